"""The WorkflowGATv2 surrogate's training, computed fast: hand-written gradients over one batch.

Same network and same training rule as the straightforward formulation
(``optimizers.maspob.autograd_training``: the torch-geometric network trained by autograd, one
graph batch per epoch), computed with far less work per epoch, which is what made MASPOB's
default 800-epoch refits cost CPU-hours in the gym:

- **One disjoint-union batch, laid out node-major.** Every graph of a fit has the same team
  graph, so node ``i`` of every graph sits in one block of rows, ``(k, graphs, ...)``; an edge's
  source and destination blocks are gathered with one index per edge of the team graph, and the
  sum over a node's incoming edges is one small matrix product (``dst_incidence``). No
  per-graph loop, no scatter.
- **The wide first layer runs on distinct nodes only.** The encoder's first ``Linear(384, 48)``
  and its ReLU act on each node by itself, before any dropout, and a fit's nodes repeat (a pool
  has ``num_prompts`` variants per role): it runs on the distinct embeddings (at most
  ``num_prompts x roles`` rows, however many pulls) and is gathered afterwards; its gradient is
  summed back per distinct row. The same numbers, a fraction of the multiply-adds.
- **No autograd, no per-epoch Python objects.** Forward and backward are about a hundred numpy
  calls on preallocated float32 arrays; the parameters are views of one flat vector, so Adam
  (torch's formula: L2 weight decay added to the gradient, bias corrections) and "keep the best
  weights" are a handful of vector operations; the plateau schedule and early stopping are
  plain arithmetic.
- **One BLAS thread**: the matrices are small; a second thread only spins.

Dropout masks (encoder, attention, head) come from a numpy ``Generator`` seeded by the fit's
seed (``DropoutMasks``): the same distribution as torch's dropout, a stream that both
formulations can be handed, which is how ``tests/optimizers/test_maspob.py`` proves that the two
give the same loss trajectory and predictions. Initial weights are drawn by the torch network
itself (``network.network``), so the initialization is exactly the reference's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from optimizers.maspob.threads import one_blas_thread  # small matrices: a second BLAS thread only spins
from optimizers.maspob.graph import TeamGraph

F32 = np.float32
NEGATIVE_SLOPE = 0.2  # GATv2's leaky ReLU
ADAM_BETAS = (0.9, 0.999)
ADAM_EPS = 1e-8
PLATEAU_THRESHOLD = 1e-4  # ReduceLROnPlateau's defaults: relative threshold, no cooldown, eps 1e-8
PLATEAU_EPS = 1e-8

# torch parameter names, in the order of the flat vector.
PARAMETERS = ("encoder.0.weight", "encoder.0.bias", "encoder.3.weight", "encoder.3.bias",
              "convs.0.lin_l.weight", "convs.0.lin_l.bias", "convs.0.lin_r.weight", "convs.0.lin_r.bias",
              "convs.0.att", "convs.0.bias", "head.0.weight", "head.0.bias", "head.3.weight", "head.3.bias")


@dataclass(frozen=True, slots=True)
class Layout:
    """Per-team-graph edge lists with self loops (GATv2 adds them), in a fixed order: the team
    graph's edges, then one self loop per node."""

    nodes: int
    src: np.ndarray  # (edges,) source node of each edge
    dst: np.ndarray  # (edges,) destination node
    dst_incidence: np.ndarray  # (nodes, edges): 1 where the edge ends at the node
    src_incidence: np.ndarray  # (nodes, edges): 1 where the edge starts at the node
    incoming: tuple[np.ndarray, ...]  # per node, the edges that end there

    @property
    def edges(self) -> int:
        return len(self.src)

    @classmethod
    def of(cls, graph: TeamGraph) -> Layout:
        k = graph.nodes
        pairs = [(a, b) for a, b in graph.edges if a != b] + [(i, i) for i in range(k)]
        src = np.array([a for a, _ in pairs], dtype=np.intp)
        dst = np.array([b for _, b in pairs], dtype=np.intp)
        edges = np.arange(len(pairs))
        dst_incidence = np.zeros((k, len(pairs)), dtype=F32)
        dst_incidence[dst, edges] = 1.0
        src_incidence = np.zeros((k, len(pairs)), dtype=F32)
        src_incidence[src, edges] = 1.0
        return cls(k, src, dst, dst_incidence, src_incidence, tuple(np.flatnonzero(dst == i) for i in range(k)))


