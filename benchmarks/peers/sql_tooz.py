#!/usr/bin/python3
"""Peer for benchmarks/sql_bench: python3-tooz's `postgresql://` driver, uncontended acquire+release.

usage: sql_tooz.py DSN ITERATIONS
  DSN: postgresql://user@host:port/dbname (the lab's)

Prints one JSON object per variant on stdout:
  {"peer": "tooz-postgresql", "variant": "...", "n": N, "p50_us": ..., "p99_us": ...}
or, when a variant fails, {"peer": ..., "variant": ..., "error": "..."}.

Variants: `blocking` is tooz's default (lock.acquire() -> pg_advisory_lock); `try` is
acquire(blocking=False) (pg_try_advisory_lock), the closest to dlock's try-once. tooz has no other
tuning knob for this driver: each acquire opens a new connection and each release closes it.
"""
import json
import sys
import time
import traceback


def percentile(samples, q):
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run(dsn, iterations, blocking):
    from tooz import coordination

    # tooz reads the database from ?dbname= or from the path.
    coordinator = coordination.get_coordinator(dsn, b"dlock-bench")
    coordinator.start()
    try:
        lock = coordinator.get_lock(b"bench/tooz")
        warmup = max(10, iterations // 10)
        samples = []
        for i in range(warmup + iterations):
            start = time.perf_counter_ns()
            if not lock.acquire(blocking=blocking):
                raise RuntimeError("uncontended acquire failed")
            lock.release()
            if i >= warmup:
                samples.append((time.perf_counter_ns() - start) / 1000.0)
        return samples
    finally:
        coordinator.stop()


def main():
    dsn, iterations = sys.argv[1], int(sys.argv[2])
    for variant, blocking in (("blocking", True), ("try", False)):
        record = {"peer": "tooz-postgresql", "variant": variant}
        try:
            samples = run(dsn, iterations, blocking)
            record.update(n=len(samples), p50_us=percentile(samples, 0.50), p99_us=percentile(samples, 0.99))
        except Exception as e:  # reported, not hidden: a failing peer is a result
            record["error"] = "%s: %s" % (type(e).__name__, str(e).strip().splitlines()[0] if str(e).strip() else "")
            traceback.print_exc(file=sys.stderr)
        print(json.dumps(record), flush=True)


if __name__ == "__main__":
    main()
