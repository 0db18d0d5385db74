"""Loading LiveCodeBench problems: built-in, from the hub's release files, or from a local file.

Release files are GB-sized JSONL with one row per line (the hidden tests of one row can be tens of
MB once decoded), so rows are streamed, filtered on their plain fields first, and only the rows we
keep have their hidden tests decoded. Decoded hidden tests are cached as JSON per release and
question id, because the decode (base64 -> zlib -> pickle -> JSON) is the slow part.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lcb.errors import DataError
from lcb.problem import Problem, TestKind
from lcb.records import write_text_atomic
from lcb.rows import decode_test_blob, problem_from_row

HF_DATASET = "livecodebench/code_generation_lite"
# One incremental file per release (v1 .. v6), in release order.
RELEASE_FILES = (
    "test.jsonl",
    "test2.jsonl",
    "test3.jsonl",
    "test4.jsonl",
    "test5.jsonl",
    "test6.jsonl",
)

BUILTIN_FILE = Path(__file__).resolve().parent / "builtin" / "problems.jsonl"
BENCHMARKS_DIR = Path(__file__).resolve().parents[1] / "benchmarks"
EVAL_IDS_FILE = BENCHMARKS_DIR / "lcb" / "lcb_eval_ids.json"
SPLITS_FILE = BENCHMARKS_DIR / "lcb" / "lcb_splits.json"

DEMO_IDS = ("demo_stdin", "demo_functional")
# The run protocol's splits for `--data builtin`: disjoint, each mixing modes and difficulties.
BUILTIN_SPLITS: dict[str, tuple[str, ...]] = {
    "train": (
        "builtin_temperature_swing",
        "builtin_count_prefixed",
        "builtin_travel_time",
        "builtin_merge_intervals",
        "builtin_longest_climb",
        "builtin_job_scheduling",
    ),
    "val": (
        "builtin_kth_distinct",
        "builtin_binary_strings",
        "builtin_max_window_sum",
        "builtin_shortest_route",
    ),
    "test": (
        "demo_stdin",
        "demo_functional",
        "builtin_palindrome_anagram",
        "builtin_trapped_water",
    ),
}


def _release_table() -> dict[str, tuple[str, ...]]:
    """Every tag LiveCodeBench's loader knows, mapped to the release files it covers."""
    n = len(RELEASE_FILES)
    table: dict[str, tuple[str, ...]] = {}
    for last in range(1, n + 1):
        table[f"release_v{last}"] = RELEASE_FILES[:last]  # cumulative
        table[f"v{last}"] = (RELEASE_FILES[last - 1],)  # one increment
        for first in range(1, last):
            table[f"v{first}_v{last}"] = RELEASE_FILES[first - 1 : last]
    table["release_latest"] = RELEASE_FILES
    return table


RELEASES = _release_table()


def release_files(release: str) -> tuple[str, ...]:
    """The hub files (in order) that make up a release tag; a one-line error for unknown tags."""
    try:
        return RELEASES[release]
    except KeyError:
        n = len(RELEASE_FILES)
        raise DataError(
            f"unknown release {release!r}; valid: release_v1..release_v{n}, release_latest, "
            f"v1..v{n}, vA_vB with 1 <= A < B <= {n} (e.g. v1_v3)"
        ) from None


@dataclass(frozen=True, slots=True)
class LoadResult:
    problems: tuple[Problem, ...]
    skipped: int
    skipped_reasons: tuple[str, ...]
    source_description: str

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(p.id for p in self.problems)


# --------------------------------------------------------------------------- row streams

_QID_RE = re.compile(r'"question_id"\s*:\s*"([^"\\]*)"')


def _iter_jsonl(path: Path, wanted: frozenset[str] | None) -> Iterator[dict[str, Any]]:
    """Rows of a JSONL file in file order, one line in memory at a time.

    With ``wanted`` ids, lines whose question_id (found by a regex that cannot match inside a
    JSON string, where quotes are escaped) is not wanted are skipped without parsing them.
    """
    try:
        handle = path.open("r", encoding="utf-8")
    except OSError as exc:
        raise DataError(f"cannot read {path}: {exc.strerror or exc}") from None
    with handle:
        for lineno, line in enumerate(handle, 1):
            if not line.strip():
                continue
            if wanted is not None:
                match = _QID_RE.search(line)
                if match and match.group(1) not in wanted:
                    continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DataError(f"{path}: line {lineno} is not valid JSON ({exc.msg})") from None
            if not isinstance(row, dict):
                raise DataError(f"{path}: line {lineno} is not a JSON object")
            yield row