class DropoutMasks:
    """Per epoch, the three dropout masks already scaled by 1 / keep (inverted dropout, as torch):
    encoder ``(nodes, graphs, middle)``, attention ``(edges, graphs, heads)``, head ``(graphs, hidden)``."""

    def __init__(self, seed: int, p: float) -> None:
        self.rng = np.random.default_rng(seed)
        self.p = float(p)

    def draw(self, shapes: tuple[tuple[int, ...], ...]) -> tuple[np.ndarray, ...]:
        sizes = [math.prod(s) for s in shapes]
        if self.p <= 0:
            return tuple(np.ones(s, dtype=F32) for s in shapes)
        keep = F32(1.0 - self.p)
        scaled = (self.rng.random(sum(sizes), dtype=F32) < keep).astype(F32)
        scaled *= F32(1.0) / keep
        out, start = [], 0
        for shape, size in zip(shapes, sizes, strict=True):
            out.append(scaled[start:start + size].reshape(shape))
            start += size
        return tuple(out)


class Plateau:
    """torch's ReduceLROnPlateau (mode min, relative threshold 1e-4, no cooldown) as arithmetic."""

    def __init__(self, lr: float, *, factor: float, patience: int, min_lr: float) -> None:
        self.lr, self.factor, self.patience, self.min_lr = lr, factor, patience, min_lr
        self.best, self.bad = math.inf, 0

    def step(self, loss: float) -> float:
        if loss < self.best * (1.0 - PLATEAU_THRESHOLD):
            self.best, self.bad = loss, 0
        else:
            self.bad += 1
        if self.bad > self.patience:
            lowered = max(self.lr * self.factor, self.min_lr)
            if self.lr - lowered > PLATEAU_EPS:
                self.lr = lowered
            self.bad = 0
        return self.lr


