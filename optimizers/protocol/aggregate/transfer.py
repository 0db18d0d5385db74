"""The transfer matrix: prompts tuned on model X, deployed on model Y (pure functions).

One matrix per (method, runtime): rows are the models the prompts were tuned on, columns the
models they were deployed on. An entry is the mean Δpp over seeds of deployed vs the deployed
model's own seed team, and the share of the source's own gain kept (Δ on Y / Δ on X; None when
the source gained nothing). The diagonal is the source cells' own Δpp (a transfer job onto the
source's own model re-tests the same prompts on the same shared evaluations, so when one exists
it must agree; a disagreement is reported as a note).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from optimizers.protocol.grid import cells

TOLERANCE_PP = 1e-9


def _share(delta: float | None, source: float | None) -> float | None:
    if delta is None or not source:
        return None
    return delta / source


def transfer_matrix(groups: Sequence[Any], cell_stats: Mapping[tuple[Any, ...], Any]) -> dict[str, Any]:
    """``{"matrices": [...], "notes": [...]}``; each matrix: method, runtime, models (row/column
    order: ``tuned_on``, ``deployed_on``) and entries ``{source, target, delta_pp, share_kept, seeds, measured_by}``."""
    sources: dict[tuple[str, str, str], Any] = {}
    transfers: dict[tuple[str, str, str], dict[str, Any]] = defaultdict(dict)
    for group in groups:
        comparison = cell_stats.get(group.key)
        job = group.first
        if comparison is None or job.matched:
            continue
        source_model = job.transfer_from.get("model") if job.transfer_from else None
        base = (job.method, job.registry_key)
        if source_model is None:
            if not job.variant:
                sources[(*base, job.model_key)] = comparison
        else:
            transfers[(*base, cells.model_key(str(source_model)))][job.model_key] = comparison
    notes: list[str] = []
    matrices = []
    for method, runtime in sorted({(m, r) for m, r, _ in [*sources, *transfers]}):
        tuned_on = sorted({x for m, r, x in [*sources, *transfers] if (m, r) == (method, runtime)})
        deployed_on = sorted(set(tuned_on) | {y for (m, r, _), row in transfers.items()
                                              if (m, r) == (method, runtime) for y in row})
        entries = []
        for x in tuned_on:
            own = sources.get((method, runtime, x))
            own_delta = own.mean_delta_pp if own is not None else None
            for y in deployed_on:
                measured = transfers.get((method, runtime, x), {}).get(y)
                if x == y:
                    if own is None:
                        continue
                    if measured is not None and abs(measured.mean_delta_pp - own_delta) > TOLERANCE_PP:
                        notes.append(f"{method} on {runtime}: re-testing {x}'s prompts on {x} gave "
                                     f"{measured.mean_delta_pp:+.2f} pp, the source jobs {own_delta:+.2f} pp")
                    entries.append({"source": x, "target": y, "delta_pp": own_delta, "share_kept": 1.0 if own_delta
                                    else None, "seeds": [s.seed for s in own.seeds], "measured_by": "source"})
                elif measured is not None:
                    entries.append({"source": x, "target": y, "delta_pp": measured.mean_delta_pp,
                                    "share_kept": _share(measured.mean_delta_pp, own_delta),
                                    "seeds": [s.seed for s in measured.seeds], "measured_by": "transfer",
                                    "source_delta_pp": own_delta})
        if any(e["measured_by"] == "transfer" for e in entries):
            matrices.append({"method": method, "runtime": runtime, "tuned_on": tuned_on,
                             "deployed_on": deployed_on, "entries": entries})
    return {"matrices": matrices, "notes": notes}


def render_transfer(matrix: Mapping[str, Any]) -> str:
    lines = []
    for block in matrix["matrices"]:
        lines.append(f"transfer\t{block['method']}\t{block['runtime']}\t(rows: tuned on; columns: deployed on; "
                     "delta_pp [share of the source's gain kept])")
        lines.append("\t".join(["tuned_on\\deployed_on", *block["deployed_on"]]))
        cell = {(e["source"], e["target"]): e for e in block["entries"]}
        for x in block["tuned_on"]:
            row = [x]
            for y in block["deployed_on"]:
                entry = cell.get((x, y))
                if entry is None:
                    row.append("-")
                else:
                    share = "-" if entry["share_kept"] is None else f"{100 * entry['share_kept']:.0f}%"
                    row.append(f"{entry['delta_pp']:+.2f} [{share}]")
            lines.append("\t".join(row))
    return "\n".join(lines) + ("\n" if lines else "")
