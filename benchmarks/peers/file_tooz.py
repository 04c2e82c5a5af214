#!/usr/bin/python3
"""tooz's file driver (file://DIR, fasteners' fcntl lock underneath) on the same filesystem dlock's
file backend is measured on.

usage: file_tooz.py DIR CYCLES
Prints one JSON object (peer_harness.py): "s1_us", or "s1_error"."""
import sys
import uuid

from peer_harness import emit, s1
from tooz import coordination

directory, cycles = sys.argv[1], int(sys.argv[2])


def uncontended():
    coordinator = coordination.get_coordinator("file://" + directory, uuid.uuid4().hex.encode())
    coordinator.start()
    lock = coordinator.get_lock(b"peer-tooz-s1")
    try:
        return s1(lambda: lock.acquire(blocking=False), lock.release, cycles, min(1000, cycles))
    finally:
        coordinator.stop()


emit([("s1", uncontended)])
