"""The batch runner behind every topology CLI (``python -m topologies.<t>...langgraph_lcb``).

Without ``--batch`` (and without data-selection flags) the two built-in demo problems run and
their extracted code and test results are shown. With ``--out-dir`` (or ``--out``) records are
appended to ``predictions.jsonl`` as rows finish and a trace per problem is written to
``traces/<id>.json``. Progress and the human summary go to stderr; stdout gets exactly one JSON
summary line. Exit status: 0 done, 1 nothing loaded / every row failed on infrastructure / no
endpoint reachable, 2 bad flags or input.

Only the standard library is imported at module level so ``--help`` is instant.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from topologies import aio

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
FORMATS = ("freeform", "semi_structured", "structured_soft")
SELECTION_FLAGS = ("only", "limit", "offset", "difficulty", "platform", "data", "release", "after", "before")
TABLE_MAX_ROWS = 60  # longer batches get the summary lines only on stderr


class UsageError(Exception):
    """Bad flags or input: one line on stderr, exit 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, no usage dump
        print(f"error: {message}", file=sys.stderr)
        raise SystemExit(EXIT_USAGE)


def build_parser(topology: str, prog: str | None = None) -> argparse.ArgumentParser:
    parser = _Parser(
        prog=prog or f"python -m topologies.{topology}",
        description=f"Run the {topology} LangGraph team on LiveCodeBench problems and grade them.",
    )
    data = parser.add_argument_group("problems")
    data.add_argument("--batch", action="store_true",
                      help="run a dataset instead of the two demo problems (implied by the flags below)")
    data.add_argument("--data", help="builtin (default), hf (hub release files) or a .jsonl/.parquet path")
    data.add_argument("--release", help="release tag for --data hf (default release_v1)")
    data.add_argument("--only", nargs="+", action="extend", metavar="ID", help="run these problem ids")
    data.add_argument("--limit", type=int, help="at most N problems (after --offset)")
    data.add_argument("--offset", type=int, help="skip the first K matching problems")
    data.add_argument("--difficulty", choices=("easy", "medium", "hard"))
    data.add_argument("--platform", choices=("atcoder", "codeforces", "leetcode"))
    data.add_argument("--after", metavar="YYYY-MM-DD",
                      help="problems whose contest date is strictly after this day (lcb_runner's "
                           "--start_date S is --after <the day before S>)")
    data.add_argument("--before", metavar="YYYY-MM-DD",
                      help="problems whose contest date is strictly before this day (lcb_runner's "
                           "--end_date E is --before <the day after E>)")
    data.add_argument("--tests", choices=("hidden", "public", "all"), default="hidden",
                      help="which tests grade a program (default hidden)")
    team = parser.add_argument_group("team")
    team.add_argument("--team-size", type=int, help="agents (default 4; single: 1)")
    team.add_argument("--communication", choices=FORMATS, default="freeform")
    team.add_argument("--rounds", type=int, default=2, help="debate rounds (decentralized)")
    model = parser.add_argument_group("model")
    model.add_argument("--model", default="qwen", help="model alias or id (default qwen)")
    model.add_argument("--task-endpoints", help="comma-separated OpenAI-compatible base URLs")
    model.add_argument("--temperature", type=float, default=0.0)
    model.add_argument("--top-p", type=float, default=0.95)
    model.add_argument("--max-tokens", type=int, default=4096)
    model.add_argument("--seed", type=int, default=0, help="run seed (per-agent seeds derive from it)")
    run = parser.add_argument_group("run")
    run.add_argument("--concurrency", type=int, default=8,
                     help="problems with their team at the model at once (default 8); grading runs beside, one per core")
    run.add_argument("--out-dir", type=Path, help="write predictions.jsonl and traces/ here")
    run.add_argument("--out", type=Path, help="predictions file path (overrides --out-dir's)")
    run.add_argument("--resume", action="store_true", help="skip ids already in the predictions file")
    return parser


@dataclass(frozen=True, slots=True)
class Outputs:
    predictions: Path | None
    traces: Path | None


def output_paths(args: argparse.Namespace) -> Outputs:
    predictions = args.out or (args.out_dir / "predictions.jsonl" if args.out_dir else None)
    if predictions is None:
        return Outputs(None, None)
    traces = (args.out_dir or predictions.parent) / "traces"
    return Outputs(predictions, traces)


