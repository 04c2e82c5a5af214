#!/usr/bin/python3
"""python3-tooz's zookeeper driver (zookeeper://, over kazoo) on the same server dlock is measured on.

usage: zookeeper_tooz.py SERVER CYCLES WARMUP      (SERVER: host:port)
Times CYCLES uncontended acquire+release cycles of one lock after WARMUP untimed ones, with tooz's
defaults (a blocking acquire waits on a watch; there is no polling interval to tune).
Prints one JSON object (peer_harness.py): "s1_us", or "s1_error"."""
import sys

from peer_harness import emit, s1
from tooz import coordination

server, cycles, warmup = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])


def uncontended():
    coordinator = coordination.get_coordinator("zookeeper://" + server, b"bench-tooz")
    coordinator.start()
    try:
        lock = coordinator.get_lock(b"bench-tooz")
        return s1(lambda: lock.acquire(blocking=True), lock.release, cycles, warmup)
    finally:
        coordinator.stop()


emit([("s1", uncontended)])
