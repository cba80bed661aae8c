#!/usr/bin/env python3
"""Print what the sandbox looks like from inside: user, writable dirs, network interfaces."""

import os

print("uid", os.getuid())
print("writable", [d for d in ("/", "/work", "/tmp", "/etc") if os.access(d, os.W_OK)])
with open("/proc/net/dev") as f:
    print("interfaces", [line.split(":")[0].strip() for line in f.readlines()[2:]])
