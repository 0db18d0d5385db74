"""The first gym as a corner of the new one: its four fixed worlds (``legacy_*``: no decoys, no
wrong-way symptoms, no paraphrases, no instance randomisation, the old rates) rerun with today's
gym and the corner knobs (``optimizers.gym.worlds.CORNER``: the first gym's draw names, draw
keying, reading order and noise-free MAPRO probe), compared job by job with a reference.

    python -m benchmarks.gym.corner --out DIR [--budgets 150] [--instances 10] [--methods ...] [--workers 2]
        [--reference FILE] [--plain]
    python -m benchmarks.gym.corner --make-reference OLD_OUT --provenance TEXT > FILE

The default reference (``docs/gym/corner_reference.json``) is the first gym's worlds code (commit
0eea35e: ``optimizers/gym``, ``benchmarks/gym``) grafted on a later main, so that both sides run
*today's* methods: its per-job regrets, charged rollouts and deployed candidates, and per cell
the mean regret with a 95 % bootstrap CI over the seeds (``benchmarks.gym.stats.bootstrap_mean``,
as the gym's table). Its ``provenance`` says how it was made. A cell is *exact* when every seed's
regret, charged count and deployed candidate equal the reference's, and *within CI* when the new
mean lies inside the reference CI or the reference mean inside the new one. ``--plain`` runs the
same worlds without the corner knobs (what the new design's draws change). A reference without
per-job values (``docs/gym/legacy_v1.json``, the first gym's published table, made with the
methods of its day) is compared by CI only. Writes ``DIR/corner.json`` and ``DIR/corner.md``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from optimizers.journal import write_json_atomic

DOCS = Path(__file__).resolve().parents[2] / "docs" / "gym"
REFERENCE = DOCS / "corner_reference.json"
KINDS = ("credit", "joint", "noisy", "seed_optimal")
WORLDS = tuple(f"legacy_{kind}" for kind in KINDS)
METHODS = ("identity", "gepa", "mipro", "mapro", "maspo", "hivemind", "mamut_gepa", "tavo")
SLACK = 5e-4  # a published table rounded to 3 decimals
EXACT = ("regret", "charged", "deployed_candidate_id")  # what an exact job reproduces


def _world(kind: str) -> str:
    """The reference's world name of a summary row or job (``legacy_credit``)."""
    return kind.partition("~")[0].partition("@")[0]


def compare(results: Sequence[Mapping[str, Any]], reference: Mapping[str, Any], *,
            resamples: int = 2000) -> list[dict[str, Any]]:
    """One row per (world, method, budget) the reference knows: the new mean and CI over the
    results' seeds, whether it is within the reference CI, and (when the reference has per-job
    values) how many seeds reproduce exactly."""
    from benchmarks.gym import stats

    cells: dict[tuple[str, str, int], list[Mapping[str, Any]]] = {}
    for result in results:
        cells.setdefault((_world(result["world"]), result["method"], int(result["budget"])), []).append(result)
    rows = []
    for (world, method, budget), items in sorted(cells.items()):
        old = reference["regret"].get(world, {}).get(method, {}).get(str(budget))
        if old is None:
            continue
        estimate = stats.bootstrap_mean([r["regret"] for r in items], resamples=resamples)
        assert estimate is not None
        new = list(estimate)
        within = old[1] - SLACK <= new[0] <= old[2] + SLACK or new[1] - SLACK <= old[0] <= new[2] + SLACK
        row: dict[str, Any] = {"world": world, "method": method, "budget": budget, "old": old, "new": new,
                               "n": len(items), "within_ci": within}
        jobs = reference.get("jobs", {}).get(world, {}).get(method, {}).get(str(budget))
        if jobs is not None:
            same = [r for r in items if str(r["seed"]) in jobs
                    and all(r[k] == jobs[str(r["seed"])][k] for k in EXACT)]
            row["exact_jobs"] = len(same)
            row["exact"] = len(same) == len(items) == len(jobs)
        rows.append(row)
    return rows


