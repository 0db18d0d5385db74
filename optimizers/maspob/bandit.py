"""LinUCB over prompt combinations: the Fisher matrix, the exploration bonus, coordinate search.

A *combination* picks one pool index per role (in ``TeamGraph.roles`` order); its feature vector
``x`` is the concatenation of the chosen prompts' embeddings. After every pull the Fisher matrix
grows by a rank-one term, ``A = ridge * I + coefficient * sum(x x^T)``, and a combination's
exploration bonus is ``sqrt(x^T A^-1 x)``. With a 384-d embedding per role ``A`` is
(384 * roles)^2, so the bonus goes through the Woodbury identity over the n pulled rows instead
(an n x n solve); the matrix is saved as JSON in that factored form (ridge, coefficient and the
combination behind each rank-one term), which rebuilds it exactly. Its products and the inverse
run on one BLAS thread (``optimizers.maspob.threads``): at a budget-600 job's sizes a second thread
only spins, and a split ``A @ A.T`` or LU rounds differently on machines with other core counts.

Coordinate search: starting from a combination, for each role in order pick the variant that
maximizes ``posterior mean + alpha * bonus`` with the other roles fixed; the next sweep starts
where the last one ended (upstream's persistent ``current_indices``). ``BanditSearch`` is the
whole decision loop (warm-up, refit, sweep), independent of how pulls are paid for.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from optimizers.maspob.threads import one_blas_thread

Combination = tuple[int, ...]
Predictor = Callable[[np.ndarray], np.ndarray]  # (m, d) features -> (m,) posterior means


class FeatureTable:
    """Embeddings per role and pool index -> concatenated combination features."""

    def __init__(self, roles: Sequence[str], vectors: Mapping[str, Sequence[Sequence[float]]]) -> None:
        self.roles = tuple(roles)
        self.tables = [np.asarray(vectors[r], dtype=np.float64) for r in self.roles]
        widths = {t.shape[1] for t in self.tables}
        if len(widths) != 1:
            raise ValueError("every role's embeddings must have the same width")
        self.width = widths.pop()

    @property
    def sizes(self) -> tuple[int, ...]:
        return tuple(t.shape[0] for t in self.tables)

    @property
    def dimension(self) -> int:
        return self.width * len(self.roles)

    def nodes(self, combinations: Sequence[Combination]) -> np.ndarray:
        """(m, roles, width): the node features of each combination's team graph (one gather per
        role: every sweep and fit asks for tens of combinations)."""
        if not len(combinations):
            raise ValueError("no combinations to look up")
        index = np.asarray(combinations, dtype=np.intp).reshape(len(combinations), len(self.roles))
        return np.stack([table[index[:, r]] for r, table in enumerate(self.tables)], axis=1)

    def features(self, combinations: Sequence[Combination]) -> np.ndarray:
        return self.nodes(combinations).reshape(len(combinations), self.dimension)


class FisherMatrix:
    """``ridge * I + coefficient * X^T X`` kept as its rows X (one per pull)."""

    def __init__(self, dimension: int, *, ridge: float = 1.0, coefficient: float = 10.0) -> None:
        if ridge <= 0 or coefficient < 0:
            raise ValueError("the Fisher matrix needs ridge > 0 and coefficient >= 0")
        self.dimension = dimension
        self.ridge = float(ridge)
        self.coefficient = float(coefficient)
        self.rows = np.zeros((0, dimension))
        self.combinations: list[Combination] = []
        self._inner: np.ndarray | None = None  # (ridge I + c X X^T)^-1, refreshed on update

    def update(self, x: np.ndarray, combination: Combination) -> None:
        self.rows = np.vstack([self.rows, np.asarray(x, dtype=np.float64).reshape(1, -1)])
        self.combinations.append(tuple(combination))
        self._inner = None

    def _inverse_inner(self) -> np.ndarray:
        if self._inner is None:
            n = self.rows.shape[0]
            with one_blas_thread():
                gram = self.ridge * np.eye(n) + self.coefficient * (self.rows @ self.rows.T)
                self._inner = np.linalg.inv(gram)
        return self._inner

    def quadratic(self, xs: np.ndarray) -> np.ndarray:
        """``x^T A^-1 x`` for each row of ``xs`` (Woodbury: no d x d matrix is formed)."""
        xs = np.atleast_2d(np.asarray(xs, dtype=np.float64))
        own = np.einsum("ij,ij->i", xs, xs)
        if self.rows.shape[0] == 0:
            return own / self.ridge
        with one_blas_thread():
            projected = xs @ self.rows.T  # (m, n)
            inner = self._inverse_inner()
        correction = self.coefficient * np.einsum("ij,jk,ik->i", projected, inner, projected)
        return np.maximum(own - correction, 0.0) / self.ridge

    def bonus(self, xs: np.ndarray) -> np.ndarray:
        return np.sqrt(self.quadratic(xs))

    def dense(self) -> np.ndarray:
        """The full matrix (for checks on small dimensions)."""
        return self.ridge * np.eye(self.dimension) + self.coefficient * (self.rows.T @ self.rows)

    def to_json(self) -> dict[str, Any]:
        return {"form": "ridge*I + coefficient*sum(x x^T)", "dimension": self.dimension, "ridge": self.ridge,
                "coefficient": self.coefficient, "rank_one_terms": [list(c) for c in self.combinations]}

    @classmethod
    def from_json(cls, data: Mapping[str, Any], table: FeatureTable) -> FisherMatrix:
        fisher = cls(int(data["dimension"]), ridge=float(data["ridge"]), coefficient=float(data["coefficient"]))
        if fisher.dimension != table.dimension:
            raise ValueError("the saved Fisher matrix does not match the embeddings")
        for combination in data["rank_one_terms"]:
            combo = tuple(int(i) for i in combination)
            fisher.update(table.features([combo])[0], combo)
        return fisher


class Surrogate(Protocol):
    """Predicts a combination's score from its team graph's node features (m, roles, width)."""

    def fit(self, nodes: np.ndarray, targets: np.ndarray, *, seed: int) -> Any: ...

    def predict(self, nodes: np.ndarray) -> np.ndarray: ...


class LinearPosterior:
    """The classic LinUCB posterior mean ``theta = A^-1 b`` (``b = coefficient * X^T y``).

    MASPOB's ``surrogate: linear`` ablation (no graph network)."""

    def __init__(self, *, ridge: float = 1.0, coefficient: float = 10.0) -> None:
        self.ridge, self.coefficient = ridge, coefficient
        self.rows = np.zeros((0, 0))
        self.weights = np.zeros(0)

    def fit(self, nodes: np.ndarray, targets: np.ndarray, *, seed: int = 0) -> None:
        xs = _flat(nodes)
        ys = np.asarray(targets, dtype=np.float64)
        # theta = X^T (ridge/c I + X X^T)^-1 y  (the kernel form of A^-1 c X^T y)
        with one_blas_thread():  # as the Fisher matrix: no spinning thread, the same rounding everywhere
            gram = (self.ridge / self.coefficient) * np.eye(len(ys)) + xs @ xs.T
            self.rows, self.weights = xs, np.linalg.solve(gram, ys)

    def predict(self, nodes: np.ndarray) -> np.ndarray:
        xs = _flat(nodes)
        if self.rows.shape[0] == 0:
            return np.zeros(xs.shape[0])
        with one_blas_thread():
            return (xs @ self.rows.T) @ self.weights


