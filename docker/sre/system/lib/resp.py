"""A minimal Redis client (RESP2 over TCP), enough for AUTH, PING, GET, SET, INCR and INFO."""

import socket


class RedisError(Exception):
    """An error reply from Redis (e.g. WRONGPASS, max number of clients reached)."""


class Redis:
    def __init__(self, host="127.0.0.1", port=6379, password="", timeout=1.0):
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.buf = b""
        if password:
            self.call("AUTH", password)

    def call(self, *args):
        parts = [b"*%d\r\n" % len(args)]
        for arg in args:
            data = str(arg).encode()
            parts.append(b"$%d\r\n%s\r\n" % (len(data), data))
        self.sock.sendall(b"".join(parts))
        return self._reply()

    def _line(self):
        while b"\r\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("redis closed the connection")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _reply(self):
        line = self._line()
        kind, rest = line[:1], line[1:].decode()
        if kind == b"+":
            return rest
        if kind == b"-":
            raise RedisError(rest)
        if kind == b":":
            return int(rest)
        if kind == b"$":
            size = int(rest)
            if size < 0:
                return None
            while len(self.buf) < size + 2:
                chunk = self.sock.recv(65536)
                if not chunk:
                    raise ConnectionError("redis closed the connection")
                self.buf += chunk
            data, self.buf = self.buf[:size], self.buf[size + 2:]
            return data.decode()
        if kind == b"*":
            return [self._reply() for _ in range(int(rest))]
        raise RedisError(f"unexpected reply {line[:40]!r}")

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass
