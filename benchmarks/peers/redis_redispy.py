#!/usr/bin/env python3
"""redis-py's Lock on the same server dlock is measured on.

usage: redis_redispy.py HOST PORT CYCLES HANDOFFS SLEEP
Prints one JSON object (peer_harness.py): S1 acquire+release latencies ("s1_us") and S4 handoff
latencies ("handoff_us") in microseconds, or "s1_error" / "handoff_error". SLEEP is redis-py's
polling interval while blocked (its default is 0.1 s; the smallest it allows is any positive
float) — handoff latency is bounded below by it, since redis-py polls."""
import sys
import redis

from peer_harness import emit, ping_pong, s1

host, port, cycles, handoffs, sleep = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])


def uncontended():
    lock = redis.Redis(host=host, port=port).lock("peer/redispy/s1", timeout=30, sleep=sleep)
    return s1(lambda: lock.acquire(blocking=False), lock.release, cycles, min(1000, cycles))


def handoff():
    # Two connections (two threads); the waiter gets 200 us to block. acquire() blocks until it
    # gets the lock, polling every SLEEP.
    locks = [redis.Redis(host=host, port=port).lock("peer/redispy/s4", timeout=30, sleep=sleep) for _ in range(2)]
    return ping_pong([l.acquire for l in locks], [l.release for l in locks], handoffs, 0.0002)


emit((("s1", uncontended), ("handoff", handoff if handoffs > 0 else list)))
