"""The C ABI of libdlock (api/include/dlock/dlock.h) as ctypes declarations, and how the library is found.

Nothing here is public: dlock.Client and dlock.Lease are the API. Every foreign function is declared
with its exact C signature (argtypes/restype), so a wrong call is a TypeError in Python, never a
crash in C. ctypes releases the GIL for the duration of every call into a CDLL, so a thread blocked
in dlock_acquire does not stop the other Python threads.

The library is looked up, first match wins:
  1. $DLOCK_LIBRARY: the path of libdlock.so (or .so.0) to load;
  2. the system's dynamic loader: "libdlock.so.0" as installed by `cmake --install` (ldconfig paths,
     $LD_LIBRARY_PATH);
  3. when this package runs from a dlock checkout: <checkout>/build/release/lib/libdlock.so.0.
A library whose major version differs from the one this package was written for is refused."""
from __future__ import annotations

import ctypes
import os
from pathlib import Path
from typing import List, Optional

# The ABI this module declares (DLOCK_VERSION_MAJOR of dlock.h).
ABI_MAJOR = 0
SONAME = "libdlock.so.0"

# dlock_status (dlock.h)
OK = 0
TIMEOUT = 1
INVALID_ARGUMENT = 2
CONFIG = 3
PLUGIN = 4
NOT_SUPPORTED = 5
UNAVAILABLE = 6
BACKEND = 7
UNKNOWN = 8
LOST = 9
CANCELLED = 10
INTERNAL = 11
PERMISSION = 12

DEFAULT = -1                 # DLOCK_DEFAULT
WAIT_FOREVER = 2**63 - 1     # DLOCK_WAIT_FOREVER (INT64_MAX)
NEVER_EXPIRES = 2**63 - 1    # dlock_lease_valid_until of a lease without expiry (INT64_MAX)

LOST_CALLBACK = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)


class AcquireOptions(ctypes.Structure):
    """dlock_acquire_options, version 3. struct_size is set to ACQUIRE_OPTIONS_SIZE: this layout's
    size, or the version 1 size for a libdlock without semaphores and shared locks."""
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("wait_ms", ctypes.c_int64),
        ("ttl_ms", ctypes.c_int64),
        ("renew", ctypes.c_int),
        ("fair", ctypes.c_int),
        ("reentrant", ctypes.c_int),
        ("on_lost", LOST_CALLBACK),
        ("on_lost_user_data", ctypes.c_void_p),
        # -- version 2 --
        ("cancel", ctypes.c_void_p),
        # -- version 3 --
        ("permits", ctypes.c_uint32),
        ("shared", ctypes.c_int),
    ]


ACQUIRE_OPTIONS_V1_SIZE = AcquireOptions.on_lost_user_data.offset + ctypes.sizeof(ctypes.c_void_p)
ACQUIRE_OPTIONS_V3_SIZE = AcquireOptions.shared.offset + ctypes.sizeof(ctypes.c_int)

# dlock_hold_kind
HOLD_EXCLUSIVE = 0
HOLD_SHARED = 1
HOLD_PERMIT = 2


class HolderInfo(ctypes.Structure):
    """dlock_holder_info (version 1)."""
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("name", ctypes.c_char_p),
        ("kind", ctypes.c_uint32),
        ("permits", ctypes.c_uint32),
        ("holder", ctypes.c_char * 64),
        ("fencing_token", ctypes.c_uint64),
        ("ttl_left_ms", ctypes.c_int64),
    ]


HOLDER_INFO_V1_SIZE = HolderInfo.ttl_left_ms.offset + ctypes.sizeof(ctypes.c_int64)

HOLDER_VISITOR = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(HolderInfo), ctypes.c_void_p)


class LockInfo(ctypes.Structure):
    """dlock_lock_info."""
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("held", ctypes.c_int),
        ("holder", ctypes.c_char * 64),
        ("fencing_token", ctypes.c_uint64),
        ("ttl_left_ms", ctypes.c_int64),
    ]


