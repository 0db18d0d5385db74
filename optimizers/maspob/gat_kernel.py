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
- float32 throughout, as the torch reference (float64 would halve the SIMD width and change
  nothing that the comparison with the reference could show).

Results equal the reference formulation within float32 rounding (the order of the sums
differs), proven in ``tests/optimizers/test_maspob.py``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from optimizers.maspob.fast_gat import (ADAM_BETAS, ADAM_EPS, F32, NEGATIVE_SLOPE, PLATEAU_EPS, PLATEAU_THRESHOLD,
                                        Batch, DropoutMasks, FastFit, Layout, TrainRule)
from optimizers.maspob.graph import TeamGraph

# Our flat order (Adam is elementwise, so any order trains the same): lin_l and lin_r weights
# adjacent, so (256, 32) is one view, and their biases likewise.
ORDER = ("encoder.0.weight", "encoder.0.bias", "encoder.3.weight", "encoder.3.bias",
         "convs.0.lin_l.weight", "convs.0.lin_r.weight", "convs.0.lin_l.bias", "convs.0.lin_r.bias",
         "convs.0.att", "convs.0.bias", "head.0.weight", "head.0.bias", "head.3.weight", "head.3.bias")
CHUNK_EPOCHS = 64  # epochs per compiled call (bounded further by CHUNK_FLOATS of dropout uniforms)
CHUNK_FLOATS = 1 << 21

_compiled: dict[str, Any] = {}
_blas: list[Any] = []


def _kernels() -> dict[str, Any]:
    """Compile (or load from numba's cache) the two kernels, once per process."""
    if not _compiled:
        _compiled.update(_build())
    return _compiled


@contextmanager
def one_blas_thread() -> Iterator[None]:
    """numba's ``np.dot`` calls scipy's BLAS, which threadpoolctl only sees once it is loaded:
    the controller is made after the kernels are."""
    _kernels()
    if not _blas:
        from threadpoolctl import ThreadpoolController

        _blas.append(ThreadpoolController())
    with _blas[0].limit(limits=1, user_api="blas"):
        yield


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
# The kernels (numba is imported here, on first use: only MASPOB needs it)


