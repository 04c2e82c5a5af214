"""Semaphores, shared (read-write) locks, holders, list and break through the dlock package, on every
backend's real servers (the lab): N permits at once and the next one waits, at most N holders across
processes, a mismatched limit refused, shared holders together and the exclusive side excluding
them, a waiting writer not starved, holders/list reporting the right owners and tokens, a break
that fences and makes the broken lease LOST, and NotSupported where a backend lacks a mode."""
from __future__ import annotations

import re
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Callable, List

import pytest

import dlock
from dlock import _native
from dlock import client as client_module

WORKER = str(Path(__file__).resolve().parent / "worker.py")
Cap = dlock.Capability

# What each backend implements (docs/backends/*.md); a backend missing here (sql) is checked
# against its own capabilities only.
EXPECTED = {
    "file": Cap.SEMAPHORE | Cap.SHARED | Cap.LIST,
    "redis": Cap.SEMAPHORE | Cap.SHARED | Cap.LIST | Cap.BREAK,
    "redlock": Cap.SHARED | Cap.LIST | Cap.BREAK,
    "zookeeper": Cap.SEMAPHORE | Cap.SHARED | Cap.LIST | Cap.BREAK,
    "etcd": Cap.SEMAPHORE | Cap.SHARED | Cap.LIST | Cap.BREAK,
    "sql": Cap.SEMAPHORE | Cap.SHARED | Cap.LIST | Cap.BREAK,  # lease mode, the lab's PostgreSQL
}


def has(client: dlock.Client, capability: dlock.Capability) -> bool:
    return bool(client.capabilities & capability)


def require(client: dlock.Client, capability: dlock.Capability, attempt: Callable[[], object]) -> None:
    """Without `capability`, `attempt()` must raise NotSupported; then the test is skipped."""
    if has(client, capability):
        return
    with pytest.raises(dlock.NotSupported):
        attempt()
    pytest.skip(f"{client.backend} has no {capability.name} (checked: NotSupported)")


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


# ---- the package's declarations -------------------------------------------------------------------

def test_declarations_match_dlock_h():
    assert (Cap.SEMAPHORE, Cap.SHARED, Cap.LIST, Cap.BREAK) == (1 << 7, 1 << 8, 1 << 9, 1 << 10)
    assert [k.value for k in dlock.HoldKind] == [0, 1, 2]
    # The LP64 layouts pinned by dlock.h's static asserts.
    options = _native.AcquireOptions
    assert (options.cancel.offset, options.permits.offset, options.shared.offset) == (56, 64, 68)
    assert (_native.ACQUIRE_OPTIONS_V1_SIZE, _native.ACQUIRE_OPTIONS_V3_SIZE) == (56, 72)
    info = _native.HolderInfo
    assert [info.name.offset, info.kind.offset, info.permits.offset, info.holder.offset,
            info.fencing_token.offset, info.ttl_left_ms.offset] == [8, 16, 20, 24, 88, 96]
    assert _native.HOLDER_INFO_V1_SIZE == 104


def test_an_older_libdlock_gets_version_1_options_and_the_new_modes_are_refused(config, monkeypatch, name):
    """A libdlock of the same major version without dlock_holders/list/break predates acquire
    options version 3: it would ignore permits and shared, so the package sends it version 1 and
    refuses the new modes itself, while plain locks keep working."""
    assert _native.acquire_options_size(_native.lib) == 72
    assert _native.acquire_options_size(object()) == 56  # a library object without the new symbols
    monkeypatch.setattr(_native, "MODES", False)
    monkeypatch.setattr(_native, "ACQUIRE_OPTIONS_SIZE", _native.ACQUIRE_OPTIONS_V1_SIZE)
    with dlock.Client.open(config) as c:
        for attempt in (lambda: c.semaphore(name, 2).try_acquire(), lambda: c.shared_lock(name).try_shared(),
                        lambda: c.holders(name), lambda: c.list(name), lambda: c.break_lock(name)):
            with pytest.raises(dlock.NotSupported, match="predates"):
                attempt()
        with c.acquire(name, wait=5) as lease:
            assert lease.state is dlock.LeaseState.HELD


def test_backends_report_the_modes_they_implement(client, backend):
    expected = EXPECTED.get(backend, Cap(0))
    assert client.capabilities & expected == expected, f"{backend}: {client.capabilities!r}"