def _iter_parquet(path: Path, wanted: frozenset[str] | None) -> Iterator[dict[str, Any]]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        parquet = pq.ParquetFile(path)
    except (OSError, pa.ArrowException) as exc:
        raise DataError(f"cannot read parquet file {path}: {exc}") from None
    import pyarrow.compute as pc

    wanted_array = pa.array(sorted(wanted), pa.string()) if wanted is not None else None
    # Small batches: one row's hidden tests can be tens of MB.
    for batch in parquet.iter_batches(batch_size=8):
        if wanted_array is not None and "question_id" in batch.schema.names:
            # Drop unwanted rows inside Arrow, before their blobs become Python strings.
            ids = pc.cast(batch.column("question_id"), pa.string())
            batch = batch.filter(pc.is_in(ids, value_set=wanted_array))
        yield from batch.to_pylist()


_READERS = {".jsonl": _iter_jsonl, ".parquet": _iter_parquet}


def _iter_file(path: Path, wanted: frozenset[str] | None) -> Iterator[dict[str, Any]]:
    if not path.is_file():
        raise DataError(f"data file not found: {path}")
    reader = _READERS.get(path.suffix.lower())
    if reader is None:
        raise DataError(f"unsupported data file {path}: expected .jsonl or .parquet")
    return reader(path, wanted)


def _download_release_file(filename: str) -> Path:
    """One release file from the hub (or the local HF cache). Tests replace this function."""
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import (
        EntryNotFoundError,
        HfHubHTTPError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
    )
    from huggingface_hub.utils import logging as hf_logging

    hf_logging.set_verbosity_error()  # retry chatter would break our one-line error contract
    try:
        return Path(hf_hub_download(HF_DATASET, filename, repo_type="dataset"))
    except LocalEntryNotFoundError:
        raise DataError(
            f"the Hugging Face hub cannot be reached and {HF_DATASET}/{filename} is not cached; "
            "use --data PATH (a local .jsonl/.parquet file) or --data builtin"
        ) from None
    except (EntryNotFoundError, RepositoryNotFoundError) as exc:
        raise DataError(
            f"{HF_DATASET}/{filename} is not on the hub ({type(exc).__name__})"
        ) from None
    except (HfHubHTTPError, OSError) as exc:
        raise DataError(
            f"downloading {HF_DATASET}/{filename} failed ({type(exc).__name__}); "
            "use --data PATH or --data builtin"
        ) from None


def _iter_hub(files: Sequence[str], wanted: frozenset[str] | None) -> Iterator[dict[str, Any]]:
    # Each file is fetched only when the stream reaches it, so `limit` on v1 rows never
    # downloads the later (GB-sized) increments.
    for filename in files:
        yield from _iter_jsonl(_download_release_file(filename), wanted)


@dataclass(frozen=True, slots=True)
class _Source:
    rows: Iterator[dict[str, Any]]
    description: str
    cache_namespace: str | None  # None: never cache (the built-in file is tiny)


def _open_source(source: str, release: str, wanted: frozenset[str] | None) -> _Source:
    if source == "builtin":
        return _Source(_iter_file(BUILTIN_FILE, wanted), "builtin problems", None)
    if source == "hf":
        files = release_files(release)
        desc = f"hf {HF_DATASET} {release} ({', '.join(files)})"
        return _Source(_iter_hub(files, wanted), desc, release)
    path = Path(source).expanduser()
    return _Source(_iter_file(path, wanted), f"file {path}", "local")


# --------------------------------------------------------------------------- hidden-test cache


def default_cache_dir() -> Path:
    """Root of the decoded-test cache: $LCB_GRID_CACHE/tests, else ~/.cache/lcb-grid/tests."""
    root = os.environ.get("LCB_GRID_CACHE")
    base = Path(root).expanduser() if root else Path.home() / ".cache" / "lcb-grid"
    return base / "tests"


def _safe_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", text) or "_"


