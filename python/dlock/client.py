"""Client and Lease: the C ABI's dlock_client and dlock_lease as Python objects.

Durations are seconds (int or float) or datetime.timedelta; None takes the value from the lock's
policy or the config's defaults (DLOCK_DEFAULT). Times on the lease (valid_until) are on the
time.monotonic() clock, which is CLOCK_MONOTONIC on Linux: the clock dlock itself uses."""
from __future__ import annotations

import atexit
import ctypes
import enum
import math
import os
import threading
import time
import traceback
import weakref
from dataclasses import dataclass
from datetime import timedelta
from typing import Callable, Dict, List, NamedTuple, Optional, Union

from . import _native
from .errors import InvalidArgument, NotSupported, Timeout, from_status

_lib = _native.lib

Duration = Union[int, float, timedelta]
LostCallback = Callable[["Lease"], None]

#: ``wait=FOREVER``: wait until acquired or the client closes (DLOCK_WAIT_FOREVER).
FOREVER = math.inf

#: In the main thread, a blocking acquire waits in slices of this many seconds, so that Ctrl-C
#: (KeyboardInterrupt) is raised within about one slice (see Client.acquire, ``interruptible``).
INTERRUPT_SLICE_S = 0.2


class Capability(enum.IntFlag):
    """The DLOCK_CAP_* bits of dlock_client_capabilities()."""
    FENCING = 1 << 0        #: leases carry a strictly increasing fencing token
    FAIR = 1 << 1           #: waiters are served first come, first served
    PUSH_WAIT = 1 << 2      #: waiters are woken by the backend, never poll
    TTL = 1 << 3            #: leases expire after their ttl unless renewed
    SESSION_BOUND = 1 << 4  #: locks are released when the holder dies
    QUORUM = 1 << 5         #: survives the loss of a minority of servers
    REENTRANT = 1 << 6      #: acquire(reentrant=True) counts holds per name
    SEMAPHORE = 1 << 7      #: Client.semaphore(name, n): one of n permits per acquire
    SHARED = 1 << 8         #: Client.shared_lock(name).shared(): many shared holders or one exclusive
    LIST = 1 << 9           #: Client.list(prefix) enumerates the held locks and semaphores
    BREAK = 1 << 10         #: Client.break_lock(name) force-releases a lock or semaphore, fenced


class LeaseState(enum.IntEnum):
    """dlock_lease_state: HELD -> SUSPECT -> LOST, or RELEASED."""
    HELD = 0      #: confirmed held until valid_until
    SUSPECT = 1   #: renewal is failing; may still be held until valid_until
    LOST = 2      #: no longer held: expired, taken, or the session ended
    RELEASED = 3  #: released by this process


class ReleaseOutcome(enum.Enum):
    """The three outcomes of Lease.release()."""
    RELEASED = "released"          #: released (or already released by an earlier call)
    ALREADY_LOST = "already_lost"  #: it had expired or been taken; nothing of the new holder's was touched
    UNKNOWN = "unknown"            #: the backend could not be reached; still owned, safe to retry


class LockInfo(NamedTuple):
    """What Client.inspect() reads about a lock without taking it."""
    held: bool                #: some process holds the lock now
    holder: str               #: the holder's owner token (hex) if known and held, else ""
    fencing_token: int        #: the last fencing token issued for the name; 0 if none or unknown
    ttl_left: Optional[float]  #: seconds until the holder's lease expires; None if no ttl or unknown


class HoldKind(enum.IntEnum):
    """dlock_hold_kind: how a holder holds what it holds."""
    EXCLUSIVE = 0  #: a lock, held exclusively
    SHARED = 1     #: a lock, held shared
    PERMIT = 2     #: one permit of a semaphore


@dataclass(frozen=True)
class HolderInfo:
    """One current holder, as Client.holders() and Client.list() report it (dlock_holder_info)."""
    name: str                  #: the lock's or semaphore's name
    kind: HoldKind
    permits: int               #: PERMIT: the semaphore's limit as the backend stores it (0 unknown)
    holder: str                #: the holder's owner token (hex) if known, else ""
    fencing_token: int         #: this holder's fencing token; 0 if none or unknown
    ttl_left: Optional[float]  #: seconds until this holder's lease expires; None if no ttl or unknown


_FINITE_MS_LIMIT_S = (_native.WAIT_FOREVER - 1) // 1000