# ---- semaphores ----------------------------------------------------------------------------------

def test_bad_permit_counts_are_refused_before_any_call(client, name):
    for bad in (0, -1, 2**32):
        with pytest.raises(dlock.InvalidArgument, match="permits"):
            client.semaphore(name, bad)
    for wrong in ("3", 2.0, True, None):
        with pytest.raises(TypeError):
            client.semaphore(name, wrong)
    with pytest.raises(TypeError):
        client.semaphore(42, 3)


def test_n_permits_are_usable_at_once_and_the_next_acquirer_waits(client, open_client, name):
    require(client, Cap.SEMAPHORE, lambda: client.semaphore(name, 3).try_acquire())
    permits = [open_client().semaphore(name, 3).try_acquire(ttl=30) for _ in range(3)]
    assert all(p is not None and p.state is dlock.LeaseState.HELD for p in permits)
    assert len({p.owner for p in permits}) == 3
    fourth = open_client().semaphore(name, 3)
    assert fourth.try_acquire() is None
    start = time.monotonic()
    with pytest.raises(dlock.Timeout, match="semaphore"):
        fourth.acquire(wait=0.3)
    assert 0.3 <= time.monotonic() - start < 2.3

    holders = fourth.holders()
    assert sorted(h.holder for h in holders) == sorted(p.owner for p in permits), "the waiters left nothing"
    assert all(h.kind is dlock.HoldKind.PERMIT and h.name == name and h.permits in (0, 3) for h in holders)
    if has(client, Cap.FENCING):
        tokens = {p.owner: p.fencing_token for p in permits}
        assert all(h.fencing_token == tokens[h.holder] for h in holders)
        assert len(set(tokens.values())) == 3
    with client.try_acquire(name) as lock:
        assert lock is not None, "the lock of the same name is another object"

    assert permits[0].release() is dlock.ReleaseOutcome.RELEASED
    with fourth.acquire(wait=5) as again:
        assert again.state is dlock.LeaseState.HELD
        if has(client, Cap.FENCING):
            assert again.fencing_token > max(p.fencing_token for p in permits)
    for p in permits[1:]:
        p.release()
    assert client.holders(name, semaphore=True) == []


