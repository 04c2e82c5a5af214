"""Exceptions: one class per dlock_status of the C ABI, all derived from dlock.DlockError.

Each carries `status` (the C status code), `status_name` ("DLOCK_TIMEOUT") and `message` (the
library's dlock_last_error() text for that call: it names the backend, the endpoint and what to do)."""
from __future__ import annotations

from typing import Dict, Type

from . import _native


class DlockError(Exception):
    """A dlock call returned a status other than DLOCK_OK."""

    status: int = -1

    def __init__(self, status: int, message: str) -> None:
        self.status = status
        self.status_name = _native.status_name(status)
        self.message = message
        super().__init__(f"{self.status_name}: {message}" if message else self.status_name)


class Timeout(DlockError):
    """DLOCK_TIMEOUT: the lock was not acquired within the wait (Client.acquire only; try_acquire
    returns None instead)."""


class InvalidArgument(DlockError, ValueError):
    """DLOCK_INVALID_ARGUMENT: a name, option or argument is malformed; the message names which."""


class ConfigError(DlockError):
    """DLOCK_CONFIG: the configuration (YAML, DSN, backend options) is invalid; the message gives where."""


class PluginError(DlockError):
    """DLOCK_PLUGIN: the backend plugin could not be found, loaded or negotiated with, or misbehaved."""


class NotSupported(DlockError):
    """DLOCK_NOT_SUPPORTED: the backend does not offer this operation or capability."""


class Unavailable(DlockError):
    """DLOCK_UNAVAILABLE: the backend could not be reached (connection refused, timed out, no quorum)."""


class BackendError(DlockError):
    """DLOCK_BACKEND: the backend answered with an error (read-only replica, out of memory, denied...)."""


class Unknown(DlockError):
    """DLOCK_UNKNOWN: a transport failure left the outcome unknown."""


class Lost(DlockError):
    """DLOCK_LOST: the lease was lost (expired, or taken by another holder)."""


class Cancelled(DlockError):
    """DLOCK_CANCELLED: the client was closed while the call waited."""


class InternalError(DlockError):
    """DLOCK_INTERNAL: out of memory, or another failure inside dlock itself."""


class PermissionDenied(DlockError):
    """DLOCK_PERMISSION: the server refused the operation to this identity (another tenant's lock)."""


_BY_STATUS: Dict[int, Type[DlockError]] = {
    _native.TIMEOUT: Timeout,
    _native.INVALID_ARGUMENT: InvalidArgument,
    _native.CONFIG: ConfigError,
    _native.PLUGIN: PluginError,
    _native.NOT_SUPPORTED: NotSupported,
    _native.UNAVAILABLE: Unavailable,
    _native.BACKEND: BackendError,
    _native.UNKNOWN: Unknown,
    _native.LOST: Lost,
    _native.CANCELLED: Cancelled,
    _native.INTERNAL: InternalError,
    _native.PERMISSION: PermissionDenied,
}
for _status, _cls in _BY_STATUS.items():
    _cls.status = _status


def from_status(status: int, message: str = "") -> DlockError:
    """The exception for a non-OK status; `message` defaults to this thread's dlock_last_error()."""
    return _BY_STATUS.get(status, DlockError)(status, message or _native.last_error())
