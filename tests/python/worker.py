"""A child process of the dlock Python tests (run with the interpreter running pytest).

usage:
  worker.py contend CONFIG NAME ITERATIONS COUNTER_FILE
      ITERATIONS times: acquire NAME, read-sleep-write an 8-byte counter, release. Prints one line
      per hold: "<fencing token> <start ns> <end ns> <release outcome>" (CLOCK_MONOTONIC, shared by
      every process of the machine).
  worker.py permit CONFIG NAME PERMITS ITERATIONS
      ITERATIONS times: take one of the PERMITS permits of the semaphore NAME, hold it 20 ms,
      release. Prints one line per hold: "<fencing token> <start ns> <end ns> <release outcome>".
  worker.py interrupt CONFIG NAME WAIT
      Prints "waiting", then acquires NAME in the main thread with wait=WAIT ("forever", "default" or
      seconds). On KeyboardInterrupt prints "interrupted <seconds since the wait began>"; on success
      prints "acquired <fence>" and keeps the lease. Then stays alive until stdin closes, so the
      test can check what the process holds while it still runs."""
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent / "python"))
import dlock  # noqa: E402


def contend(config, name, iterations, counter):
    client = dlock.Client.open(config)
    for _ in range(int(iterations)):
        with client.acquire(name, wait=60, ttl=30) as lease:
            start = time.monotonic_ns()
            with open(counter, "r+b") as f:
                value = int.from_bytes(f.read(8), "little")
                time.sleep(0.001)
                f.seek(0)
                f.write((value + 1).to_bytes(8, "little"))
            end = time.monotonic_ns()
            fence = lease.fencing_token
            outcome = lease.release()
        print(fence, start, end, outcome.value, flush=True)
    client.close()


def permit(config, name, permits, iterations):
    client = dlock.Client.open(config)
    semaphore = client.semaphore(name, int(permits))
    for _ in range(int(iterations)):
        with semaphore.acquire(wait=60, ttl=30) as lease:
            start = time.monotonic_ns()
            time.sleep(0.02)
            end = time.monotonic_ns()
            fence = lease.fencing_token
            outcome = lease.release()
        print(fence, start, end, outcome.value, flush=True)
    client.close()


def interrupt(config, name, wait):
    client = dlock.Client.open(config)
    kwargs = {} if wait == "default" else {"wait": dlock.FOREVER if wait == "forever" else float(wait)}
    print("waiting", flush=True)
    began = time.monotonic()
    held = None
    try:
        held = client.acquire(name, **kwargs)
    except KeyboardInterrupt:
        print(f"interrupted {time.monotonic() - began:.3f}", flush=True)
    else:
        # A Ctrl-C from here on must not end the process: the test checks that it holds the lock.
        # It may still land while the handler is being replaced; then the lease is ours all the same.
        while True:
            try:
                signal.signal(signal.SIGINT, signal.SIG_IGN)
                break
            except KeyboardInterrupt:
                continue
        print("acquired", held.fencing_token, flush=True)
    sys.stdin.read()
    return held


if __name__ == "__main__":
    mode, args = sys.argv[1], sys.argv[2:]
    {"contend": contend, "permit": permit, "interrupt": interrupt}[mode](*args)
