"""``grid --check``: every job of every lcb_grid* sweep composes and passes its pre-flight checks
(no model is called); methods this build cannot load are named, never silently skipped."""

from __future__ import annotations

from pathlib import Path

import pytest

from optimizers.protocol.grid_command import cli as grid
from optimizers.registry import MethodUnavailable, UnknownMethod, available_methods, get_optimizer_class


def _loadable(method: str) -> bool:
    try:
        get_optimizer_class(method)
    except (MethodUnavailable, UnknownMethod):
        return False
    return True


def test_every_shipped_grid_job_can_start_and_unloadable_methods_are_named() -> None:
    checked, failures = grid.check_grid()
    assert checked == 396  # the six sweeps together are the grid
    # Every job of a loadable method passes; a failure is only ever an unloadable method ...
    assert [f for f in failures if not f.unloadable_method] == []
    unloadable = {f.method for f in failures}
    # ... that really cannot be loaded (once all eight methods exist, this set is empty).
    assert all(not _loadable(m) for m in unloadable)
    grid_methods = {c.method for c in grid.cells.grid()}
    assert {m for m in grid_methods if not _loadable(m)} == unloadable

    out = "\n".join(grid.check_lines(checked, failures))  # what `grid --check` prints
    assert "jobs\t396\tfailed\t0" in out
    for method in unloadable:
        assert f"unloadable\t{method}\t" in out
    if unloadable:
        assert "methods not loadable in this build" in out


def test_a_sweep_with_a_bad_knob_or_an_off_grid_seed_fails_the_check(tmp_path: Path) -> None:
    if not _loadable("gepa"):
        pytest.skip("gepa is not available in this build")
    sweep = tmp_path / "lcb_grid.yaml"  # same stem as a shipped experiment: composed with its name
    sweep.write_text(
        "hydra:\n  sweeper:\n    params:\n      method: gepa\n      topology: centralized\n"
        "      method.components: sideways\n      seed: 0\n", encoding="utf-8")
    checked, failures = grid.check_grid([sweep])
    assert checked == 1 and len(failures) == 1 and not failures[0].unloadable_method
    assert "components" in failures[0].reason

    sweep.write_text(
        "hydra:\n  sweeper:\n    params:\n      method: gepa\n      topology: centralized\n      seed: 7\n",
        encoding="utf-8")
    checked, failures = grid.check_grid([sweep])
    assert checked == 1 and len(failures) == 1
    assert "seed 7 is not a grid seed" in failures[0].reason
    assert "fail\tlcb_grid\tmethod=gepa topology=centralized seed=7\t" in "\n".join(
        grid.check_lines(checked, failures))


def test_check_cli_exits_nonzero_while_a_job_cannot_start(capsys) -> None:
    code = grid.main(["--check"])
    out = capsys.readouterr().out
    unloadable = [line for line in out.splitlines() if line.startswith("unloadable\t")]
    assert code == (1 if unloadable else 0)
    assert out.rstrip().splitlines()[-1 if not unloadable else -2].startswith("jobs\t396\t")


def test_available_methods_include_the_grid() -> None:
    assert {c.method for c in grid.cells.grid()} <= set(available_methods())
