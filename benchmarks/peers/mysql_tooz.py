#!/usr/bin/python3
"""python3-tooz's mysql:// driver (GET_LOCK, through python3-pymysql) on the same MariaDB dlock is measured on.

usage: mysql_tooz.py DSN CYCLES VARIANT
  DSN:     mysql://user:password@host:port/dbname (the lab's)
  VARIANT: blocking — tooz's default, acquire() -> GET_LOCK(name, timeout);
           try      — acquire(blocking=False) -> GET_LOCK(name, 0), the closest to dlock's try-once.
tooz has no other knob for this driver (each lock opens a connection of its own on acquire).
Prints one JSON object (peer_harness.py): "s1_us", or "s1_error"."""
import sys

from peer_harness import emit, s1
from tooz import coordination

dsn, cycles, variant = sys.argv[1], int(sys.argv[2]), sys.argv[3]
blocking = variant == "blocking"


def uncontended():
    coordinator = coordination.get_coordinator(dsn, b"dlock-bench")
    coordinator.start()
    try:
        lock = coordinator.get_lock(b"bench/tooz")
        return s1(lambda: lock.acquire(blocking=blocking), lock.release, cycles, max(10, cycles // 10))
    finally:
        coordinator.stop()


emit([("s1", uncontended)])
