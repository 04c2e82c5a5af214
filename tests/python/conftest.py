"""pytest fixtures of the dlock Python tests: a lab of real servers for the whole session, and one
dlock config per backend.

The session starts its own lab with `dlock-lab up --foreground` (a child process, in a private state
directory) and stops it with SIGTERM at the end; if pytest dies first, the kernel sends that SIGTERM. Where to find things:
  --dlock-lab PATH / $DLOCK_LAB_BIN   the dlock-lab binary (default: <checkout>/build/release/bin/dlock-lab)
  $DLOCK_LIBRARY                      the libdlock the package loads (default: <checkout>/build/release/lib)
  $DLOCK_PYTHON_BACKENDS              comma-separated subset of file,redis,redlock,zookeeper,etcd,sql
With CI=true a backend whose servers cannot start FAILS its tests; elsewhere they are skipped with
the reason."""
from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Dict, Iterator, Optional

import pytest

CHECKOUT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(CHECKOUT / "python"))  # the package under test, from this checkout
# Without $DLOCK_LIBRARY, this checkout's release build (inherited by the processes tests start).
if not os.environ.get("DLOCK_LIBRARY") and (CHECKOUT / "build/release/lib/libdlock.so.0").exists():
    os.environ["DLOCK_LIBRARY"] = str(CHECKOUT / "build/release/lib/libdlock.so.0")

ALL_BACKENDS = ["file", "redis", "redlock", "zookeeper", "etcd", "sql"]
SERVER_BACKENDS = [b for b in ALL_BACKENDS if b != "file"]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--dlock-lab", default=os.environ.get("DLOCK_LAB_BIN",
                                                           str(CHECKOUT / "build" / "release" / "bin" / "dlock-lab")),
                     help="the dlock-lab binary that starts the servers")


def selected_backends() -> list:
    wanted = os.environ.get("DLOCK_PYTHON_BACKENDS")
    return [b.strip() for b in wanted.split(",") if b.strip()] if wanted else ALL_BACKENDS


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "backend" in metafunc.fixturenames:
        metafunc.parametrize("backend", selected_backends())


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def _die_with_this_process() -> None:
    """In the lab supervisor's child, before exec: SIGTERM it when the pytest process dies, however
    it dies, so that its servers never outlive the tests (the supervisor stops them on SIGTERM)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class Lab:
    """The servers of one `dlock-lab up --foreground`, a child of this process, or why they could
    not start."""

    def __init__(self, binary: str, state_dir: Path, backends: list) -> None:
        self.binary, self.state_dir = binary, state_dir
        self.configs: Dict[str, str] = {}
        self.error = ""
        self.supervisor: Optional[subprocess.Popen] = None
        if not backends:
            return
        log = state_dir / "supervisor.out"
        try:
            with open(log, "wb") as out:
                self.supervisor = subprocess.Popen(
                    [binary, "--state-dir", str(state_dir), "up", *backends, "--timeout", "120", "--foreground"],
                    stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                    preexec_fn=_die_with_this_process)
        except OSError as e:
            self.error = f"cannot run {binary}: {e}"
            return
        # The supervisor writes its state (read by `env`) once every server answers.
        deadline = time.monotonic() + 300
        while True:
            env = subprocess.run([binary, "--state-dir", str(state_dir), "env"], capture_output=True, text=True, timeout=60)
            if env.returncode == 0 and "_CONFIG=" in env.stdout:
                break
            if self.supervisor.poll() is not None or time.monotonic() > deadline:
                self.error = (f"dlock-lab up {'exited with ' + str(self.supervisor.returncode) if self.supervisor.returncode is not None else 'timed out'}: "
                              + log.read_text(errors="replace")[-3000:])
                return
            time.sleep(0.1)
        sys.stderr.write(log.read_text(errors="replace"))
        for line in env.stdout.splitlines():
            if line.startswith("export DLOCK_LAB_") and line.split("=", 1)[0].endswith("_CONFIG"):
                key, value = line[len("export DLOCK_LAB_"):].split("=", 1)
                self.configs[key[:-len("_CONFIG")].lower().replace("_", "-")] = value.strip("'")

    def down(self) -> None:
        if self.supervisor is None:
            return
        self.supervisor.terminate()  # the supervisor tears its servers down on SIGTERM
        try:
            self.supervisor.wait(120)
        except subprocess.TimeoutExpired:
            self.supervisor.kill()
            self.supervisor.wait()


@pytest.fixture(scope="session")
def lab(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    servers = [b for b in selected_backends() if b in SERVER_BACKENDS]
    started = Lab(request.config.getoption("--dlock-lab"), tmp_path_factory.mktemp("lab-state"), servers)
    try:
        yield started
    finally:
        started.down()


@pytest.fixture
def config(backend: str, lab: Lab, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The path of a dlock config for `backend`: the lab's for servers, a fresh directory for `file`."""
    if backend == "file":
        directory = tmp_path_factory.mktemp("file-locks")
        path = directory / "file.yaml"
        path.write_text(f'backend: file\noptions:\n  directory: "{directory}"\n')
        return str(path)
    if backend not in lab.configs:
        reason = lab.error or f"the lab has no {backend} config"
        if in_ci():
            pytest.fail(f"{backend}: servers did not start under CI: {reason}")
        pytest.skip(f"{backend}: {reason}")
    return lab.configs[backend]


@pytest.fixture
def name() -> str:
    """A lock name no other test uses (the lab is not reset between tests)."""
    return f"py/{uuid.uuid4().hex}"
