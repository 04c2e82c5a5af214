#!/usr/bin/python3
"""python3-kazoo's Lock (ZooKeeper's lock recipe in Python) on the same server dlock is measured on.

usage: zookeeper_kazoo.py CONNECT CYCLES WARMUP
Times CYCLES uncontended acquire+release cycles of one lock after WARMUP untimed ones, on one
session, with kazoo's defaults (kazoo waits on watches: it has no polling interval to tune).
Prints one JSON object (peer_harness.py): "s1_us", or "s1_error"."""
import sys

from kazoo.client import KazooClient
from peer_harness import emit, s1

connect, cycles, warmup = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])


def uncontended():
    client = KazooClient(hosts=connect, timeout=10.0)
    client.start(timeout=10)
    try:
        lock = client.Lock("/bench-peers/kazoo", "bench")
        return s1(lambda: lock.acquire(timeout=10), lock.release, cycles, warmup)
    finally:
        client.stop()
        client.close()


emit([("s1", uncontended)])