def check_args(topology: str, args: argparse.Namespace) -> None:
    from topologies.teams.layouts import LayoutError, role_names

    if args.concurrency < 1:
        raise UsageError("--concurrency must be at least 1")
    if (args.limit is not None and args.limit < 0) or (args.offset is not None and args.offset < 0):
        raise UsageError("--limit and --offset must be non-negative")
    if args.rounds < 1:
        raise UsageError("--rounds must be at least 1")
    if args.max_tokens < 1:
        raise UsageError("--max-tokens must be at least 1")
    if args.resume and output_paths(args).predictions is None:
        raise UsageError("--resume needs --out-dir or --out")
    if args.task_endpoints is not None:
        from lcb.errors import LcbError
        from topologies.models import parse_endpoints

        try:
            if not parse_endpoints(args.task_endpoints):
                raise UsageError("--task-endpoints is empty")
        except LcbError as exc:
            raise UsageError(str(exc)) from None
    if topology == "single" and args.team_size not in (None, 1):
        raise UsageError("the single topology has exactly one agent; drop --team-size")
    if args.team_size is not None and topology != "single":
        try:
            role_names(topology, args.team_size)
        except LayoutError as exc:
            raise UsageError(str(exc)) from None


def is_batch(args: argparse.Namespace) -> bool:
    return args.batch or any(getattr(args, name) is not None for name in SELECTION_FLAGS)


def load(args: argparse.Namespace) -> Any:
    from lcb.data import DEMO_IDS, load_problems

    if not is_batch(args):
        return load_problems("builtin", only=list(DEMO_IDS))
    options: dict[str, Any] = {"only": args.only, "offset": args.offset or 0, "limit": args.limit,
                               "difficulty": args.difficulty, "platform": args.platform,
                               "after": args.after, "before": args.before}
    if args.release:
        options["release"] = args.release
    return load_problems(args.data or "builtin", **options)


# --------------------------------------------------------------------------- files


def read_done(path: Path) -> list[dict[str, Any]]:
    """Records already in a predictions file (a torn last line from a crash is ignored)."""
    if not path.exists():
        return []
    records = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(record, dict) and "id" in record:
            records.append(record)
    return records


def trace_name(problem_id: str) -> str:
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", problem_id)[:120] or "_"
    return f"{safe}.json"


class RecordSink:
    """Appends records as rows finish (flushed), keeps them for the summary.

    With ``resume`` the file keeps every record already in it (``done``; a torn last line is
    dropped); ``counted`` are the ones of this run's selection, which the summary includes.
    """

    def __init__(self, outputs: Outputs, done: list[dict[str, Any]], *, resume: bool,
                 counted: list[dict[str, Any]] | None = None) -> None:
        from lcb.records import write_jsonl_atomic

        self.outputs = outputs
        self.records = list(done if counted is None else counted)
        self._handle = None
        if outputs.predictions is not None:
            write_jsonl_atomic(outputs.predictions, done if resume else [])  # atomically, at start
            self._handle = outputs.predictions.open("a", encoding="utf-8")

    def add(self, record: dict[str, Any], trace: dict[str, Any] | None) -> None:
        from lcb.records import write_text_atomic

        self.records.append(record)
        if self._handle is not None:
            self._handle.write(json.dumps(record, ensure_ascii=False) + "\n")
            self._handle.flush()
        if trace is not None and self.outputs.traces is not None:
            write_text_atomic(self.outputs.traces / trace_name(record["id"]),
                              json.dumps(trace, ensure_ascii=False, indent=1))

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()


# --------------------------------------------------------------------------- rows


@dataclass(slots=True)
class RunSettings:
    spec: Any
    client: Any
    decoding: Any
    seed: int
    tests: str
    limits: Any = None
    grade_slots: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(os.cpu_count() or 2))