def test_at_most_n_permit_holders_across_processes(config, client, name):
    require(client, Cap.SEMAPHORE, lambda: client.semaphore(name, 2).try_acquire())
    processes, permits, iterations = 4, 2, 8
    workers = [subprocess.Popen([sys.executable, WORKER, "permit", config, name, str(permits), str(iterations)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(processes)]
    holds = []
    for w in workers:
        out, err = w.communicate(timeout=300)
        assert w.returncode == 0, err
        holds += [line.split() for line in out.splitlines()]
    assert len(holds) == processes * iterations
    assert all(h[3] == "released" for h in holds)
    # The most holders at any instant: a release at the same nanosecond as an acquire counts first.
    events = sorted([(int(start), 1) for _, start, _, _ in holds] + [(int(end), -1) for _, _, end, _ in holds])
    at_once = most = 0
    for _, delta in events:
        at_once += delta
        most = max(most, at_once)
    assert most <= permits, f"{most} permit holders at once, limit {permits}"
    if has(client, Cap.FENCING):
        assert len({int(h[0]) for h in holds}) == len(holds), "every grant has its own fencing token"


def test_a_mismatched_limit_is_refused_naming_both_and_leaves_nothing(client, open_client, name):
    require(client, Cap.SEMAPHORE, lambda: client.semaphore(name, 2).try_acquire())
    held = client.semaphore(name, 2).try_acquire()
    assert held is not None
    with pytest.raises(dlock.InvalidArgument) as raised:
        open_client().semaphore(name, 3).acquire(wait=1)
    message = str(raised.value)
    assert "2" in message and "3" in message and name in message, message
    assert [h.holder for h in client.holders(name, semaphore=True)] == [held.owner]
    held.release()


# ---- shared locks --------------------------------------------------------------------------------

def test_shared_holders_hold_together_and_the_exclusive_side_excludes_them(client, open_client, name):
    require(client, Cap.SHARED, lambda: client.shared_lock(name).try_shared())
    readers = [client.shared_lock(name).try_shared(ttl=30), open_client().shared_lock(name).try_shared(ttl=30)]
    assert all(r is not None for r in readers), "two shared holders at once"
    writer = open_client()
    assert writer.shared_lock(name).try_exclusive() is None
    assert writer.try_acquire(name) is None, "an ordinary acquire is the exclusive side"
    with pytest.raises(dlock.Timeout):
        writer.shared_lock(name).exclusive(wait=0.3)
    holders = writer.holders(name)
    assert sorted(h.holder for h in holders) == sorted(r.owner for r in readers)
    assert all(h.kind is dlock.HoldKind.SHARED for h in holders)
    for r in readers:
        assert r.release() is dlock.ReleaseOutcome.RELEASED

    with writer.shared_lock(name).exclusive(wait=5) as exclusive:
        assert open_client().shared_lock(name).try_shared() is None, "the exclusive holder excludes readers"
        [only] = writer.holders(name)
        assert only.kind is dlock.HoldKind.EXCLUSIVE and only.holder == exclusive.owner
        if has(client, Cap.FENCING):
            assert exclusive.fencing_token > max(r.fencing_token for r in readers), "one counter for both sides"
    with client.shared_lock(name).shared(wait=5) as again:
        assert again.state is dlock.LeaseState.HELD


def test_a_waiting_writer_is_not_starved_by_later_readers(client, open_client, name):
    require(client, Cap.SHARED, lambda: client.shared_lock(name).try_shared())
    reader = client.shared_lock(name).shared(wait=5)
    writer_client = open_client()
    got: List[float] = []

    def write() -> None:
        with writer_client.shared_lock(name).exclusive(wait=30):
            got.append(time.monotonic())
            time.sleep(0.2)

    writer = threading.Thread(target=write)
    writer.start()
    time.sleep(1.0)  # the writer is queued behind the reader
    with pytest.raises(dlock.Timeout):
        open_client().shared_lock(name).shared(wait=1)  # a later reader waits behind the writer
    assert not got, "the writer got in beside a reader"
    released = time.monotonic()
    reader.release()
    writer.join(30)
    assert got and got[0] - released < 5.0, "the writer never got the lock after the reader left"


# ---- holders, list, break ------------------------------------------------------------------------

def test_list_reports_every_holder_under_a_prefix(client, open_client, name):
    require(client, Cap.LIST, lambda: client.list(name))
    prefix = name + "/"
    expected = {}
    exclusive = open_client().acquire(prefix + "x", wait=5, ttl=30)
    expected[prefix + "x"] = (dlock.HoldKind.EXCLUSIVE, exclusive)
    if has(client, Cap.SHARED):
        reader = open_client().shared_lock(prefix + "r").shared(wait=5, ttl=30)
        expected[prefix + "r"] = (dlock.HoldKind.SHARED, reader)
    if has(client, Cap.SEMAPHORE):
        permit = open_client().semaphore(prefix + "s", 2).acquire(wait=5, ttl=30)
        expected[prefix + "s"] = (dlock.HoldKind.PERMIT, permit)
    outside = open_client().acquire(name + "-outside", wait=5, ttl=30)

    found = client.list(prefix)
    assert sorted(h.name for h in found) == sorted(expected), found
    for h in found:
        kind, lease = expected[h.name]
        assert h.kind is kind
        assert h.holder in ("", lease.owner)
        if has(client, Cap.FENCING):
            assert h.fencing_token == lease.fencing_token
        assert h.ttl_left is None or 0 < h.ttl_left <= 30
    assert outside.name in {h.name for h in client.list(name)}
    assert client.list(prefix + "nothing-here") == []


def test_break_fences_and_the_broken_lease_becomes_lost(client, open_client, name):
    require(client, Cap.BREAK, lambda: client.break_lock(name))
    fencing = has(client, Cap.FENCING)
    # Without fencing (redlock) a break is fenced by time: the name stays taken while the broken
    # lease may be valid, so a short ttl.
    victim = open_client().acquire(name, wait=5, ttl=30 if fencing else 3)
    assert client.break_lock(name) == 1
    valid_until = victim.valid_until
    with pytest.raises(dlock.Lost):
        victim.renew()  # LOST at its next renewal at the latest
    assert victim.state is dlock.LeaseState.LOST
    if not fencing:
        left = valid_until - time.monotonic()
        assert left > 0.6, "the broken lease should still be valid here"
        with pytest.raises(dlock.Timeout):  # never granted while the broken lease is valid
            open_client().acquire(name, wait=left - 0.1)
    with open_client().acquire(name, wait=5) as successor:
        if has(client, Cap.FENCING):
            assert successor.fencing_token > victim.fencing_token, "the break is fenced"
        assert victim.release() is dlock.ReleaseOutcome.ALREADY_LOST
        assert successor.state is dlock.LeaseState.HELD and client.holders(name)[0].holder in ("", successor.owner)
    assert client.break_lock(name + "/free") == 0

    if has(client, Cap.SEMAPHORE):
        semaphore = name + "/sem"
        permits = [open_client().semaphore(semaphore, 2).acquire(wait=5, ttl=30) for _ in range(2)]
        assert client.break_lock(semaphore, semaphore=True) == 2
        assert client.holders(semaphore, semaphore=True) == []
        for p in permits:
            with pytest.raises(dlock.Lost):
                p.renew()


def _redis_command(port: int, *args: str) -> bytes:
    """One command to the lab's Redis (whose default user may do everything); its first reply line."""
    request = f"*{len(args)}\r\n".encode() + b"".join(f"${len(a.encode())}\r\n{a}\r\n".encode() for a in args)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(request)
        return s.makefile("rb").readline()


# The tenant's ACL line of docs/backends/redis.md ("Listing and breaking locks"): every kind of
# hold, neither +scan (list) nor +unlink (break).
_REDIS_TENANT_COMMANDS = ("+eval +evalsha +script|load +get +set +incr +pttl +pexpire +del +time +zadd +zrem "
                          "+zrange +zrangebyscore +zscore +publish +subscribe +unsubscribe +ping").split()


def test_list_and_break_raise_permission_denied_for_a_redis_tenant(config, backend, name, tmp_path):
    if backend != "redis":
        pytest.skip("an ACL user made on the fly needs redis")
    text = Path(config).read_text()
    port = int(re.search(r"127\.0\.0\.1:(\d+)", text).group(1))
    user, password, prefix = f"py-tenant-{uuid.uuid4().hex[:12]}", f"pw-{uuid.uuid4().hex}", f"pyt{uuid.uuid4().hex[:8]}:"
    reply = _redis_command(port, "ACL", "SETUSER", user, "on", f">{password}", f"~{prefix}*", f"&{prefix}*",
                           *_REDIS_TENANT_COMMANDS)
    assert reply.startswith(b"+OK"), reply
    try:
        tenant_config = tmp_path / "tenant.yaml"
        tenant_config.write_text(text.replace("options:\n", f"options:\n  username: {user}\n  password: {password}\n"
                                                             f"  key_prefix: \"{prefix}\"\n", 1))
        with dlock.Client.open(str(tenant_config)) as tenant:
            lease = tenant.acquire(name, wait=5)
            with pytest.raises(dlock.PermissionDenied) as raised:
                tenant.break_lock(name)
            assert raised.value.status_name == "DLOCK_PERMISSION" and password not in str(raised.value)
            with pytest.raises(dlock.PermissionDenied):
                tenant.list("")
            assert [h.holder for h in tenant.holders(name)] == [lease.owner], "the refused break touched nothing"
            lease.renew()
            assert lease.release() is dlock.ReleaseOutcome.RELEASED
    finally:
        _redis_command(port, "ACL", "DELUSER", user)


def test_holders_of_a_free_name_is_empty(client, name):
    try:
        assert client.holders(name) == []
    except dlock.NotSupported:
        pytest.skip(f"{client.backend} cannot enumerate holders")
    if has(client, Cap.SEMAPHORE):
        assert client.holders(name, semaphore=True) == []


def test_a_visitor_failure_is_raised_after_the_call_and_the_client_goes_on(client, open_client, name, monkeypatch):
    require(client, Cap.LIST, lambda: client.list(name))
    lease = open_client().acquire(name + "/x", wait=5)

    def broken_holder_info(*_args: object) -> None:
        raise MemoryError("on purpose")

    monkeypatch.setattr(client_module, "HolderInfo", broken_holder_info)
    with pytest.raises(MemoryError, match="on purpose"):
        client.list(name + "/")
    monkeypatch.undo()
    assert [h.holder for h in client.list(name + "/")] in ([lease.owner], [""])
    lease.release()
