#!/usr/bin/python3
"""python3-kazoo's Lock (ZooKeeper's lock recipe in Python) on the same server dlock is measured on;
with a MODE, kazoo's Semaphore or its ReadLock / WriteLock instead.

usage: zookeeper_kazoo.py CONNECT CYCLES WARMUP [MODE [PERMITS]]
Times CYCLES uncontended acquire+release cycles of one lock after WARMUP untimed ones, on one
session, with kazoo's defaults (kazoo waits on watches: it has no polling interval to tune).
MODE: "lock" (the default), "semaphore" (kazoo.recipe.lock.Semaphore with max_leases = PERMITS,
default 4), "read" (ReadLock) or "write" (WriteLock).
Prints one JSON object (peer_harness.py): "s1_us", or "s1_error"."""
import sys

from kazoo.client import KazooClient
from peer_harness import emit, s1

connect, cycles, warmup = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
mode = sys.argv[4] if len(sys.argv) > 4 else "lock"
permits = int(sys.argv[5]) if len(sys.argv) > 5 else 4


def recipe(client):
    if mode == "lock":
        return client.Lock("/bench-peers/kazoo", "bench")
    if mode == "semaphore":
        return client.Semaphore("/bench-peers/kazoo-semaphore", "bench", max_leases=permits)
    if mode == "read":
        return client.ReadLock("/bench-peers/kazoo-rw", "bench")
    if mode == "write":
        return client.WriteLock("/bench-peers/kazoo-rw", "bench")
    raise RuntimeError(f"unknown mode {mode!r}")


def uncontended():
    client = KazooClient(hosts=connect, timeout=10.0)
    client.start(timeout=10)
    try:
        held = recipe(client)
        return s1(lambda: held.acquire(timeout=10), held.release, cycles, warmup)
    finally:
        client.stop()
        client.close()


emit([("s1", uncontended)])
