#!/usr/bin/python3
"""python3-tooz's SQL drivers on the same server dlock is measured on: postgresql:// (advisory locks)
and mysql:// (GET_LOCK, through python3-pymysql); the DSN's scheme picks the driver.

usage: sql_tooz.py DSN CYCLES VARIANT
  DSN:     postgresql://user@host:port/dbname or mysql://user:password@host:port/dbname (the lab's)
  VARIANT: blocking — tooz's default, acquire() -> pg_advisory_lock / GET_LOCK(name, timeout);
           try      — acquire(blocking=False) -> pg_try_advisory_lock / GET_LOCK(name, 0), the closest
                      to dlock's try-once.
tooz has no other knob for these drivers (postgresql: each acquire opens a connection, each release
closes it; mysql: each lock opens a connection of its own on acquire).
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