def _milliseconds(value: Optional[Duration], what: str, *, allow_forever: bool) -> int:
    """A duration argument as the C ABI's milliseconds (rounded up, so a positive wait never becomes
    a try-once); None -> DLOCK_DEFAULT. Negative, NaN and non-numbers are refused here because the
    C sentinels (-1 = default) would otherwise give them a meaning."""
    if value is None:
        return _native.DEFAULT
    if type(value) in (int, float) and 0 <= value < _FINITE_MS_LIMIT_S:  # the common case, checked cheaply
        return math.ceil(value * 1000)
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    else:
        raise TypeError(f"{what} must be seconds (int or float) or a timedelta, not {type(value).__name__}")
    if math.isnan(seconds) or seconds < 0:
        raise InvalidArgument(_native.INVALID_ARGUMENT, f"{what} must be >= 0 seconds, got {value!r}")
    if math.isinf(seconds):
        if not allow_forever:
            raise InvalidArgument(_native.INVALID_ARGUMENT, f"{what} must be finite, got {value!r}")
        return _native.WAIT_FOREVER
    return min(math.ceil(seconds * 1000), _native.WAIT_FOREVER - 1)


def _flag(value: Optional[bool]) -> int:
    return _native.DEFAULT if value is None else int(bool(value))


def _encode_name(name: Union[str, bytes]) -> bytes:
    if isinstance(name, str):
        return name.encode("utf-8", "surrogateescape")  # invalid UTF-8 reaches the library, which names the fault
    if isinstance(name, (bytes, bytearray)):
        return bytes(name)
    raise TypeError(f"a lock name is str or bytes, not {type(name).__name__}")


# Lost callbacks. One C function pointer for the whole process (kept alive by this module); its
# user_data is a key into _lost_handlers, which holds the lease weakly so that registering a
# callback never keeps a lease (and so its lock) alive.
_lost_handlers: Dict[int, "tuple[weakref.ref[Lease], LostCallback]"] = {}
_lost_lock = threading.Lock()
_lost_keys = iter(range(1, 2**62))


_callback_thread = threading.local()


def _on_lost_trampoline(_lease_handle: int, user_data: int) -> None:
    # Everything Python does on the keeper thread happens with `inside` set, so that a finalizer
    # run here (the user's callback dropping the last reference to its lease or client, or a
    # garbage collection) defers the destroy or close instead of calling it on the keeper thread.
    _callback_thread.inside = True
    try:
        with _lost_lock:
            entry = _lost_handlers.get(user_data)
        lease = entry[0]() if entry is not None else None
        if lease is not None:
            try:
                entry[1](lease)  # type: ignore[index]
            except BaseException:  # noqa: BLE001 - nothing may cross into the C library
                traceback.print_exc()
        del lease, entry
    finally:
        _callback_thread.inside = False


def _outside_lost_callbacks(action: Callable[[], None]) -> None:
    """Runs `action` (a lease destroy or client close) now, or, inside a lost callback, where the C
    ABI forbids both, on a short-lived thread once the callback has returned."""
    if getattr(_callback_thread, "inside", False):
        threading.Thread(target=action, name="dlock-deferred-close", daemon=True).start()
    else:
        action()


_ON_LOST = _native.LOST_CALLBACK(_on_lost_trampoline)

# Clients still open, closed at interpreter exit so that no keeper thread calls into Python while
# it shuts down, and every lock still held is released.
_open_clients: "weakref.WeakSet[Client]" = weakref.WeakSet()


def _close_all_clients() -> None:
    for client in list(_open_clients):
        client.close()


atexit.register(_close_all_clients)


class _Handle:
    """Owns one dlock_lease pointer. The pointer is taken out of the cell before it is destroyed, so
    two paths racing to free it (an exception path and the finalizer) free it once."""
    __slots__ = ("cell",)

    def __init__(self, cell: ctypes.c_void_p) -> None:
        self.cell = cell

    def take(self) -> Optional[int]:
        value, self.cell.value = self.cell.value, None
        return value


