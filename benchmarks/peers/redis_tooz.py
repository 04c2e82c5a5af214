#!/usr/bin/env python3
"""tooz's redis driver lock on the same server dlock is measured on.

usage: redis_tooz.py HOST PORT CYCLES
Prints one JSON object (peer_harness.py): S1 acquire+release latencies ("s1_us") in microseconds,
or "s1_error"."""
import sys
from tooz import coordination

from peer_harness import emit, s1

host, port, cycles = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])


def uncontended():
    coordinator = coordination.get_coordinator(f"redis://{host}:{port}", b"dlock-bench")
    coordinator.start()
    lock = coordinator.get_lock(b"peer/tooz/s1")
    out = s1(lambda: lock.acquire(blocking=False), lock.release, cycles, min(1000, cycles))
    coordinator.stop()
    return out


emit((("s1", uncontended),))