class FastWorkflowGAT:
    """The one-layer WorkflowGATv2 (encoder, GATv2 with concatenated heads, mean, head) as flat
    float32 parameters with a hand-written forward and backward pass."""

    def __init__(self, state: dict[str, np.ndarray], graph: TeamGraph, heads: int) -> None:
        self.layout = Layout.of(graph)
        self.heads = heads
        arrays = [np.asarray(state[name], dtype=F32) for name in PARAMETERS]
        self.shapes = [a.shape for a in arrays]
        self.flat = np.concatenate([a.ravel() for a in arrays]).astype(F32)
        self.params = self._views(self.flat)
        self.middle, self.width = self.shapes[0]
        self.hidden = self.shapes[2][0]
        self.channels = self.shapes[4][0] // heads  # per head
        self.blocks = np.kron(np.eye(heads, dtype=F32), np.ones((self.channels, 1), dtype=F32))

    def _views(self, flat: np.ndarray) -> list[np.ndarray]:
        views, start = [], 0
        for shape in self.shapes:
            size = math.prod(shape)
            views.append(flat[start:start + size].reshape(shape))
            start += size
        return views

    def state(self) -> dict[str, np.ndarray]:
        return {name: view.copy() for name, view in zip(PARAMETERS, self.params, strict=True)}

    def _attention_matrix(self, att: np.ndarray) -> np.ndarray:
        """(heads x channels, heads) block diagonal: one matrix product scores every head."""
        return att.reshape(-1, 1) * self.blocks

    # ------------------------------------------------------------------ the pass

    def forward(self, batch: Batch, masks: tuple[np.ndarray, ...] | None) -> tuple[np.ndarray, dict[str, Any]]:
        (w1, b1, w2, b2, wl, bl, wr, br, att, bg, w3, b3, w4, b4) = self.params
        lay, g, k = self.layout, batch.graphs, self.layout.nodes
        h, c = self.heads, self.channels
        hc = h * c
        a1 = batch.distinct @ w1.T
        a1 += b1
        r1 = np.maximum(a1, 0, out=a1)  # a1 is not needed again: relu' is read from r1 > 0
        g1 = r1[batch.inverse]  # (k * graphs, middle), node-major rows
        d1 = g1 * masks[0].reshape(g1.shape) if masks is not None else g1
        a2 = d1 @ w2.T
        a2 += b2
        hn = np.maximum(a2, 0)
        xl = (hn @ wl.T + bl).reshape(k, g, hc)
        xr = (hn @ wr.T + br).reshape(k, g, hc)
        xl_src = xl[lay.src]  # (edges, graphs, hc)
        z = xl_src + xr[lay.dst]
        slope = np.where(z > 0, F32(1.0), F32(NEGATIVE_SLOPE))
        lz = z * slope
        amat = self._attention_matrix(att)
        scores = (lz.reshape(-1, hc) @ amat).reshape(lay.edges, g, h)
        top = np.empty((k, g, h), dtype=F32)
        for node, incoming in enumerate(lay.incoming):
            top[node] = scores[incoming].max(axis=0)
        ex = np.exp(scores - top[lay.dst])
        total = (lay.dst_incidence @ ex.reshape(lay.edges, -1)).reshape(k, g, h)
        alpha = ex / total[lay.dst]
        alpha_d = alpha * masks[1] if masks is not None else alpha
        msg = xl_src.reshape(lay.edges, g, h, c) * alpha_d[..., None]
        out = (lay.dst_incidence @ msg.reshape(lay.edges, -1)).reshape(k, g, hc)
        out += bg
        hg = np.maximum(out, 0)
        pooled = hg.mean(axis=0)  # (graphs, hc)
        a3 = pooled @ w3.T
        a3 += b3
        r3 = np.maximum(a3, 0)
        d3 = r3 * masks[2] if masks is not None else r3
        a4 = d3 @ w4[0] + b4[0]
        with np.errstate(over="ignore"):  # exp overflow -> inf -> p = 0, the sigmoid's limit
            p = 1.0 / (1.0 + np.exp(-a4))
        cache = {"r1": r1, "d1": d1, "a2": a2, "hn": hn, "xl_src": xl_src, "slope": slope, "lz": lz,
                 "amat": amat, "alpha": alpha, "alpha_d": alpha_d, "out": out, "pooled": pooled, "a3": a3,
                 "d3": d3, "p": p}
        return p.astype(F32), cache

    def backward(self, batch: Batch, masks: tuple[np.ndarray, ...], cache: dict[str, Any], y: np.ndarray,
                 grad: np.ndarray) -> float:
        """Fill ``grad`` (flat, the parameters' layout) with d(MSE)/d(parameters); return the loss."""
        (w1, b1, w2, b2, wl, bl, wr, br, att, bg, w3, b3, w4, b4) = self.params
        (gw1, gb1, gw2, gb2, gwl, gbl, gwr, gbr, gatt, gbg, gw3, gb3, gw4, gb4) = self._views(grad)
        lay, g, k = self.layout, batch.graphs, self.layout.nodes
        h, c = self.heads, self.channels
        hc = h * c
        p = cache["p"]
        diff = p - y
        loss = float(np.dot(diff, diff)) / g
        da4 = (F32(2.0 / g) * diff) * p * (1 - p)  # (graphs,)
        np.dot(da4, cache["d3"], out=gw4[0])
        gb4[0] = da4.sum()
        da3 = np.multiply.outer(da4, w4[0]) * masks[2]
        da3 *= cache["a3"] > 0
        np.dot(da3.T, cache["pooled"], out=gw3)
        np.sum(da3, axis=0, out=gb3)
        dpooled = da3 @ w3  # (graphs, hc)
        dout = (dpooled * F32(1.0 / k))[None] * (cache["out"] > 0)  # (k, graphs, hc)
        np.sum(dout, axis=(0, 1), out=gbg)
        dmsg = dout[lay.dst].reshape(lay.edges, g, h, c)
        alpha_d = cache["alpha_d"]
        xl_src = cache["xl_src"].reshape(lay.edges, g, h, c)
        dxl_src = dmsg * alpha_d[..., None]
        dalpha = np.einsum("eghc,eghc->egh", dmsg, xl_src) * masks[1]
        alpha = cache["alpha"]
        weighted = alpha * dalpha
        group = (lay.dst_incidence @ weighted.reshape(lay.edges, -1)).reshape(k, g, h)
        dscores = weighted - alpha * group[lay.dst]  # softmax backward per destination
        dscores2 = dscores.reshape(-1, h)
        damat = cache["lz"].reshape(-1, hc).T @ dscores2  # (hc, h); att's gradient is its block diagonal
        gatt.reshape(h, c)[:] = damat.reshape(h, c, h)[np.arange(h), :, np.arange(h)]
        dz = (dscores2 @ cache["amat"].T).reshape(lay.edges, g, hc)
        dz *= cache["slope"]
        dz_src = dz + dxl_src.reshape(lay.edges, g, hc)
        dxl = (lay.src_incidence @ dz_src.reshape(lay.edges, -1)).reshape(k * g, hc)
        dxr = (lay.dst_incidence @ dz.reshape(lay.edges, -1)).reshape(k * g, hc)
        hn = cache["hn"]
        np.dot(dxl.T, hn, out=gwl)
        np.sum(dxl, axis=0, out=gbl)
        np.dot(dxr.T, hn, out=gwr)
        np.sum(dxr, axis=0, out=gbr)
        dhn = dxl @ wl
        dhn += dxr @ wr
        dhn *= cache["a2"] > 0
        np.dot(dhn.T, cache["d1"], out=gw2)
        np.sum(dhn, axis=0, out=gb2)
        dg1 = dhn @ w2
        dg1 *= masks[0].reshape(dg1.shape)
        dr1 = np.add.reduceat(dg1[batch.order], batch.starts, axis=0)  # back onto the distinct rows
        dr1 *= cache["r1"] > 0
        np.dot(dr1.T, batch.distinct, out=gw1)
        np.sum(dr1, axis=0, out=gb1)
        return loss


