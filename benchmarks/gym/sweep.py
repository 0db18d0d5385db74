"""How sensitive the ranking is to what the gym assumes: a factorial sweep of symptom rate x decoy
rate x fix rate (each at a low and a high value), every method on the same instances and draws.

    python -m benchmarks.gym.sweep --out DIR [--kinds credit,joint,noisy] [--instances 6] [--budget 150]
                                   [--methods ...] [--workers 2]

Each setting is one gym run of every kind (``DIR/<setting>/``, resumable). Writes
``DIR/sensitivity.json`` (per kind and setting: average ranks, mean regret per method, Kendall's
tau of its ranking against the same kind's ranking at the cleanest setting) and
``DIR/sensitivity.png`` (average rank per method across the settings, one panel per kind).
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


def kind_rows(summary: dict, setting: dict[str, float], kinds: Sequence[str]) -> dict[str, dict]:
    """Per kind, the row of one setting's gym run (``summary.json``): its ranks, blocks,
    Friedman test and mean regret per method."""
    from benchmarks.gym.report import kind_of

    out = {}
    for kind in kinds:
        (cell,) = [c for c in summary["cells"] if kind_of(c["kind"]).partition("~")[0] == kind]
        regrets = {r["method"]: r["regret"]["mean"] for r in summary["rows"]
                   if r["kind"] == cell["kind"] and r["regret"]}
        out[kind] = {**setting, "average_ranks": cell["average_ranks"], "blocks": cell["blocks"],
                     "friedman": cell["friedman"], "mean_regret": regrets}
    return out


def with_taus(rows: Sequence[dict]) -> list[dict]:
    """The rows of one kind, each with Kendall's tau of its ranking against the reference setting's."""
    reference = next(r for r in rows if all(r[k] == v for k, v in REFERENCE.items()))
    return [{**row, "tau": kendall(row["average_ranks"], reference["average_ranks"])} for row in rows]


def _label(r: dict) -> str:
    head = f"s{r['symptom_rate']:g} d{r['decoy_rate']:g} f{r['fix_rate']:g}"
    return head if r["tau"] is None else f"{head}\nτ={r['tau']:.2f}"


def plot(by_kind: dict[str, Sequence[dict]], path: Path) -> None:
    from benchmarks.gym.report import _colors, _grid, _pyplot, _save_with_legend

    _pyplot()
    methods = sorted({m for rows in by_kind.values() for r in rows for m in r["average_ranks"]})
    colors = _colors(methods)
    figure, axes = _grid(len(by_kind), columns=1, size=(9, 3.2))
    for ax, (kind, rows) in zip(axes, by_kind.items()):
        xs = list(range(len(rows)))
        for method in methods:
            ax.plot(xs, [r["average_ranks"].get(method) for r in rows], marker="o", markersize=3, linewidth=1.1,
                    color=colors[method], label=method)
        ax.set_xticks(xs, [_label(r) for r in rows], fontsize=7)
        ax.invert_yaxis()
        ax.set_ylabel("average rank", fontsize=8)
        ax.set_title(f"{kind}: ranking per setting (s = symptom rate, d = decoy rate, f = fix rate; "
                     f"τ = Kendall vs {tag(REFERENCE)}; {rows[0]['blocks']} instances)", fontsize=8)
    _save_with_legend(figure, axes[:len(by_kind)], path)


def main(argv: Sequence[str] | None = None) -> int:
    from benchmarks.gym import cli

    parser = argparse.ArgumentParser(prog="python -m benchmarks.gym.sweep", description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--kinds", default="credit", help="comma list of world kinds")
    parser.add_argument("--instances", type=int, default=6)
    parser.add_argument("--budget", type=int, default=150)
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args(argv)
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    by_kind: dict[str, list[dict]] = {kind: [] for kind in kinds}
    for setting in settings():
        out = args.out / tag(setting)
        knobs = [x for k, v in setting.items() for x in ("--knob", f"{k}={v:g}")]
        code = cli.main(["--worlds", ",".join(kinds), "--methods", args.methods, "--budgets", str(args.budget),
                         "--instances", str(args.instances), "--workers", str(args.workers), "--bootstrap", "200",
                         "--out", str(out), *knobs])
        if code != 0:
            return code
        for kind, row in kind_rows(json.loads((out / "summary.json").read_text()), setting, kinds).items():
            by_kind[kind].append(row)
    by_kind = {kind: with_taus(rows) for kind, rows in by_kind.items()}
    write_json_atomic(args.out / "sensitivity.json", {"kinds": kinds, "budget": args.budget,
                                                      "instances": args.instances, "reference": REFERENCE,
                                                      "settings": by_kind})
    plot(by_kind, args.out / "sensitivity.png")
    for kind, rows in by_kind.items():
        for row in rows:
            print(kind, tag({k: row[k] for k in AXES}), "tau", row["tau"],
                  " ".join(f"{m}:{r:.2f}" for m, r in sorted(row["average_ranks"].items(), key=lambda kv: kv[1])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
