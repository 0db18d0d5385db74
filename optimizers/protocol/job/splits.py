"""The fixed train / val / test split of a job, with the test problems locked until selection.

``SplitData.test_problems()`` raises until ``unlock_test`` receives the sealed selection, so no
code path can look at test problems before the deployment decision is final.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lcb.errors import LcbError
from lcb.problem import Problem
from optimizers.journal import content_hash
from optimizers.protocol.job.errors import JobError, TestLockedError

SPLITS = ("train", "val", "test")
ProblemLoader = Callable[[Sequence[str]], Sequence[Problem]]


@dataclass(frozen=True, slots=True)
class SplitIds:
    train: tuple[str, ...]
    val: tuple[str, ...]
    test: tuple[str, ...]

    def __post_init__(self) -> None:
        seen: dict[str, str] = {}
        for name in SPLITS:
            ids = getattr(self, name)
            if not ids:
                raise JobError(f"the {name} split is empty")
            if len(set(ids)) != len(ids):
                raise JobError(f"the {name} split lists an id twice")
            for problem_id in ids:
                if problem_id in seen:
                    raise JobError(f"problem {problem_id} is in both {seen[problem_id]} and {name}")
                seen[problem_id] = name

    def as_dict(self) -> dict[str, list[str]]:
        return {name: list(getattr(self, name)) for name in SPLITS}

    @property
    def split_hash(self) -> str:
        return content_hash(self.as_dict())


@dataclass(frozen=True, slots=True)
class SelectionSplit:
    """Validation as the protocol uses it: rows a method may search on, rows keep-or-reject uses.

    ``val`` mode (the reference): both are all of validation. ``heldout`` mode: ``selection``
    is a fixed subset the method never sees, ``search`` the rest of validation.
    """

    mode: str
    search: tuple[str, ...]
    selection: tuple[str, ...]


def selection_split(ids: SplitIds, mode: str, size: int) -> SelectionSplit:
    """Split validation for ``mode``; the held-out rows are a fixed function of the split ids
    (ordered by a hash of split hash and id), so every method and seed keeps the same rows."""
    if mode == "val":
        return SelectionSplit(mode, ids.val, ids.val)
    if mode != "heldout":
        raise JobError(f"unknown selection mode {mode!r}")
    if not 1 <= size < len(ids.val):
        raise JobError(f"selection_size {size} must be between 1 and {len(ids.val) - 1} "
                       f"(the validation split has {len(ids.val)} problems)")
    salt = ids.split_hash
    held = set(sorted(ids.val, key=lambda pid: content_hash({"split": salt, "id": pid}))[:size])
    return SelectionSplit(mode, tuple(p for p in ids.val if p not in held), tuple(p for p in ids.val if p in held))


def split_ids_for(data: str, splits_file: str | Path | None = None) -> SplitIds:
    """The protocol's split: ``splits_file`` if given, else the built-in split for
    ``data=builtin``, else benchmarks/lcb/lcb_splits.json."""
    from lcb import data as lcb_data

    try:
        if splits_file is not None:
            raw: Mapping[str, Sequence[str]] = lcb_data.load_split_ids(Path(splits_file))
        elif data == "builtin":
            raw = lcb_data.BUILTIN_SPLITS
        else:
            raw = lcb_data.load_split_ids()
    except LcbError as exc:
        raise JobError(str(exc)) from None
    return SplitIds(*(tuple(raw[name]) for name in SPLITS))


def lcb_loader(source: str, release: str) -> ProblemLoader:
    """Load problems by id from an LCB source; every requested id must come back."""

    def load(ids: Sequence[str]) -> Sequence[Problem]:
        from lcb.data import load_problems

        try:
            result = load_problems(source, release=release, only=list(ids))
        except LcbError as exc:
            raise JobError(str(exc)) from None
        missing = [i for i in ids if i not in set(result.ids)]
        if missing:
            raise JobError(f"{len(missing)} split problem(s) have no usable tests: {', '.join(missing[:5])}")
        return result.problems

    return load


class SplitData:
    """Problems of a job's splits, loaded on first use; test stays locked until selection."""

    def __init__(self, ids: SplitIds, loader: ProblemLoader) -> None:
        self.ids = ids
        self._loader = loader
        self._problems: dict[str, Problem] = {}
        self._search_loaded = False
        self._selection_id: str | None = None

    def _load(self, ids: Sequence[str]) -> None:
        for problem in self._loader(ids):
            self._problems[problem.id] = problem

    def search_problems(self) -> dict[str, Problem]:
        """Train and val problems (what optimization and validation may use)."""
        if not self._search_loaded:
            self._load(self.ids.train + self.ids.val)
            self._search_loaded = True
        return {i: self._problems[i] for i in self.ids.train + self.ids.val}

    def unlock_test(self, selection: Mapping[str, Any], selection_ids: Sequence[str] | None = None) -> None:
        """Allow test problems, given the sealed selection record (never before it exists);
        ``selection_ids``: the rows keep-or-reject must have used (default: all of validation)."""
        if not selection.get("sha256") or not selection.get("selection_id"):
            raise TestLockedError("test problems need a sealed selection")
        if selection.get("test_exposed") is not False:
            raise TestLockedError("the selection record says test was exposed before selection")
        expected = self.ids.val if selection_ids is None else selection_ids
        if list(selection.get("validation_ids", [])) != list(expected):
            raise TestLockedError("the selection was made on a different validation split")
        self._selection_id = selection["selection_id"]

    @property
    def test_unlocked(self) -> bool:
        return self._selection_id is not None

    def test_problems(self) -> dict[str, Problem]:
        if self._selection_id is None:
            raise TestLockedError("test problems are locked until the selection is sealed")
        missing = [i for i in self.ids.test if i not in self._problems]
        if missing:
            self._load(missing)
        return {i: self._problems[i] for i in self.ids.test}

    def problem(self, problem_id: str) -> Problem:
        """A loaded problem by id; test ids only once unlocked."""
        if problem_id in self.ids.test and self._selection_id is None:
            raise TestLockedError(f"problem {problem_id} is a test problem and test is locked")
        if problem_id not in self._problems:
            if problem_id in self.ids.test:
                self.test_problems()
            elif problem_id in self.ids.train or problem_id in self.ids.val:
                self.search_problems()
            else:
                raise KeyError(f"problem {problem_id} is not in this job's splits")
        return self._problems[problem_id]
