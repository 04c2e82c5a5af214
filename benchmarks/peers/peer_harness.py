"""Shared by the peer drivers of the comparison suite (benchmarks/suite/probes_*.cpp run them with
Debian's /usr/bin/python3).

The contract with the probes: a driver prints ONE JSON object on its last line:
  "s1_us":      uncontended acquire+release latencies in microseconds (every sample)
  "handoff_us": S4 handoff latencies in microseconds, when the driver measures handoff
  "s1_error" / "handoff_error" / "error": why that part (or the whole peer) failed: a failing peer
                is reported with its error, never dropped."""
import json
import sys
import threading
import time

now = time.monotonic_ns


def s1(acquire, release, cycles, warmup):
    """Times `cycles` acquire()+release() pairs after `warmup` untimed ones. acquire() must return a
    truthy value when it got the lock (an uncontended try that fails is an error)."""
    for _ in range(warmup):
        acquire()
        release()
    out = []
    for _ in range(cycles):
        t = now()
        if not acquire():
            raise RuntimeError("uncontended acquire failed")
        release()
        out.append((now() - t) / 1000)
    return out


def ping_pong(acquire, release, handoffs, queue_pause_s, refused="acquire returned without the lock",
              join_timeout_s=None):
    """S4: two threads pass one lock back and forth `handoffs` times; acquire[i]() and release[i]()
    act through thread i's own client, acquire returning truthy when it got the lock (falsy raises
    `refused`). The holder lets the other start waiting, gives it `queue_pause_s` to queue, notes
    the time and releases; a sample (µs) is that release to the waiter's acquire returning. An error
    in either thread ends both and is raised; join_timeout_s bounds the wait for each thread."""
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
                if not acquire[me]():
                    raise RuntimeError(refused)
                got = now()
                with cond:
                    if not first:
                        samples.append((got - state["released"]) / 1000)
                    state["may_wait"] = 1 - me
                    cond.notify_all()
                time.sleep(queue_pause_s)
                state["released"] = now()
                release[me]()
        except Exception as e:  # noqa: BLE001 - reported by the caller's emit()
            with cond:
                state["error"] = state["error"] or error_text(e)
                cond.notify_all()

    threads = [threading.Thread(target=side, args=(i,), daemon=True) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(join_timeout_s)
    if state["error"]:
        raise RuntimeError(state["error"])
    return samples


def error_text(e):
    return str(e) if isinstance(e, RuntimeError) else f"{type(e).__name__}: {e}"


def emit(parts):
    """Runs each (key, function) of `parts` and prints the JSON object: key_us with its samples, or
    key_error with the error."""
    result = {}
    for key, part in parts:
        try:
            result[key + "_us"] = part()
        except Exception as e:  # noqa: BLE001 - a failing peer is a result
            result[key + "_error"] = error_text(e)
    print(json.dumps(result))
    sys.stdout.flush()
