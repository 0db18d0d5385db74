"""The WorkflowGATv2 surrogate's training as one compiled loop (numba): MASPOB's default trainer.

Same network, same training rule and same dropout-mask stream as the straightforward
formulation (``autograd_training``) and the numpy trainer (``fast_gat``); what changes is only
where the time goes. ``fast_gat`` still paid ~100 numpy calls, ~20 temporaries and a 14-pass
Adam per epoch, and most of its time went to elementwise passes over the (edges, graphs, 128)
attention arrays, not to the matrix products: ~250 us per epoch before the first graph, 4-7 us
per graph, 27-57 s of CPU per budget-600 gym job (116 fits x ~600 epochs). Here:

- **Whole chunks of epochs in one compiled call.** Forward, backward, Adam, the plateau
  schedule, early stopping and "keep the best weights" run inside one ``numba.njit`` function
  over up to ``CHUNK_EPOCHS`` epochs; Python is entered once per chunk, not ~150 times per
  epoch. The chunk's dropout uniforms are drawn by one ``Generator.random`` call, which yields
  exactly the numbers the per-epoch draws of ``fast_gat.DropoutMasks`` would (numpy's stream
  is the same however it is split; a fit's generator serves nothing else, so what a stopped fit
  drew past its last epoch is never used).
- **Fused elementwise work.** The attention (GATv2 scores, per-destination softmax, dropout,
  messages, bias, ReLU, mean pooling) and its backward are loops over each graph's few edges
  with no temporaries; masks are applied where they are read (``u < keep``), never stored.
- **Matrix products stay in BLAS** (numba's ``np.dot`` calls it, one thread): the encoder's
  first layer on the distinct embeddings only (as ``fast_gat``), the second layer, ``lin_l``
  and ``lin_r`` as one ``(rows, 32) x (32, 256)`` product (their weights sit next to each other
  in the flat vector), the head.
- **One-node softmaxes are skipped exactly.** When every node's only incoming edge is its self
  loop (single, independent, decentralized teams) the attention weight is exp(0)/exp(0) = 1
  whatever ``lin_r`` and ``att`` are, so their forward pass is skipped and their gradient is
  exactly zero (Adam still applies weight decay to them, as torch does).
- The kernels themselves are in ``gat_kernels_numba`` (module-level, so numba's on-disk cache
  serves a new process; see there).
- float32 throughout, as the torch reference (float64 would halve the SIMD width and change
  nothing that the comparison with the reference could show).

Results equal the reference formulation within float32 rounding (the order of the sums
differs), proven in ``tests/optimizers/test_maspob.py``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from optimizers.maspob.fast_gat import (ADAM_BETAS, ADAM_EPS, F32, NEGATIVE_SLOPE, PLATEAU_EPS, PLATEAU_THRESHOLD,
                                        Batch, DropoutMasks, FastFit, Layout, TrainRule)
from optimizers.maspob.graph import TeamGraph
from optimizers.maspob.threads import one_blas_thread

# Our flat order (Adam is elementwise, so any order trains the same): lin_l and lin_r weights
# adjacent, so (256, 32) is one view, and their biases likewise.
ORDER = ("encoder.0.weight", "encoder.0.bias", "encoder.3.weight", "encoder.3.bias",
         "convs.0.lin_l.weight", "convs.0.lin_r.weight", "convs.0.lin_l.bias", "convs.0.lin_r.bias",
         "convs.0.att", "convs.0.bias", "head.0.weight", "head.0.bias", "head.3.weight", "head.3.bias")
CHUNK_EPOCHS = 64  # epochs per compiled call (bounded further by CHUNK_FLOATS of dropout uniforms)
CHUNK_FLOATS = 1 << 21

_compiled: dict[str, Any] = {}


def _kernels() -> dict[str, Any]:
    """Compile (or load from numba's cache) the two kernels, once per process."""
    if not _compiled:
        _compiled.update(_build())
    return _compiled


class KernelGAT:
    """The one-layer WorkflowGATv2 as a flat float32 vector (``ORDER``) plus the team graph's
    edge structure, trained and evaluated by the compiled kernels."""

    def __init__(self, state: dict[str, np.ndarray], graph: TeamGraph, heads: int) -> None:
        self.layout = Layout.of(graph)
        self.heads = int(heads)
        arrays = [np.asarray(state[name], dtype=F32) for name in ORDER]
        self.shapes = {name: a.shape for name, a in zip(ORDER, arrays, strict=True)}
        self.flat = np.ascontiguousarray(np.concatenate([a.ravel() for a in arrays]), dtype=F32)
        self.middle, self.width = self.shapes["encoder.0.weight"]
        self.hidden = self.shapes["encoder.3.weight"][0]
        self.wide = self.shapes["convs.0.lin_l.weight"][0]  # heads x channels
        self.head_hidden = self.shapes["head.0.weight"][0]
        lay = self.layout
        order = np.argsort(lay.dst, kind="stable")
        self.in_edges = np.ascontiguousarray(order, dtype=np.int64)
        self.in_ptr = np.concatenate([[0], np.cumsum(np.bincount(lay.dst, minlength=lay.nodes))]).astype(np.int64)
        self.src = np.ascontiguousarray(lay.src, dtype=np.int64)
        self.dst = np.ascontiguousarray(lay.dst, dtype=np.int64)
        # Every node's only incoming edge is its self loop: every attention weight is exactly 1.
        self.self_only = bool(np.all(np.diff(self.in_ptr) == 1))

    def state(self) -> dict[str, np.ndarray]:
        out, start = {}, 0
        for name in ORDER:
            size = math.prod(self.shapes[name])
            out[name] = self.flat[start:start + size].reshape(self.shapes[name]).copy()
            start += size
        return out

    def _dims(self) -> np.ndarray:
        return np.array([self.width, self.middle, self.hidden, self.wide, self.heads, self.head_hidden,
                         self.layout.nodes], dtype=np.int64)

    def workspace(self, batch: Batch) -> tuple[np.ndarray, ...]:
        g, k, e = batch.graphs, self.layout.nodes, self.layout.edges
        rows, lin = k * g, self.wide * (1 if self.self_only else 2)
        distinct = batch.distinct.shape[0]

        def z(*shape: int) -> np.ndarray:
            return np.zeros(shape, dtype=F32)

        # A1 DR1 D1 DD1 HN DHN XT DXT OUTT DOUTT ALPHA MA DALPHA TG VEC POOLT DPOOLT A3 DA3 ONES P
        return (z(distinct, self.middle), z(distinct, self.middle), z(rows, self.middle), z(rows, self.middle),
                z(rows, self.hidden), z(rows, self.hidden), z(lin, rows), z(lin, rows), z(self.wide, rows),
                z(self.wide, rows), z(e, self.heads, g), z(e, self.heads, g), z(e, self.heads, g), z(self.wide, g),
                z(g), z(self.wide, g), z(self.wide, g), z(g, self.head_hidden), z(g, self.head_hidden),
                np.ones(rows, dtype=F32), z(g))


def mask_floats(model: KernelGAT, graphs: int) -> int:
    """Dropout uniforms per epoch, in ``DropoutMasks.draw``'s order: encoder, attention, head."""
    lay = model.layout
    return lay.nodes * graphs * model.middle + lay.edges * graphs * model.heads + graphs * model.head_hidden


def train(model: KernelGAT, nodes: np.ndarray, targets: np.ndarray, rule: TrainRule,
          masks: DropoutMasks) -> FastFit:
    """Full-batch Adam on the MSE with the plateau schedule and early stopping; the model ends
    with the best epoch's weights (upstream's ``train_with_early_stopping``)."""
    kernels = _kernels()
    batch = Batch.of(nodes)
    y = np.ascontiguousarray(targets, dtype=F32)
    work = model.workspace(batch)
    n = model.flat.size
    grad, m, v, best = (np.zeros(n, dtype=F32) for _ in range(4))
    losses = np.zeros(rule.max_epochs, dtype=np.float64)
    # lr, plateau best, plateau bad epochs, best loss, epochs since best, epochs done, stopped, best saved
    state = np.array([rule.lr, math.inf, 0, math.inf, 0, 0, 0, 0], dtype=np.float64)
    hyper = np.array([rule.weight_decay, rule.patience, rule.min_delta, rule.plateau_factor, rule.plateau_patience,
                      rule.min_lr, ADAM_BETAS[0], ADAM_BETAS[1], ADAM_EPS, PLATEAU_THRESHOLD, PLATEAU_EPS,
                      NEGATIVE_SLOPE, rule.max_epochs], dtype=np.float64)
    per_epoch = mask_floats(model, batch.graphs)
    dropout = masks.p > 0
    keep = F32(1.0 - masks.p) if dropout else F32(1.0)
    chunk = max(1, min(CHUNK_EPOCHS, CHUNK_FLOATS // max(1, per_epoch)))
    inverse = np.ascontiguousarray(batch.inverse, dtype=np.int64)
    with one_blas_thread():
        while state[5] < rule.max_epochs and not state[6]:
            epochs = int(min(chunk, rule.max_epochs - state[5]))
            if dropout:
                u = masks.rng.random(epochs * per_epoch, dtype=F32).reshape(epochs, per_epoch)
            else:  # keep = 1: every mask is exactly 1
                u = np.zeros((epochs, per_epoch), dtype=F32)
            kernels["train"](model.flat, grad, m, v, best, state, losses, hyper, u, keep,
                             model._dims(), batch.distinct, inverse, model.src, model.dst, model.in_ptr,
                             model.in_edges, model.self_only, y, *work)
    epochs = int(state[5])
    if state[7]:
        model.flat[:] = best
    return FastFit(epochs, float(state[3]), tuple(float(x) for x in losses[:epochs]))


def predict(model: KernelGAT, nodes: np.ndarray) -> np.ndarray:
    kernels = _kernels()
    batch = Batch.of(nodes)
    work = model.workspace(batch)
    with one_blas_thread():
        # No dropout at prediction: keep = 1 and zeros make every mask exactly 1.
        kernels["predict"](model.flat, np.zeros(mask_floats(model, batch.graphs), dtype=F32), F32(1.0), model._dims(),
                           batch.distinct, np.ascontiguousarray(batch.inverse, dtype=np.int64), model.src, model.dst,
                           model.in_ptr, model.in_edges, model.self_only, F32(NEGATIVE_SLOPE), *work)
    return work[-1].astype(np.float64)


# ------------------------------------------------------------------------------------------------
# The kernels live in ``gat_kernels_numba`` (numba is imported there, on first use: only MASPOB needs it)


def _build() -> dict[str, Any]:
    from optimizers.maspob.gat_kernels_numba import compiled

    kernels = compiled()
    return {"train": kernels["train_chunk"], "predict": kernels["predict_kernel"]}
