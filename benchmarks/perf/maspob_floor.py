"""How far MASPOB's budget-600 gym job can get below its present CPU without changing what it
computes: the parts of the job that no formulation of the same network and training rule in
float32 can skip, each timed on this machine.

    .venv/bin/python benchmarks/perf/maspob_floor.py [--world credit] [--budget 600] [--repeat 300]

Runs one MASPOB gym job at its defaults (after a warm-up job that pays imports, the encoder load
and numba's cache), records every surrogate fit (graphs, distinct node embeddings, epochs, CPU)
and the CPU of the prompt encoder, then times, on one BLAS thread:

1. **Matrix products.** For each fit's shapes, the eleven products and three matrix-vector sums
   of one training epoch of the one-layer WorkflowGATv2, called from compiled code exactly as
   ``optimizers.maspob.gat_kernels_numba`` lays them out (encoder layers, ``lin_l``/``lin_r``,
   head, their gradients), so no Python call overhead is counted. Summed over the job's fits x
   epochs. Also the same FLOPs at this core's best sgemm rate (a 1024^3 product): what a perfect
   kernel could reach.
2. **Adam.** The trainer's own ``adam_step`` over the network's weights, once per epoch: torch's
   formula needs a square root and two divisions per weight, which no layout removes.
3. **The rest of the job**: the prompt encoder (once per pool) and everything outside the fits
   (the gym's team runs, the bandit, journals).

Their sum is a floor for the job before any elementwise work (attention, softmax, dropout masks,
ReLUs, pooling) that the rule also needs; the ``<= 10 s`` target of issue 28 is read against it.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

import numpy as np
from maspob_speed import TARGET_JOB_CPU_S  # the sibling script (this folder is sys.path[0])

WIDTH, MIDDLE, HIDDEN, WIDE, HEAD_HIDDEN = 384, 48, 32, 128, 32  # MASPOB's default network


@dataclass(frozen=True, slots=True)
class FitShape:
    graphs: int
    distinct: int
    nodes: int
    needs_lin_r: bool  # False when every node's only incoming edge is its self loop
    epochs: int
    cpu_s: float

    @property
    def key(self) -> tuple[int, int, int, bool]:
        return self.graphs, self.distinct, self.nodes, self.needs_lin_r

    def flops(self) -> float:
        """Multiply-adds x 2 of one epoch's products (``epoch_products``' list)."""
        g, d, rows = self.graphs, self.distinct, self.nodes * self.graphs
        lin = WIDE * (2 if self.needs_lin_r else 1)
        macs = (d * WIDTH * MIDDLE + rows * MIDDLE * HIDDEN + lin * HIDDEN * rows  # encoder, lin_l/lin_r
                + g * WIDE * HEAD_HIDDEN * 3  # head forward, its weight and input gradients
                + WIDE * rows + lin * rows + WIDE * g  # bias and attention sums
                + lin * rows * HIDDEN * 2  # lin weight and input gradients
                + HIDDEN * rows * MIDDLE * 2  # encoder's second layer gradients
                + MIDDLE * d * WIDTH)  # encoder's first layer weight gradient
        return 2.0 * macs


@dataclass(frozen=True, slots=True)
class JobRecord:
    cpu_s: float
    encoder_cpu_s: float
    weights: int
    fits: tuple[FitShape, ...]


def record_job(world: str, budget: int) -> JobRecord:
    """One MASPOB gym job with every fit's shape and the prompt encoder's CPU recorded."""
    import optimizers.maspob.surrogate as surrogate
    from optimizers.gym.runner import GymJob, run_job
    from optimizers.maspob.optimizer import _Run

    fits: list[FitShape] = []
    encoder = [0.0]
    plain_fit, plain_embeddings = surrogate.GATv2Surrogate.fit, _Run._embeddings

    def recording_fit(self, nodes, targets, *, seed):  # type: ignore[no-untyped-def]
        started = time.process_time()
        report = plain_fit(self, nodes, targets, seed=seed)
        rows = np.asarray(nodes, dtype=np.float32).reshape(-1, nodes.shape[2])
        incoming = np.bincount([b for _, b in self.graph.edges], minlength=self.graph.nodes)
        fits.append(FitShape(nodes.shape[0], len(np.unique(rows, axis=0)), nodes.shape[1], bool(incoming.any()),
                             report.epochs, time.process_time() - started))
        return report

    def recording_embeddings(self):  # type: ignore[no-untyped-def]
        started = time.thread_time()  # the encoder runs in a worker thread (asyncio.to_thread)
        try:
            return plain_embeddings(self)
        finally:
            encoder[0] += time.thread_time() - started

    surrogate.GATv2Surrogate.fit, _Run._embeddings = recording_fit, recording_embeddings
    try:
        with TemporaryDirectory() as folder:
            run_job(GymJob(world, "maspob", 50, 99), Path(folder))  # warm-up: imports, encoder, compile
            fits.clear()
            encoder[0] = 0.0
            started = time.process_time()
            run_job(GymJob(world, "maspob", budget, 0), Path(folder))
            cpu_s = time.process_time() - started
    finally:
        surrogate.GATv2Surrogate.fit, _Run._embeddings = plain_fit, plain_embeddings
    initial = surrogate.initial_state(WIDTH, surrogate.GNNSettings(), 0)  # the default network's weights
    return JobRecord(cpu_s, encoder[0], sum(a.size for a in initial.values()), tuple(fits))


def _compiled_products() -> Any:
    from numba import njit

    @njit(cache=False)
    def products(reps, distinct, w1, d1, w2, hn, wlr, poolt, w3, da3, doutt, tg, dxt, dhn, dr1, ones,
                 a1, hn_out, xt, a3, gw3, dpoolt, gbg, gatt, gblr, gwlr, ghn, gw2, gd1, gw1):
        for _ in range(reps):  # as gat_kernels_numba calls them: forward, then backward
            np.dot(distinct, w1.T, a1)
            np.dot(d1, w2.T, hn_out)
            np.dot(wlr, hn.T, xt)
            np.dot(poolt.T, w3.T, a3)
            np.dot(da3.T, poolt.T, gw3)
            np.dot(w3.T, da3.T, dpoolt)
            np.dot(doutt, ones, gbg)
            np.dot(tg, ones[:tg.shape[1]], gatt)
            np.dot(dxt, ones, gblr)
            np.dot(dxt, hn, gwlr)
            np.dot(dxt.T, wlr, ghn)
            np.dot(dhn.T, d1, gw2)
            np.dot(dhn, w2, gd1)
            np.dot(dr1.T, distinct, gw1)

    return products


def epoch_products(products: Any, fit: FitShape, repeat: int) -> float:
    """CPU seconds of one epoch's products for ``fit``'s shapes (best of ``repeat`` blocks of 20)."""
    rng = np.random.default_rng(0)
    g, d, rows = fit.graphs, fit.distinct, fit.nodes * fit.graphs
    lin = WIDE * (2 if fit.needs_lin_r else 1)

    def m(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape).astype(np.float32)

    def e(*shape: int) -> np.ndarray:
        return np.empty(shape, np.float32)

    inputs = (m(d, WIDTH), m(MIDDLE, WIDTH), m(rows, MIDDLE), m(HIDDEN, MIDDLE), m(rows, HIDDEN), m(lin, HIDDEN),
              m(WIDE, g), m(HEAD_HIDDEN, WIDE), m(g, HEAD_HIDDEN), m(WIDE, rows), m(WIDE, g), m(lin, rows),
              m(rows, HIDDEN), m(d, MIDDLE), np.ones(rows, np.float32))
    outputs = (e(d, MIDDLE), e(rows, HIDDEN), e(lin, rows), e(g, HEAD_HIDDEN), e(HEAD_HIDDEN, WIDE), e(WIDE, g),
               e(WIDE), e(WIDE), e(lin), e(lin, HIDDEN), e(rows, HIDDEN), e(HIDDEN, MIDDLE), e(rows, MIDDLE),
               e(MIDDLE, WIDTH))
    products(1, *inputs, *outputs)
    best = float("inf")
    for _ in range(repeat):
        started = time.process_time()
        products(20, *inputs, *outputs)
        best = min(best, (time.process_time() - started) / 20)
    return best


def adam_seconds(weights: int, repeat: int) -> float:
    """CPU seconds of the trainer's own Adam step over ``weights`` floats (best of ``repeat`` x 200)."""
    from optimizers.maspob.fast_gat import ADAM_BETAS, ADAM_EPS
    from optimizers.maspob.gat_kernels_numba import compiled
    from optimizers.maspob.surrogate import GNNSettings

    step = compiled()["adam_step"]
    rng = np.random.default_rng(0)
    flat = rng.standard_normal(weights).astype(np.float32)
    grad = (rng.standard_normal(weights) * 1e-3).astype(np.float32)
    m, v = np.zeros(weights, np.float32), np.full(weights, 1e-6, np.float32)
    settings, (beta1, beta2), f = GNNSettings(), ADAM_BETAS, np.float32
    epoch = 100  # any: the bias corrections only scale the step
    args = (f(settings.weight_decay), f(1 - beta1), f(beta2), f(1 - beta2), f(ADAM_EPS),
            f(settings.lr / (1 - beta1 ** epoch)), f(np.sqrt(1 - beta2 ** epoch)))
    step(flat, grad, m, v, *args)
    best = float("inf")
    for _ in range(repeat):
        started = time.process_time()
        for _ in range(200):
            step(flat, grad, m, v, *args)
        best = min(best, (time.process_time() - started) / 200)
    return best


