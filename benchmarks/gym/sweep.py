"""How sensitive the ranking is to what the gym assumes: a factorial sweep of symptom rate x decoy
rate x fix rate (each at a low and a high value), every method on the same instances and draws.

    python -m benchmarks.gym.sweep --out DIR [--kind credit] [--instances 6] [--budget 150]
                                   [--methods ...] [--workers 2]

Each setting is one gym run (``DIR/<setting>/``, resumable). Writes ``DIR/sensitivity.json`` (per
setting: average ranks, mean regret per method, Kendall's tau of its ranking against the
setting closest to the gym's defaults) and ``DIR/sensitivity.png`` (average rank per method
across the settings).
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from optimizers.journal import write_json_atomic

AXES = {"symptom_rate": (0.4, 0.8), "decoy_rate": (0.0, 0.4), "fix_rate": (0.3, 0.9)}
REFERENCE = {"symptom_rate": 0.8, "decoy_rate": 0.0, "fix_rate": 0.9}  # ranked against this corner
METHODS = ("identity", "random", "gepa", "mipro", "mapro", "maspo", "hivemind", "mamut_gepa", "tavo")


def settings() -> list[dict[str, float]]:
    return [dict(zip(AXES, values, strict=True)) for values in itertools.product(*AXES.values())]


def tag(setting: dict[str, float]) -> str:
    return ",".join(f"{k}={v:g}" for k, v in setting.items())


def kendall(a: dict[str, float], b: dict[str, float]) -> float | None:
    from scipy.stats import kendalltau

    common = sorted(set(a) & set(b))
    if len(common) < 3:
        return None
    value = kendalltau([a[m] for m in common], [b[m] for m in common]).statistic
    return None if value != value else float(value)  # NaN when a ranking is constant


def plot(rows: Sequence[dict], path: Path) -> None:
    from benchmarks.gym.report import _colors, _pyplot, _save

    plt = _pyplot()
    methods = sorted({m for r in rows for m in r["average_ranks"]})
    colors = _colors(methods)
    figure, ax = plt.subplots(figsize=(9, 4.2))
    xs = list(range(len(rows)))
    for method in methods:
        ax.plot(xs, [r["average_ranks"].get(method) for r in rows], marker="o", markersize=3, linewidth=1.1,
                color=colors[method], label=method)
    ax.set_xticks(xs, [f"s{r['symptom_rate']:g} d{r['decoy_rate']:g} f{r['fix_rate']:g}\nτ={r['tau']:.2f}"
                       if r["tau"] is not None else f"s{r['symptom_rate']:g} d{r['decoy_rate']:g} f{r['fix_rate']:g}"
                       for r in rows], fontsize=7)
    ax.invert_yaxis()
    ax.set_ylabel("average rank (1 = lowest regret)")
    ax.set_title("ranking per setting: s = symptom rate, d = decoy rate, f = fix rate; τ = Kendall vs "
                 + tag(REFERENCE), fontsize=8)
    ax.legend(fontsize=7, ncol=2, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    figure.tight_layout()
    _save(figure, path)


def main(argv: Sequence[str] | None = None) -> int:
    from benchmarks.gym import cli

    parser = argparse.ArgumentParser(prog="python -m benchmarks.gym.sweep", description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--kind", default="credit")
    parser.add_argument("--instances", type=int, default=6)
    parser.add_argument("--budget", type=int, default=150)
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args(argv)
    rows = []
    for setting in settings():
        out = args.out / tag(setting)
        knobs = [x for k, v in setting.items() for x in ("--knob", f"{k}={v:g}")]
        code = cli.main(["--worlds", args.kind, "--methods", args.methods, "--budgets", str(args.budget),
                         "--instances", str(args.instances), "--workers", str(args.workers), "--bootstrap", "200",
                         "--out", str(out), *knobs])
        if code != 0:
            return code
        summary = json.loads((out / "summary.json").read_text())
        (cell,) = summary["cells"]
        rows.append({**setting, "average_ranks": cell["average_ranks"], "blocks": cell["blocks"],
                     "friedman": cell["friedman"],
                     "mean_regret": {r["method"]: r["regret"]["mean"] for r in summary["rows"] if r["regret"]}})
    reference = next(r for r in rows if all(r[k] == v for k, v in REFERENCE.items()))
    for row in rows:
        row["tau"] = kendall(row["average_ranks"], reference["average_ranks"])
    write_json_atomic(args.out / "sensitivity.json", {"kind": args.kind, "budget": args.budget,
                                                      "instances": args.instances, "reference": REFERENCE,
                                                      "settings": rows})
    plot(rows, args.out / "sensitivity.png")
    for row in rows:
        print(tag({k: row[k] for k in AXES}), "tau", row["tau"],
              " ".join(f"{m}:{r:.2f}" for m, r in sorted(row["average_ranks"].items(), key=lambda kv: kv[1])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
