"""Grade a predictions file: ``python -m lcb.evaluate PREDICTIONS.jsonl [options]``.

Each prediction line is ``{"id": ..., "code": ...}`` (a program) or ``{"id": ..., "output": ...}``
(a raw model answer; the program is extracted from it). Only the predicted problems are loaded.
Records go to ``--out`` (JSONL, written atomically), a table to stderr, and one JSON summary line
to stdout. Bad input is reported as one ``error: ...`` line with exit status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Only the standard library at import time: `--help` must be instant.

EXIT_USAGE = 2


@dataclass(frozen=True, slots=True)
class Prediction:
    id: str
    code: str | None
    extraction_rule: str | None  # None when the line gave the program itself
    latency_s: float


def _parse_prediction(obj: Any, where: str) -> Prediction:
    from lcb.errors import LcbError

    if not isinstance(obj, dict):
        raise LcbError(f"{where}: expected a JSON object")
    qid = obj.get("id")
    if not isinstance(qid, (str, int)) or isinstance(qid, bool) or str(qid).strip() == "":
        raise LcbError(f"{where}: missing or invalid 'id'")
    latency = obj.get("latency_s", 0.0)
    latency = float(latency) if isinstance(latency, (int, float)) else 0.0
    if "code" in obj:
        code = obj["code"]
        if code is not None and not isinstance(code, str):
            raise LcbError(f"{where}: 'code' must be a string or null")
        return Prediction(str(qid).strip(), code, None, latency)
    if "output" in obj:
        from lcb.extract import extract_code

        output = obj["output"]
        if output is not None and not isinstance(output, str):
            raise LcbError(f"{where}: 'output' must be a string or null")
        extraction = extract_code(output)
        return Prediction(str(qid).strip(), extraction.code, extraction.rule, latency)
    raise LcbError(f"{where}: needs a 'code' or an 'output' field")


def read_predictions(path: Path) -> list[Prediction]:
    from lcb.errors import LcbError

    try:
        handle = path.open("r", encoding="utf-8")
    except FileNotFoundError:
        raise LcbError(f"predictions file not found: {path}") from None
    except OSError as exc:
        raise LcbError(f"cannot read {path}: {exc.strerror or exc}") from None
    predictions: list[Prediction] = []
    seen: dict[str, int] = {}
    with handle:
        for lineno, line in enumerate(handle, 1):
            if not line.strip():
                continue
            where = f"{path}: line {lineno}"
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise LcbError(f"{where} is not valid JSON ({exc.msg})") from None
            prediction = _parse_prediction(obj, where)
            if prediction.id in seen:
                raise LcbError(
                    f"{where}: duplicate id {prediction.id!r} (first on line {seen[prediction.id]})"
                )
            seen[prediction.id] = lineno
            predictions.append(prediction)
    if not predictions:
        raise LcbError(f"no predictions in {path}")
    return predictions


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m lcb.evaluate",
        description="Grade LiveCodeBench predictions (pass@1) with the sandboxed grader.",
    )
    parser.add_argument("predictions", type=Path, help='JSONL: {"id", "code"} or {"id", "output"}')
    parser.add_argument(
        "--data",
        default="builtin",
        help="builtin (default), hf (release files from the hub), or a .jsonl/.parquet path",
    )
    parser.add_argument("--release", default="release_v1", help="release tag for --data hf")
    parser.add_argument(
        "--tests",
        choices=("hidden", "public", "all"),
        default="hidden",
        help="hidden tests (default), public ones, or all (official: public then hidden)",
    )
    parser.add_argument("--out", type=Path, help="write one record per problem here (JSONL)")
    parser.add_argument("--workers", type=int, help="parallel gradings (default: CPU count)")
    return parser


def _problems_for(predictions: list[Prediction], args: argparse.Namespace) -> list[Any]:
    from lcb.data import load_problems
    from lcb.errors import DataError

    loaded = load_problems(args.data, release=args.release, only=[p.id for p in predictions])
    by_id = {p.id: p for p in loaded.problems}
    ungradable = [
        p.id for p in predictions if p.id not in by_id or not by_id[p.id].tests(args.tests)
    ]
    if ungradable:
        shown = ", ".join(ungradable[:5]) + (" ..." if len(ungradable) > 5 else "")
        hint = " (try --tests public or --tests all)" if args.tests == "hidden" else ""
        raise DataError(f"no {args.tests} tests for {len(ungradable)} problem(s): {shown}{hint}")
    print(f"loaded {len(by_id)} problem(s) from {loaded.source_description}", file=sys.stderr)
    return [by_id[p.id] for p in predictions]


def run(args: argparse.Namespace) -> dict[str, Any]:
    from lcb.errors import LcbError
    from lcb.records import format_table, isolation_line, make_record, summarize, write_jsonl_atomic

    if args.workers is not None and args.workers < 1:
        raise LcbError("--workers must be at least 1")
    predictions = read_predictions(args.predictions)
    problems = _problems_for(predictions, args)
    from lcb.grading import grade_many  # the sandbox machinery: only once the input is sound

    started = time.monotonic()
    verdicts = grade_many(
        [(problem, pred.code) for problem, pred in zip(problems, predictions)],
        workers=args.workers,
        tests=args.tests,
    )
    records = [
        make_record(
            problem,
            code=pred.code,
            verdict=verdict,
            latency_s=pred.latency_s,
            extraction_rule=pred.extraction_rule,
        )
        for problem, pred, verdict in zip(problems, predictions, verdicts)
    ]
    summary = summarize(records)
    summary.update(
        {"isolation": isolation_line(records), "data": args.data, "tests": args.tests, "grading_s": round(time.monotonic() - started, 3)}
    )
    if args.data == "hf":
        summary["release"] = args.release
    if args.out is not None:
        write_jsonl_atomic(args.out, records)
    print(format_table(records, summary), file=sys.stderr)
    return summary


def _fail(message: str) -> None:
    print("error: " + " ".join(message.split()), file=sys.stderr)  # always exactly one line


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    from lcb.errors import LcbError

    try:
        summary = run(args)
    except LcbError as exc:
        _fail(str(exc))
        return EXIT_USAGE
    except OSError as exc:  # e.g. --out in a read-only place
        _fail(f"{exc.strerror or exc}: {exc.filename or ''}".rstrip(": "))
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    print(json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
