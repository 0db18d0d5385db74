"""Issue 30 end to end on the scripted world: a small grid, both matched-compute baselines, one
transfer sweep, then the aggregate's tables and the report's panels.

Everything after the model is the real code, driven through the real command lines
(``python -m optimizers.protocol.run`` multiruns, ``experiment=lcb_transfer``,
``python -m optimizers.protocol.aggregate``, ``python -m optimizers.protocol.report``). The model is
the scripted server of tests/optimizers/scripted_world.py (useful world: a prompt carrying its
MARKER solves every built-in problem; the reflection model proposes MARKER), with two changes
that make the issue's quantities visible:

* two task models: ``scripted/team-model`` (model A, where the grid is tuned) and
  ``scripted/team-model-b`` (model B, the transfer target), on which MARKER helps on only half of
  the problems the seed fails, so B keeps part of A's gain;
* sampled requests (temperature > 0) that the prompt does not solve are right on one seed in
  three (a hash of the decoding seed and the problem): samples disagree, so the behavioural vote
  (majority: wrong) and best-of-N by the statement's examples (finds the right one) differ.

Tokens differ per role because the scripted server counts tokens from the text it is sent and
returns (the four-agent independent team reads and writes four times what one agent does).

    .venv/bin/python benchmarks/baselines_scripted_grid.py --out /tmp/issue30 [--methods gepa,mipro]

Writes OUT/runs (job folders), OUT/aggregate.txt, OUT/summary.json and OUT/report/ and prints
the aggregate's output. A second run reuses every finished job (the jobs resume).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MODEL_A = "scripted/team-model"
MODEL_B = "scripted/team-model-b"


def _noisy_right(seed: Any, problem_id: str) -> bool:
    digest = hashlib.sha256(f"{seed}|{problem_id}".encode()).digest()
    return digest[0] % 3 == 0


def _half(problem_id: str) -> bool:
    return hashlib.sha256(problem_id.encode()).digest()[0] % 2 == 0


def world(seed_solves: frozenset[str]) -> Any:
    """The scripted Script: scripted_world's reflection rule plus a model-aware task rule."""
    sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "optimizers")]
    from scripted_world import MARKER, _conversation_text, reflection_rule

    from optimizers.judge import JUDGE_SYSTEM
    from optimizers.reflection import REFLECTION_SYSTEM
    from topologies.scripted import FunctionRule, Script, builtin_answers

    def is_solved(request: Any, problem_id: str) -> bool:
        if problem_id in seed_solves:
            return True
        body = request.body
        if MARKER in request.system and (body.get("model") != MODEL_B or _half(problem_id)):
            return True
        return float(body.get("temperature") or 0.0) > 0 and _noisy_right(body.get("seed"), problem_id)

    answer = builtin_answers(is_solved, text=_conversation_text)

    def solve(request: Any) -> str | None:
        if REFLECTION_SYSTEM in request.system or JUDGE_SYSTEM in request.system:
            return None
        return answer(request)

    return Script([reflection_rule("useful"), FunctionRule("solve", solve)], default=None)


def run(command: list[str], log: Path) -> None:
    started = time.monotonic()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "WANDB_MODE": "offline", "HF_HUB_OFFLINE": "1"}
    with log.open("a", encoding="utf-8") as sink:
        sink.write("$ " + " ".join(command) + "\n")
        sink.flush()
        done = subprocess.run(command, cwd=ROOT, stdout=sink, stderr=subprocess.STDOUT, env=env, check=False)
    print(f"[{time.monotonic() - started:6.1f} s] rc={done.returncode} {' '.join(command[2:5])} ...", flush=True)
    if done.returncode != 0:
        raise SystemExit(f"failed (rc {done.returncode}); see {log}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for runs/, the tables and report/")
    parser.add_argument("--methods", default="gepa,mipro", help="the optimizers of the grid (default gepa,mipro)")
    parser.add_argument("--topology", default="independent", help="the grid's one topology (default independent)")
    parser.add_argument("--budget", type=int, default=24, help="charged rollouts per optimizer job (default 24)")
    parser.add_argument("--deployments", type=int, default=100, help="amortise the search over (default 100)")
    args = parser.parse_args(argv)
    sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "optimizers")]
    from job_support import SEED_SOLVES

    from topologies.scripted import ScriptedServer

    out = args.out.resolve()
    runs = out / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    log = out / "commands.log"
    python = sys.executable
    common = ["data=builtin", "allow_any_cell=true", "tracker=jsonl", "quiet=true", f"runs_root={runs}",
              "concurrency=4"]
    server = ScriptedServer(world(SEED_SOLVES)).start()
    try:
        url = server.base_url
        models = [f"task_endpoints=[{url}]", "reflection.id=scripted/reflection-model",
                  f"reflection.endpoints=[{url}]"]
        # The grid on model A: methods x one topology x seeds 0, 1; then both baselines there.
        run([python, "-m", "optimizers.protocol.run", "-m", f"method={args.methods}", f"topology={args.topology}",
             "seed=0,1", "model=custom", f"model.id={MODEL_A}", f"budget={args.budget}", *models, *common], log)
        run([python, "-m", "optimizers.protocol.run", "-m", "method=self_consistency,best_of_n",
             f"topology={args.topology}", "seed=0,1", "model=custom", f"model.id={MODEL_A}", *models, *common], log)
        # Every finished job of that grid onto model B (the baselines have no prompts: skipped).
        run([python, "-m", "optimizers.protocol.run", "experiment=lcb_transfer", f"transfer_root={runs}",
             "model=custom", f"model.id={MODEL_B}", *models, *common], log)
        # Model B's own baselines, so its column of "team vs matched single" exists too.
        run([python, "-m", "optimizers.protocol.run", "-m", "method=self_consistency,best_of_n",
             f"topology={args.topology}", "seed=0,1", "model=custom", f"model.id={MODEL_B}", *models, *common], log)
    finally:
        server.stop()
    aggregate = [python, "-m", "optimizers.protocol.aggregate", str(runs), "--include-nonconformant",
                 "--seeds", "0,1", "--bootstrap", "1000", "--deployments", str(args.deployments),
                 "--out", str(out / "summary.json")]
    done = subprocess.run(aggregate, cwd=ROOT, capture_output=True, text=True, check=False,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    (out / "aggregate.txt").write_text(done.stdout + done.stderr, encoding="utf-8")
    sys.stdout.write(done.stdout)
    if done.returncode != 0:
        sys.stderr.write(done.stderr[-3000:])
        return 1
    run([python, "-m", "optimizers.protocol.report", str(runs), "--out", str(out / "report"),
         "--include-nonconformant", "--seeds", "0,1", "--bootstrap", "1000", "--deployments",
         str(args.deployments)], log)
    print(f"report: {out / 'report' / 'report.html'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
