#!/usr/bin/env python3
"""redis-py's Lock on the same server dlock is measured on.

usage: redis_redispy.py HOST PORT CYCLES HANDOFFS SLEEP
Prints one JSON object: S1 acquire+release latencies and S4 handoff latencies, in microseconds.
SLEEP is redis-py's polling interval while blocked (its default is 0.1 s; the smallest it allows
is any positive float) — handoff latency is bounded below by it, since redis-py polls."""
import json, sys, threading, time
import redis

host, port, cycles, handoffs, sleep = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
now = time.monotonic_ns


def s1():
    r = redis.Redis(host=host, port=port)
    lock = r.lock("peer/redispy/s1", timeout=30, sleep=sleep)
    for _ in range(min(1000, cycles)):
        lock.acquire(blocking=False)
        lock.release()
    out = []
    for _ in range(cycles):
        t = now()
        if not lock.acquire(blocking=False):
            raise RuntimeError("uncontended acquire failed")
        lock.release()
        out.append((now() - t) / 1000)
    return out


def s4():
    # Two threads, each with its own connection, pass one lock back and forth. The holder lets the
    # other start waiting, gives it 200 us to block, notes the time and releases; a sample is that
    # release to the waiter's acquire returning.
    locks = [redis.Redis(host=host, port=port).lock("peer/redispy/s4", timeout=30, sleep=sleep) for _ in range(2)]
    cond = threading.Condition()
    state = {"may_wait": 0, "released": 0}
    samples = []

    def side(me):
        for k in range(handoffs):
            first = me == 0 and k == 0
            if not first:
                with cond:
                    cond.wait_for(lambda: state["may_wait"] == me)
            locks[me].acquire()
            got = now()
            with cond:
                if not first:
                    samples.append((got - state["released"]) / 1000)
                state["may_wait"] = 1 - me
                cond.notify_all()
            time.sleep(0.0002)
            state["released"] = now()
            locks[me].release()

    threads = [threading.Thread(target=side, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return samples


try:
    print(json.dumps({"s1_us": s1(), "handoff_us": s4() if handoffs > 0 else []}))
except Exception as e:  # a failing peer is reported with its error, never dropped
    print(json.dumps({"error": f"{type(e).__name__}: {e}"}))