def peak_gflops() -> float:
    """This core's best float32 product rate (1024^3, best of 5)."""
    a = np.random.default_rng(0).standard_normal((1024, 1024)).astype(np.float32)
    out = np.empty_like(a)
    best = float("inf")
    for _ in range(5):
        started = time.process_time()
        np.dot(a, a, out)
        best = min(best, time.process_time() - started)
    return 2 * 1024 ** 3 / best / 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--world", default="credit")
    parser.add_argument("--budget", type=int, default=600)
    parser.add_argument("--repeat", type=int, default=300, help="timing blocks per shape (the best is kept)")
    args = parser.parse_args()
    from threadpoolctl import threadpool_limits

    job = record_job(args.world, args.budget)
    epochs = sum(fit.epochs for fit in job.fits)
    with threadpool_limits(limits=1, user_api="blas"):
        products = _compiled_products()
        per_shape: dict[tuple[int, int, int, bool], float] = {}
        for fit in job.fits:
            if fit.key not in per_shape:
                per_shape[fit.key] = epoch_products(products, fit, args.repeat)
        products_s = sum(fit.epochs * per_shape[fit.key] for fit in job.fits)
        flops = sum(fit.epochs * fit.flops() for fit in job.fits)
        peak = peak_gflops()
        adam_s = adam_seconds(job.weights, max(5, args.repeat // 30)) * epochs
    fit_s = sum(f.cpu_s for f in job.fits)
    rest_s = job.cpu_s - fit_s
    print(f"{args.world} budget {args.budget}: job {job.cpu_s:.1f} s CPU = fits {fit_s:.1f} s ({len(job.fits)} fits, "
          f"{epochs} epochs) + the rest {rest_s:.1f} s (of which the prompt encoder {job.encoder_cpu_s:.1f} s)")
    print(f"matrix products, called from compiled code (one BLAS thread, best of {args.repeat}): {products_s:.1f} s "
          f"({flops / products_s / 1e9:.0f} GFLOP/s; at this core's 1024^3 rate of {peak:.0f} GFLOP/s: "
          f"{flops / peak / 1e9:.1f} s)")
    print(f"Adam over {job.weights} weights, once per epoch: {adam_s:.1f} s")
    floor = products_s + adam_s + rest_s
    ideal = flops / peak / 1e9 + adam_s + rest_s
    print(f"floor before any elementwise work: {floor:.1f} s (products at their peak rate: {ideal:.1f} s); "
          f"target <= {TARGET_JOB_CPU_S:g} s; the elementwise work now: {fit_s - products_s - adam_s:.1f} s")


if __name__ == "__main__":
    main()