class _TestCache:
    """Decoded hidden tests as JSON files, checked against a digest of the blob they came from."""

    def __init__(self, root: Path, namespace: str) -> None:
        self.dir = root / _safe_name(namespace)

    @staticmethod
    def digest(blob: str) -> str:
        return hashlib.sha1(blob.encode("utf-8")).hexdigest()

    def get(self, qid: str, digest: str) -> list[dict[str, Any]] | None:
        try:
            data = json.loads((self.dir / f"{_safe_name(qid)}.json").read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            return None
        if not isinstance(data, dict) or data.get("blob_sha1") != digest:
            return None
        tests = data.get("tests")
        return tests if isinstance(tests, list) else None

    def put(self, qid: str, digest: str, tests: list[dict[str, Any]]) -> None:
        payload = {"question_id": qid, "blob_sha1": digest, "tests": tests}
        try:
            write_text_atomic(self.dir / f"{_safe_name(qid)}.json", json.dumps(payload))
        except OSError:
            pass  # a read-only cache only costs speed


def _hidden_tests(
    row: Mapping[str, Any], cache: _TestCache | None
) -> list[dict[str, Any]]:
    """Decode a row's hidden tests, through the cache for compressed blobs."""
    qid = str(row.get("question_id", "?"))
    blob = row.get("private_test_cases")
    compressed = isinstance(blob, str) and blob.strip() and not blob.lstrip().startswith("[")
    if not compressed or cache is None:
        return decode_test_blob(blob, where=f"row {qid}")
    digest = cache.digest(blob)
    cached = cache.get(qid, digest)
    if cached is not None:
        return cached
    tests = decode_test_blob(blob, where=f"row {qid}")
    cache.put(qid, digest, tests)
    return tests


# --------------------------------------------------------------------------- loading


_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


@dataclass(frozen=True, slots=True)
class DateWindow:
    """Contest dates strictly after ``after`` and strictly before ``before`` (ISO days).

    lcb_runner's ``--start_date S --end_date E`` (both inclusive) is ``after`` = the day before S and
    ``before`` = the day after E. "After a model's cutoff" is ``after=<cutoff>``: the cutoff day
    itself is not after it. A row without a contest date is outside every bounded window.
    """

    after: str | None = None
    before: str | None = None

    def __post_init__(self) -> None:
        for name in ("after", "before"):
            value = getattr(self, name)
            if value is not None and not _DATE.match(value):
                raise DataError(f"{name} must be an ISO date YYYY-MM-DD, not {value!r}")

    @property
    def bounded(self) -> bool:
        return self.after is not None or self.before is not None

    def contains(self, contest_date: str) -> bool:
        day = str(contest_date or "")[:10]
        if not _DATE.match(day):
            return not self.bounded
        if self.after is not None and day <= self.after:
            return False
        return self.before is None or day < self.before


def _matches(row: Mapping[str, Any], difficulty: str | None, platform: str | None,
             window: DateWindow | None = None) -> bool:
    if difficulty is not None and str(row.get("difficulty", "")).lower() != difficulty.lower():
        return False
    if platform is not None and str(row.get("platform", "")).lower() != platform.lower():
        return False
    if window is not None and not window.contains(str(row.get("contest_date") or "")):
        return False
    return True


class _Unusable(Exception):
    """A row we skip when loading many rows (carries the short reason)."""


class _NoTests(_Unusable):
    """Neither public nor hidden tests: skipped even when requested by id."""


class _Undecodable(_Unusable):
    """Hidden tests that cannot be decoded: skipped in bulk, an error when requested by id."""


_TEST_KINDS = frozenset(kind.value for kind in TestKind)


def _check_test_dicts(tests: list[dict[str, Any]], qid: str) -> None:
    """Hidden tests that decode to the wrong shape count as undecodable (skippable), not fatal."""
    for i, test in enumerate(tests):
        if not {"input", "output"} <= set(test) or test.get("testtype") not in _TEST_KINDS:
            raise DataError(f"row {qid}: undecodable test blob (hidden test {i} is malformed)")


def _build_problem(
    row: Mapping[str, Any], cache: _TestCache | None, decode_private: bool
) -> Problem:
    qid = str(row.get("question_id", "")).strip()
    if decode_private:
        try:
            hidden = _hidden_tests(row, cache)
            _check_test_dicts(hidden, qid)
        except DataError as exc:
            raise _Undecodable(str(exc)) from None
    else:
        hidden = []
    # Errors raised here (missing func_name, malformed public tests) are data errors, not skips.
    problem = problem_from_row(row, private_tests=hidden)
    has_unread_hidden = not decode_private and bool(row.get("private_test_cases"))
    if not problem.public_tests and not problem.private_tests and not has_unread_hidden:
        raise _NoTests(f"row {qid}: no tests")
    return problem


def load_problems(
    source: str = "builtin",
    *,
    release: str = "release_v1",
    only: Sequence[str] | None = None,
    offset: int = 0,
    limit: int | None = None,
    difficulty: str | None = None,
    platform: str | None = None,
    cache_dir: Path | None = None,
    decode_private: bool = True,
    after: str | None = None,
    before: str | None = None,
) -> LoadResult:
    """Load problems in file order (or, with ``only``, in the order of ``only``).

    Filters apply before any hidden test is decoded: ``only`` ids (which lifts ``limit``),
    ``difficulty``, ``platform``, the contest-date window (``after``/``before``: see
    ``DateWindow``), then the ``offset``/``limit`` window over the matching rows.
    Rows without usable tests are skipped and counted; with ``only`` a requested row whose
    hidden tests cannot be decoded is an error, as are ids that are not in the data.
    """
    if offset < 0 or (limit is not None and limit < 0):
        raise DataError("offset and limit must be non-negative")
    window = DateWindow(after, before)
    if source == "hf":
        release_files(release)  # fail on a bad tag before touching the network
    wanted_order = list(dict.fromkeys(str(i) for i in only)) if only is not None else None
    wanted = frozenset(wanted_order) if wanted_order is not None else None
    src = _open_source(source, release, wanted)
    cache = (
        _TestCache(cache_dir or default_cache_dir(), src.cache_namespace)
        if src.cache_namespace is not None
        else None
    )
    if wanted_order is not None:
        return _load_only(src, wanted_order, offset, difficulty, platform, cache, decode_private, window)

    problems: list[Problem] = []
    reasons: list[str] = []
    seen = 0  # matching rows so far, for the offset/limit window
    if limit == 0:
        return LoadResult((), 0, (), src.description)
    for row in src.rows:
        if not _matches(row, difficulty, platform, window):
            continue
        seen += 1
        if seen <= offset:
            continue
        try:
            problems.append(_build_problem(row, cache, decode_private))
        except _Unusable as exc:
            reasons.append(str(exc))
        if limit is not None and seen - offset >= limit:
            break  # stop reading: release files are huge
    return LoadResult(tuple(problems), len(reasons), tuple(reasons), src.description)


def _load_only(
    src: _Source,
    wanted_order: list[str],
    offset: int,
    difficulty: str | None,
    platform: str | None,
    cache: _TestCache | None,
    decode_private: bool,
    window: DateWindow | None = None,
) -> LoadResult:
    if not wanted_order:
        return LoadResult((), 0, (), src.description)
    pending = set(wanted_order)
    found: dict[str, Problem] = {}
    reasons: list[str] = []
    for row in src.rows:
        qid = str(row.get("question_id", "")).strip()
        if qid not in pending:
            continue
        pending.discard(qid)
        if _matches(row, difficulty, platform, window):
            try:
                found[qid] = _build_problem(row, cache, decode_private)
            except _Undecodable as exc:
                raise DataError(str(exc)) from None
            except _NoTests as exc:
                reasons.append(str(exc))
        if not pending:
            break  # every requested row seen: no need to read the rest of the file
    if pending:
        missing = [i for i in wanted_order if i in pending]
        more = f" (+{len(missing) - 10} more)" if len(missing) > 10 else ""
        shown = ", ".join(missing[:10]) + more
        raise DataError(f"{len(missing)} requested id(s) not in {src.description}: {shown}")
    ordered = [found[i] for i in wanted_order if i in found][offset:]
    return LoadResult(tuple(ordered), len(reasons), tuple(reasons), src.description)


# --------------------------------------------------------------------------- id manifests


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DataError(f"id file not found: {path}") from None
    except (OSError, json.JSONDecodeError) as exc:
        raise DataError(f"cannot read id file {path}: {exc}") from None


def load_eval_ids(path: Path | None = None) -> tuple[str, ...]:
    """The 50 reported evaluation ids (the first 50 rows of release_v1), in their file order."""
    data = _read_json(path or EVAL_IDS_FILE)
    ids = data.get("ids") if isinstance(data, dict) else None
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        raise DataError(
            f"{path or EVAL_IDS_FILE}: expected an object with an 'ids' list of strings"
        )
    return tuple(ids)


def load_split_ids(path: Path | None = None) -> dict[str, list[str]]:
    """The optimization splits: {"train": [...], "val": [...], "test": [...]}."""
    path = path or SPLITS_FILE
    data = _read_json(path)
    splits: dict[str, list[str]] = {}
    for key in ("train", "val", "test"):
        ids = data.get(key) if isinstance(data, dict) else None
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            raise DataError(f"{path}: '{key}' must be a list of id strings")
        splits[key] = list(ids)
    return splits


def __getattr__(name: str) -> Any:
    # EVAL_IDS is read on first use, so importing this module never touches the file system.
    if name == "EVAL_IDS":
        return load_eval_ids()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
