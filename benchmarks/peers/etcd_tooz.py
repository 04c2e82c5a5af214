#!/usr/bin/env python3
"""tooz's etcd3 driver (etcd3://, over python-etcd3) on the same etcd member dlock is measured on.

usage: etcd_tooz.py HOST PORT CYCLES HANDOFFS
Prints one JSON object like etcd_python_etcd3.py: "s1_us" and "handoff_us" in microseconds, or
"s1_error" / "handoff_error" with the peer's error. tooz warns that the etcd3 driver is deprecated;
the etcd3+http:// driver (etcd3gw) fails on Debian 12 with a TypeError about api_path."""
import json, sys, threading, time, uuid, warnings

warnings.simplefilter("ignore")
from tooz import coordination

host, port, cycles, handoffs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
url = f"etcd3://{host}:{port}"
now = time.monotonic_ns


def coordinator():
    c = coordination.get_coordinator(url, uuid.uuid4().hex.encode())
    c.start()
    return c


def s1():
    c = coordinator()
    lock = c.get_lock(b"peer-tooz-s1")
    for _ in range(min(200, cycles)):
        lock.acquire(blocking=False)
        lock.release()
    out = []
    for _ in range(cycles):
        t = now()
        if not lock.acquire(blocking=False):
            raise RuntimeError("uncontended acquire failed")
        lock.release()
        out.append((now() - t) / 1000)
    c.stop()
    return out


def s4():
    locks = [coordinator().get_lock(b"peer-tooz-s4") for _ in range(2)]
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
                if not locks[me].acquire(blocking=30):
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
