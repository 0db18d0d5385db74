"""pass@k from n samples per problem: the unbiased estimator of Chen et al. (2021).

With n samples of which c pass, pass@k = 1 − C(n − c, k) / C(n, k): the chance that k samples
drawn without replacement from the n hold at least one pass. Computed as a running product so
large n never builds huge binomials. pass@1 is the mean over samples.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

DEFAULT_KS = (1, 5, 10)


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one problem with ``c`` passing samples out of ``n`` (needs k <= n)."""
    if not 0 <= c <= n or n < 1:
        raise ValueError(f"need 0 <= c <= n and n >= 1 (n={n}, c={c})")
    if not 1 <= k <= n:
        raise ValueError(f"k must be between 1 and the number of samples {n}, not {k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def passes(scores: Sequence[float]) -> int:
    """Samples that passed (a score of 1.0 is a pass; partial credit is not)."""
    return sum(1 for s in scores if s >= 1.0)


def pass_at_k_table(per_problem: Iterable[Sequence[float]], ks: Iterable[int] = DEFAULT_KS) -> dict[str, float]:
    """``{"1": mean pass@1, "5": ...}`` over problems, for every k up to the samples each has, and
    for k = that number of samples (pass@n: solved by any sample)."""
    rows = [list(s) for s in per_problem]
    if not rows or any(not r for r in rows):
        return {}
    n = min(len(r) for r in rows)
    out: dict[str, float] = {}
    for k in sorted({*ks, n}):
        if k > n:
            continue
        values = [pass_at_k(len(r), passes(r), k) for r in rows]
        out[str(k)] = math.fsum(values) / len(values)
    return out


def arms_pass_at_k(arms: Mapping[str, Iterable[Sequence[float]]], ks: Iterable[int] = DEFAULT_KS) -> dict[str, dict[str, float]]:
    """``result.json["test"]["pass_at_k"]``: per arm, the pass@k table."""
    wanted = tuple(ks)
    return {arm: pass_at_k_table(rows, wanted) for arm, rows in arms.items()}
