"""Regenerate the built-in problem file and its solutions from the Python definitions.

    python -m lcb.builtin.build           # write problems.jsonl and solutions.json
    python -m lcb.builtin.build --check   # exit 1 if the files on disk are out of date

The output is deterministic (seeded generators, stable JSON), so the files are reproducible.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from lcb.builtin import PROBLEMS_FILE, SOLUTIONS_FILE
from lcb.builtin.functional_problems import PROBLEMS as FUNCTIONAL
from lcb.builtin.model import BuiltinProblem, to_row
from lcb.builtin.stdin_problems import PROBLEMS as STDIN
from lcb.rows import decode_test_blob

ALL_PROBLEMS: tuple[BuiltinProblem, ...] = STDIN + FUNCTIONAL


def problems_text() -> str:
    ids = [p.id for p in ALL_PROBLEMS]
    if len(set(ids)) != len(ids):
        raise ValueError("duplicate built-in problem ids")
    return "".join(json.dumps(to_row(p)) + "\n" for p in ALL_PROBLEMS)


def solutions_text() -> str:
    solutions: dict[str, dict[str, Any]] = {}
    for p in ALL_PROBLEMS:
        entry = {"correct": p.correct, "wrong": p.wrong}
        if p.slow is not None:
            entry["slow"] = p.slow
        solutions[p.id] = entry
    return json.dumps(solutions, indent=1) + "\n"


def _canonical(problems_jsonl: str) -> list[dict[str, Any]]:
    """Rows with hidden tests decoded: equal content even where zlib builds compress differently."""
    rows = [json.loads(line) for line in problems_jsonl.splitlines() if line.strip()]
    for row in rows:
        row["private_test_cases"] = decode_test_blob(row["private_test_cases"])
    return rows


def stale_files() -> list[str]:
    """Names of generated files whose content differs from what the definitions produce."""
    stale = []
    if not PROBLEMS_FILE.exists() or _canonical(
        PROBLEMS_FILE.read_text(encoding="utf-8")
    ) != _canonical(problems_text()):
        stale.append(PROBLEMS_FILE.name)
    if not SOLUTIONS_FILE.exists() or SOLUTIONS_FILE.read_text(encoding="utf-8") != solutions_text():
        stale.append(SOLUTIONS_FILE.name)
    return stale


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only compare with the files on disk")
    args = parser.parse_args(argv)
    if args.check:
        stale = stale_files()
        if stale:
            print(f"error: out of date: {', '.join(stale)} (run python -m lcb.builtin.build)",
                  file=sys.stderr)
            return 1
        return 0
    from lcb.records import write_text_atomic

    outputs = {PROBLEMS_FILE: problems_text(), SOLUTIONS_FILE: solutions_text()}
    for path, text in outputs.items():
        write_text_atomic(path, text)
        print(f"wrote {path} ({len(text)} bytes)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
