#!/usr/bin/env python3
"""python-etcd3's Lock on the same etcd member dlock is measured on.

usage: etcd_python_etcd3.py HOST PORT CYCLES HANDOFFS
Prints one JSON object: S1 acquire+release latencies ("s1_us") and S4 handoff latencies
("handoff_us"), in microseconds. A part that fails is reported with its error ("s1_error",
"handoff_error") instead of its samples: a failing peer is reported, never dropped.
Lock(ttl=30) is python-etcd3's default use; acquire(timeout=0) tries once."""
import json, sys, threading, time
import etcd3

host, port, cycles, handoffs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
now = time.monotonic_ns


def s1():
    client = etcd3.client(host=host, port=port)
    lock = client.lock("peer-etcd3-s1", ttl=30)
    for _ in range(min(200, cycles)):
        lock.acquire(timeout=0)
        lock.release()
    out = []
    for _ in range(cycles):
        t = now()
        if not lock.acquire(timeout=0):
            raise RuntimeError("uncontended acquire failed")
        lock.release()
        out.append((now() - t) / 1000)
    return out


def s4():
    # Two threads, each with its own client, pass one lock back and forth. The holder lets the other
    # start waiting, gives it 3 ms to queue, notes the time and releases; a sample is that release
    # to the waiter's acquire returning.
    locks = [etcd3.client(host=host, port=port).lock("peer-etcd3-s4", ttl=30) for _ in range(2)]
    cond = threading.Condition()
    state = {"may_wait": 0, "released": 0, "error": None}
    samples = []

    def side(me):
        try:
            for k in range(handoffs):
                first = me == 0 and k == 0
                if not first:
                    with cond:
                        cond.wait_for(lambda: state["may_wait"] == me or state["error"])
                        if state["error"]:
                            return
                if not locks[me].acquire(timeout=30):
                    raise RuntimeError("acquire timed out after 30 s")
                got = now()
                with cond:
                    if not first:
                        samples.append((got - state["released"]) / 1000)
                    state["may_wait"] = 1 - me
                    cond.notify_all()
                time.sleep(0.003)
                state["released"] = now()
                locks[me].release()
        except Exception as e:
            with cond:
                state["error"] = state["error"] or f"{type(e).__name__}: {e}"
                cond.notify_all()

    threads = [threading.Thread(target=side, args=(i,), daemon=True) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    if state["error"]:
        raise RuntimeError(state["error"])
    return samples


result = {}
for key, part in (("s1", s1), ("handoff", s4)):
    try:
        result[key + "_us"] = part() if key == "s1" or handoffs > 0 else []
    except Exception as e:
        result[key + "_error"] = str(e) if isinstance(e, RuntimeError) else f"{type(e).__name__}: {e}"
print(json.dumps(result))
sys.stdout.flush()
