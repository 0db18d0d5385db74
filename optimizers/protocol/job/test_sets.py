"""A job's test problems under its test design (``conf/test``): the reference's 50 ids, or a window.

``window``: every problem of the configured data and release whose contest date lies in the
window, minus the train and validation ids (disjoint by id, whatever the release), optionally
capped by ``size`` with a draw stratified by platform × difficulty. The draw depends only on the
candidate rows and ``draw_seed`` — never on the job's seed or method — so every job of a sweep
tests the same problems and arms stay paired. The resulting ids enter the split, hence the job's
identity and its runtime condition.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache

from lcb.errors import LcbError
from optimizers.journal import content_hash
from optimizers.protocol.grid.config import JobConfig, TestDesign
from optimizers.protocol.job.errors import JobError
from optimizers.protocol.job.splits import SplitIds, split_ids_for


@dataclass(frozen=True, slots=True)
class WindowRow:
    id: str
    platform: str
    difficulty: str
    contest_date: str

    @property
    def stratum(self) -> tuple[str, str]:
        return (self.platform, self.difficulty)


@lru_cache(maxsize=8)
def window_rows(source: str, release: str, after: str | None, before: str | None) -> tuple[WindowRow, ...]:
    """Rows of the source inside the date window (hidden tests not decoded: only plain fields)."""
    from lcb.data import load_problems

    try:
        result = load_problems(source, release=release, after=after, before=before, decode_private=False)
    except LcbError as exc:
        raise JobError(str(exc)) from None
    return tuple(WindowRow(p.id, p.platform, p.difficulty, p.contest_date) for p in result.problems)


def stratified_draw(rows: Sequence[WindowRow], size: int | None, seed: int) -> tuple[WindowRow, ...]:
    """``size`` rows with each platform × difficulty stratum represented in proportion (largest
    remainders get the leftover places); inside a stratum, rows are taken in the order of a hash of
    (seed, id). All rows when ``size`` is None or not smaller. Returned by contest date, then id."""
    if size is None or size >= len(rows):
        chosen = list(rows)
    else:
        strata: dict[tuple[str, str], list[WindowRow]] = {}
        for row in rows:
            strata.setdefault(row.stratum, []).append(row)
        quotas = {key: size * len(members) / len(rows) for key, members in strata.items()}
        places = {key: int(q) for key, q in quotas.items()}
        leftover = size - sum(places.values())
        for key in sorted(quotas, key=lambda k: (-(quotas[k] - places[k]), k))[:leftover]:
            places[key] += 1
        chosen = []
        for key, members in strata.items():
            ordered = sorted(members, key=lambda r: content_hash({"draw": seed, "id": r.id}))
            chosen.extend(ordered[: places[key]])
    return tuple(sorted(chosen, key=lambda r: (r.contest_date, r.id)))


def window_ids(cfg: JobConfig, base: SplitIds) -> tuple[str, ...]:
    design: TestDesign = cfg.test
    taken = set(base.train) | set(base.val)
    rows = [r for r in window_rows(cfg.data, cfg.release, design.after, design.before) if r.id not in taken]
    if not rows:
        raise JobError(f"the test window (after {design.after or '-'}, before {design.before or '-'}) holds no "
                       f"problem of data={cfg.data} release={cfg.release} outside train and validation")
    return tuple(r.id for r in stratified_draw(rows, design.size, design.draw_seed))


# Test design -> the split it tests on, given the protocol's split.
TEST_SETS: dict[str, Callable[[JobConfig, SplitIds], SplitIds]] = {
    "lcb50": lambda cfg, base: base,
    "window": lambda cfg, base: SplitIds(base.train, base.val, window_ids(cfg, base)),
}


def resolve_split_ids(cfg: JobConfig) -> SplitIds:
    """The job's train / val / test ids: the protocol's split, with the test ids the design picks."""
    pick = TEST_SETS.get(cfg.test.design)
    if pick is None:
        raise JobError(f"unknown test design {cfg.test.design!r}; known: {', '.join(TEST_SETS)}")
    return pick(cfg, split_ids_for(cfg.data, cfg.splits))