class Lease:
    """Proof that this process holds the named lock until it is released or lost
    (dlock_lease). Made by Client.acquire/try_acquire, never directly.

    Use it as a context manager (``with client.acquire("x") as lease:``): leaving the block
    releases the lock. A lease not released explicitly is released when it is garbage-collected
    (dlock_lease_destroy: best effort). A lease may be used from any thread, but not from two at once."""

    __slots__ = ("_handle", "_client", "_lost_key", "__weakref__")

    def __init__(self, client: "Client", handle: _Handle) -> None:
        self._handle = handle
        self._client = client  # keeps the client (its connections and keeper) alive while the lease is
        self._lost_key = 0

    @property
    def _ptr(self) -> int:
        value = self._handle.cell.value
        if value is None:
            raise InvalidArgument(_native.INVALID_ARGUMENT, "the lease was closed (Lease.close)")
        return value

    @property
    def name(self) -> str:
        """The lock's name."""
        return _native.text(_lib.dlock_lease_name(self._ptr))

    @property
    def owner(self) -> str:
        """The owner token: 128 random bits fresh for this acquisition, as 32 lowercase hex digits."""
        return _native.text(_lib.dlock_lease_owner(self._ptr))

    @property
    def fencing_token(self) -> int:
        """The fencing token, strictly increasing per name across all holders; 0 when the backend has
        no Capability.FENCING. Pass it to the resources the lock protects so they can refuse stale writers."""
        return _lib.dlock_lease_fencing_token(self._ptr)

    @property
    def valid_until_ns(self) -> int:
        """The end of validity on CLOCK_MONOTONIC in nanoseconds (time.monotonic_ns() scale): the send
        time of the last confirmed acquire or renew + ttl - drift. 2**63-1 for leases that never
        expire on their own (session-bound backends such as `file`)."""
        return _lib.dlock_lease_valid_until(self._ptr)

    @property
    def valid_until(self) -> float:
        """valid_until_ns in seconds on the time.monotonic() clock; math.inf for leases that never
        expire on their own."""
        ns = self.valid_until_ns
        return math.inf if ns == _native.NEVER_EXPIRES else ns / 1e9

    @property
    def time_left(self) -> float:
        """Seconds until valid_until (negative once passed; math.inf without expiry)."""
        return self.valid_until - time.monotonic()

    @property
    def state(self) -> LeaseState:
        """The current state. Moves to LOST by itself (keeper, backend notice, or valid_until passing)."""
        return LeaseState(_lib.dlock_lease_state_get(self._ptr))

    def on_lost(self, callback: Optional[LostCallback]) -> None:
        """Registers `callback(lease)`, called once when the lease becomes LOST (replacing any earlier
        one; None removes it). It runs on the client's keeper thread — or at once, in this thread, if
        the lease is already LOST. It may close the lease or the client (the C ABI forbids that inside
        the callback, so the close is carried out on another thread once the callback has returned);
        exceptions it raises are printed to stderr and dropped (they cannot cross into the C library)."""
        ptr = self._ptr
        if callback is None:
            _lib.dlock_lease_on_lost(ptr, _native.LOST_CALLBACK(), None)
            self._forget_lost_handler()
            return
        key = self._lost_key or next(_lost_keys)
        with _lost_lock:
            _lost_handlers[key] = (weakref.ref(self), callback)
        self._lost_key = key
        status = _lib.dlock_lease_on_lost(ptr, _ON_LOST, key)
        if status != _native.OK:
            raise from_status(status)

    def renew(self) -> None:
        """Extends the lease by its ttl now, whatever the keeper does (dlock_lease_renew). Raises
        Lost, Unavailable/Unknown (could not confirm: the lease is SUSPECT), Cancelled (client
        closed) or InvalidArgument (released). For backends without Capability.TTL this confirms the
        lease is still held."""
        status = _lib.dlock_lease_renew(self._ptr)
        if status != _native.OK:
            raise from_status(status)

    def release(self) -> ReleaseOutcome:
        """Releases the lock: owner-only and idempotent (dlock_lease_release). Returns
        RELEASED (or already released by an earlier call), ALREADY_LOST (it had expired or been
        taken; nothing of the new holder's was touched) or UNKNOWN (the backend could not be
        reached: still owned, safe to retry; it becomes LOST at valid_until if never confirmed).
        Any other status raises its DlockError."""
        status = _lib.dlock_lease_release(self._ptr)
        if status == _native.OK:
            return ReleaseOutcome.RELEASED
        if status == _native.LOST:
            return ReleaseOutcome.ALREADY_LOST
        if status == _native.UNKNOWN:
            return ReleaseOutcome.UNKNOWN
        raise from_status(status)

    def close(self) -> None:
        """Frees the lease handle, releasing the lock first if still held (best effort,
        dlock_lease_destroy). Idempotent; every other method raises InvalidArgument afterwards."""
        ptr = self._handle.take()
        if ptr is not None:
            if getattr(_callback_thread, "inside", False):
                _outside_lost_callbacks(lambda: _lib.dlock_lease_destroy(ptr))
            else:
                _lib.dlock_lease_destroy(ptr)
        if self._lost_key:
            self._forget_lost_handler()

    def _forget_lost_handler(self) -> None:
        if self._lost_key:
            with _lost_lock:
                _lost_handlers.pop(self._lost_key, None)
            self._lost_key = 0

    def __enter__(self) -> "Lease":
        return self

    def __exit__(self, *exc_info: object) -> None:
        # Like the C++ API's unlock(): leaving the block never raises for the release's outcome;
        # call release() inside the block to see it. The handle is freed at once.
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown may have torn down the module
            pass

    def __repr__(self) -> str:
        if self._handle.cell.value is None:
            return "<dlock.Lease closed>"
        return f"<dlock.Lease {self.name!r} fence={self.fencing_token} state={self.state.name}>"


