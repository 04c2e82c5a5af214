"""The conformance cases a Python user relies on, through the dlock package, on every backend's real
servers (the lab): mutual exclusion across processes, timeouts, fencing order, the three release
outcomes, the lost callback, Ctrl-C during a blocking acquire, and precise errors for bad input."""
from __future__ import annotations

import math
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import List, Optional

import pytest

import dlock

WORKER = str(Path(__file__).resolve().parent / "worker.py")


def has(client: dlock.Client, capability: dlock.Capability) -> bool:
    return bool(client.capabilities & capability)


@pytest.fixture
def client(config: str):
    with dlock.Client.open(config) as c:
        yield c


@pytest.fixture
def open_client(config: str):
    """Opens further clients of the same backend; all are closed after the test."""
    made: List[dlock.Client] = []

    def make() -> dlock.Client:
        made.append(dlock.Client.open(config))
        return made[-1]

    yield make
    for c in made:
        c.close()


# ---- basics --------------------------------------------------------------------------------------

def test_acquire_release_round_trip(client, open_client, name):
    with client.acquire(name, wait=5) as lease:
        assert lease.name == name
        assert len(lease.owner) == 32 and int(lease.owner, 16) >= 0
        assert lease.state is dlock.LeaseState.HELD
        assert lease.valid_until > time.monotonic()
        assert open_client().try_acquire(name) is None
        assert lease.release() is dlock.ReleaseOutcome.RELEASED
        assert lease.state is dlock.LeaseState.RELEASED
    with open_client().try_acquire(name) as again:
        assert again is not None


def test_leaving_the_with_block_releases(client, open_client, name):
    with client.acquire(name, wait=5):
        pass
    other = open_client().try_acquire(name)
    assert other is not None
    other.release()


# ---- timeouts ------------------------------------------------------------------------------------

def test_try_acquire_on_a_held_lock_returns_none_at_once_and_leaves_nothing(client, open_client, name):
    holder = client.try_acquire(name)
    assert holder is not None
    other = open_client()
    start = time.monotonic()
    assert other.try_acquire(name) is None
    assert time.monotonic() - start < 1.0
    info = other.inspect(name)
    assert info.held
    if info.holder:
        assert info.holder == holder.owner, "the failed attempt left no trace"
    holder.release()


def test_wait_times_out_within_bounds_and_raises_timeout(client, open_client, name):
    holder = client.try_acquire(name)
    other = open_client()
    start = time.monotonic()
    with pytest.raises(dlock.Timeout) as raised:
        other.acquire(name, wait=0.3)
    waited = time.monotonic() - start
    assert raised.value.status == dlock.Timeout.status and raised.value.status_name == "DLOCK_TIMEOUT"
    assert name in str(raised.value)
    assert 0.3 <= waited < 2.3
    assert holder.state is dlock.LeaseState.HELD
    holder.release()
    # The timed-out waiter left nothing behind: a third client gets the lock at once.
    assert open_client().try_acquire(name) is not None


def test_waiter_proceeds_when_the_holder_releases(client, open_client, name):
    holder = client.try_acquire(name)
    other = open_client()
    got: List[float] = []

    def wait() -> None:
        with other.acquire(name, wait=10):
            got.append(time.monotonic())

    waiter = threading.Thread(target=wait)
    waiter.start()
    time.sleep(0.2)
    assert not got, "acquired a held lock"
    released = time.monotonic()
    holder.release()
    waiter.join(15)
    assert got, "the waiter never got the lock"
    assert got[0] - released < 2.0, "the waiter must be woken, not left to time out"


def test_closing_the_client_cancels_its_waiters(client, open_client, name):
    holder = client.try_acquire(name)
    other = open_client()
    errors: List[BaseException] = []

    def wait() -> None:
        try:
            other.acquire(name, wait=30)
        except BaseException as e:  # noqa: BLE001 - inspected below
            errors.append(e)

    waiter = threading.Thread(target=wait)
    waiter.start()
    time.sleep(0.2)
    other.close()
    waiter.join(10)
    assert not waiter.is_alive()
    assert len(errors) == 1 and isinstance(errors[0], dlock.Cancelled), errors
    holder.release()


