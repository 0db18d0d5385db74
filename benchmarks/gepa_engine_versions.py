"""Does the ``gepa`` engine version change what MAMUT-GEPA (or GEPA) does? Run both, compare steps.

The reference pins ``gepa==0.0.27``; this project runs the version in pyproject.toml. This script
runs the same small jobs on the scripted world (tests/optimizers/scripted_world.py: built-in data,
job seed 0, one rollout at a time) once with the installed engine and once with an older engine
put first on ``PYTHONPATH``, and compares their traces step by step: every charged rollout in
order (which candidate, which problem, which split, its outcome), every validation evaluation
(iteration, candidate, score, charge), the proposals, merges, reflection prompts (hashes), the
stop reason and the charged total.

    pip install --target DIR gepa==0.0.27 --no-deps        # the old engine, outside the venv
    .venv/bin/python benchmarks/gepa_engine_versions.py --old-gepa DIR [--scenarios all]

Prints one JSON line per scenario (``same`` true/false, and the first difference) and exits 1 when
any trace differs. ``--trace NAME`` (used internally) runs one scenario with whatever ``gepa`` is
importable and prints its trace as JSON.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

# name -> (world, job overrides); small enough to run in seconds on the scripted server.
# GEPA itself is not among them: its per-component reflection templates need gepa >= 0.1 (0.0.27
# takes one template string), and the reference runs GEPA through DSPy, not this engine API.
SCENARIOS: dict[str, tuple[str, dict[str, Any]]] = {
    "mamut_single_useful": ("useful", {"method": "mamut_gepa", "budget": 30}),
    "mamut_sequential_useful": ("useful", {"method": "mamut_gepa", "topology": "sequential", "team_size": 2,
                                           "budget": 40}),
    "mamut_centralized_useful_cap": ("useful", {"method": "mamut_gepa", "topology": "centralized", "team_size": 2,
                                                "budget": 40, "method_params": {"metric_call_limit": 18}}),
    "mamut_single_useless": ("useless", {"method": "mamut_gepa", "budget": 24}),
    # every proposal hands the current text back: the no-op path (no child may be evaluated)
    "mamut_single_echo": ("echo", {"method": "mamut_gepa", "budget": 30,
                                   "method_params": {"max_idle_iterations": 3}}),
    # every proposal reply is empty: no usable proposal, one reflection call each
    "mamut_single_silent": ("silent", {"method": "mamut_gepa", "budget": 30,
                                       "method_params": {"max_idle_iterations": 3}}),
}


def trace(name: str) -> dict[str, Any]:
    """Run one scenario with the importable gepa and return its trace."""
    sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "optimizers")]
    from importlib import metadata

    from optimizers.journal import read_jsonl, read_sealed
    from optimizers.protocol.job.engine import run_job
    from scripted_world import fast_runtime, start_world, world_job_config

    world, overrides = SCENARIOS[name]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "job"
        server = _proposer_world(world) if world in ("echo", "silent") else start_world(world=world)
        try:
            run_job(world_job_config(out, server.base_url, concurrency=1, **overrides), fast_runtime())
        finally:
            server.stop()
        optimization = read_sealed(out / "optimization.json")
        names: dict[str, int] = {}

        def label(candidate_id: str) -> int:  # candidates by order of first appearance
            return names.setdefault(candidate_id, len(names))

        rollouts = [(label(a["candidate_id"]), a["phase"], a["problem_id"], a["outcome"])
                    for a in read_jsonl(out / "optimization" / "attempts.jsonl") if a["charged"]]
        validations = [(row["iteration"], label(row["candidate_id"]), row["val_score"], row["charged"])
                       for row in optimization["history"]]
        prompts = [hashlib.sha256(r["prompt"].encode()).hexdigest()[:16]
                   for r in read_jsonl(out / "optimization" / "native" / "reflection.jsonl")]
        metadata_ = optimization["metadata"]
        return {
            "scenario": name,
            "gepa": metadata.version("gepa"),
            "charged": optimization["budget"]["charged"],
            "stop_reason": optimization["stop_reason"],
            "proposals": metadata_.get("proposals"),
            "merge_attempts": metadata_.get("merge_attempts"),
            "metric_calls": metadata_.get("metric_calls"),
            "incumbent": label(optimization["incumbent_candidate"]["id"]),
            "rollouts": rollouts,
            "validations": validations,
            "reflection_prompts": prompts,
        }


def _proposer_world(kind: str) -> Any:
    """The useless world whose MAMUT proposer returns the current text unchanged (``echo``) or
    an empty reply (``silent``)."""
    from optimizers.mamut_gepa.adapter import read_proposal
    from optimizers.reflection import REFLECTION_SYSTEM
    from scripted_world import world_script
    from topologies.scripted import FunctionRule, Script, ScriptedServer

    def echo(request: Any) -> str | None:
        if REFLECTION_SYSTEM not in request.system or "Task: mamut_gepa/propose." not in request.system:
            return None
        return f"BEGIN_PROMPT\n{read_proposal(request.last_user)}\nEND_PROMPT" if kind == "echo" else " "

    return ScriptedServer(Script([FunctionRule("echo", echo), *world_script(world="useless").rules],
                                 default=None)).start()


def run_trace(name: str, gepa_dir: str | None) -> dict[str, Any]:
    """The trace of one scenario in a child process (``gepa_dir`` first on the path, if given)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(([gepa_dir] if gepa_dir else []) + [str(ROOT)]),
           "WANDB_MODE": "offline", "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    done = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--trace", name], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=900, check=False)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["(no output)"]
        return {"scenario": name, "error": tail[0]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def first_difference(new: dict[str, Any], old: dict[str, Any]) -> str | None:
    for key in ("error", "charged", "stop_reason", "proposals", "merge_attempts", "metric_calls", "incumbent",
                "validations", "reflection_prompts", "rollouts"):
        a, b = new.get(key), old.get(key)
        if a == b:
            continue
        if isinstance(a, list) and isinstance(b, list):
            index = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            return f"{key}[{index}]: {a[index] if index < len(a) else None} vs {b[index] if index < len(b) else None}"
        return f"{key}: {a} vs {b}"
    return None


def compare(names: list[str], old_dir: str) -> int:
    differ = 0
    for name in names:
        new, old = run_trace(name, None), run_trace(name, old_dir)
        difference = first_difference(new, old)
        differ += difference is not None
        print(json.dumps({"scenario": name, "same": difference is None, "new": new.get("gepa"),
                          "old": old.get("gepa"), "charged": [new.get("charged"), old.get("charged")],
                          "stop": [new.get("stop_reason"), old.get("stop_reason")],
                          "first_difference": difference}), flush=True)
    return 1 if differ else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old-gepa", help="folder holding the old gepa package (pip install --target ...)")
    parser.add_argument("--scenarios", default="all", help=f"comma list of {', '.join(SCENARIOS)} (or all)")
    parser.add_argument("--trace", choices=sorted(SCENARIOS), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.trace:
        print(json.dumps(trace(args.trace)))
        return 0
    names = list(SCENARIOS) if args.scenarios == "all" else args.scenarios.split(",")
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown or not args.old_gepa:
        print(f"error: {'unknown scenario(s) ' + ', '.join(unknown) if unknown else '--old-gepa is required'}",
              file=sys.stderr)
        return 2
    if not (Path(args.old_gepa) / "gepa" / "__init__.py").exists():
        print(f"error: no gepa package in {args.old_gepa}", file=sys.stderr)
        return 2
    return compare(names, args.old_gepa)


if __name__ == "__main__":
    sys.exit(main())