def team_record_fields(trajectory: Any) -> dict[str, Any]:
    from topologies.teams.trajectory import usage_to_dict

    extras = trajectory.extras
    fields: dict[str, Any] = {}
    if "winner" in extras:
        fields["winner"] = extras["winner"]
        fields["per_agent"] = [{"agent": a["agent"], "code": a["code"], "status": a["status"]}
                               for a in extras.get("per_agent", [])]
    fields.update({
        "topology": extras.get("team", {}).get("topology"),
        "team_size": extras.get("team", {}).get("team_size"),
        "communication": extras.get("team", {}).get("communication"),
        "code_source": extras.get("code_source"),
        "usage": usage_to_dict(trajectory.usage),
        "calls_by_role": extras.get("calls_by_role", {}),
        "format_parse_rate": extras.get("format", {}).get("parse_rate"),
        "error": trajectory.error,
        "error_kind": trajectory.error_kind.value if trajectory.error_kind else None,
    })
    return fields


def failed_verdict(problem: Any, tests: str, message: str) -> Any:
    from lcb.verdict import Outcome, Verdict

    return Verdict(problem.id, Outcome.NO_CODE, 0, len(problem.tests(tests)), (), message)


async def run_row(problem: Any, settings: RunSettings, team_slot: Any = None
                  ) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """One problem: team run, grading, record, trace. Never raises (a bug becomes the row's error).

    ``team_slot`` (a semaphore) is held for the team run only: grading runs after it is released,
    so the next row is already talking to the model while this one is graded.
    """
    from lcb.grading import agrade
    from lcb.records import make_record
    from topologies.teams import run_team, trajectory_to_dict

    started = time.perf_counter()
    try:
        async with team_slot or contextlib.nullcontext():
            started = time.perf_counter()  # a row's latency starts when it gets its slot
            trajectory = await run_team(settings.spec, problem, settings.client, decoding=settings.decoding,
                                        seed=settings.seed, limits=settings.limits)
        latency = time.perf_counter() - started
        async with settings.grade_slots:
            verdict = await agrade(problem, trajectory.code, tests=settings.tests)
    except Exception as exc:  # noqa: BLE001 - one broken row must not end the batch
        message = f"{type(exc).__name__}: {exc}"
        record = make_record(problem, code=None, verdict=failed_verdict(problem, settings.tests, message),
                             latency_s=time.perf_counter() - started, extraction_rule="none",
                             error=message, error_kind="internal")
        return record, None
    record = make_record(problem, code=trajectory.code, verdict=verdict, latency_s=latency,
                         extraction_rule=trajectory.extraction_rule, **team_record_fields(trajectory))
    trace = {**trajectory_to_dict(trajectory), "verdict": verdict.to_dict()}
    return record, trace


async def run_rows(problems: list[Any], settings: RunSettings, sink: RecordSink, concurrency: int,
                   *, on_row: Any = None) -> None:
    from tqdm import tqdm

    from topologies.heap import settle_for_batches

    settle_for_batches()
    slots = asyncio.Semaphore(concurrency)  # rows at the model; grading is bounded by grade_slots
    # disable=None: a live bar on a terminal, nothing in logs and pipes
    bar = tqdm(total=len(problems), file=sys.stderr, unit="problem", dynamic_ncols=True, disable=None)
    solved = 0

    async def one(problem: Any) -> None:
        nonlocal solved
        record, trace = await run_row(problem, settings, slots)
        sink.add(record, trace)
        solved += int(record.get("em", 0))
        bar.update(1)
        bar.set_postfix(solved=solved, refresh=False)
        if on_row is not None:
            on_row(problem, record)

    try:
        await asyncio.gather(*(one(p) for p in problems))
    finally:
        bar.close()


# --------------------------------------------------------------------------- endpoints