class Client:
    """One configured backend instance (dlock_client): connections, session, lease keeper.
    Thread-safe. Open it with Client.open(config_or_dsn) or Client.from_yaml(text); close it with
    close() or a ``with`` block (acquires waiting in other threads then raise Cancelled, and every
    lease still held is released)."""

    __slots__ = ("_ptr", "_backend", "__weakref__")

    def __init__(self, handle: int) -> None:
        self._ptr: Optional[int] = handle
        self._backend = _native.text(_lib.dlock_client_backend(handle))
        _open_clients.add(self)

    @classmethod
    def open(cls, config: Union[str, "os.PathLike[str]", None] = None) -> "Client":
        """Opens a client (dlock_client_open) from `config`:
        None or "": the file named by $DLOCK_CONFIG if set, else the embedded default (the `file`
        backend in $XDG_RUNTIME_DIR/dlock, or /tmp/dlock-<uid>); a DSN, recognised by
        "<scheme>://" (e.g. "redis://:pw@127.0.0.1:6379/0?ttl=30s"); otherwise the path of a YAML
        config file. Raises ConfigError, PluginError, Unavailable, BackendError or InternalError."""
        raw = b"" if config is None else os.fsencode(config)
        out = ctypes.c_void_p()
        status = _lib.dlock_client_open(raw, ctypes.byref(out))
        if status != _native.OK:
            raise from_status(status)
        return cls(out.value)

    @classmethod
    def from_yaml(cls, yaml_text: str, origin: Optional[str] = None) -> "Client":
        """Opens a client from YAML text (dlock_client_open_yaml); `origin` names the text in error messages."""
        out = ctypes.c_void_p()
        status = _lib.dlock_client_open_yaml(yaml_text.encode("utf-8"),
                                             None if origin is None else origin.encode("utf-8"), ctypes.byref(out))
        if status != _native.OK:
            raise from_status(status)
        return cls(out.value)

    @property
    def _handle(self) -> int:
        if self._ptr is None:
            raise InvalidArgument(_native.INVALID_ARGUMENT, f"the {self._backend} client is closed")
        return self._ptr

    @property
    def backend(self) -> str:
        """The backend's name ("file", "redis", ...)."""
        return self._backend

    @property
    def capabilities(self) -> Capability:
        """The backend's capabilities as configured (a redlock client has QUORUM, a file one does not)."""
        return Capability(_lib.dlock_client_capabilities(self._handle))

    def acquire(self, name: Union[str, bytes], *, wait: Optional[Duration] = None, ttl: Optional[Duration] = None,
                renew: Optional[bool] = None, fair: Optional[bool] = None, reentrant: Optional[bool] = None,
                on_lost: Optional[LostCallback] = None, interruptible: Optional[bool] = None) -> Lease:
        """Acquires the lock `name` (1..1024 bytes of UTF-8; every distinct byte sequence is a distinct
        lock) and returns its Lease (dlock_acquire).

        wait: 0 = try once; N seconds = give up after N; FOREVER; None = the config's default.
        ttl: the lease length (> 0); renew: the keeper extends the lease until release; fair: FIFO
        among waiters where the backend can; reentrant: a name this client already holds
        reentrantly is held again (hold count); None = the lock's policy or the config's defaults.
        on_lost: called once with the lease when it becomes LOST (see Lease.on_lost).

        Blocks with the GIL released. interruptible (default: True in the main thread, False
        elsewhere) waits in slices of INTERRUPT_SLICE_S seconds so Ctrl-C raises KeyboardInterrupt
        within about one slice; each slice that runs out leaves nothing behind (the C contract) and
        a lease acquired as the interrupt arrives is released before KeyboardInterrupt propagates.
        On a FAIR backend a waiter re-queues at each slice: pass interruptible=False to keep one
        place in the queue for the whole wait. With wait=None the config's wait is not known here,
        so it is not sliced: the C call waits in a helper thread and this thread waits
        interruptibly for it; on Ctrl-C the abandoned call waits out its wait and releases at once
        a lease it gets after the interrupt.

        Raises Timeout (not acquired within `wait`), InvalidArgument, Unavailable, BackendError,
        Unknown, Cancelled (the client was closed), PluginError or InternalError; on any of them
        nothing is left behind."""
        lease = self._acquire(name, wait, ttl, renew, fair, reentrant, interruptible)
        return self._granted(lease, f"lock {name!r}", wait, on_lost)

    def _granted(self, lease: Optional[Lease], what: str, wait: Optional[Duration],
                 on_lost: Optional[LostCallback]) -> Lease:
        """`lease` with `on_lost` registered, or Timeout naming `what` when the wait ran out (None)."""
        if lease is None:
            raise Timeout(_native.TIMEOUT, f"{what} not acquired within the wait "
                          f"({'config default' if wait is None else wait}) on the {self._backend} backend")
        if on_lost is not None:
            lease.on_lost(on_lost)
        return lease

    def try_acquire(self, name: Union[str, bytes], *, ttl: Optional[Duration] = None, renew: Optional[bool] = None,
                    reentrant: Optional[bool] = None, on_lost: Optional[LostCallback] = None) -> Optional[Lease]:
        """Tries once (wait 0): the Lease, or None when another holder has the lock. Other failures
        raise as in acquire()."""
        lease = self._acquire(name, 0, ttl, renew, None, reentrant, False)
        if lease is not None and on_lost is not None:
            lease.on_lost(on_lost)
        return lease

    def semaphore(self, name: Union[str, bytes], permits: int) -> "Semaphore":
        """The counting semaphore `name` with `permits` (>= 1) permits: at most that many holders at
        once, across processes. Every client of one semaphore must give the same number; where the
        backend stores it, another number is refused with InvalidArgument naming both. A semaphore
        and a lock of the same name are different objects. Contacts no server; its acquires raise
        NotSupported without Capability.SEMAPHORE."""
        return Semaphore(self, name, permits)

    def shared_lock(self, name: Union[str, bytes]) -> "SharedLock":
        """The lock `name` as a read-write lock: SharedLock.shared() holds it beside other shared
        holders, SharedLock.exclusive() (the same as Client.acquire(name)) alone. Contacts no
        server; shared() raises NotSupported without Capability.SHARED."""
        return SharedLock(self, name)

    def holders(self, name: Union[str, bytes], semaphore: bool = False) -> List[HolderInfo]:
        """Every current holder of the lock `name` (its exclusive or shared holders) or, with
        semaphore=True, every permit holder of the semaphore `name`; [] when free (dlock_holders).
        Raises NotSupported where the backend cannot enumerate holders, InvalidArgument,
        Unavailable, BackendError or PermissionDenied."""
        raw_name = _encode_name(name)
        handle = self._handle
        holders_entry = self._modes_entry("dlock_holders")
        return _collect_holders(lambda visit: holders_entry(handle, raw_name, int(bool(semaphore)), visit, None))

    def list(self, prefix: Union[str, bytes] = "") -> List[HolderInfo]:
        """Every holder of every lock and semaphore whose name starts with `prefix` ("" = all of
        this client's keyspace), in no particular order: a snapshot read once (dlock_list). Raises
        NotSupported without Capability.LIST, InvalidArgument, Unavailable, BackendError or
        PermissionDenied."""
        raw_prefix = _encode_name(prefix) if prefix else b""
        handle = self._handle
        list_entry = self._modes_entry("dlock_list")
        return _collect_holders(lambda visit: list_entry(handle, raw_prefix, visit, None))

    def break_lock(self, name: Union[str, bytes], semaphore: bool = False) -> int:
        """An administrator's forced release of every holder of the lock `name` (or, with
        semaphore=True, of every permit of the semaphore `name`), whoever holds it (dlock_break).
        Fenced: the next holder's fencing token is above every broken one's; the broken leases
        become LOST at their next renewal at the latest. Returns how many holds were removed (0:
        it was free). Raises NotSupported without Capability.BREAK, PermissionDenied (this identity
        may not remove other holders' locks), InvalidArgument, Unavailable, Unknown or BackendError."""
        raw_name = _encode_name(name)
        handle = self._handle
        broken = ctypes.c_size_t(0)
        status = self._modes_entry("dlock_break")(handle, raw_name, int(bool(semaphore)), ctypes.byref(broken))
        if status != _native.OK:
            raise from_status(status)
        return broken.value

    def _modes_entry(self, symbol: str) -> Callable[..., int]:
        if not _native.MODES:
            raise NotSupported(_native.NOT_SUPPORTED, _old_library_message(symbol))
        return getattr(_lib, symbol)

    def _acquire(self, name: Union[str, bytes], wait: Optional[Duration], ttl: Optional[Duration],
                 renew: Optional[bool], fair: Optional[bool], reentrant: Optional[bool],
                 interruptible: Optional[bool], permits: int = 0, shared: bool = False) -> Optional[Lease]:
        """One acquire as the C ABI does it; None on DLOCK_TIMEOUT."""
        raw_name = _encode_name(name)
        if (permits or shared) and not _native.MODES:
            raise NotSupported(_native.NOT_SUPPORTED, _old_library_message("semaphores" if permits else "shared locks"))
        options = _native.AcquireOptions(_native.ACQUIRE_OPTIONS_SIZE,
                                         _milliseconds(wait, "wait", allow_forever=True),
                                         _milliseconds(ttl, "ttl", allow_forever=False),
                                         _flag(renew), _flag(fair), _flag(reentrant),
                                         permits=permits, shared=int(shared))
        if interruptible is None:
            interruptible = threading.current_thread() is threading.main_thread()
        slice_ms = math.ceil(INTERRUPT_SLICE_S * 1000)
        if not interruptible or 0 <= options.wait_ms <= slice_ms:
            return self._acquire_once(raw_name, options)
        if options.wait_ms == _native.DEFAULT:
            return self._acquire_default_wait_interruptibly(raw_name, options)
        deadline = None if options.wait_ms == _native.WAIT_FOREVER else time.monotonic() + options.wait_ms / 1000
        while True:
            if deadline is None:
                options.wait_ms = slice_ms
            else:
                left_ms = math.ceil((deadline - time.monotonic()) * 1000)
                options.wait_ms = max(0, min(slice_ms, left_ms))
            lease = self._acquire_once(raw_name, options)  # Python runs signal handlers between slices
            if lease is not None or (deadline is not None and time.monotonic() >= deadline):
                return lease

    def _acquire_default_wait_interruptibly(self, raw_name: bytes, options: "_native.AcquireOptions") -> Optional[Lease]:
        """The config's default wait is not visible through the C ABI, so it cannot be cut into
        slices: after one try, the C call waits in a helper thread while this (main) thread waits
        interruptibly for it. On KeyboardInterrupt the helper's call is abandoned: it runs until
        its wait ends, and a lease it gets after that is released at once, so the lock is never
        left held."""
        options.wait_ms = 0
        lease = self._acquire_once(raw_name, options)
        if lease is not None:
            return lease
        options.wait_ms = _native.DEFAULT
        guard = threading.Lock()
        done = threading.Event()
        outcome: Dict[str, object] = {}

        def wait_in_helper() -> None:
            try:
                outcome["lease"] = self._acquire_once(raw_name, options)
            except BaseException as e:  # noqa: BLE001 - handed to the waiting thread
                outcome["error"] = e
            with guard:
                done.set()
                abandoned = outcome.get("abandoned", False)
            if abandoned and outcome.get("lease") is not None:
                outcome["lease"].close()  # type: ignore[union-attr]

        threading.Thread(target=wait_in_helper, name="dlock-acquire", daemon=True).start()
        try:
            done.wait()
        except BaseException:
            with guard:
                outcome["abandoned"] = True
                finished = done.is_set()
            if finished and outcome.get("lease") is not None:
                outcome["lease"].close()  # type: ignore[union-attr]
            raise
        if "error" in outcome:
            raise outcome["error"]  # type: ignore[misc]
        return outcome["lease"]  # type: ignore[return-value]

    def _acquire_once(self, raw_name: bytes, options: "_native.AcquireOptions") -> Optional[Lease]:
        handle = _Handle(ctypes.c_void_p())
        try:
            status = _lib.dlock_acquire(self._handle, raw_name, options, ctypes.byref(handle.cell))
            if status == _native.OK:
                return Lease(self, handle)
            if status == _native.TIMEOUT:
                return None
            raise from_status(status)
        except BaseException:
            # KeyboardInterrupt (or any exception) between the C call's success and the caller
            # receiving the lease: release it rather than leave the lock held.
            ptr = handle.take()
            if ptr is not None:
                _lib.dlock_lease_destroy(ptr)
            raise

    def inspect(self, name: Union[str, bytes]) -> LockInfo:
        """Reads who holds `name` now without taking it (dlock_inspect). Raises InvalidArgument,
        NotSupported, Unavailable or BackendError."""
        info = _native.LockInfo(ctypes.sizeof(_native.LockInfo), 0, b"", 0, -1)
        status = _lib.dlock_inspect(self._handle, _encode_name(name), ctypes.byref(info))
        if status != _native.OK:
            raise from_status(status)
        return LockInfo(bool(info.held), info.holder.decode("ascii", "replace"), info.fencing_token,
                        None if info.ttl_left_ms < 0 else info.ttl_left_ms / 1000)

    def close(self) -> None:
        """Closes the client (dlock_client_close): acquires waiting in other threads raise Cancelled,
        every lease still held is released (its state becomes RELEASED, or LOST if the backend had
        lost it), the keeper stops. Lease objects stay usable for their read-only properties.
        Idempotent. Called from a lost callback, the close happens once the callback has returned."""
        ptr, self._ptr = self._ptr, None
        if ptr is not None:
            _open_clients.discard(self)
            _outside_lost_callbacks(lambda: _lib.dlock_client_close(ptr))

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown may have torn down the module
            pass

    def __repr__(self) -> str:
        return f"<dlock.Client {self._backend}{' closed' if self._ptr is None else ''}>"


