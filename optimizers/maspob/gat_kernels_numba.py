"""The kernels of ``gat_kernel`` (numba): forward, backward, one chunk of training epochs, prediction.

Written as plain module-level functions; ``compiled()`` (called by ``gat_kernel._kernels`` on
first use, so that numba stays a MASPOB-only import) replaces each by its ``numba.njit``
dispatcher in this module's namespace, where the kernels find one another when they compile.

Module-level, not closures: numba keys a cached closure by its closure cells, and a cell
holding another compiled function pickles with that dispatcher's per-process id, so closures
missed the on-disk cache in every new process and recompiled (~10 s of CPU per process, more
than half of what a budget-600 gym job's fits cost). Here ``cache=True`` loads them; the cache
is keyed on this file, so editing any kernel recompiles all of them.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

KERNELS = ("views", "forward", "backward", "adam_step", "train_chunk", "predict_kernel")


def compiled() -> dict[str, Any]:
    """The kernels as numba dispatchers (compiled, or loaded from numba's cache, on first call)."""
    namespace = globals()
    if not hasattr(namespace["train_chunk"], "py_func"):
        import scipy.linalg.cython_blas  # noqa: F401 - numba's np.dot calls scipy's BLAS
        from numba import njit

        for name in KERNELS:
            namespace[name] = njit(cache=True, nogil=True, error_model="numpy")(namespace[name])
    return {name: namespace[name] for name in KERNELS}


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


def adam_step(flat, grad, m, v, wd, one_minus_b1, b2, one_minus_b2, eps, step, root2):
    """One Adam step over the flat weights, torch's formula: L2 weight decay added to the
    gradient, lerp for the first moment, ``step`` and ``root2`` the bias-corrected rate and
    sqrt(1 - beta2^t)."""
    zero = np.float32(0.0)
    tiny_g = np.float32(2.0 ** -50)
    safe_v = np.float32(2.0 ** -85)
    for i in range(flat.shape[0]):
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
        adam_step(flat, grad, m, v, wd, one_minus_b1, b2, one_minus_b2, eps, step, root2)
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


def predict_kernel(flat, u, keep, dims, distinct, inverse, src, dst, in_ptr, in_edges, self_only,
                   slope_neg, A1, DR1, D1, DD1, HN, DHN, XT, DXT, OUTT, DOUTT, ALPHA, MA, DALPHA, TG, VEC,
                   POOLT, DPOOLT, A3, DA3, ONES, P):
    forward(flat, u, keep, dims, distinct, inverse, src, dst, in_ptr, in_edges, self_only, slope_neg,
            A1, DR1, D1, DD1, HN, DHN, XT, DXT, OUTT, DOUTT, ALPHA, MA, DALPHA, TG, VEC, POOLT, DPOOLT, A3,
            DA3, ONES, P)
