"""``python -m optimizers.protocol.run`` as a user runs it (subprocesses).

Bad input: one ``error:`` line, exit 2, no job folder. Good input: identity jobs end to end on
the scripted model server (zero latency), one job, a sweep with the joblib launcher, and a
re-launch that returns the saved results without a single model request.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPTED_ANSWER = "```python\nprint(0)\n```"


def run_app(*args: str, cwd: Path, extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    env.update(extra_env or {})
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return subprocess.run([sys.executable, "-m", "optimizers.protocol.run", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=240)


def job_folders(runs: Path) -> list[Path]:
    return sorted(p.parent for p in runs.rglob("job.json")) + sorted(
        p for p in runs.glob("*") if p.name != ".hydra"
    )


def closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


@pytest.fixture(scope="module")
def server() -> Iterator[object]:
    from topologies.scripted import ScriptedServer, Script

    with ScriptedServer(Script([], default=SCRIPTED_ANSWER)) as srv:
        yield srv


COMMON = ["--dataset", "lcb", "--seed", "0"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--method", "nope", "--topology", "single"], "unknown method 'nope'"),
        (["--method", "identity", "--topology", "ring"], "unknown topology 'ring'"),
        (["--method", "identity", "--topology", "single", "--model", "qwenn"], "unknown model 'qwenn'"),
        (["--method", "identity", "--topology", "single", "--budget", "0"], "budget must be a positive"),
        (["--method", "identity", "--topology", "centralized", "--team-size", "3"], "team size 3"),
        (["--method", "identity", "--topology", "centralized", "--team-size", "2", "--model", "llama",
          "--data", "builtin"], "no grid cell runs centralized_r2 with model llama"),
        (["--method", "identity", "--topology", "single", "--splits", "missing.json", "--allow-any-cell"],
         "splits file not found: missing.json"),
        (["--method", "identity", "--topology", "single", "hydra/launcher=nope"], "Could not find 'hydra/launcher/nope'"),
        (["--method", "identity", "--topology", "single", "--bogus"], "unknown option --bogus"),
        (["--method", "identity", "--topology", "centralized_r8", "--team-size", "4"], "means team_size 8"),
        (["--method", "tavo", "--topology", "decentralized", "--allow-any-cell", "method.mode=papr"], "mode"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path: Path, args: list[str], message: str) -> None:
    proc = run_app(*args, *COMMON, "--out", "job", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    assert proc.stderr.startswith("error: ") and proc.stderr.count("\n") == 1, proc.stderr
    assert message in proc.stderr
    assert not (tmp_path / "job").exists()
    assert job_folders(tmp_path / "runs") == [] if (tmp_path / "runs").exists() else True


def test_unreachable_endpoint_leaves_no_job_folder(tmp_path: Path) -> None:
    proc = run_app("--method", "identity", "--topology", "single", *COMMON, "--data", "builtin", "--budget", "4",
                   "--allow-any-cell", "--task-endpoints", closed_port_url(), "--out", "job", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: ") and proc.stderr.count("\n") == 1, proc.stderr
    assert "reachable" in proc.stderr
    assert not (tmp_path / "job").exists()


@pytest.mark.parametrize("variable", ["TASK_ENDPOINTS", "REFLECTION_MODEL_BASE_URL"])
def test_unreachable_endpoint_from_the_environment_leaves_no_job_folder(
    tmp_path: Path, server: object, variable: str
) -> None:
    # The task model is reachable through the flag; the broken endpoint comes from the environment
    # (task: replaces nothing given explicitly, so use it alone; reflection: only methods that reflect).
    env = {variable: closed_port_url()}
    args = ["--method", "identity", "--topology", "single", *COMMON, "--data", "builtin", "--budget", "4",
            "--allow-any-cell", "--out", "job"]
    if variable == "REFLECTION_MODEL_BASE_URL":
        from optimizers.registry import MethodUnavailable, available_methods, get_optimizer_class

        reflecting = []
        for name in available_methods():
            try:
                if get_optimizer_class(name).needs_reflection:
                    reflecting.append(name)
            except MethodUnavailable:
                continue
        if not reflecting:
            pytest.skip("no reflecting method in this build")
        args[1] = reflecting[0]
        args += ["--task-endpoints", server.base_url]
    proc = run_app(*args, cwd=tmp_path, extra_env=env)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("error: ") and proc.stderr.count("\n") == 1, proc.stderr
    assert "reachable" in proc.stderr
    assert not (tmp_path / "job").exists()


def test_help_and_cfg_are_answered_without_running(tmp_path: Path) -> None:
    proc = run_app("--help", cwd=tmp_path)
    assert proc.returncode == 0 and "Flag form" in proc.stdout
    (methods,) = [line for line in proc.stdout.splitlines() if line.startswith("method: ")]
    assert "identity" in methods
    assert "selection: heldout, val" in proc.stdout.splitlines()  # modes are config groups
    proc = run_app("--method", "identity", "--topology", "decentralized_r2", "--seed", "1", "--cfg", "job",
                   cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "team_size: 2" in proc.stdout and "seed: 1" in proc.stdout
    assert not (tmp_path / "runs").exists()


def test_identity_job_end_to_end(tmp_path: Path, server: object) -> None:
    url = server.base_url  # type: ignore[attr-defined]
    proc = run_app("--method", "identity", "--dataset", "lcb", "--topology", "single", "--model", "qwen",
                   "--seed", "0", "--out", "job", "--data", "builtin", "--budget", "4", "--allow-any-cell",
                   "--task-endpoints", url, "--quiet", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    (line,) = proc.stdout.splitlines()
    summary = json.loads(line)
    assert summary["status"] == "completed" and summary["delta_pp"] == 0.0
    job = tmp_path / "job"
    result = json.loads((job / "result.json").read_text())
    assert result["cell"]["method"] == "identity" and result["conformant"] is False
    config = (job / "config.yaml").read_text()
    assert "name: identity" in config and "budget: 4" in config and url in config


def test_sweep_with_joblib_then_relaunch_skips_finished_jobs(tmp_path: Path, server: object) -> None:
    url = server.base_url  # type: ignore[attr-defined]
    sweep = ["-m", "method=identity", "topology=single,decentralized", "seed=0,1,2", "data=builtin", "budget=4",
             "allow_any_cell=true", f"task_endpoints=[{url}]", "runs_root=runs", "quiet=true"]
    first = run_app(*sweep, "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    lines = [json.loads(line) for line in first.stdout.splitlines()]
    assert len(lines) == 6 and all(line["status"] == "completed" for line in lines)
    runs = tmp_path / "runs"
    results = sorted(runs.glob("identity/lcb/*/qwen/*/result.json"))
    assert [p.relative_to(runs).parts[2:4] for p in results] == [
        ("decentralized", "qwen"), ("decentralized", "qwen"), ("decentralized", "qwen"),
        ("single", "qwen"), ("single", "qwen"), ("single", "qwen"),
    ]
    assert sorted(p.parent.name for p in results) == ["0", "0", "1", "1", "2", "2"]
    assert not (REPO / "multirun").exists() and not (tmp_path / "multirun").exists()
    stamps = {p: p.stat().st_mtime_ns for p in results}
    requests = server.request_count  # type: ignore[attr-defined]

    again = run_app(*sweep, cwd=tmp_path)  # the basic launcher this time
    assert again.returncode == 0, again.stderr
    assert sorted(again.stdout.splitlines()) == sorted(first.stdout.splitlines())
    assert server.request_count == requests  # type: ignore[attr-defined]
    assert {p: p.stat().st_mtime_ns for p in results} == stamps


def test_sweep_skips_off_grid_jobs_and_reports_failed_ones(tmp_path: Path) -> None:
    proc = run_app("-m", "method=identity", "topology=centralized", "topology.team_size=2,8", "model=llama",
                   "seed=0", "data=builtin", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("skip: ") == 2 and proc.stdout == ""
    assert job_folders(tmp_path / "runs") == []

    proc = run_app("-m", "method=identity", "topology=single", "seed=0,1", "data=builtin", "allow_any_cell=true",
                   f"task_endpoints=[{closed_port_url()}]", cwd=tmp_path)
    assert proc.returncode == 2
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 3 and "2 job(s) of the sweep failed" in errors[-1]
    assert job_folders(tmp_path / "runs") == []


def test_ctrl_c_is_one_line_and_the_same_command_resumes(tmp_path: Path) -> None:
    import signal
    import time

    from topologies.scripted import Script, ScriptedServer

    args = ["--method", "identity", "--topology", "single", *COMMON, "--data", "builtin", "--budget", "4",
            "--allow-any-cell", "--tracker", "jsonl", "--out", "job"]
    with ScriptedServer(Script([], default=SCRIPTED_ANSWER, latency_s=1.0)) as slow:
        env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
        # A job started from a shell has SIGINT at its default; a child inherits an *ignored*
        # SIGINT (and Python then keeps ignoring it), so whatever state this test's process is in
        # (another test, a runner, a library may have set SIG_IGN) must not reach the job.
        proc = subprocess.Popen([sys.executable, "-m", "optimizers.protocol.run", *args,
                                 "--task-endpoints", slow.base_url],
                                cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        deadline = time.monotonic() + 60
        while not (tmp_path / "job" / "job.json").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(1.5)  # some rollouts are in flight
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 130, err[-2000:]
        assert "Traceback" not in err
        assert err.rstrip().splitlines()[-1] == "error: interrupted; run the same command again to resume the job"
        assert not (tmp_path / "job" / "result.json").exists()
        again = run_app(*args, "--task-endpoints", slow.base_url, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["status"] == "completed"
