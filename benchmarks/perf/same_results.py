"""Whether a speed change left the gym's results alone: run a few gym jobs into a folder with one
checkout, again with another, and compare the folders field by field (all but timings).

    .venv/bin/python benchmarks/perf/same_results.py run OUT [--jobs credit@2:gepa:150,...]
    .venv/bin/python benchmarks/perf/same_results.py compare OUT_BEFORE OUT_AFTER

``run`` also writes every default world's digest (``digests.json``), so a change to the worlds'
tables shows up even where no job ran on them. ``compare`` exits 1 on any difference.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

DEFAULT_JOBS = ",".join([*(f"{w}:{m}:150" for w in ("credit@2", "joint@2")
                           for m in ("gepa", "hivemind", "mapro", "maspob")), "credit@2:maspob:600"])
TIMINGS = ("cpu_s", "wall_s", "skipped")  # what differs between two runs of the same job


def run(out: Path, jobs: str) -> None:
    from optimizers.gym.runner import GymJob, run_job, world_digest
    from optimizers.gym.worlds import default_worlds

    out.mkdir(parents=True, exist_ok=True)
    digests = {w.name: world_digest(GymJob(w.name, "identity", 1, 0), w) for w in default_worlds()}
    (out / "digests.json").write_text(json.dumps(digests, sort_keys=True, indent=1))
    for spec in jobs.split(","):
        world, method, budget = spec.split(":")
        result = run_job(GymJob(world, method, int(budget), 0), out)
        print(f"{spec}: regret {result['regret']:.6f} charged {result['charged']} cpu {result['cpu_s']} s", flush=True)


def _stripped(path: Path) -> Any:
    data = json.loads(path.read_text())
    return {k: v for k, v in data.items() if k not in TIMINGS} if isinstance(data, dict) else data


def compare(before: Path, after: Path) -> int:
    files = sorted({p.relative_to(before) for p in before.rglob("*.json")} |
                   {p.relative_to(after) for p in after.rglob("*.json")})
    differ = 0
    for name in files:
        a, b = before / name, after / name
        if not (a.exists() and b.exists()):
            print(f"ONLY IN ONE: {name}")
            differ += 1
        elif _stripped(a) != _stripped(b):
            keys = sorted(k for k in set(_stripped(a)) | set(_stripped(b))
                          if _stripped(a).get(k) != _stripped(b).get(k)) if name.name != "digests.json" else ["*"]
            print(f"DIFFERS: {name}: {keys[:10]}")
            differ += 1
        else:
            print(f"same: {name}")
    print(f"{len(files)} files, {differ} differ")
    return 1 if differ else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run")
    r.add_argument("out", type=Path)
    r.add_argument("--jobs", default=DEFAULT_JOBS, help="WORLD:METHOD:BUDGET, comma-separated")
    c = sub.add_parser("compare")
    c.add_argument("before", type=Path)
    c.add_argument("after", type=Path)
    args = parser.parse_args(argv)
    if args.command == "run":
        run(args.out, args.jobs)
        return 0
    return compare(args.before, args.after)


if __name__ == "__main__":
    sys.exit(main())
