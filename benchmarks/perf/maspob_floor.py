"""How far MASPOB's surrogate training can get below its present cost without changing what it
computes: the matrix products alone of a real budget-600 gym job, timed at one BLAS thread.

    .venv/bin/python benchmarks/perf/maspob_floor.py [--world credit] [--budget 600] [--repeat 400]

Runs one MASPOB gym job at its defaults (after a warm-up job), records every surrogate fit (graphs,
distinct node embeddings, edges, epochs, CPU) and then times, for each fit's shapes, the eleven
products and three matrix-vector sums one training epoch of the one-layer WorkflowGATv2 needs
(the shapes and layouts of ``optimizers.maspob.gat_kernel``: encoder layers, ``lin_l``/``lin_r``,
head, and their gradients). The sum over the job's fits of epochs x that time is a floor for any
formulation of the same network and training rule in float32 on this BLAS: the elementwise work
(attention, softmax, dropout, ReLU, Adam) and the job's team runs come on top.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from pathlib import Path
from tempfile import TemporaryDirectory

import numpy as np

WIDTH, MIDDLE, HIDDEN, WIDE, HEAD_HIDDEN = 384, 48, 32, 128, 32  # MASPOB's default network


@dataclass(frozen=True, slots=True)
class FitShape:
    graphs: int
    distinct: int
    nodes: int
    needs_lin_r: bool  # False when every node's only incoming edge is its self loop
    epochs: int
    cpu_s: float


def record_job(world: str, budget: int) -> tuple[float, list[FitShape]]:
    """One MASPOB gym job with every fit's shape recorded; returns (job CPU s, fits)."""
    import optimizers.maspob.surrogate as surrogate
    from optimizers.gym.runner import GymJob, run_job

    fits: list[FitShape] = []
    plain_fit = surrogate.GATv2Surrogate.fit

    def recording_fit(self, nodes, targets, *, seed):  # type: ignore[no-untyped-def]
        started = time.process_time()
        report = plain_fit(self, nodes, targets, seed=seed)
        rows = np.asarray(nodes, dtype=np.float32).reshape(-1, nodes.shape[2])
        incoming = np.bincount([b for _, b in self.graph.edges], minlength=self.graph.nodes)
        fits.append(FitShape(nodes.shape[0], len(np.unique(rows, axis=0)), nodes.shape[1], bool(incoming.any()),
                             report.epochs, time.process_time() - started))
        return report

    surrogate.GATv2Surrogate.fit = recording_fit
    try:
        with TemporaryDirectory() as folder:
            run_job(GymJob(world, "maspob", 50, 99), Path(folder))  # warm-up: imports, encoder, compile
            fits.clear()
            started = time.process_time()
            run_job(GymJob(world, "maspob", budget, 0), Path(folder))
            return time.process_time() - started, fits
    finally:
        surrogate.GATv2Surrogate.fit = plain_fit


def epoch_products(fit: FitShape, repeat: int) -> float:
    """CPU seconds of one epoch's matrix products for ``fit``'s shapes (best of ``repeat``)."""
    rng = np.random.default_rng(0)
    g, d, rows = fit.graphs, fit.distinct, fit.nodes * fit.graphs
    lin = WIDE * (2 if fit.needs_lin_r else 1)

    def m(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape).astype(np.float32)

    distinct, w1, d1, w2, hn, wlr = m(d, WIDTH), m(MIDDLE, WIDTH), m(rows, MIDDLE), m(HIDDEN, MIDDLE), m(rows, HIDDEN), m(lin, HIDDEN)
    poolt, w3, da3, doutt, dxt, dhn, dr1 = m(WIDE, g), m(HEAD_HIDDEN, WIDE), m(g, HEAD_HIDDEN), m(WIDE, rows), m(lin, rows), m(rows, HIDDEN), m(d, MIDDLE)
    ones = np.ones(rows, dtype=np.float32)
    products = (  # (left, right, out): as the compiled kernel lays them out
        (distinct, w1.T, np.empty((d, MIDDLE), np.float32)),
        (d1, w2.T, np.empty((rows, HIDDEN), np.float32)),
        (wlr, hn.T, np.empty((lin, rows), np.float32)),
        (poolt.T, w3.T, np.empty((g, HEAD_HIDDEN), np.float32)),
        (da3.T, poolt.T, np.empty((HEAD_HIDDEN, WIDE), np.float32)),
        (w3.T, da3.T, np.empty((WIDE, g), np.float32)),
        (doutt, ones, np.empty(WIDE, np.float32)),
        (dxt, ones, np.empty(lin, np.float32)),
        (dxt, hn, np.empty((lin, HIDDEN), np.float32)),
        (dxt.T, wlr, np.empty((rows, HIDDEN), np.float32)),
        (dhn.T, d1, np.empty((HIDDEN, MIDDLE), np.float32)),
        (dhn, w2, np.empty((rows, MIDDLE), np.float32)),
        (dr1.T, distinct, np.empty((MIDDLE, WIDTH), np.float32)),
    )
    best = float("inf")
    for _ in range(repeat):
        started = time.process_time()
        for left, right, out in products:
            np.dot(left, right, out)
        best = min(best, time.process_time() - started)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--world", default="credit")
    parser.add_argument("--budget", type=int, default=600)
    parser.add_argument("--repeat", type=int, default=400, help="timings per shape (the best is kept)")
    args = parser.parse_args()
    from threadpoolctl import threadpool_limits

    job_s, fits = record_job(args.world, args.budget)
    with threadpool_limits(limits=1, user_api="blas"):
        cache: dict[tuple[int, int, int, bool], float] = {}
        floor = 0.0
        for fit in fits:
            key = (fit.graphs, fit.distinct, fit.nodes, fit.needs_lin_r)
            if key not in cache:
                cache[key] = epoch_products(fit, args.repeat)
            floor += fit.epochs * cache[key]
    fit_s = sum(f.cpu_s for f in fits)
    print(f"{args.world} budget {args.budget}: job {job_s:.1f} s CPU = fits {fit_s:.1f} s ({len(fits)} fits, "
          f"{sum(f.epochs for f in fits)} epochs) + the rest {job_s - fit_s:.1f} s")
    print(f"matrix products alone (one BLAS thread, best of {args.repeat}): {floor:.1f} s "
          f"= {floor / max(fit_s, 1e-9):.0%} of the fits' CPU; with the rest of the job: {floor + job_s - fit_s:.1f} s")


if __name__ == "__main__":
    main()
