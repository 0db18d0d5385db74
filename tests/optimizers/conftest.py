"""Shared fixtures for optimizer/job tests: a scripted model server behind the real teams."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

# job_support is shared with job_entry.py, which runs in a subprocess: import it by its folder.
sys.path.insert(0, str(Path(__file__).resolve().parent))

from job_support import register_test_methods, team_script  # noqa: E402


@pytest.fixture(autouse=True)
def _test_methods() -> None:
    register_test_methods()


@pytest.fixture
def scripted_server() -> Iterator[Callable[..., Any]]:
    """``start(faults=..., latency_s=...)`` -> a running ScriptedServer (stopped after the test)."""
    from topologies.scripted import ScriptedServer

    servers: list[Any] = []

    def start(**options: Any) -> Any:
        server = ScriptedServer(team_script(**options)).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


OLD_GEPA_REQUIREMENTS = Path(__file__).resolve().parents[2] / "requirements-gepa-old.txt"


def _registry_unreachable(index: str) -> str | None:
    """Why the package registry cannot be reached (None when it answers)."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(f"{index.rstrip('/')}/gepa/", timeout=15):
            return None
    except (urllib.error.URLError, OSError) as exc:
        return f"{type(exc).__name__}: {getattr(exc, 'reason', exc)}"


@pytest.fixture(scope="session")
def old_gepa_dir() -> Path:
    """A folder holding the reference's gepa (0.0.27), installed once from the package registry,
    hash-pinned by requirements-gepa-old.txt, into the user cache ($LCB_GRID_CACHE, else
    ~/.cache/lcb-grid), never into the venv. Skips (one line) when the registry is unreachable;
    any other failure to install fails the test."""
    digest = hashlib.sha256(OLD_GEPA_REQUIREMENTS.read_bytes()).hexdigest()[:12]
    root = Path(os.environ.get("LCB_GRID_CACHE") or Path.home() / ".cache" / "lcb-grid")
    target = root / f"gepa-old-{digest}"
    if (target / "gepa" / "__init__.py").exists():
        return target
    index = os.environ.get("PIP_INDEX_URL", "https://pypi.org/simple")
    unreachable = _registry_unreachable(index)
    if unreachable:
        pytest.skip(f"gepa 0.0.27 not installed: the package registry {index} is unreachable ({unreachable})")
    root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".gepa-old-", dir=root))
    try:
        done = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--require-hashes",
                               "--only-binary", ":all:", "--no-compile", "--disable-pip-version-check",
                               "--target", str(staging), "-r", str(OLD_GEPA_REQUIREMENTS)],
                              capture_output=True, text=True, timeout=600, check=False)
        if done.returncode != 0:
            lines = (done.stderr or done.stdout).strip().splitlines()
            pytest.fail(f"pip could not install gepa 0.0.27: {lines[-1] if lines else done.returncode}")
        try:
            staging.rename(target)  # atomic: a half-installed folder is never taken for a good one
        except OSError:
            if not (target / "gepa" / "__init__.py").exists():  # not another process's install
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target