def _old_library_message(what: str) -> str:
    return (f"{what}: the loaded libdlock {_native.text(_lib.dlock_version())} ({_lib._name}) predates "
            "semaphores, shared locks, holders, list and break; install a newer libdlock")


def _collect_holders(call: Callable[["_native.HOLDER_VISITOR"], int]) -> List[HolderInfo]:
    """Runs `call(visitor)` (dlock_holders or dlock_list) and returns what the visitor was given.
    The visitor runs on this thread inside the C call; nothing may be raised through the C caller,
    so a failure stops the visit (returns 1) and is raised once the call has returned."""
    found: List[HolderInfo] = []
    failure: List[BaseException] = []

    def visit(info_ptr: "ctypes._Pointer[_native.HolderInfo]", _user_data: Optional[int]) -> int:
        try:
            info = info_ptr.contents
            found.append(HolderInfo(_native.text(info.name), HoldKind(info.kind), info.permits,
                                    info.holder.decode("ascii", "replace"), info.fencing_token,
                                    None if info.ttl_left_ms < 0 else info.ttl_left_ms / 1000))
            return 0
        except BaseException as e:  # noqa: BLE001 - raised below, outside the C call
            failure.append(e)
            return 1

    status = call(_native.HOLDER_VISITOR(visit))
    if status != _native.OK:
        raise from_status(status)
    if failure:
        raise failure[0]
    return found


