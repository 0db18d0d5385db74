"""``python -m optimizers.protocol.grid --list / --status / --commands``."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from pathlib import Path

from optimizers.journal import write_sealed
from optimizers.protocol.grid import cells
from optimizers.protocol.grid_command import cli as grid

REPO = Path(__file__).resolve().parents[2]


def run_grid(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "optimizers.protocol.grid", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=60)


def test_list_prints_every_cell_and_the_counts() -> None:
    proc = run_grid("--list")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    cell_lines = lines[1:lines.index("")]
    assert len(cell_lines) == 132
    assert "gepa\tcentralized_r8\tqwen\t0,1,2\tteam_size" in cell_lines
    assert "mipro\tsingle\tllama\t0,1,2\tllama" in cell_lines
    assert "configurations\t132" in lines and "jobs\t396" in lines


def _done(root: Path, cell: cells.GridCell, seed: int, status: str = "completed") -> Path:
    folder = cell.job_dir(root, seed)
    folder.mkdir(parents=True)
    write_sealed(folder / "result.json", {"schema": grid.RESULT_SCHEMA, "status": status})
    return folder


def test_status_counts_done_failed_running_missing(tmp_path: Path) -> None:
    first, second = cells.grid()[0], cells.grid()[1]
    _done(tmp_path, first, 0)
    _done(tmp_path, first, 1, status="failed")
    first.job_dir(tmp_path, 2).mkdir(parents=True)  # interrupted: no result.json
    running = second.job_dir(tmp_path, 0)
    running.mkdir(parents=True)
    fd = os.open(running / ".lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)  # what a running job holds
    try:
        proc = run_grid("--status", str(tmp_path))
    finally:
        os.close(fd)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[-1] == "done=1\tfailed=2\trunning=1\trequeued=0\tqueued=0\tmissing=392\ttotal=396"
    rows = {tuple(line.split("\t")[1:5]): line.split("\t")[0] for line in lines[1:-2]}
    key = (first.method, first.registry_key, first.model)
    assert rows[(*key, "0")] == "done" and rows[(*key, "1")] == "failed" and rows[(*key, "2")] == "failed"
    assert rows[(second.method, second.registry_key, second.model, "0")] == "running"


def test_status_treats_a_tampered_result_as_failed(tmp_path: Path) -> None:
    folder = _done(tmp_path, cells.grid()[0], 0)
    (folder / "result.json").write_text('{"schema": "x", "status": "completed"}')
    assert grid.job_status(folder)[0] == "failed"


def test_commands_name_every_grid_experiment() -> None:
    proc = run_grid("--commands")
    assert proc.returncode == 0
    names = [line.split()[3] for line in proc.stdout.splitlines()]
    assert sorted(names) == sorted(f"experiment={p.stem}" for p in grid.experiment_files())
    assert sum(int(line.split("# ")[1].split()[0]) for line in proc.stdout.splitlines()) == 396


def test_status_of_a_missing_folder_is_an_error(tmp_path: Path) -> None:
    proc = run_grid("--status", str(tmp_path / "nope"))
    assert proc.returncode == 2 and proc.stderr.startswith("error:")