def _flat(nodes: np.ndarray) -> np.ndarray:
    nodes = np.asarray(nodes, dtype=np.float64)
    return nodes.reshape(nodes.shape[0], -1)


@dataclass(frozen=True, slots=True)
class SweepStep:
    role: str
    chosen: int
    mean: float
    bonus: float

    def to_json(self) -> dict[str, Any]:
        return {"role": self.role, "chosen": self.chosen, "mean": self.mean, "bonus": self.bonus}


def coordinate_search(start: Combination, table: FeatureTable, predict: Predictor, fisher: FisherMatrix,
                      alpha: float) -> tuple[Combination, list[SweepStep]]:
    """One sweep over the roles; ties keep the lower pool index (the seed is index 0)."""
    current = list(start)
    steps = []
    for role_index, role in enumerate(table.roles):
        options = []
        for variant in range(table.sizes[role_index]):
            trial = list(current)
            trial[role_index] = variant
            options.append(tuple(trial))
        xs = table.features(options)
        means = np.asarray(predict(xs), dtype=np.float64)
        bonuses = fisher.bonus(xs)
        best = int(np.argmax(means + alpha * bonuses))  # argmax returns the first of equal maxima
        current[role_index] = best
        steps.append(SweepStep(role, best, round(float(means[best]), 6), round(float(bonuses[best]), 6)))
    return tuple(current), steps