@dataclass(frozen=True, slots=True)
class Batch:
    """One fit's graphs as the fast pass reads them: the distinct node embeddings and, per
    node-major row (node i of graph b at row i x graphs + b), which distinct row it is."""

    graphs: int
    distinct: np.ndarray  # (distinct, width) float32
    inverse: np.ndarray  # (k * graphs,)
    order: np.ndarray  # rows sorted by distinct row (for summing gradients back)
    starts: np.ndarray  # first sorted row of each distinct row

    @classmethod
    def of(cls, nodes: np.ndarray) -> Batch:
        graphs, k, width = nodes.shape
        rows = np.ascontiguousarray(np.asarray(nodes, dtype=F32).transpose(1, 0, 2).reshape(k * graphs, width))
        # Distinct rows in order of first appearance (a dict of the rows' bytes: no sort of 384-d rows).
        number: dict[bytes, int] = {}
        inverse = np.array([number.setdefault(row.tobytes(), len(number)) for row in rows], dtype=np.intp)
        distinct = rows[np.unique(inverse, return_index=True)[1]]
        order = np.argsort(inverse, kind="stable")
        starts = np.searchsorted(inverse[order], np.arange(len(distinct)))
        return cls(graphs, np.ascontiguousarray(distinct), inverse, order, starts)


@dataclass(frozen=True, slots=True)
class TrainRule:
    lr: float
    weight_decay: float
    max_epochs: int
    patience: int
    min_delta: float
    plateau_factor: float
    plateau_patience: int
    min_lr: float
    dropout: float


@dataclass(frozen=True, slots=True)
class FastFit:
    epochs: int
    best_loss: float
    losses: tuple[float, ...]  # the training loss of every epoch (before that epoch's step)


def train(model: FastWorkflowGAT, nodes: np.ndarray, targets: np.ndarray, rule: TrainRule,
          masks: DropoutMasks) -> FastFit:
    """Full-batch Adam on the MSE with the plateau schedule and early stopping; the model ends
    with the best epoch's weights (upstream's ``train_with_early_stopping``)."""
    batch = Batch.of(nodes)
    y = np.asarray(targets, dtype=F32)
    k, g = model.layout.nodes, batch.graphs
    shapes = ((k, g, model.middle), (model.layout.edges, g, model.heads), (g, model.hidden))
    grad = np.zeros_like(model.flat)
    m = np.zeros_like(model.flat)
    v = np.zeros_like(model.flat)
    tmp = np.empty_like(model.flat)
    b1, b2 = ADAM_BETAS
    plateau = Plateau(rule.lr, factor=rule.plateau_factor, patience=rule.plateau_patience, min_lr=rule.min_lr)
    lr = rule.lr
    best_loss, best, since_best, epoch = math.inf, None, 0, 0
    losses: list[float] = []
    with one_blas_thread():
        for epoch in range(1, rule.max_epochs + 1):
            drawn = masks.draw(shapes)
            _, cache = model.forward(batch, drawn)
            loss = model.backward(batch, drawn, cache, y, grad)
            losses.append(loss)
            # Adam, torch's formula (weight decay as L2 on the gradient).
            if rule.weight_decay:
                np.multiply(model.flat, F32(rule.weight_decay), out=tmp)
                grad += tmp
            m *= F32(b1)
            np.multiply(grad, F32(1 - b1), out=tmp)
            m += tmp
            v *= F32(b2)
            np.multiply(grad, grad, out=tmp)
            tmp *= F32(1 - b2)
            v += tmp
            correction1 = 1 - b1 ** epoch
            correction2 = math.sqrt(1 - b2 ** epoch)
            np.sqrt(v, out=tmp)
            tmp *= F32(1 / correction2)
            tmp += F32(ADAM_EPS)
            np.divide(m, tmp, out=tmp)
            tmp *= F32(lr / correction1)
            model.flat -= tmp
            lr = plateau.step(loss)
            if loss < best_loss - rule.min_delta:
                best_loss, since_best = loss, 0
                # As the reference loop: the weights kept are those after this epoch's step.
                best = model.flat.copy()
            else:
                since_best += 1
                if since_best >= rule.patience:
                    break
    if best is not None:
        model.flat[:] = best
    return FastFit(epoch, best_loss, tuple(losses))


def predict(model: FastWorkflowGAT, nodes: np.ndarray) -> np.ndarray:
    with one_blas_thread():
        p, _ = model.forward(Batch.of(nodes), None)
    return p.astype(np.float64)
