"""``python -m optimizers.protocol.run.calibrate``: measure token profiles on the endpoint that will run the grid.

    python -m optimizers.protocol.run.calibrate --topology single,sequential,centralized \\
        --model qwen --task-endpoints http://host:8000/v1 --problems 8 --out runs/token_profiles.json
    python -m optimizers.protocol.grid --plan --profiles runs/token_profiles.json

For each topology it rolls the seed team (the job's own team system and evaluation decoding) on the
first ``--problems`` validation problems (never test problems), and records the mean calls per
rollout and tokens per call the endpoint reported. ``grid --plan --profiles FILE`` then uses these
in place of the default profile (``optimizers.protocol.grid.profiles``). Topologies not measured
keep the default. Nothing is written into any job folder.
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from optimizers.protocol.aggregate.summary import OneLineParser


def build_parser() -> OneLineParser:
    parser = OneLineParser(prog="python -m optimizers.protocol.run.calibrate",
                           description="Measure calls and tokens per rollout of the seed teams on an endpoint.")
    parser.add_argument("--topology", required=True, help="comma-separated topologies (single, sequential, ...)")
    parser.add_argument("--team-size", type=int, default=4, help="agents of the multi-agent teams (default 4)")
    parser.add_argument("--model", default="qwen", help="model alias or full id (default qwen)")
    parser.add_argument("--task-endpoints", default="", help="comma-separated OpenAI-compatible base URLs")
    parser.add_argument("--data", default="hf", help="hf, builtin or a rows file (default hf)")
    parser.add_argument("--release", default="release_latest")
    parser.add_argument("--problems", type=int, default=5, help="validation problems per topology (default 5)")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--out", type=Path, required=True, help="the profiles file to write (JSON)")
    return parser


def _config(args: Any, topology: str, out: Path) -> Any:
    from optimizers.protocol.grid import cells
    from optimizers.protocol.grid.config import JobConfig, ModelSpec
    from optimizers.protocol.run.hydra_config import model_alias, resolve_model_name

    model_id = resolve_model_name(args.model)
    endpoints = tuple(u.strip() for u in args.task_endpoints.split(",") if u.strip())
    size = cells.default_team_size(topology) if topology == "single" else args.team_size
    return JobConfig(method="identity", topology=topology, model=ModelSpec(model_alias(model_id), model_id, endpoints),
                     seed=0, out=out, team_size=size, max_turns=cells.default_max_turns(size), data=args.data,
                     release=args.release, concurrency=args.concurrency, quiet=True, tracker=_jsonl())


def _jsonl() -> Any:
    from optimizers.protocol.grid.config import TrackerSpec

    return TrackerSpec(kind="jsonl")


async def measure(cfg: Any, problems: int) -> list[dict[str, int]]:
    """Usage of the seed team's rollouts on the first ``problems`` validation problems."""
    import asyncio

    from optimizers.evaluator import MODE_EVALUATE
    from optimizers.protocol.job.engine import Job
    from optimizers.protocol.job.seeds import evaluation_seed

    job = Job(cfg)
    job.data.search_problems()
    ids = list(job.split_ids.val)[:problems]
    semaphore = asyncio.Semaphore(cfg.concurrency)

    async def one(pid: str) -> Any:
        async with semaphore:
            return await job.system.run(job.seed_candidate, pid, mode=MODE_EVALUATE,
                                        seed=evaluation_seed(job.condition_id, "val", pid, 0))

    try:
        results = await asyncio.gather(*(one(pid) for pid in ids))
    finally:
        await job._close()
    return [dict(r.usage) for r in results if r.infrastructure_error is None]


def main(argv: Sequence[str] | None = None) -> int:
    from optimizers.journal import write_text_atomic
    from optimizers.protocol.grid import cells
    from optimizers.protocol.grid.profiles import ProfileError, measured_profile, profiles_payload
    from optimizers.protocol.job.errors import JobError
    from topologies import aio

    parser = build_parser()
    args = parser.parse_args(argv)
    topologies = [t.strip() for t in args.topology.split(",") if t.strip()]
    unknown = [t for t in topologies if t not in cells.TOPOLOGIES]
    if unknown or not topologies:
        parser.error(f"unknown topology {', '.join(unknown) or '(none)'}; expected {', '.join(cells.TOPOLOGIES)}")
    if args.problems < 1:
        parser.error("--problems must be >= 1")
    import json

    measured = {}
    with tempfile.TemporaryDirectory(prefix="calibrate-") as scratch:
        for topology in topologies:
            cfg = _config(args, topology, Path(scratch) / topology)
            try:
                usages = aio.run(measure(cfg, args.problems))
                measured[topology] = measured_profile(usages, cfg.team_size,
                                                      f"measured: {cfg.model.id} at {','.join(cfg.model.endpoints) or 'default endpoint'}")
            except (JobError, ProfileError, ValueError, OSError) as exc:
                sys.stderr.write(f"error: {topology}: {' '.join(str(exc).split())}\n")
                return 1
            profile = measured[topology]
            sys.stderr.write(f"{topology}: {profile.rollouts_measured} rollouts, {profile.calls_per_rollout:.2f} calls "
                             f"per rollout, {profile.prompt_tokens_per_call:.0f} prompt + "
                             f"{profile.completion_tokens_per_call:.0f} completion tokens per call\n")
    payload = profiles_payload(measured, model=cfg.model.id, endpoints=list(cfg.model.endpoints), data=args.data)
    write_text_atomic(args.out, json.dumps(payload, indent=2, sort_keys=True) + "\n")
    sys.stdout.write(str(args.out) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
