#!/usr/bin/env python3
"""tooz's redis driver lock on the same server dlock is measured on.

usage: redis_tooz.py HOST PORT CYCLES
Prints one JSON object with S1 acquire+release latencies in microseconds, or {"error": ...}."""
import json, sys, time
from tooz import coordination

host, port, cycles = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
now = time.monotonic_ns
try:
    coordinator = coordination.get_coordinator(f"redis://{host}:{port}", b"dlock-bench")
    coordinator.start()
    lock = coordinator.get_lock(b"peer/tooz/s1")
    for _ in range(min(1000, cycles)):
        lock.acquire(blocking=False)
        lock.release()
    out = []
    for _ in range(cycles):
        t = now()
        if not lock.acquire(blocking=False):
            raise RuntimeError("uncontended acquire failed")
        lock.release()
        out.append((now() - t) / 1000)
    coordinator.stop()
    print(json.dumps({"s1_us": out}))
except Exception as e:
    print(json.dumps({"error": f"{type(e).__name__}: {e}"}))