def counts(rows: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    return {"cells": len(rows), "within_ci": sum(r["within_ci"] for r in rows),
            "exact": sum(bool(r.get("exact")) for r in rows),
            "jobs": sum(r["n"] for r in rows), "exact_jobs": sum(r.get("exact_jobs", 0) for r in rows)}


def markdown(rows: Sequence[Mapping[str, Any]], exact: bool) -> str:
    head = "| world | method | B | reference: regret [95% CI] | now: regret [95% CI] | within CI |"
    lines = [head + (" exact seeds |" if exact else ""), "|---|---|---|---|---|---|" + ("---|" if exact else "")]
    for r in rows:
        o, n = r["old"], r["new"]
        line = (f"| {r['world']} | {r['method']} | {r['budget']} | {o[0]:.3f} [{o[1]:.3f}, {o[2]:.3f}] | "
                f"{n[0]:.3f} [{n[1]:.3f}, {n[2]:.3f}] | {'yes' if r['within_ci'] else 'no'} |")
        lines.append(line + (f" {r.get('exact_jobs', 0)}/{r['n']} |" if exact else ""))
    c = counts(rows)
    lines.append(f"\n{c['within_ci']} of {c['cells']} cells within CI"
                 + (f"; {c['exact']} of {c['cells']} cells exact ({c['exact_jobs']} of {c['jobs']} jobs "
                    f"draw for draw)." if exact else "."))
    return "\n".join(lines)


def make_reference(old_out: Path, provenance: str, *, resamples: int = 2000) -> dict[str, Any]:
    """The reference from a run of the first gym's code (``OLD_OUT/jobs/<kind>/<method>/b<B>/s<i>``)."""
    from benchmarks.gym import stats

    jobs: dict[str, dict[str, dict[str, dict[str, dict[str, Any]]]]] = {}
    versions: dict[str, str] = {}
    for path in sorted(old_out.glob("jobs/*/*/b*/s*/result.json")):
        r = json.loads(path.read_text())
        if r.get("status") != "completed" or r.get("params"):
            continue
        world = "legacy_" + r["world"]
        jobs.setdefault(world, {}).setdefault(r["method"], {}).setdefault(str(r["budget"]), {})[str(r["seed"])] = {
            k: r[k] for k in EXACT}
        versions[r["method"]] = r["method_version"]
    if not jobs:
        raise SystemExit(f"error: no completed first-gym results under {old_out}/jobs")
    regret = {w: {m: {b: list(stats.bootstrap_mean([j["regret"] for _, j in sorted(seeds.items(), key=lambda s: int(s[0]))],
                                                   resamples=resamples) or ())
                      for b, seeds in budgets.items()} for m, budgets in methods.items()} for w, methods in jobs.items()}
    return {"provenance": provenance, "method_versions": dict(sorted(versions.items())), "regret": regret, "jobs": jobs}


def main(argv: Sequence[str] | None = None) -> int:
    from benchmarks.gym import cli
    from optimizers.gym.worlds import CORNER

    parser = argparse.ArgumentParser(prog="python -m benchmarks.gym.corner", description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--budgets", default="150")
    parser.add_argument("--instances", type=int, default=10)
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--reference", type=Path, default=REFERENCE, help="regrets to compare with (JSON)")
    parser.add_argument("--plain", action="store_true", help="without the corner knobs")
    parser.add_argument("--make-reference", type=Path, metavar="OLD_OUT",
                        help="print a reference made from a run of the first gym's code and exit")
    parser.add_argument("--provenance", default="", help="with --make-reference: how OLD_OUT was made")
    args = parser.parse_args(argv)
    if args.make_reference is not None:
        if not args.provenance:
            parser.exit(2, "error: --make-reference needs --provenance (commit and command of the run)\n")
        print(json.dumps(make_reference(args.make_reference, args.provenance), indent=1))
        return 0
    if args.out is None:
        parser.exit(2, "error: --out is required\n")
    try:
        reference = json.loads(args.reference.read_text())
    except (OSError, ValueError) as exc:
        parser.exit(2, f"error: cannot read the reference {args.reference}: {exc}\n")
    knobs = [] if args.plain else [a for name, value in CORNER for a in ("--knob", f"{name}={int(value)}")]
    run_args = ["--worlds", ",".join(WORLDS), "--methods", args.methods, "--budgets", args.budgets,
                "--instances", str(args.instances), "--workers", str(args.workers), "--out", str(args.out), *knobs]
    code = cli.main(run_args)
    if code != 0:
        return code
    results = cli.collect(cli.parse(run_args), cli.jobs_of(cli.parse(run_args)))
    rows = compare(results, reference)
    exact = "jobs" in reference
    write_json_atomic(args.out / "corner.json", {"reference": str(args.reference), "plain": args.plain,
                                                 **counts(rows), "rows": rows})
    text = markdown(rows, exact)
    (args.out / "corner.md").write_text(text + "\n", encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
