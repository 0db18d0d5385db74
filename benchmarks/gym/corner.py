"""The first gym as a corner of the new one: its four fixed worlds (``legacy_*``: no decoys, no
wrong-way symptoms, no paraphrases, no instance randomisation, the old rates) rerun with today's
gym, compared with the first gym's published regrets (``docs/gym/legacy_v1.json``: mean and 95 %
bootstrap CI over 10 seeds).

    python -m benchmarks.gym.corner --out DIR [--budgets 150] [--instances 10] [--methods ...] [--workers 2]

A cell is *reproduced* when the new mean lies inside the old CI or the old mean inside the new
one. Differences that remain have causes in the design, listed in the README: the request seed
now comes from (world, problem, sample) and the outcome from the configuration too (common random
numbers), MAPRO's probes are stochastic rollouts instead of a noise-free read of the optimum, and
the methods changed version since the first run. Writes ``DIR/corner.json`` and ``DIR/corner.md``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from optimizers.journal import write_json_atomic

REFERENCE = Path(__file__).resolve().parents[2] / "docs" / "gym" / "legacy_v1.json"
WORLDS = ("legacy_credit", "legacy_joint", "legacy_noisy", "legacy_seed_optimal")
METHODS = ("identity", "gepa", "mipro", "mapro", "maspo", "hivemind", "mamut_gepa", "tavo")


def compare(summary: dict, reference: dict) -> list[dict]:
    rows = []
    for row in summary["rows"]:
        old = reference["regret"].get(row["kind"], {}).get(row["method"], {}).get(str(row["budget"]))
        if old is None or row["regret"] is None:
            continue
        new = row["regret"]
        inside = old[1] - 1e-9 <= new["mean"] <= old[2] + 1e-9 or new["low"] - 1e-9 <= old[0] <= new["high"] + 1e-9
        rows.append({"world": row["kind"], "method": row["method"], "budget": row["budget"], "old": old,
                     "new": [new["mean"], new["low"], new["high"]], "n": new["n"], "reproduced": inside})
    return rows


def markdown(rows: Sequence[dict]) -> str:
    lines = ["| world | method | B | first gym: regret [95% CI] | now: regret [95% CI] | reproduced |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        o, n = r["old"], r["new"]
        lines.append(f"| {r['world']} | {r['method']} | {r['budget']} | {o[0]:.3f} [{o[1]:.3f}, {o[2]:.3f}] | "
                     f"{n[0]:.3f} [{n[1]:.3f}, {n[2]:.3f}] | {'yes' if r['reproduced'] else 'no'} |")
    done = sum(r["reproduced"] for r in rows)
    lines.append(f"\n{done} of {len(rows)} cells reproduced.")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    from benchmarks.gym import cli

    parser = argparse.ArgumentParser(prog="python -m benchmarks.gym.corner", description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--budgets", default="150")
    parser.add_argument("--instances", type=int, default=10)
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args(argv)
    code = cli.main(["--worlds", ",".join(WORLDS), "--methods", args.methods, "--budgets", args.budgets,
                     "--instances", str(args.instances), "--workers", str(args.workers), "--out", str(args.out)])
    if code != 0:
        return code
    rows = compare(json.loads((args.out / "summary.json").read_text()), json.loads(REFERENCE.read_text()))
    write_json_atomic(args.out / "corner.json", {"rows": rows, "reproduced": sum(r["reproduced"] for r in rows),
                                                 "cells": len(rows)})
    text = markdown(rows)
    (args.out / "corner.md").write_text(text + "\n", encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
