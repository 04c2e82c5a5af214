"""The package carries the C library's version: CMakeLists.txt's project() VERSION is the one place
it is written for the build, python/dlock/__init__.py's __version__ must equal it (pyproject.toml
reads __version__), and the libdlock this checkout builds reports it."""
from __future__ import annotations

import re
from pathlib import Path

import dlock

CHECKOUT = Path(__file__).resolve().parent.parent.parent


def project_version() -> str:
    found = re.search(r"^project\(dlock\s+VERSION\s+([0-9.]+)", (CHECKOUT / "CMakeLists.txt").read_text(), re.M)
    assert found, "CMakeLists.txt has no project(dlock VERSION ...)"
    return found.group(1)


def test_the_package_version_is_the_project_version():
    assert dlock.__version__ == project_version()


def test_pyproject_takes_the_version_from_the_package():
    text = (CHECKOUT / "python" / "pyproject.toml").read_text()
    assert re.search(r'^dynamic\s*=\s*\["version"\]', text, re.M), "pyproject.toml must not write a version"
    assert re.search(r'^version\s*=\s*\{\s*attr\s*=\s*"dlock\.__version__"\s*\}', text, re.M)


def test_the_library_of_this_build_reports_the_project_version():
    assert dlock.library_version() == project_version()