async def unreachable_endpoints(urls: tuple[str, ...], timeout_s: float = 5.0) -> list[str]:
    """Endpoints that refuse a TCP connection (checked before a batch so a typo fails fast)."""
    from urllib.parse import urlsplit

    async def probe(url: str) -> str | None:
        parts = urlsplit(url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
        try:
            _, writer = await asyncio.wait_for(asyncio.open_connection(parts.hostname, port), timeout_s)
        except (OSError, TimeoutError) as exc:
            reason = "timed out" if isinstance(exc, TimeoutError) else (exc.strerror or str(exc))
            return f"{url} ({reason})"
        writer.close()
        return None

    results = await asyncio.gather(*(probe(u) for u in urls))
    return [r for r in results if r is not None]


# --------------------------------------------------------------------------- output


def show_demo_row(problem: Any, record: dict[str, Any]) -> None:
    code = record.get("predicted_code")
    lines = [f"=== {problem.id} ({problem.platform}, {problem.difficulty}) ===",
             "extracted code:" if code else "no code extracted",
             code or "",
             f"tests: {record['pass']}/{record['total']} passed, outcome {record['outcome']}"
             + (f", error: {record['error']}" if record.get("error") else "")]
    print("\n".join(lines), file=sys.stderr, flush=True)


def summary_line(records: list[dict[str, Any]], args: argparse.Namespace, spec: Any, model: str,
                 outputs: Outputs, wall_s: float) -> dict[str, Any]:
    from lcb.records import summarize

    summary = summarize(records)
    summary.update({
        "topology": spec.topology,
        "team_size": spec.team_size,
        "communication": spec.communication.value,
        "rounds": spec.rounds,
        "model": model,
        "errors": sum(1 for r in records if r.get("error")),
        "infrastructure_errors": sum(1 for r in records if r.get("error_kind") == "infrastructure"),
        "model_calls": sum(int(r.get("usage", {}).get("calls", 0)) for r in records),
        "wall_s": round(wall_s, 3),
        "predictions": str(outputs.predictions) if outputs.predictions else None,
    })
    return summary


async def execute(topology: str, args: argparse.Namespace) -> int:
    from lcb.errors import LcbError
    from lcb.records import format_table
    from topologies.models import make_client, resolve_model
    from topologies.prompts import default_team_spec
    from topologies.types import Decoding

    started = time.perf_counter()
    try:
        spec = default_team_spec(topology, team_size=args.team_size, communication=args.communication,
                                 rounds=args.rounds)
        loaded = load(args)
    except (LcbError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    problems = list(loaded.problems)
    if not problems:
        print(f"error: no problem loaded from {loaded.source_description}"
              + (f" ({loaded.skipped} skipped)" if loaded.skipped else ""), file=sys.stderr)
        return EXIT_FAILED
    outputs = output_paths(args)
    done = read_done(outputs.predictions) if args.resume and outputs.predictions else []
    done_ids = {str(r["id"]) for r in done}
    todo = [p for p in problems if p.id not in done_ids]
    print(f"{topology}: {len(problems)} problem(s) from {loaded.source_description}"
          + (f", {len(problems) - len(todo)} already done" if done_ids else ""), file=sys.stderr)

    try:
        config = resolve_model(args.model, task_endpoints=args.task_endpoints)
    except (LcbError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    if todo:
        dead = await unreachable_endpoints(config.endpoints)
        if len(dead) == len(config.endpoints):
            print(f"error: cannot reach the model endpoint(s): {', '.join(dead)}", file=sys.stderr)
            return EXIT_FAILED
    client = make_client(config)
    decoding = Decoding(temperature=args.temperature, top_p=args.top_p, max_tokens=args.max_tokens,
                        seed=args.seed)
    settings = RunSettings(spec, client, decoding, args.seed, args.tests)
    selected = {p.id for p in problems}
    sink = RecordSink(outputs, done, resume=args.resume,
                      counted=[r for r in done if str(r["id"]) in selected])
    try:
        await run_rows(todo, settings, sink, args.concurrency,
                       on_row=None if is_batch(args) else show_demo_row)
    finally:
        sink.close()
        await client.aclose()
    records = sink.records
    summary = summary_line(records, args, spec, config.name, outputs, time.perf_counter() - started)
    if len(records) <= TABLE_MAX_ROWS:
        from lcb.records import summarize

        print(format_table(records, summarize(records)), file=sys.stderr)
    else:
        print(f"pass@1 {summary['pass@1']:.4f} ({summary['solved']}/{summary['n']})", file=sys.stderr)
    print(json.dumps(summary), flush=True)
    ran = [r for r in records if str(r["id"]) not in done_ids]
    if ran and all(r.get("error_kind") == "infrastructure" for r in ran):
        print(f"error: every row failed on an infrastructure error (first: {ran[0].get('error')})",
              file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


def main(topology: str, argv: list[str] | None = None, *, prog: str | None = None) -> int:
    args = build_parser(topology, prog).parse_args(argv)
    try:
        check_args(topology, args)
        return aio.run(execute(topology, args))
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
