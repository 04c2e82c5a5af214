#!/usr/bin/python3
"""dlock's own Python package (python/, ctypes over libdlock's C ABI) on the same target as dlock and
the Python peers, so the report shows what the binding costs next to redis-py, kazoo, python-etcd3
and tooz.

usage: dlock_python.py LIBDLOCK CONFIG CYCLES HANDOFFS
LIBDLOCK is the libdlock the comparison itself runs (set as $DLOCK_LIBRARY); CONFIG the target's
dlock config. S1: CYCLES uncontended try-once acquire+release cycles (ttl 30 s, the lease freed
after each, as dlock's C++ S1 does) after min(1000, CYCLES) untimed ones, on one client. S4:
HANDOFFS ping-pong handoffs between two clients (0 = none), each waiter blocking in acquire().
Prints one JSON object (peer_harness.py): "s1_us", "handoff_us", or their errors."""
import os
import sys
from pathlib import Path

library, config, cycles, handoffs = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
os.environ["DLOCK_LIBRARY"] = library
sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent / "python"))

import dlock  # noqa: E402
from peer_harness import emit, ping_pong, s1  # noqa: E402


def uncontended():
    with dlock.Client.open(config) as client:
        lease = None

        def acquire():
            nonlocal lease
            lease = client.try_acquire("peer/dlock-python/s1", ttl=30)
            return lease is not None

        def release():
            lease.release()
            lease.close()

        return s1(acquire, release, cycles, min(1000, cycles))


def handoff():
    clients = [dlock.Client.open(config) for _ in range(2)]
    held = [None, None]
    try:
        def acquire(i):
            held[i] = clients[i].acquire("peer/dlock-python/s4", wait=30, ttl=30)
            return True

        def release(i):
            held[i].release()
            held[i].close()

        return ping_pong([lambda: acquire(0), lambda: acquire(1)], [lambda: release(0), lambda: release(1)],
                         handoffs, 0.0002, join_timeout_s=120)
    finally:
        for c in clients:
            c.close()


emit((("s1", uncontended), ("handoff", handoff if handoffs > 0 else list)))
