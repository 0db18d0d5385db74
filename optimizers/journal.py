"""Durable JSON records: canonical hashing, atomic and sealed files, append-only JSONL journals.

Every file a job writes goes through here. Whole files are written atomically (temp file, fsync,
``os.replace``), so a reader sees the old file or the new one. "Sealed" files carry the SHA-256 of
their own canonical content and are verified on read, so a hand-edited or half-copied file is
refused instead of silently trusted. Journals are append-only JSONL; a line cut short by a kill is
ignored on read (it was never acknowledged to anyone).

A process that is being killed can stop writing altogether (``freeze_writes``): on a cluster the
scheduler sends SIGTERM to every process of a job before SIGKILL, so the job's own sandboxed
programs die first and would otherwise be journaled as infrastructure failures that never
happened in an undisturbed run. Once frozen, appends and file writes are dropped: what was written
is consistent, and the job resumes from it when it starts again.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import threading
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

SEAL_KEY = "sha256"

_frozen = threading.Event()


def freeze_writes() -> None:
    """From now on this process writes no journal record and no file through this module (it is
    being terminated; see the module docstring). There is no thaw: the process is going away."""
    _frozen.set()


def writes_frozen() -> bool:
    return _frozen.is_set()


class SealError(ValueError):
    """A sealed file whose content does not match its recorded hash (or is not sealed at all)."""


def canonical_json(value: Any) -> str:
    """The one JSON text of a value: sorted keys, no whitespace, UTF-8 kept as is."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def content_hash(value: Any) -> str:
    """SHA-256 (hex) of the canonical JSON of ``value``."""
    return hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()


def short_hash(value: Any, length: int = 16) -> str:
    return content_hash(value)[:length]


def without_keys(value: Any, keys: frozenset[str] | set[str]) -> Any:
    """``value`` with every mapping entry whose key is in ``keys`` left out, at any depth
    (e.g. what legitimately differs between two runs of one job, before hashing or comparing)."""
    if isinstance(value, Mapping):
        return {k: without_keys(v, keys) for k, v in value.items() if k not in keys}
    if isinstance(value, list):
        return [without_keys(v, keys) for v in value]
    if isinstance(value, tuple):
        return tuple(without_keys(v, keys) for v in value)
    return value


def write_text_atomic(path: Path | str, text: str) -> None:
    """Write ``text`` durably: readers see the old file or the new one, never a partial one."""
    if _frozen.is_set():
        return
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def write_json_atomic(path: Path | str, value: Any) -> None:
    write_text_atomic(path, json.dumps(value, sort_keys=True, indent=2, ensure_ascii=False) + "\n")


def read_json(path: Path | str) -> Any:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def read_json_object(path: Path | str) -> dict[str, Any] | None:
    """A JSON object from a file, or None when it is missing, unreadable or not an object
    (for readers of job folders that may be partial, such as reports and trackers)."""
    try:
        data = read_json(path)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def seal(payload: Mapping[str, Any]) -> dict[str, Any]:
    """``payload`` plus its own hash under ``sha256`` (computed without that key)."""
    body = {k: v for k, v in payload.items() if k != SEAL_KEY}
    return {**body, SEAL_KEY: content_hash(body)}


def write_sealed(path: Path | str, payload: Mapping[str, Any]) -> dict[str, Any]:
    sealed = seal(payload)
    write_json_atomic(path, sealed)
    return sealed


def read_sealed(path: Path | str) -> dict[str, Any]:
    """Read a sealed file and verify its hash; ``SealError`` names the file on any mismatch."""
    path = Path(path)
    try:
        data = read_json(path)
    except json.JSONDecodeError as exc:
        raise SealError(f"{path} is not valid JSON ({exc.msg})") from None
    if not isinstance(data, dict) or not isinstance(data.get(SEAL_KEY), str):
        raise SealError(f"{path} is not a sealed record")
    body = {k: v for k, v in data.items() if k != SEAL_KEY}
    if content_hash(body) != data[SEAL_KEY]:
        raise SealError(f"{path} was modified after it was sealed (hash mismatch)")
    return data


class JsonlJournal:
    """An append-only JSONL file, safe to share between threads and coroutines of one process.

    Each record is one ``os.write`` of one line to a file opened with ``O_APPEND`` and then
    fsynced, so a kill leaves at most one truncated last line, which ``read_jsonl`` skips.
    """

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._tail_checked = False  # our own appends always end with a newline

    def append(self, record: Mapping[str, Any]) -> None:
        line = (json.dumps(record, sort_keys=True, ensure_ascii=False, allow_nan=False) + "\n").encode("utf-8")
        with self._lock:
            if _frozen.is_set():
                return
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if not self._tail_checked:
                self._repair_tail()
                self._tail_checked = True
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, line)
                os.fsync(fd)
            finally:
                os.close(fd)

    def _repair_tail(self) -> None:
        # A kill mid-write can leave a last line without its newline; appending after it would
        # glue the next record onto garbage. Cut the partial line off first (it was never read).
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            return
        if size == 0:
            return
        with self.path.open("rb+") as handle:
            handle.seek(size - 1)
            if handle.read(1) == b"\n":
                return
            handle.seek(0)
            keep = handle.read().rfind(b"\n") + 1
            handle.truncate(keep)

    def read(self) -> list[dict[str, Any]]:
        return list(read_jsonl(self.path))


def read_jsonl(path: Path | str) -> Iterator[dict[str, Any]]:
    """Complete records of a JSONL journal; a missing file is empty, a cut-off last line skipped."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return
    lines = data.split(b"\n")
    # The last element is b"" for a complete file, or the partial line a kill left behind.
    for raw in lines[:-1]:
        if not raw.strip():
            continue
        record = json.loads(raw)
        if isinstance(record, dict):
            yield record


def write_jsonl_atomic(path: Path | str, rows: Iterable[Mapping[str, Any]]) -> None:
    write_text_atomic(path, "".join(json.dumps(r, sort_keys=True, ensure_ascii=False) + "\n" for r in rows))