def test_a_blocked_acquire_releases_the_gil(client, open_client, name):
    holder = client.try_acquire(name)
    other = open_client()
    waiter = threading.Thread(target=lambda: pytest.raises(dlock.Timeout, other.acquire, name, wait=2))
    waiter.start()
    time.sleep(0.3)  # the waiter is inside the C call now
    start = time.monotonic()
    total = sum(i for i in range(300_000))  # pure Python work: needs the GIL
    took = time.monotonic() - start
    assert total > 0
    assert waiter.is_alive(), "the Python work could only run after the blocked acquire returned"
    assert took < 2.0
    waiter.join(10)
    holder.release()


def test_reentrant_acquisitions_count_holds(client, open_client, name):
    if not has(client, dlock.Capability.REENTRANT):
        pytest.skip(f"{client.backend} has no REENTRANT capability")
    outer = client.acquire(name, wait=0, reentrant=True)
    inner = client.acquire(name, wait=0, reentrant=True)
    assert inner.fencing_token == outer.fencing_token, "the same hold"
    other = open_client()
    assert inner.release() is dlock.ReleaseOutcome.RELEASED
    assert other.try_acquire(name) is None, "still held by the outer acquisition"
    assert outer.release() is dlock.ReleaseOutcome.RELEASED
    assert other.try_acquire(name) is not None


def test_a_second_acquire_in_one_client_contends_unless_reentrant(client, name):
    with client.try_acquire(name):
        assert client.try_acquire(name) is None


# ---- mutual exclusion across processes ----------------------------------------------------------

