#!/usr/bin/python3
"""Peer for benchmarks/zookeeper_bench: python3-kazoo's `Lock` (ZooKeeper's lock recipe in Python).

usage: zookeeper_kazoo.py CONNECT CYCLES WARMUP

Times CYCLES uncontended acquire+release cycles of one lock after WARMUP untimed ones, on one
session, with kazoo's defaults (kazoo waits on watches; it has no polling interval to tune). Prints
one line: RESULT p50_us=.. p99_us=.. p999_us=.. cycles=.. version=..
"""
import sys
import time

from kazoo.client import KazooClient
from kazoo import version as kazoo_version


def percentile(sorted_ns, fraction):
    return sorted_ns[min(len(sorted_ns) - 1, int(fraction * len(sorted_ns)))] / 1000.0


def main():
    connect, cycles, warmup = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    client = KazooClient(hosts=connect, timeout=10.0)
    client.start(timeout=10)
    lock = client.Lock("/bench-peers/kazoo", "bench")
    samples = []
    for i in range(warmup + cycles):
        start = time.perf_counter_ns()  # CLOCK_MONOTONIC
        lock.acquire()
        lock.release()
        elapsed = time.perf_counter_ns() - start
        if i >= warmup:
            samples.append(elapsed)
    client.stop()
    client.close()
    samples.sort()
    print("RESULT p50_us=%.1f p99_us=%.1f p999_us=%.1f cycles=%d version=kazoo-%s"
          % (percentile(samples, 0.5), percentile(samples, 0.99), percentile(samples, 0.999), len(samples),
             kazoo_version.__version__))


if __name__ == "__main__":
    main()
