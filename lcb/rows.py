"""Turning a raw LCB row (all fields strings, as on the hub) into a ``Problem``.

``private_test_cases`` is plain JSON in older rows and base64 -> zlib -> pickle -> JSON string in
newer ones. The pickle layer only ever wraps a ``str`` (or bytes), so we unpickle with a loader
that refuses every global: a malicious blob cannot import or call anything.
"""

from __future__ import annotations

import base64
import binascii
import io
import json
import pickle
import zlib
from collections.abc import Mapping
from typing import Any

from lcb.errors import DataError
from lcb.problem import Problem, TestCase, TestKind


class _NoGlobalsUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refusing to load global {module}.{name}")


def _safe_unpickle(data: bytes) -> Any:
    return _NoGlobalsUnpickler(io.BytesIO(data)).load()


def decode_test_blob(blob: str | list | None, *, where: str = "row") -> list[dict[str, Any]]:
    """Decode a ``public_test_cases``/``private_test_cases`` value into a list of test dicts."""
    if blob is None or blob == "":
        return []
    if isinstance(blob, list):
        return blob
    try:
        value = json.loads(blob)
    except (json.JSONDecodeError, TypeError):
        value = None
    if value is None:
        try:
            raw = zlib.decompress(base64.b64decode(blob.encode("utf-8"), validate=False))
            value = _safe_unpickle(raw)
        except (binascii.Error, zlib.error, pickle.UnpicklingError, EOFError, ValueError,
                TypeError, AttributeError, IndexError) as exc:
            raise DataError(f"{where}: undecodable test blob ({type(exc).__name__}: {exc})") from None
        if isinstance(value, bytes):
            value = value.decode("utf-8")
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except json.JSONDecodeError as exc:
                raise DataError(f"{where}: test blob is not JSON after decompression ({exc})") from None
    if not isinstance(value, list) or not all(isinstance(t, Mapping) for t in value):
        raise DataError(f"{where}: test blob does not hold a list of test objects")
    return list(value)


def encode_test_blob(tests: list[dict[str, Any]]) -> str:
    """The compressed LCB encoding (pickle of a JSON string, zlib, base64); used for built-ins."""
    payload = pickle.dumps(json.dumps(tests), protocol=4)
    return base64.b64encode(zlib.compress(payload)).decode("ascii")


def _tests(raw: list[dict[str, Any]], *, where: str) -> tuple[TestCase, ...]:
    out = []
    for i, test in enumerate(raw):
        try:
            out.append(TestCase(str(test["input"]), str(test["output"]), TestKind(test["testtype"])))
        except (KeyError, ValueError) as exc:
            raise DataError(f"{where}: test {i} is malformed ({type(exc).__name__}: {exc})") from None
    return tuple(out)


def _metadata(row: Mapping[str, Any], where: str) -> dict[str, Any]:
    meta = row.get("metadata") or "{}"
    if isinstance(meta, Mapping):
        return dict(meta)
    try:
        value = json.loads(meta)
    except json.JSONDecodeError:
        raise DataError(f"{where}: metadata is not JSON") from None
    return value if isinstance(value, dict) else {}


def problem_from_row(
    row: Mapping[str, Any],
    *,
    private_tests: list[dict[str, Any]] | None = None,
    decode_private: bool = True,
) -> Problem:
    """Build a ``Problem`` from a raw row.

    ``private_tests`` lets a caller pass tests it already decoded (from the JSON cache);
    ``decode_private=False`` leaves them empty (rows shipped without hidden tests).
    """
    qid = str(row.get("question_id", "")).strip()
    where = f"row {qid or '?'}"
    if not qid:
        raise DataError("row without question_id")
    starter = str(row.get("starter_code") or "").rstrip()
    meta = _metadata(row, where)
    fn_name = meta.get("func_name") or None
    if starter.strip() and not fn_name:
        raise DataError(f"{where}: functional row (has starter code) but metadata.func_name is missing")
    public = _tests(decode_test_blob(row.get("public_test_cases"), where=where), where=where)
    if private_tests is None:
        private_raw = (
            decode_test_blob(row.get("private_test_cases"), where=where) if decode_private else []
        )
    else:
        private_raw = private_tests
    return Problem(
        id=qid,
        title=str(row.get("question_title") or ""),
        statement=str(row.get("question_content") or "").strip(),
        platform=str(row.get("platform") or "unknown"),
        difficulty=str(row.get("difficulty") or "unknown"),
        contest_date=str(row.get("contest_date") or ""),
        starter_code=starter,
        fn_name=fn_name,
        public_tests=public,
        private_tests=_tests(private_raw, where=where),
    )