@dataclass(frozen=True, slots=True)
class Decision:
    kind: str  # warmup | linucb
    combination: Combination
    sweep: tuple[SweepStep, ...] = ()


@dataclass
class FitLog:
    fits: int = 0
    seconds: float = 0.0  # wall
    cpu_seconds: float = 0.0  # this process's CPU time (what the gym's cost column counts)
    epochs: list[int] = field(default_factory=list)


class BanditSearch:
    """The decision loop, apart from how a pull is paid for: ``decide`` -> pull -> ``observe``.

    The first ``len(warmup)`` decisions are the given warm-up combinations; then each decision
    refits the surrogate from scratch on every observation (seeded by ``seed`` + their count, so a
    resumed search refits exactly as the first run did) and makes one LinUCB coordinate sweep
    from ``anchor()``: the best warm-up combination first, then always the last pulled one.
    """

    def __init__(self, table: FeatureTable, *, make_surrogate: Callable[[], Surrogate],
                 warmup: Sequence[Combination], alpha: float = 0.2, ridge: float = 1.0,
                 coefficient: float = 10.0, seed: int = 0) -> None:
        self.table = table
        self.make_surrogate = make_surrogate
        self.warmup = [tuple(c) for c in warmup]
        self.alpha = alpha
        self.seed = seed
        self.fisher = FisherMatrix(table.dimension, ridge=ridge, coefficient=coefficient)
        self.combinations: list[Combination] = []
        self.scores: list[float] = []
        self.fit_log = FitLog()
        self._surrogate: Surrogate | None = None
        self._fitted_on = -1

    def observe(self, combination: Combination, score: float) -> None:
        combination = tuple(combination)
        self.combinations.append(combination)
        self.scores.append(float(score))
        self.fisher.update(self.table.features([combination])[0], combination)

    def decide(self) -> Decision:
        if len(self.combinations) < len(self.warmup):
            return Decision("warmup", self.warmup[len(self.combinations)])
        combination, steps = coordinate_search(self.anchor(), self.table, self.predict, self.fisher, self.alpha)
        return Decision("linucb", combination, tuple(steps))

    def anchor(self) -> Combination:
        """Where the next sweep starts. Right after the warm-up: the warm-up combination with the
        highest posterior mean (upstream's initialization); after that, the combination pulled
        last - upstream keeps one current combination that every sweep edits and every pull
        runs, it never jumps back to the best-predicted one."""
        if not self.combinations:
            return tuple(0 for _ in self.table.roles)  # no warm-up at all: the seed prompts
        if len(self.combinations) == len(self.warmup):
            return self.incumbent()[0]
        return self.combinations[-1]

    def incumbent(self) -> tuple[Combination, float]:
        """The observed combination with the highest posterior mean (ties: the earliest)."""
        if not self.combinations:
            raise ValueError("no observations yet")
        distinct = list(dict.fromkeys(self.combinations))
        means = self.predict(self.table.features(distinct))
        index = int(np.argmax(means))
        return distinct[index], float(means[index])

    def predict(self, xs: np.ndarray) -> np.ndarray:
        self._fit()
        assert self._surrogate is not None
        nodes = np.asarray(xs).reshape(len(xs), len(self.table.roles), self.table.width)
        return np.asarray(self._surrogate.predict(nodes), dtype=np.float64)

    def _fit(self) -> None:
        if self._fitted_on == len(self.combinations):
            return
        started, cpu_started = time.monotonic(), time.process_time()
        surrogate = self.make_surrogate()
        report = surrogate.fit(self.table.nodes(self.combinations), np.asarray(self.scores),
                               seed=self.seed + len(self.combinations))
        self.fit_log.fits += 1
        self.fit_log.seconds += time.monotonic() - started
        self.fit_log.cpu_seconds += time.process_time() - cpu_started
        self.fit_log.epochs.append(int(getattr(report, "epochs", 0)))
        self._surrogate, self._fitted_on = surrogate, len(self.combinations)