def _build() -> dict[str, Any]:  # noqa: C901 - one network's forward and backward, written out
    import scipy.linalg.cython_blas  # noqa: F401 - numba's np.dot calls scipy's BLAS
    from numba import njit

    @njit(cache=True, nogil=True, error_model="numpy")
    def views(flat: Any, dims: Any) -> Any:
        width, middle, hidden, wide, heads, head_hidden = dims[0], dims[1], dims[2], dims[3], dims[4], dims[5]
        sizes = (middle * width, middle, hidden * middle, hidden, 2 * wide * hidden, 2 * wide, wide, wide,
                 head_hidden * wide, head_hidden, head_hidden, 1)
        out = []
        start = 0
        for size in sizes:
            out.append(flat[start:start + size])
            start += size
        w1 = out[0].reshape((middle, width))
        w2 = out[2].reshape((hidden, middle))
        wlr = out[4].reshape((2 * wide, hidden))
        w3 = out[8].reshape((head_hidden, wide))
        return w1, out[1], w2, out[3], wlr, out[5], out[6], out[7], w3, out[9], out[10], out[11]

    # Loops index row slices (``x = X[j, a:b]; x[i]``) rather than ``X[j, a + i]``: numba
    # wraps negative indices, so only an index that is the loop's own counter lets LLVM see
    # consecutive addresses and vectorize (5x on these loops). Masks are read as
    # ``scale if u < keep else 0`` with no branch on whether dropout is on: without dropout the
    # caller passes keep = 1 and zeros, and x * 1 = x exactly.
    @njit(cache=True, nogil=True, error_model="numpy")
    def forward(flat, mu, keep, dims, distinct, inverse, src, dst, in_ptr, in_edges, self_only, slope_neg,
                A1, DR1, D1, DD1, HN, DHN, XT, DXT, OUTT, DOUTT, ALPHA, MA, DALPHA, TG, VEC, POOLT, DPOOLT, A3,
                DA3, ONES, P):
        w1, b1, w2, b2, wlr, blr, att, bg, w3, b3, w4, b4 = views(flat, dims)
        middle, hidden, wide, heads, head_hidden, k = dims[1], dims[2], dims[3], dims[4], dims[5], dims[6]
        channels = wide // heads
        g = P.shape[0]
        rows = k * g
        edges = src.shape[0]
        scale = np.float32(1.0) / keep
        zero = np.float32(0.0)
        one = np.float32(1.0)
        enc_end = rows * middle
        att_end = enc_end + edges * g * heads
        # Encoder, first layer, on the distinct embeddings only (no dropout before it).
        np.dot(distinct, w1.T, A1)
        for d in range(A1.shape[0]):
            a = A1[d]
            for j in range(middle):
                x = a[j] + b1[j]
                a[j] = x if x > zero else zero
        for r in range(rows):
            a = A1[inverse[r]]
            out = D1[r]
            m = mu[r * middle:(r + 1) * middle]
            for j in range(middle):
                out[j] = a[j] * (scale if m[j] < keep else zero)
        np.dot(D1, w2.T, HN)
        for r in range(rows):
            hn = HN[r]
            for j in range(hidden):
                x = hn[j] + b2[j]
                hn[j] = x if x > zero else zero
        # lin_l and lin_r in one product, feature-major (feature, node x graph) so that the
        # attention loops below run over the graphs, contiguous and independent (SIMD).
        lin = XT.shape[0]
        np.dot(wlr[:lin], HN.T, XT)
        for j in range(lin):
            xt = XT[j]
            bj = blr[j]
            for r in range(rows):
                xt[r] += bj
        for e in range(edges):
            for h in range(heads):
                ma = MA[e, h]
                al = ALPHA[e, h]
                for b in range(g):
                    ma[b] = scale if mu[enc_end + (e * g + b) * heads + h] < keep else zero
                    al[b] = one
        if not self_only:  # (a one-term softmax is exactly 1)
            for e in range(edges):
                s0 = src[e] * g
                t0 = dst[e] * g
                for h in range(heads):
                    al = ALPHA[e, h]
                    for b in range(g):
                        al[b] = zero
                    for c in range(channels):
                        j = h * channels + c
                        aj = att[j]
                        xl = XT[j, s0:s0 + g]
                        xr = XT[wide + j, t0:t0 + g]
                        for b in range(g):
                            z = xl[b] + xr[b]
                            al[b] += (z if z > zero else z * slope_neg) * aj
            for node in range(k):
                for h in range(heads):
                    for b in range(g):
                        VEC[b] = -np.inf
                    for i in range(in_ptr[node], in_ptr[node + 1]):
                        al = ALPHA[in_edges[i], h]
                        for b in range(g):
                            VEC[b] = max(VEC[b], al[b])
                    for i in range(in_ptr[node], in_ptr[node + 1]):
                        al = ALPHA[in_edges[i], h]
                        for b in range(g):
                            al[b] = np.exp(al[b] - VEC[b])
                    for b in range(g):
                        VEC[b] = zero
                    for i in range(in_ptr[node], in_ptr[node + 1]):
                        al = ALPHA[in_edges[i], h]
                        for b in range(g):
                            VEC[b] += al[b]
                    for i in range(in_ptr[node], in_ptr[node + 1]):
                        al = ALPHA[in_edges[i], h]
                        for b in range(g):
                            al[b] = al[b] / VEC[b]
        # Messages (attention dropout applied as read), bias, ReLU, mean over the nodes.
        for j in range(wide):
            o = OUTT[j]
            for r in range(rows):
                o[r] = zero
        for e in range(edges):
            s0 = src[e] * g
            t0 = dst[e] * g
            for h in range(heads):
                al = ALPHA[e, h]
                ma = MA[e, h]
                for b in range(g):
                    VEC[b] = al[b] * ma[b]
                for c in range(channels):
                    j = h * channels + c
                    o = OUTT[j, t0:t0 + g]
                    xl = XT[j, s0:s0 + g]
                    for b in range(g):
                        o[b] += VEC[b] * xl[b]
        inv_k = one / np.float32(k)
        for j in range(wide):
            pool = POOLT[j]
            bj = bg[j]
            for b in range(g):
                pool[b] = zero
            for node in range(k):
                o = OUTT[j, node * g:(node + 1) * g]
                for b in range(g):
                    x = o[b] + bj
                    o[b] = x
                    pool[b] += x if x > zero else zero
            for b in range(g):
                pool[b] = pool[b] * inv_k
        np.dot(POOLT.T, w3.T, A3)
        for b in range(g):
            a3 = A3[b]
            m = mu[att_end + b * head_hidden:att_end + (b + 1) * head_hidden]
            acc = b4[0]
            for j in range(head_hidden):
                x = a3[j] + b3[j]
                a3[j] = x
                acc += ((x if x > zero else zero) * (scale if m[j] < keep else zero)) * w4[j]
            P[b] = one / (one + np.exp(-acc))

    @njit(cache=True, nogil=True, error_model="numpy")
    def backward(flat, grad, y, mu, keep, dims, distinct, inverse, src, dst, in_ptr, in_edges, self_only,
                 slope_neg, A1, DR1, D1, DD1, HN, DHN, XT, DXT, OUTT, DOUTT, ALPHA, MA, DALPHA, TG, VEC, POOLT,
                 DPOOLT, A3, DA3, ONES, P):
        """Fill ``grad`` with d(mean squared error)/d(parameters); return the loss."""
        w1, b1, w2, b2, wlr, blr, att, bg, w3, b3, w4, b4 = views(flat, dims)
        gw1, gb1, gw2, gb2, gwlr, gblr, gatt, gbg, gw3, gb3, gw4, gb4 = views(grad, dims)
        middle, hidden, wide, heads, head_hidden, k = dims[1], dims[2], dims[3], dims[4], dims[5], dims[6]
        channels = wide // heads
        g = P.shape[0]
        rows = k * g
        edges = src.shape[0]
        scale = np.float32(1.0) / keep
        zero = np.float32(0.0)
        one = np.float32(1.0)
        enc_end = rows * middle
        att_end = enc_end + edges * g * heads
        loss = 0.0
        two_over_g = np.float32(2.0 / g)
        gb4[0] = zero
        for j in range(head_hidden):
            gw4[j] = zero
            gb3[j] = zero
        for b in range(g):
            diff = P[b] - y[b]
            loss += float(diff) * float(diff)
            da4 = two_over_g * diff * P[b] * (one - P[b])
            gb4[0] += da4
            a3 = A3[b]
            da3 = DA3[b]
            m = mu[att_end + b * head_hidden:att_end + (b + 1) * head_hidden]
            for j in range(head_hidden):
                x = a3[j]
                mask = (scale if m[j] < keep else zero) if x > zero else zero
                gw4[j] += da4 * (x * mask)
                da3[j] = da4 * w4[j] * mask
                gb3[j] += da3[j]
        np.dot(DA3.T, POOLT.T, gw3)
        np.dot(w3.T, DA3.T, DPOOLT)
        inv_k = one / np.float32(k)
        for j in range(wide):
            dp = DPOOLT[j]
            for node in range(k):
                o = OUTT[j, node * g:(node + 1) * g]
                do = DOUTT[j, node * g:(node + 1) * g]
                for b in range(g):
                    do[b] = dp[b] * inv_k if o[b] > zero else zero
        np.dot(DOUTT, ONES[:rows], gbg)
        lin = XT.shape[0]
        for j in range(lin):
            dx = DXT[j]
            for r in range(rows):
                dx[r] = zero
        for j in range(wide):
            tg = TG[j]
            for b in range(g):
                tg[b] = zero
        for e in range(edges):
            s0 = src[e] * g
            t0 = dst[e] * g
            for h in range(heads):
                al = ALPHA[e, h]
                ma = MA[e, h]
                dal = DALPHA[e, h]
                for b in range(g):
                    VEC[b] = al[b] * ma[b]
                    dal[b] = zero
                for c in range(channels):
                    j = h * channels + c
                    do = DOUTT[j, t0:t0 + g]
                    dxl = DXT[j, s0:s0 + g]
                    xl = XT[j, s0:s0 + g]
                    for b in range(g):
                        dxl[b] += do[b] * VEC[b]
                        dal[b] += do[b] * xl[b]
                for b in range(g):
                    dal[b] = dal[b] * ma[b]
        if not self_only:  # a one-term softmax has zero gradient: nothing reaches att or lin_r
            for node in range(k):
                for h in range(heads):
                    for b in range(g):
                        VEC[b] = zero
                    for i in range(in_ptr[node], in_ptr[node + 1]):
                        al = ALPHA[in_edges[i], h]
                        dal = DALPHA[in_edges[i], h]
                        for b in range(g):
                            VEC[b] += al[b] * dal[b]
                    for i in range(in_ptr[node], in_ptr[node + 1]):
                        al = ALPHA[in_edges[i], h]
                        dal = DALPHA[in_edges[i], h]
                        for b in range(g):
                            dal[b] = al[b] * dal[b] - al[b] * VEC[b]
            for e in range(edges):
                s0 = src[e] * g
                t0 = dst[e] * g
                for h in range(heads):
                    ds = DALPHA[e, h]
                    for c in range(channels):
                        j = h * channels + c
                        aj = att[j]
                        xl = XT[j, s0:s0 + g]
                        xr = XT[wide + j, t0:t0 + g]
                        dxl = DXT[j, s0:s0 + g]
                        dxr = DXT[wide + j, t0:t0 + g]
                        tg = TG[j]
                        for b in range(g):
                            z = xl[b] + xr[b]
                            slope = one if z > zero else slope_neg
                            tg[b] += ds[b] * (z * slope)
                            dz = ds[b] * aj * slope
                            dxl[b] += dz
                            dxr[b] += dz
        np.dot(TG, ONES[:g], gatt)
        np.dot(DXT, ONES[:rows], gblr[:lin])
        gblr[lin:] = zero
        np.dot(DXT, HN, gwlr[:lin])
        gwlr[lin:] = zero
        np.dot(DXT.T, wlr[:lin], DHN)
        for j in range(hidden):
            gb2[j] = zero
        for r in range(rows):
            dh = DHN[r]
            hn = HN[r]
            for j in range(hidden):
                x = dh[j] if hn[j] > zero else zero
                dh[j] = x
                gb2[j] += x
        np.dot(DHN.T, D1, gw2)
        np.dot(DHN, w2, DD1)
        for d in range(DR1.shape[0]):
            dr = DR1[d]
            for j in range(middle):
                dr[j] = zero
        for r in range(rows):
            dr = DR1[inverse[r]]
            dd = DD1[r]
            m = mu[r * middle:(r + 1) * middle]
            for j in range(middle):
                dr[j] += dd[j] * (scale if m[j] < keep else zero)
        for j in range(middle):
            gb1[j] = zero
        for d in range(DR1.shape[0]):
            dr = DR1[d]
            a = A1[d]
            for j in range(middle):
                x = dr[j] if a[j] > zero else zero
                dr[j] = x
                gb1[j] += x
        np.dot(DR1.T, distinct, gw1)
        # The loss as torch reports it, a float32 mean: early stopping and the plateau schedule
        # compare these values, and a float64 loss would break float32 ties differently.
        return float(np.float32(np.float32(loss) / np.float32(g)))

    @njit(cache=True, nogil=True, error_model="numpy")
    def train_chunk(flat, grad, m, v, best, state, losses, hyper, u, keep, dims, distinct, inverse, src,
                    dst, in_ptr, in_edges, self_only, y, A1, DR1, D1, DD1, HN, DHN, XT, DXT, OUTT, DOUTT, ALPHA,
                    MA, DALPHA, TG, VEC, POOLT, DPOOLT, A3, DA3, ONES, P):
        wd = np.float32(hyper[0])
        patience = hyper[1]
        min_delta = hyper[2]
        factor, plateau_patience, min_lr = hyper[3], hyper[4], hyper[5]
        beta1, beta2 = hyper[6], hyper[7]
        eps = np.float32(hyper[8])
        threshold, plateau_eps = hyper[9], hyper[10]
        slope_neg = np.float32(hyper[11])
        max_epochs = hyper[12]
        one_minus_b1 = np.float32(1.0 - beta1)
        b2 = np.float32(beta2)
        one_minus_b2 = np.float32(1.0 - beta2)
        zero = np.float32(0.0)
        tiny_g = np.float32(2.0 ** -50)
        safe_v = np.float32(2.0 ** -85)
        n = flat.shape[0]
        for row in range(u.shape[0]):
            if state[5] >= max_epochs or state[6] != 0:
                break
            forward(flat, u[row], keep, dims, distinct, inverse, src, dst, in_ptr, in_edges, self_only,
                    slope_neg, A1, DR1, D1, DD1, HN, DHN, XT, DXT, OUTT, DOUTT, ALPHA, MA, DALPHA, TG, VEC,
                    POOLT, DPOOLT, A3, DA3, ONES, P)
            loss = backward(flat, grad, y, u[row], keep, dims, distinct, inverse, src, dst, in_ptr, in_edges,
                            self_only, slope_neg, A1, DR1, D1, DD1, HN, DHN, XT, DXT, OUTT, DOUTT, ALPHA, MA,
                            DALPHA, TG, VEC, POOLT, DPOOLT, A3, DA3, ONES, P)
            epoch = state[5] + 1.0
            state[5] = epoch
            losses[int(epoch) - 1] = loss
            # Adam, torch's formula: L2 weight decay on the gradient, lerp for the first moment.
            lr = state[0]
            step = np.float32(lr / (1.0 - beta1 ** epoch))
            root2 = np.float32(math.sqrt(1.0 - beta2 ** epoch))
            for i in range(n):
                gi = grad[i] + wd * flat[i]
                mi = m[i] + one_minus_b1 * (gi - m[i])
                vb = v[i] * b2
                # Dead units leave many gradients at ~1e-20, whose square is subnormal: every
                # vector holding one took a microcode assist (~10x slower Adam). Where |gi| <
                # 2^-50 and vb >= 2^-85, (1 - beta2) gi^2 < 2^-109 is below half an ulp of vb, so
                # vb + it rounds to vb: squaring 0 instead gives the same bits without the
                # subnormal. Other cases (vb tiny, NaN) compute as written.
                gs = zero if (gi < tiny_g and gi > -tiny_g and vb >= safe_v) else gi
                vi = vb + one_minus_b2 * (gs * gs)
                m[i] = mi
                v[i] = vi
                flat[i] -= step * (mi / (np.sqrt(vi) / root2 + eps))
            # ReduceLROnPlateau on the training loss (relative threshold, no cooldown).
            if loss < state[1] * (1.0 - threshold):
                state[1] = loss
                state[2] = 0.0
            else:
                state[2] += 1.0
            if state[2] > plateau_patience:
                lowered = max(lr * factor, min_lr)
                if lr - lowered > plateau_eps:
                    state[0] = lowered
                state[2] = 0.0
            # Early stopping; the weights kept are those after the best epoch's step.
            if loss < state[3] - min_delta:
                state[3] = loss
                state[4] = 0.0
                best[:] = flat
                state[7] = 1.0
            else:
                state[4] += 1.0
                if state[4] >= patience:
                    state[6] = 1.0

    @njit(cache=True, nogil=True, error_model="numpy")
    def predict_kernel(flat, u, keep, dims, distinct, inverse, src, dst, in_ptr, in_edges, self_only,
                       slope_neg, A1, DR1, D1, DD1, HN, DHN, XT, DXT, OUTT, DOUTT, ALPHA, MA, DALPHA, TG, VEC,
                       POOLT, DPOOLT, A3, DA3, ONES, P):
        forward(flat, u, keep, dims, distinct, inverse, src, dst, in_ptr, in_edges, self_only, slope_neg,
                A1, DR1, D1, DD1, HN, DHN, XT, DXT, OUTT, DOUTT, ALPHA, MA, DALPHA, TG, VEC, POOLT, DPOOLT, A3,
                DA3, ONES, P)

    return {"train": train_chunk, "predict": predict_kernel}
