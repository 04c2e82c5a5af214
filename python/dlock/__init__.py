"""dlock for Python: distributed locks over libdlock's stable C ABI (dlock.h), on every backend
dlock has (file, redis, redlock, zookeeper, etcd, sql), chosen by a YAML config or a DSN at run time.

    import dlock
    with dlock.Client.open("redis://127.0.0.1:6379") as client:
        with client.acquire("orders/42", wait=5, ttl=30) as lease:
            write(data, fence=lease.fencing_token)

See docs/python.md for the whole API."""
from ._native import lib as _lib
from .client import (FOREVER, INTERRUPT_SLICE_S, Capability, Client, HolderInfo, HoldKind, Lease, LeaseState,
                     LockInfo, ReleaseOutcome, Semaphore, SharedLock)
from .errors import (BackendError, Cancelled, ConfigError, DlockError, InternalError, InvalidArgument, Lost,
                     NotSupported, PermissionDenied, PluginError, Timeout, Unavailable, Unknown)

# The package is released with libdlock and carries its version: the VERSION of CMakeLists.txt's
# project(). pyproject.toml reads it from here (setuptools' `attr`, evaluated without importing),
# and tests/python/test_version.py holds the two equal.
__version__ = "0.1.0"


def library_version() -> str:
    """The version of the libdlock this package loaded ("MAJOR.MINOR.PATCH")."""
    return _lib.dlock_version().decode()


def library_path() -> str:
    """The path (or soname) of the libdlock this package loaded."""
    return _lib._name


__all__ = ["BackendError", "Cancelled", "Capability", "Client", "ConfigError", "DlockError", "FOREVER",
           "HoldKind", "HolderInfo", "INTERRUPT_SLICE_S", "InternalError", "InvalidArgument", "Lease", "LeaseState",
           "LockInfo", "Lost", "NotSupported", "PermissionDenied", "PluginError", "ReleaseOutcome", "Semaphore",
           "SharedLock", "Timeout", "Unavailable", "Unknown", "library_path", "library_version"]
