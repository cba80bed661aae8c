"""Reading the system's config files: INI files for the Python services, `key value` lines for Redis."""

import configparser
import sys


def ini(path, section):
    """One section of an INI file as a dict; raises OSError/KeyError with the path in the message."""
    parser = configparser.ConfigParser()
    with open(path) as f:
        parser.read_file(f)
    if not parser.has_section(section):
        raise KeyError(f"{path} has no [{section}] section")
    return dict(parser.items(section))


def redis_conf(path="/srv/etc/redis.conf"):
    """`key value` pairs of redis.conf (the last one wins, like Redis itself)."""
    values = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#"):
                key, _, value = line.partition(" ")
                values[key.lower()] = value.strip().strip('"')
    return values


def say(line):
    """Write one log line to stdout; a full disk or a closed log never takes a service down."""
    try:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()
    except (OSError, ValueError):
        pass