def _declare(lib: ctypes.CDLL) -> ctypes.CDLL:
    c_void_p, c_char_p, c_int = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int
    signatures = {
        "dlock_version": (c_char_p, []),
        "dlock_status_name": (c_char_p, [c_int]),
        "dlock_last_error": (c_char_p, []),
        "dlock_client_open": (c_int, [c_char_p, ctypes.POINTER(c_void_p)]),
        "dlock_client_open_yaml": (c_int, [c_char_p, c_char_p, ctypes.POINTER(c_void_p)]),
        "dlock_client_close": (None, [c_void_p]),
        "dlock_client_backend": (c_char_p, [c_void_p]),
        "dlock_client_capabilities": (ctypes.c_uint64, [c_void_p]),
        "dlock_acquire": (c_int, [c_void_p, c_char_p, ctypes.POINTER(AcquireOptions), ctypes.POINTER(c_void_p)]),
        "dlock_lease_name": (c_char_p, [c_void_p]),
        "dlock_lease_owner": (c_char_p, [c_void_p]),
        "dlock_lease_fencing_token": (ctypes.c_uint64, [c_void_p]),
        "dlock_lease_valid_until": (ctypes.c_int64, [c_void_p]),
        "dlock_lease_state_get": (c_int, [c_void_p]),
        "dlock_lease_on_lost": (c_int, [c_void_p, LOST_CALLBACK, c_void_p]),
        "dlock_lease_renew": (c_int, [c_void_p]),
        "dlock_lease_release": (c_int, [c_void_p]),
        "dlock_lease_destroy": (None, [c_void_p]),
        "dlock_inspect": (c_int, [c_void_p, c_char_p, ctypes.POINTER(LockInfo)]),
    }
    # Came with acquire options version 3 (permits, shared); a libdlock of the same major version
    # built before them lacks these symbols, and the package then offers plain locks only.
    optional_signatures = {
        "dlock_holders": (c_int, [c_void_p, c_char_p, c_int, HOLDER_VISITOR, c_void_p]),
        "dlock_list": (c_int, [c_void_p, c_char_p, HOLDER_VISITOR, c_void_p]),
        "dlock_break": (c_int, [c_void_p, c_char_p, c_int, ctypes.POINTER(ctypes.c_size_t)]),
    }
    for name, (restype, argtypes) in signatures.items():
        function = getattr(lib, name)
        function.restype = restype
        function.argtypes = argtypes
    for name, (restype, argtypes) in optional_signatures.items():
        function = getattr(lib, name, None)
        if function is not None:
            function.restype = restype
            function.argtypes = argtypes
    return lib


def has_modes(library: object) -> bool:
    """Whether `library` understands acquire options version 3 (permits, shared) and has
    dlock_holders, dlock_list and dlock_break: all four came in one libdlock release."""
    return all(hasattr(library, name) for name in ("dlock_holders", "dlock_list", "dlock_break"))


def acquire_options_size(library: object) -> int:
    """The struct_size to send: version 3 where the library reads permits and shared. An older
    library would accept the larger struct and ignore both fields (taking an exclusive lock for a
    semaphore's permit), so it is sent version 1, and the package refuses the new modes itself."""
    return ACQUIRE_OPTIONS_V3_SIZE if has_modes(library) else ACQUIRE_OPTIONS_V1_SIZE


def _candidates() -> List[str]:
    found = []
    explicit = os.environ.get("DLOCK_LIBRARY")
    if explicit:
        return [explicit]  # an explicit choice is never silently replaced by another library
    found.append(SONAME)
    checkout = Path(__file__).resolve().parent.parent.parent
    build_tree = checkout / "build" / "release" / "lib" / SONAME
    if build_tree.exists():
        found.append(str(build_tree))
    return found


def load() -> ctypes.CDLL:
    """Loads and declares libdlock; raises ImportError naming every place tried and why each failed."""
    tried = []
    for candidate in _candidates():
        try:
            lib = ctypes.CDLL(candidate)
        except OSError as e:
            tried.append(f"{candidate}: {e}")
            continue
        lib = _declare(lib)
        version = lib.dlock_version().decode()
        if version.split(".")[0] != str(ABI_MAJOR):
            tried.append(f"{candidate}: version {version}, this package needs {ABI_MAJOR}.x")
            continue
        return lib
    raise ImportError("dlock: cannot load libdlock (set DLOCK_LIBRARY to its path, or install it with "
                      "`cmake --install`): " + "; ".join(tried))


lib: ctypes.CDLL = load()
MODES = has_modes(lib)
ACQUIRE_OPTIONS_SIZE = acquire_options_size(lib)


def last_error() -> str:
    return lib.dlock_last_error().decode("utf-8", "replace")


def status_name(status: int) -> str:
    return lib.dlock_status_name(status).decode()


def text(value: Optional[bytes]) -> str:
    return "" if value is None else value.decode("utf-8", "surrogateescape")