def _permit_count(permits: object) -> int:
    if isinstance(permits, bool) or not isinstance(permits, int):
        raise TypeError(f"permits must be an int, not {type(permits).__name__}")
    if not 1 <= permits <= 0xFFFFFFFF:
        raise InvalidArgument(_native.INVALID_ARGUMENT,
                              f"permits must be 1..4294967295 (a semaphore has at least 1 permit), got {permits}")
    return permits


class Semaphore:
    """The counting semaphore `name` with `permits` permits (Client.semaphore). Each acquire takes
    one permit and returns it as a Lease: its own owner token, ttl and renewal, lost callback,
    fencing token (permits of a name share one strictly increasing counter where the backend has
    Capability.FENCING) and owner-only release; ``with sem.acquire(wait=5) as permit:`` gives it
    back when the block ends. Holds no state besides its client, name and count: any thread may use it."""

    __slots__ = ("_client", "_name", "_permits")

    def __init__(self, client: Client, name: Union[str, bytes], permits: int) -> None:
        _encode_name(name)  # a wrong type is a TypeError here, not at the first acquire
        self._client, self._name, self._permits = client, name, _permit_count(permits)

    @property
    def name(self) -> Union[str, bytes]:
        return self._name

    @property
    def permits(self) -> int:
        """The permit limit N this semaphore is used with."""
        return self._permits

    def acquire(self, *, wait: Optional[Duration] = None, ttl: Optional[Duration] = None,
                renew: Optional[bool] = None, fair: Optional[bool] = None, on_lost: Optional[LostCallback] = None,
                interruptible: Optional[bool] = None) -> Lease:
        """Takes one permit: as Client.acquire (wait, ttl, renew, fair, on_lost, interruptible mean
        the same), raising Timeout when every permit stays taken for `wait`; NotSupported without
        Capability.SEMAPHORE; InvalidArgument when the backend stores another limit for the name."""
        lease = self._client._acquire(self._name, wait, ttl, renew, fair, None, interruptible, permits=self._permits)
        return self._client._granted(lease, f"a permit of semaphore {self._name!r} (limit {self._permits})", wait,
                                     on_lost)

    def try_acquire(self, *, ttl: Optional[Duration] = None, renew: Optional[bool] = None,
                    on_lost: Optional[LostCallback] = None) -> Optional[Lease]:
        """Tries once: a permit's Lease, or None when every permit is taken."""
        lease = self._client._acquire(self._name, 0, ttl, renew, None, None, False, permits=self._permits)
        if lease is not None and on_lost is not None:
            lease.on_lost(on_lost)
        return lease

    def holders(self) -> List[HolderInfo]:
        """The current permit holders (Client.holders(name, semaphore=True))."""
        return self._client.holders(self._name, semaphore=True)

    def __repr__(self) -> str:
        return f"<dlock.Semaphore {self._name!r} permits={self._permits}>"


