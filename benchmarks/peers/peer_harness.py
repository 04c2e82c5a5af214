"""Shared by the peer drivers of the comparison suite (benchmarks/suite/probes_*.cpp run them with
Debian's /usr/bin/python3).

The contract with the probes: a driver prints ONE JSON object on its last line:
  "s1_us":      uncontended acquire+release latencies in microseconds (every sample)
  "handoff_us": S4 handoff latencies in microseconds, when the driver measures handoff
  "s1_error" / "handoff_error" / "error": why that part (or the whole peer) failed: a failing peer
                is reported with its error, never dropped."""
import json
import sys
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