def test_mutual_exclusion_across_processes(config, client, name, tmp_path):
    processes, iterations = 4, 15
    counter = tmp_path / "counter"
    counter.write_bytes(bytes(8))
    workers = [subprocess.Popen([sys.executable, WORKER, "contend", config, name, str(iterations), str(counter)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(processes)]
    holds = []
    for w in workers:
        out, err = w.communicate(timeout=300)
        assert w.returncode == 0, err
        holds += [tuple(line.split()) for line in out.splitlines()]
    assert len(holds) == processes * iterations
    assert all(h[3] == "released" for h in holds), "every release of a held lease reports RELEASED"
    intervals = sorted((int(start), int(end), int(fence)) for fence, start, end, _ in holds)
    for (s1, e1, f1), (s2, e2, f2) in zip(intervals, intervals[1:]):
        assert e1 <= s2, f"two holders at once: [{s1}, {e1}] and [{s2}, {e2}]"
        if has(client, dlock.Capability.FENCING):
            assert f2 > f1, "fencing tokens must increase in the order the lock was held"
    assert int.from_bytes(counter.read_bytes(), "little") == len(holds), "lost updates in the counter"


# ---- fencing -------------------------------------------------------------------------------------

def test_fencing_tokens_strictly_increase_across_holders(client, open_client, name):
    other = open_client()
    if not has(client, dlock.Capability.FENCING):
        with client.try_acquire(name) as lease:
            assert lease.fencing_token == 0, "a backend without FENCING reports token 0"
        pytest.skip(f"{client.backend} has no FENCING capability")
    last = 0
    for i in range(10):
        with (other if i % 2 else client).acquire(name, wait=5) as lease:
            assert lease.fencing_token > last
            last = lease.fencing_token


# ---- release outcomes and the lost callback ------------------------------------------------------

def test_release_is_idempotent_and_never_touches_the_next_holder(client, open_client, name):
    first = client.try_acquire(name)
    assert first.release() is dlock.ReleaseOutcome.RELEASED
    second = open_client().try_acquire(name)
    assert second is not None
    assert first.release() is dlock.ReleaseOutcome.RELEASED, "a repeated release is a no-op"
    third = open_client()
    assert third.try_acquire(name) is None, "the second holder must still hold it"
    info = third.inspect(name)
    assert info.held and (not info.holder or info.holder == second.owner)
    second.release()


def test_unrenewed_lease_is_lost_the_callback_fires_once_and_release_says_already_lost(client, open_client, name):
    if not has(client, dlock.Capability.TTL):
        pytest.skip(f"{client.backend} has no TTL capability")
    fired: List[dlock.Lease] = []
    threads: List[str] = []

    def lost(lease: dlock.Lease) -> None:
        fired.append(lease)
        threads.append(threading.current_thread().name)

    lease = client.acquire(name, wait=0, ttl=0.5, renew=False, on_lost=lost)
    assert lease.state is dlock.LeaseState.HELD
    valid_until = lease.valid_until
    other = open_client()
    with other.acquire(name, wait=5) as next_holder:
        assert time.monotonic() >= valid_until, "acquired before the first lease's validity ended"
        deadline = time.monotonic() + 2.0
        while not fired and time.monotonic() < deadline:
            time.sleep(0.01)
        assert fired == [lease], "the lost callback fires once, with the lease"
        assert threads[0] != threading.current_thread().name, "it runs on the keeper thread"
        assert lease.state is dlock.LeaseState.LOST
        assert lease.release() is dlock.ReleaseOutcome.ALREADY_LOST
        assert next_holder.state is dlock.LeaseState.HELD
        assert open_client().inspect(name).held, "the stale release left the new holder alone"
        # Once per lease: a callback registered after it fired is not called again.
        again: List[str] = []
        lease.on_lost(lambda _: again.append(threading.current_thread().name))
        assert again == []
    assert len(fired) == 1


def test_lost_callback_registered_on_a_lease_already_lost_runs_at_once_in_this_thread(client, name):
    if not has(client, dlock.Capability.TTL):
        pytest.skip(f"{client.backend} has no TTL capability")
    lease = client.acquire(name, wait=0, ttl=0.3, renew=False)
    deadline = time.monotonic() + 3.0
    while lease.state is not dlock.LeaseState.LOST and time.monotonic() < deadline:
        time.sleep(0.01)
    assert lease.state is dlock.LeaseState.LOST
    called: List[str] = []
    lease.on_lost(lambda l: called.append(threading.current_thread().name) if l is lease else None)
    assert called == [threading.current_thread().name]
    assert lease.release() is dlock.ReleaseOutcome.ALREADY_LOST


def test_a_lost_callback_may_close_its_lease(client, open_client, name):
    if not has(client, dlock.Capability.TTL):
        pytest.skip(f"{client.backend} has no TTL capability")
    closed = threading.Event()
    kept: List[dlock.Lease] = []

    def close_it(lease: dlock.Lease) -> None:
        lease.close()
        kept.clear()  # the last reference outside the callback: the lease is finalized in it
        closed.set()

    kept.append(client.acquire(name, wait=0, ttl=0.3, renew=False, on_lost=close_it))
    assert closed.wait(5), "the lost callback never ran"
    with open_client().acquire(name, wait=5) as next_holder:
        assert next_holder.state is dlock.LeaseState.HELD
    client.try_acquire(name).release()  # the client still works: nothing deadlocked in the callback


def test_a_lost_callback_that_raises_is_reported_and_the_keeper_goes_on(client, name, capfd):
    if not has(client, dlock.Capability.TTL):
        pytest.skip(f"{client.backend} has no TTL capability")
    kept: List[dlock.Lease] = []
    second = threading.Event()

    def raise_after_dropping(_lease: dlock.Lease) -> None:
        kept.clear()  # the lease's last reference then lives in the exception's traceback
        raise RuntimeError("callback failure on purpose")

    kept.append(client.acquire(name, wait=0, ttl=0.3, renew=False, on_lost=raise_after_dropping))
    later = client.acquire(name + "/2", wait=0, ttl=0.6, renew=False, on_lost=lambda _: second.set())
    assert second.wait(5), "the keeper stopped calling lost callbacks after one raised"
    assert "callback failure on purpose" in capfd.readouterr().err
    assert later.state is dlock.LeaseState.LOST


def test_renewed_lease_outlives_its_ttl(client, open_client, name):
    if not has(client, dlock.Capability.TTL):
        pytest.skip(f"{client.backend} has no TTL capability")
    with client.acquire(name, wait=0, ttl=0.4) as lease:
        time.sleep(1.5)
        assert lease.state is dlock.LeaseState.HELD
        assert open_client().try_acquire(name) is None


class _CuttableProxy:
    """A TCP forwarder to one server whose connections can all be cut (the server stays up): the
    transport failure that makes a release's outcome unknown."""

    def __init__(self, target: tuple) -> None:
        self.target = target
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.sockets: List[socket.socket] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                downstream, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            with self.lock:
                self.sockets += [downstream, upstream]
            for a, b in ((downstream, upstream), (upstream, downstream)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cut(self) -> None:
        """Closes the listening socket and every connection: nothing reaches the server any more."""
        try:
            self.listener.shutdown(socket.SHUT_RDWR)  # wakes the accept() blocked on it, or close() would not stop listening
        except OSError:
            pass
        self.listener.close()
        with self.lock:
            for s in self.sockets:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


def test_release_through_a_cut_connection_reports_unknown_and_keeps_the_lease(config, backend, name, tmp_path):
    if backend == "file":
        pytest.skip("the file backend has no transport to fail")
    # Every server endpoint of the config goes through its own proxy in the test.
    text = Path(config).read_text()
    proxies = []
    for port in sorted(set(re.findall(r"127\.0\.0\.1:(\d+)", text))):
        proxies.append(_CuttableProxy(("127.0.0.1", int(port))))
        text = text.replace(f"127.0.0.1:{port}", f"127.0.0.1:{proxies[-1].port}")
    proxied = tmp_path / "proxied.yaml"
    proxied.write_text(text)
    with dlock.Client.open(str(proxied)) as through_proxy, dlock.Client.open(config) as direct:
        lease = through_proxy.acquire(name, wait=5, ttl=30, renew=False)
        for proxy in proxies:
            proxy.cut()
        assert lease.release() is dlock.ReleaseOutcome.UNKNOWN
        assert lease.state is not dlock.LeaseState.RELEASED, "an unconfirmed release leaves the lease owned"
        assert direct.try_acquire(name) is None, "the lock is still held: nothing was released"
        try:
            assert direct.inspect(name).holder in ("", lease.owner)
        except dlock.NotSupported:
            pass


def test_lost_callback_fires_when_the_backend_becomes_unreachable(config, backend, name, tmp_path):
    """The keeper cannot renew (or the session cannot be kept) once every connection is cut: the
    lease goes LOST by valid_until (TTL backends) or the session timeout (zookeeper), and the
    callback says so."""
    if backend == "file":
        pytest.skip("the file backend has no transport to fail")
    text = Path(config).read_text()
    proxies = []
    for port in sorted(set(re.findall(r"127\.0\.0\.1:(\d+)", text))):
        proxies.append(_CuttableProxy(("127.0.0.1", int(port))))
        text = text.replace(f"127.0.0.1:{port}", f"127.0.0.1:{proxies[-1].port}")
    proxied = tmp_path / "proxied.yaml"
    proxied.write_text(text)
    lost = threading.Event()
    with dlock.Client.open(str(proxied)) as through_proxy:
        lease = through_proxy.acquire(name, wait=5, ttl=1, on_lost=lambda _: lost.set())
        cut = time.monotonic()
        for proxy in proxies:
            proxy.cut()
        assert lost.wait(15), f"no lost callback within 15 s; state {lease.state.name}"
        print(f"[{backend}] lost callback {time.monotonic() - cut:.2f} s after the cut")
        assert lease.state is dlock.LeaseState.LOST
        assert time.monotonic() >= lease.valid_until or lease.valid_until == math.inf
        assert lease.release() in (dlock.ReleaseOutcome.ALREADY_LOST, dlock.ReleaseOutcome.UNKNOWN)


# ---- Ctrl-C --------------------------------------------------------------------------------------

@pytest.mark.parametrize("wait", ["forever", "30", "default"])
def test_ctrl_c_interrupts_a_blocking_acquire_and_leaves_nothing_behind(config, client, open_client, name, wait):
    holder = client.try_acquire(name)
    child = subprocess.Popen([sys.executable, WORKER, "interrupt", config, name, wait],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "waiting"
        time.sleep(0.5)  # inside the blocking wait
        sent = time.monotonic()
        child.send_signal(signal.SIGINT)
        line = child.stdout.readline().split()
        reacted = time.monotonic() - sent
        assert line and line[0] == "interrupted", f"expected KeyboardInterrupt, got {line} {child.stderr.read() if not line else ''}"
        assert reacted < 3.0, f"Ctrl-C took {reacted:.2f} s to interrupt the wait"
        assert holder.state is dlock.LeaseState.HELD
        holder.release()
        # The interrupted process is still alive: it must hold nothing and (for explicit waits)
        # wait for nothing. With the config's default wait the abandoned call may still take the
        # lock briefly, and releases it at once.
        other = open_client()
        lease: Optional[dlock.Lease] = other.try_acquire(name) if wait != "default" else other.acquire(name, wait=15)
        assert lease is not None, "the interrupted acquire left the lock held"
        lease.release()
    finally:
        child.stdin.close()
        child.wait(30)


def test_ctrl_c_as_the_lock_frees_never_leaves_it_held(config, client, open_client, name):
    # The interrupt and the release race: whichever wins, an interrupted process holds nothing.
    for _ in range(3):
        holder = client.try_acquire(name)
        child = subprocess.Popen([sys.executable, WORKER, "interrupt", config, name, "30"],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert child.stdout.readline().strip() == "waiting"
            time.sleep(0.3)
            holder.release()
            child.send_signal(signal.SIGINT)
            line = child.stdout.readline().split()
            assert line and line[0] in ("interrupted", "acquired"), child.stderr.read()
            other = open_client()
            lease = other.try_acquire(name)
            if line[0] == "interrupted":
                assert lease is not None, "the interrupted process left the lock held"
                lease.release()
            else:
                assert lease is None, "the child reported the lock, so nobody else may have it"
        finally:
            child.stdin.close()
            child.wait(30)


# ---- bad input -----------------------------------------------------------------------------------

def test_bad_input_gets_precise_errors(client, name):
    with pytest.raises(dlock.InvalidArgument, match="empty"):
        client.acquire("", wait=0)
    with pytest.raises(dlock.InvalidArgument):
        client.acquire(b"\xff", wait=0)
    with pytest.raises(dlock.InvalidArgument, match="ttl"):
        client.acquire(name, wait=0, ttl=0)
    with pytest.raises(dlock.InvalidArgument, match="ttl"):
        client.acquire(name, wait=0, ttl=-1)
    with pytest.raises(dlock.InvalidArgument, match="wait"):
        client.acquire(name, wait=float("nan"))
    with pytest.raises(TypeError):
        client.acquire(name, wait="5s")
    with pytest.raises(TypeError):
        client.acquire(42)
    # Nothing was left behind by the refused calls.
    with client.try_acquire(name) as lease:
        assert lease is not None


def test_bad_configs_raise_config_error_naming_where(tmp_path):
    with pytest.raises(dlock.ConfigError, match="bad.yaml") as raised:
        dlock.Client.from_yaml("backend: [", "bad.yaml")
    assert raised.value.status_name == "DLOCK_CONFIG"
    with pytest.raises(dlock.DlockError) as raised:
        dlock.Client.open("redis://:s3cret-pw@127.0.0.1:1/0?ttl=banana")
    assert "s3cret-pw" not in str(raised.value), "a password is never echoed"
    with pytest.raises(dlock.DlockError):
        dlock.Client.open(str(tmp_path / "missing.yaml"))


def test_capabilities_and_backend(client, backend):
    assert client.backend == backend.split("-")[0]
    caps = client.capabilities
    assert isinstance(caps, dlock.Capability)
    if backend == "redlock":
        assert caps & dlock.Capability.QUORUM and not caps & dlock.Capability.FENCING
    if backend in ("file", "redis", "zookeeper", "etcd", "sql"):
        assert caps & dlock.Capability.FENCING


# ---- installing ----------------------------------------------------------------------------------

def test_the_package_installs_offline_and_works_from_the_install(tmp_path):
    """`pip install --no-build-isolation --no-index ./python` into a venv: nothing fetched, only
    Debian's setuptools; the installed package then loads libdlock and takes a lock."""
    source = tmp_path / "src"
    shutil.copytree(Path(__file__).resolve().parent.parent.parent / "python", source,
                    ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True, timeout=120)
    install = subprocess.run([str(venv / "bin" / "pip"), "install", "--no-build-isolation", "--no-index", str(source)],
                             capture_output=True, text=True, timeout=300)
    assert install.returncode == 0, install.stdout + install.stderr
    locks = tmp_path / "locks"
    script = ("import dlock, importlib.metadata, sys\n"
              "assert dlock.__file__.startswith(sys.prefix), dlock.__file__\n"
              "assert importlib.metadata.version('dlock') == dlock.__version__, importlib.metadata.version('dlock')\n"
              f"with dlock.Client.open('file://{locks}') as c, c.acquire('installed', wait=1) as lease:\n"
              "    print(lease.fencing_token)\n")
    run = subprocess.run([str(venv / "bin" / "python"), "-c", script], capture_output=True, text=True, timeout=60,
                         cwd=str(tmp_path))
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "1"
