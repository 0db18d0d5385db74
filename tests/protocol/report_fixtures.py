"""Handwritten job folders for the report tests: sealed result.json, test.json, job.json and a
learning curve per job, written with the project's own sealing (no engine, no model)."""

from __future__ import annotations

import json
import random
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

from optimizers.journal import write_sealed
from optimizers.protocol.report.plots import PANELS

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

PROBLEMS = ("demo_stdin", "demo_functional", "builtin_palindrome_anagram", "builtin_trapped_water",
            "builtin_merge_intervals", "builtin_job_scheduling")


def write_job(root: Path, *, method: str, topology: str, seed: int, gain: int, fallback: bool = False,
              model: str = "Qwen/Qwen3.5-9B", charged: int = 40, conformant: bool = True,
              optimism: dict[str, Any] | None = None) -> Path:
    """One finished job whose deployed prompts solve ``gain`` more test problems than the seed's."""
    folder = root / method / "lcb" / topology / "qwen" / str(seed)
    (folder / "optimization").mkdir(parents=True, exist_ok=True)
    rng = random.Random(f"{method}-{topology}-{seed}")
    baseline = [1.0 if i % 2 == 0 else 0.0 for i in range(len(PROBLEMS))]
    deployed = list(baseline)
    if not fallback:
        for index in [i for i, v in enumerate(baseline) if v == 0.0][:max(gain, 0)]:
            deployed[index] = 1.0
        for index in [i for i, v in enumerate(baseline) if v == 1.0][:max(-gain, 0)]:
            deployed[index] = 0.0
    n = len(PROBLEMS)
    delta = 100.0 * (sum(deployed) - sum(baseline)) / n
    cell = {"method": method, "dataset": "lcb", "topology": topology, "team_size": 4, "communication": "freeform",
            "rounds": 2, "model": model, "registry_key": topology}
    selection = {
        "selection_id": f"sel-{method}-{topology}-{seed}",
        "selected_candidate": "seed" if fallback else "incumbent",
        "deployed_candidate_id": "c-deployed",
        "fallback_reason": "validation_not_better" if fallback else None,
        "baseline_validation_score": 0.4, "incumbent_validation_score": 0.4 if fallback else 0.6,
        "validation_delta": 0.0 if fallback else 0.2,
        **({"optimism": optimism} if optimism is not None else {}),
    }
    test = {"example_ids": list(PROBLEMS), "baseline_scores": baseline, "deployed_scores": deployed,
            "baseline_mean": sum(baseline) / n, "deployed_mean": sum(deployed) / n, "delta_pp": delta,
            "valid_for_aggregation": True}
    result: dict[str, Any] = {
        "schema": "lcb-grid-result/v1", "protocol": "lcb-grid-protocol/v1", "status": "completed",
        "job_id": f"job-{method}-{topology}-{seed}", "cell": cell, "cell_id": f"cell-{method}-{topology}",
        "seed": seed, "condition_id": f"cond-{topology}", "conformant": conformant, "in_grid": True,
        "optimization": {
            "status": "completed", "failure_kind": None, "stop_reason": "budget",
            "budget": {"maximum": charged, "charged": charged, "infrastructure_failures": 0, "retries": 0,
                       "unusable_rollouts": 0},
            "usage": {"task": {"attempts": charged, "prompt_tokens": 900 * charged + rng.randint(0, 5000),
                               "completion_tokens": 200 * charged},
                      "reflection": {"calls": 4, "prompt_tokens": 3000, "completion_tokens": 800}},
            "elapsed_seconds": 10.0 + rng.random() * 20, "incumbent_candidate_id": "c-deployed"},
        "selection": selection, "test": test,
    }
    write_sealed(folder / "result.json", result)
    write_sealed(folder / "test.json", {**test, "deployed_evaluation_id": None, "selection_id": selection["selection_id"]})
    write_sealed(folder / "job.json", {"job_id": result["job_id"], "cell": cell, "spec": {"data": "builtin"}})
    curve = [{"schema": 1, "reason": "initial_state", "charged_rollouts": 0, "best_score": None}]
    best = 0.3
    for charged_so_far in range(10, charged + 1, 10):
        best = min(1.0, best + rng.random() * 0.15)
        curve.append({"schema": 1, "reason": "grid", "charged_rollouts": charged_so_far, "best_score": round(best, 3)})
    (folder / "optimization" / "learning_curve.jsonl").write_text("".join(json.dumps(r) + "\n" for r in curve))
    return folder


def write_grid(root: Path) -> list[Path]:
    """Two methods x two topologies x three seeds, plus one cell with only one seed."""
    folders = []
    for method, gain in (("gepa", 1), ("tavo", -1)):
        for topology in ("sequential", "centralized"):
            for seed in (0, 1, 2):
                folders.append(write_job(root, method=method, topology=topology, seed=seed,
                                         gain=gain + (seed == 2), fallback=(method == "tavo" and seed == 0)))
    folders.append(write_job(root, method="mipro", topology="decentralized", seed=0, gain=2))
    return folders


def screenshot(html: Path, target: Path) -> str:
    """Open the page in headless Chromium: returns the DOM it rendered and writes a screenshot."""
    assert CHROMIUM is not None
    flags = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
             "--hide-scrollbars", "--window-size=1280,3400"]
    shot = subprocess.run([*flags, f"--screenshot={target}", html.as_uri()], capture_output=True, text=True,
                          timeout=120, stdin=subprocess.DEVNULL, check=False)
    assert shot.returncode == 0, shot.stderr[-500:]
    dom = subprocess.run([*flags, "--dump-dom", html.as_uri()], capture_output=True, text=True, timeout=120,
                         stdin=subprocess.DEVNULL, check=False)
    assert dom.returncode == 0, dom.stderr[-500:]
    return dom.stdout


def assert_rendered(dom: str, shot: Path) -> None:
    """Every panel is on the page, drawn (an embedded PNG) or saying in one line why not."""
    from PIL import Image

    for panel_id in ("summary", *PANELS):
        assert f'id="panel-{panel_id}"' in dom
    drawn = dom.count("data:image/png;base64,")
    idle = len(re.findall(r'<section id="panel-[^"]+" class="panel"><h2>[^<]*</h2><p class="idle-line">', dom))
    assert drawn + idle == len(PANELS) and drawn >= 1
    image = Image.open(shot).convert("L")
    histogram = image.histogram()
    non_white = sum(histogram[:245]) / sum(histogram)
    assert non_white > 0.03, f"the screenshot is (nearly) blank: {non_white:.3%} non-white pixels"
