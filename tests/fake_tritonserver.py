"""Stands in for tritonserver in the launch tests: records what it was started with, then behaves as told.

FAKE_SERVER_RECORD: where to write {argv, pid, env, loaded}; FAKE_SERVER_EXIT: the exit status;
FAKE_SERVER_WAIT=1: wait for SIGTERM (and exit 143 on it, as a server shutting down would)."""

import json
import os
import signal
import sys
import time

with open("/proc/self/maps") as maps:
    loaded = sorted({line.split()[-1] for line in maps if ".so" in line.rsplit("/", 1)[-1]})
record = {"argv": sys.argv[1:], "pid": os.getpid(), "loaded": loaded,
          "env": {k: os.environ.get(k) for k in ("LD_PRELOAD", "LD_LIBRARY_PATH")}}
partial = os.environ["FAKE_SERVER_RECORD"] + ".partial"  # renamed into place: a reader never sees half of it
with open(partial, "w") as f:
    json.dump(record, f)
os.replace(partial, os.environ["FAKE_SERVER_RECORD"])
if os.environ.get("FAKE_SERVER_WAIT"):
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    while True:
        time.sleep(0.05)
sys.exit(int(os.environ.get("FAKE_SERVER_EXIT", "0")))
