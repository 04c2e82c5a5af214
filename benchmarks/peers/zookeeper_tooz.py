#!/usr/bin/python3
"""Peer for benchmarks/zookeeper_bench: python3-tooz's zookeeper driver (`zookeeper://`, over kazoo).

usage: zookeeper_tooz.py SERVER CYCLES WARMUP      (SERVER: host:port)

Times CYCLES uncontended acquire+release cycles of one lock after WARMUP untimed ones, with tooz's
defaults (a blocking acquire waits on a watch; there is no polling interval to tune). Prints one
line: RESULT p50_us=.. p99_us=.. p999_us=.. cycles=.. version=..
"""
import sys
import time
from importlib import metadata

from tooz import coordination


def percentile(sorted_ns, fraction):
    return sorted_ns[min(len(sorted_ns) - 1, int(fraction * len(sorted_ns)))] / 1000.0


def main():
    server, cycles, warmup = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    coordinator = coordination.get_coordinator("zookeeper://" + server, b"bench-tooz")
    coordinator.start()
    lock = coordinator.get_lock(b"bench-tooz")
    samples = []
    for i in range(warmup + cycles):
        start = time.perf_counter_ns()  # CLOCK_MONOTONIC
        if not lock.acquire(blocking=True):
            raise RuntimeError("tooz lock not acquired")
        lock.release()
        elapsed = time.perf_counter_ns() - start
        if i >= warmup:
            samples.append(elapsed)
    coordinator.stop()
    samples.sort()
    print("RESULT p50_us=%.1f p99_us=%.1f p999_us=%.1f cycles=%d version=tooz-%s"
          % (percentile(samples, 0.5), percentile(samples, 0.99), percentile(samples, 0.999), len(samples),
             metadata.version("tooz")))


if __name__ == "__main__":
    main()
