"""A job's stderr as a user sees it: our progress and notices only, one line naming the W&B offline
run and how to upload it, ``WANDB_DIR`` honoured, third-party chatter back with ``--verbose``; and
the closing lines that name the job folder and the command for its report."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "optimizers"))

from scripted_world import MODEL_ID, REFLECTION_ID, REPO, start_world  # noqa: E402

from optimizers.protocol.run.chatter import QUIET_ENV, quiet_third_parties  # noqa: E402


@pytest.fixture(scope="module")
def world() -> Any:
    server = start_world(world="useful")
    yield server
    server.stop()


def run_job_cli(base_url: str, out: Path, *extra: str, env: dict[str, str] | None = None) -> Any:
    command = [
        sys.executable, "-m", "optimizers.protocol.run", "--method", "tavo", "--topology", "single",
        "--model", MODEL_ID, "--seed", "0", "--out", str(out), "--budget", "6", "--data", "builtin",
        "--allow-any-cell", "--task-endpoints", base_url, "--reflection-model", REFLECTION_ID,
        "--reflection-endpoints", base_url, "--tracker", "wandb", *extra,
    ]
    clean = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_") or k == "WANDB_MODE"}
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=240, check=False,
                          env={**clean, "WANDB_MODE": "offline", **(env or {})})


def lines(stderr: str) -> list[str]:
    """stderr lines without the progress bars (tqdm redraws with carriage returns)."""
    return [part.strip() for line in stderr.splitlines() for part in line.split("\r")
            if part.strip() and "it/s]" not in part and not part.startswith("optimize ")]


def test_a_plain_run_shows_only_our_lines_and_one_sync_hint(tmp_path: Path, world: Any) -> None:
    out = tmp_path / "job"
    wandb_dir = tmp_path / "wandb-home"
    done = run_job_cli(world.base_url, out, env={"WANDB_DIR": str(wandb_dir)})
    assert done.returncode == 0, done.stderr[-3000:]
    shown = lines(done.stderr)
    ours = ("[job] ", "[tracking] ", "job folder: ", "its report: ", "note: ")
    assert [line for line in shown if not line.startswith(ours)] == []
    sync = [line for line in shown if line.startswith("[tracking] W&B offline run: ")]
    assert len(sync) == 1
    folder = Path(sync[0].split(": ", 1)[1].split(";", 1)[0])
    assert folder.parent == wandb_dir / "wandb" and folder.name.startswith("offline-run-")
    assert any(folder.glob("*.wandb")) and sync[0].endswith(f"upload it with: wandb sync {folder}")
    assert not (out / "wandb" / "latest-run").exists()  # the run went to WANDB_DIR, not the job folder
    python = str(Path(sys.executable).relative_to(REPO)) if Path(sys.executable).is_relative_to(REPO) else "python"
    assert shown[-2:] == [f"job folder: {out} (result.json, journals)",
                          f"its report: {python} -m optimizers.protocol.report {out} --out {out / 'report'}"]


def test_verbose_lets_third_party_lines_through(tmp_path: Path, world: Any) -> None:
    done = run_job_cli(world.base_url, tmp_path / "job", "--verbose")
    assert done.returncode == 0, done.stderr[-3000:]
    assert any(line.startswith("wandb: ") for line in lines(done.stderr))


def test_user_settings_win_and_verbose_sets_nothing() -> None:
    env = {"WANDB_SILENT": "false"}
    chosen = quiet_third_parties(False, env)
    assert env["WANDB_SILENT"] == "false" and set(chosen) == set(QUIET_ENV) - {"WANDB_SILENT"}
    untouched: dict[str, str] = {}
    assert quiet_third_parties(True, untouched) == {} and untouched == {}