class SharedLock:
    """The lock `name` as a read-write lock (Client.shared_lock): any number of shared holders at
    once, or one exclusive holder. Each hold is a Lease of its own, usable as a context manager:
    ``with rw.shared(wait=5):`` beside other readers, ``with rw.exclusive(wait=5) as lease:`` alone.
    The exclusive side is the ordinary lock `name`: Client.acquire(name) excludes every shared
    holder too. Writers do not starve: each backend with Capability.SHARED serves FIFO or prefers
    writers (its page in docs/backends says which). Holds no state besides its client and name."""

    __slots__ = ("_client", "_name")

    def __init__(self, client: Client, name: Union[str, bytes]) -> None:
        _encode_name(name)
        self._client, self._name = client, name

    @property
    def name(self) -> Union[str, bytes]:
        return self._name

    def shared(self, *, wait: Optional[Duration] = None, ttl: Optional[Duration] = None,
               renew: Optional[bool] = None, fair: Optional[bool] = None, on_lost: Optional[LostCallback] = None,
               interruptible: Optional[bool] = None) -> Lease:
        """Holds the lock shared: as Client.acquire, raising Timeout while an exclusive holder keeps
        it (or, on a writer-preferring backend, a writer waits) for `wait`; NotSupported without
        Capability.SHARED."""
        lease = self._client._acquire(self._name, wait, ttl, renew, fair, None, interruptible, shared=True)
        return self._client._granted(lease, f"lock {self._name!r} (shared)", wait, on_lost)

    def try_shared(self, *, ttl: Optional[Duration] = None, renew: Optional[bool] = None,
                   on_lost: Optional[LostCallback] = None) -> Optional[Lease]:
        """Tries once to hold the lock shared: the Lease, or None while it is held exclusively."""
        lease = self._client._acquire(self._name, 0, ttl, renew, None, None, False, shared=True)
        if lease is not None and on_lost is not None:
            lease.on_lost(on_lost)
        return lease

    def exclusive(self, *, wait: Optional[Duration] = None, ttl: Optional[Duration] = None,
                  renew: Optional[bool] = None, fair: Optional[bool] = None, on_lost: Optional[LostCallback] = None,
                  interruptible: Optional[bool] = None) -> Lease:
        """Holds the lock alone, excluding every shared holder: Client.acquire(name, ...)."""
        return self._client.acquire(self._name, wait=wait, ttl=ttl, renew=renew, fair=fair, on_lost=on_lost,
                                    interruptible=interruptible)

    def try_exclusive(self, *, ttl: Optional[Duration] = None, renew: Optional[bool] = None,
                      on_lost: Optional[LostCallback] = None) -> Optional[Lease]:
        """Tries once to hold the lock alone: Client.try_acquire(name, ...)."""
        return self._client.try_acquire(self._name, ttl=ttl, renew=renew, on_lost=on_lost)

    def holders(self) -> List[HolderInfo]:
        """The current holders, shared and exclusive (Client.holders(name))."""
        return self._client.holders(self._name)

    def __repr__(self) -> str:
        return f"<dlock.SharedLock {self._name!r}>"


__all__ = ["Capability", "Client", "FOREVER", "HoldKind", "HolderInfo", "INTERRUPT_SLICE_S", "Lease", "LeaseState",
           "LockInfo", "ReleaseOutcome", "Semaphore", "SharedLock"]
