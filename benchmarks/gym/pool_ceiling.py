"""How much of a world's gain MASPOB's prompt pool can hold at best: the pool's ceiling.

    python -m benchmarks.gym.pool_ceiling --out DIR [--kinds credit,joint,noisy,seed_optimal]
        [--instances 30] [--run OUT]

MASPOB searches only over combinations of the variants in its pool, and the pool is written once,
before any rollout, from a meta-prompt that carries no failing turn (so, in the gym, every variant
is the seed plus a blind edit). For each instance this runs the pool-building part of a MASPOB gym
job (a budget-50 job with its journals kept under ``DIR``, seeded as the full run seeds instance i:
seed i; the pool depends on the job's seed, not on its budget),
then scores every combination of the pool's variants with the world's exact expected success. The
ceiling's gain share, (best combination - seed) / (optimum - seed), bounds what any bandit over
this pool can keep; with ``--run`` (a full run's ``OUT``) the gain MASPOB kept in that run at each
budget is printed beside it, with the number of instances where it kept more than the ceiling
(none, or the ceiling is wrong). One line of JSON per kind on stdout; ``DIR/pool_ceiling.json``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
from pathlib import Path
from typing import Any

from optimizers.journal import write_json_atomic

KINDS = ("credit", "joint", "noisy", "seed_optimal")
POOL_FILE = "maspob_prompt_pool.json"


def instance_of(name: str) -> int:
    return int(name.rpartition("@")[2])


def ceiling(name: str, out: Path) -> dict[str, Any]:
    """The pool's best combination for the world instance ``name`` (its gain share and how many
    variants carry any fact or distractor the seed does not)."""
    from optimizers.gym.runner import GymJob, run_job
    from optimizers.gym.worlds import make_world

    job = GymJob(name, "maspob", 50, instance_of(name))
    result = run_job(job, out, keep_journals=True)
    if result.get("status") != "completed":
        raise RuntimeError(f"{name}: the MASPOB job ended {result.get('status')}: {result.get('error')}")
    pool = json.loads((job.directory(out) / "native" / POOL_FILE).read_text())["pool"]["prompts"]
    world = make_world(name)
    keys = {}
    for role in pool:
        matches = [c for c in world.components if c.partition("/")[2] == role]
        if len(matches) != 1:
            raise RuntimeError(f"{name}: role {role!r} is not one component of the world ({world.components})")
        keys[role] = matches[0]
    seed_components = {keys[role]: variants[0] for role, variants in pool.items()}
    seed = world.expected_success(world.configuration(seed_components))
    optimum = world.optimal_success()
    seed_config = world.configuration(seed_components)
    changed = 0
    for role, variants in pool.items():
        for text in variants[1:]:
            config = world.configuration({**seed_components, keys[role]: text})
            changed += config != seed_config
    best = seed
    roles = list(pool)
    for combination in itertools.product(*(range(len(pool[role])) for role in roles)):
        components = {keys[role]: pool[role][i] for role, i in zip(roles, combination, strict=True)}
        best = max(best, world.expected_success(world.configuration(components)))
    gap = optimum - seed
    return {"world": name, "seed": seed, "optimum": optimum, "pool_best": best, "variants": sum(len(v) - 1 for v in pool.values()),
            "variants_that_change_the_configuration": changed,
            "ceiling_gain_share": (best - seed) / gap if gap > 1e-12 else None}


def kept(run: Path | None, name: str) -> dict[str, float | None]:
    """MASPOB's gain share per budget for the instance ``name`` in a full run (if given)."""
    if run is None:
        return {}
    out = {}
    for result in sorted((run / "jobs" / name / "maspob").glob(f"b*/s{instance_of(name)}/result.json")):
        out[result.parent.parent.name[1:]] = json.loads(result.read_text()).get("gain_share")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--kinds", default=",".join(KINDS))
    parser.add_argument("--instances", type=int, default=30)
    parser.add_argument("--run", type=Path, help="a full gym run's OUT (MASPOB's kept gain beside)")
    args = parser.parse_args(argv)
    kinds = [k for k in args.kinds.split(",") if k]
    unknown = sorted(set(kinds) - set(KINDS))
    if unknown or args.instances < 1:
        print(f"error: unknown kinds {unknown} (known: {', '.join(KINDS)})" if unknown
              else "error: --instances must be >= 1", file=sys.stderr)
        return 2
    if args.run is not None and not (args.run / "jobs").is_dir():
        print(f"error: no gym run at {args.run} (no jobs/ folder)", file=sys.stderr)
        return 2
    rows, report = [], {}
    for kind in kinds:
        items = [{**ceiling(name, args.out), "maspob_gain_kept": kept(args.run, name)}
                 for name in (f"{kind}@{i}" for i in range(args.instances))]
        rows += items
        by_budget: dict[str, list[float]] = {}
        above = 0
        for item in items:
            for budget, share in item["maspob_gain_kept"].items():
                if share is not None:
                    by_budget.setdefault(budget, []).append(share)
                    above += item["ceiling_gain_share"] is not None and share > item["ceiling_gain_share"] + 1e-9
        shares = [r["ceiling_gain_share"] for r in items if r["ceiling_gain_share"] is not None]
        line = {"kind": kind, "instances": len(items), "mean_ceiling_gain_share": statistics.fmean(shares) if shares else None,
                "max_ceiling_gain_share": max(shares) if shares else None,
                "mean_variants_that_change_the_configuration": statistics.fmean(r["variants_that_change_the_configuration"] for r in items),
                "variants_per_instance": items[0]["variants"],
                "maspob_mean_gain_kept": {b: statistics.fmean(v) for b, v in sorted(by_budget.items(), key=lambda x: int(x[0]))},
                "maspob_kept_more_than_the_ceiling": above}
        report[kind] = line
        print(json.dumps(line), flush=True)
    write_json_atomic(args.out / "pool_ceiling.json", {"kinds": report, "instances": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
