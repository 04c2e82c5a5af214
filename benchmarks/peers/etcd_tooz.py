#!/usr/bin/env python3
"""tooz's etcd3 driver (etcd3://, over python-etcd3) on the same etcd member dlock is measured on.

usage: etcd_tooz.py HOST PORT CYCLES HANDOFFS
Prints one JSON object (peer_harness.py): "s1_us" and "handoff_us" in microseconds, or
"s1_error" / "handoff_error" with the peer's error. tooz warns that the etcd3 driver is deprecated;
the etcd3+http:// driver (etcd3gw) fails on Debian 12 with a TypeError about api_path."""
import sys, uuid, warnings

warnings.simplefilter("ignore")
from tooz import coordination

from peer_harness import emit, ping_pong, s1

host, port, cycles, handoffs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
url = f"etcd3://{host}:{port}"


def coordinator():
    c = coordination.get_coordinator(url, uuid.uuid4().hex.encode())
    c.start()
    return c


def uncontended():
    c = coordinator()
    lock = c.get_lock(b"peer-tooz-s1")
    out = s1(lambda: lock.acquire(blocking=False), lock.release, cycles, min(200, cycles))
    c.stop()
    return out


def handoff():
    # Two coordinators (two etcd clients); the waiter gets 3 ms to queue.
    locks = [coordinator().get_lock(b"peer-tooz-s4") for _ in range(2)]
    return ping_pong([lambda l=l: l.acquire(blocking=30) for l in locks], [l.release for l in locks], handoffs,
                     0.003, "acquire timed out after 30 s", join_timeout_s=60)


emit((("s1", uncontended), ("handoff", handoff if handoffs > 0 else list)))
