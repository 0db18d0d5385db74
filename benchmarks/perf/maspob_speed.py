"""MASPOB's surrogate training: the three formulations of one training rule, and the CPU cost of
whole gym jobs at MASPOB's default settings.

    .venv/bin/python benchmarks/perf/maspob_speed.py [--epochs 60] [--jobs credit,joint,noisy,seed_optimal]
                                                     [--budget 600,150,50] [--no-jobs]

1. Fits on gym-shaped data (team graphs of 2 nodes and 1 node, the gym's topologies; 20 graphs
   = the first LinUCB fits, 120 = the last of a budget-600 job), each trained for ``--epochs``
   epochs by torch autograd (``autograd_training``), the numpy trainer (``fast_gat``) and the
   compiled one (``gat_kernel``, MASPOB's default) on the same seed and mask stream: CPU
   microseconds per epoch, and the numpy/compiled ratio. Each is warmed up first (torch-geometric's
   first call, numba's compile or cache load are paid once per process).
2. One gym job per world and budget (``--budget``, default 600) with MASPOB's defaults, in this process
   after a warm-up job (imports, the encoder load and the kernel's compile are paid once per gym
   worker, not per job): CPU seconds per job, and how much of it is surrogate training (CPU).
   Target: <= 10 s per job.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

import numpy as np

TARGET_JOB_CPU_S = 10.0


def fit_speeds(epochs: int) -> None:
    from optimizers.maspob import autograd_training, fast_gat, gat_kernel
    from optimizers.maspob.graph import team_graph
    from optimizers.maspob.surrogate import GNNSettings, initial_state, train_rule

    settings = GNNSettings(max_epochs=epochs, patience=epochs + 1)

    def autograd(graph: Any, nodes: np.ndarray, y: np.ndarray) -> None:
        autograd_training.fit(graph, nodes, y, settings, seed=1, masks=fast_gat.DropoutMasks(1, settings.dropout))

    def numpy_trainer(graph: Any, nodes: np.ndarray, y: np.ndarray) -> None:
        model = fast_gat.FastWorkflowGAT(initial_state(384, settings, 1), graph, settings.heads)
        fast_gat.train(model, nodes, y, train_rule(settings), fast_gat.DropoutMasks(1, settings.dropout))

    def kernel(graph: Any, nodes: np.ndarray, y: np.ndarray) -> None:
        model = gat_kernel.KernelGAT(initial_state(384, settings, 1), graph, settings.heads)
        gat_kernel.train(model, nodes, y, train_rule(settings), fast_gat.DropoutMasks(1, settings.dropout))

    trainers = (autograd, numpy_trainer, kernel)
    print(f"{'graph':<8} {'graphs':>6} {'autograd us/ep':>14} {'numpy us/ep':>11} {'compiled us/ep':>14} "
          f"{'numpy/compiled':>14}")
    for roles in (("manager", "coder_worker"), ("coder",)):
        graph = team_graph(roles)
        rng = np.random.default_rng(0)
        pool = rng.normal(size=(graph.nodes, 20, 384))
        pool /= np.linalg.norm(pool, axis=2, keepdims=True)
        for graphs in (20, 120):
            combos = [tuple(int(i) for i in rng.integers(0, 20, size=graph.nodes)) for _ in range(graphs)]
            nodes = np.stack([np.stack([pool[r][i] for r, i in enumerate(c)]) for c in combos])
            y = rng.uniform(0, 1, size=graphs)
            costs = []
            for trainer in trainers:
                trainer(graph, nodes[:2], y[:2])  # warm-up
                started = time.process_time()
                trainer(graph, nodes, y)
                costs.append((time.process_time() - started) / epochs * 1e6)
            print(f"{graph.shape:<8} {graphs:>6} {costs[0]:>14.0f} {costs[1]:>11.0f} {costs[2]:>14.0f} "
                  f"{costs[1] / costs[2]:>14.1f}")


def job_costs(worlds: list[str], budgets: list[int]) -> None:
    import json

    from optimizers.gym.runner import GymJob, run_job

    with TemporaryDirectory() as folder:
        out = Path(folder)
        started = time.process_time()
        run_job(GymJob(worlds[0], "maspob", 50, 99), out, keep_journals=True)  # warm-up: imports, encoder
        print(f"warm-up job (imports, encoder load, budget 50): {time.process_time() - started:.1f} s CPU")
        print(f"{'world':<14} {'budget':>6} {'CPU s/job':>9} {'fits':>5} {'fit CPU s':>9} {'epochs/fit':>10} "
              f"{'charged':>7}  target <= {TARGET_JOB_CPU_S:g} s at budget 600")
        for budget, world in ((b, w) for b in budgets for w in worlds):
            job = GymJob(world, "maspob", budget, 0)
            started = time.process_time()
            result = run_job(job, out, keep_journals=True)
            seconds = time.process_time() - started
            timing = json.loads((job.directory(out) / "native" / "maspob_timing.json").read_text())
            epochs = timing["surrogate_epochs"]
            print(f"{world:<14} {budget:>6} {seconds:>9.1f} {timing['surrogate_fits']:>5} "
                  f"{timing['surrogate_fit_cpu_seconds']:>9.1f} {sum(epochs) / max(1, len(epochs)):>10.0f} "
                  f"{result['charged']:>7}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--epochs", type=int, default=60)
    parser.add_argument("--jobs", default="credit,joint,noisy,seed_optimal")
    parser.add_argument("--budget", default="600", help="one budget or several, comma-separated (600,150,50)")
    parser.add_argument("--no-jobs", action="store_true")
    args = parser.parse_args()
    fit_speeds(args.epochs)
    if not args.no_jobs:
        job_costs([w for w in args.jobs.split(",") if w], [int(b) for b in args.budget.split(",") if b])


if __name__ == "__main__":
    main()
