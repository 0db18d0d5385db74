"""Team framework overhead and batch throughput against the scripted model server.

    .venv/bin/python benchmarks/perf/team_throughput.py [--rows 128] [--concurrency 32]

(a) Overhead per model call at zero latency: problems run one after another through
    ``run_team``; the client is wrapped to time every ``complete`` call (HTTP round trip + the
    server's answer). Overhead = (wall - model time) / calls: the graph, sessions, prompt assembly,
    hand-off rendering and recording. Target < 5 ms.
(b) Throughput at 100 ms simulated latency: ``--rows`` problems through the batch runner's row
    path (team run + grading) with ``--concurrency`` rows in flight, against the ideal wall time
    (waves of ``concurrency`` rows x the team's critical path of sequential calls x latency).
    Target >= 80 %.

The scripted server runs in its own process (so its work does not share our GIL) and plays every
role without tools (``use_tools=False``), so no sandbox time is mixed into the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))


def serve(latency_s: float) -> None:
    """Child process: the scripted server with the team player, until stdin closes."""
    from topologies.scripted import ScriptedServer
    from topologies.teams.rehearsal import team_script

    with ScriptedServer(team_script(use_tools=False, latency_s=latency_s), keep_bodies=False) as server:
        print(f"ready {server.base_url}", flush=True)
        sys.stdin.read()


class ScriptedProcess:
    def __init__(self, latency_s: float) -> None:
        self.process = subprocess.Popen(
            [sys.executable, __file__, "--serve", str(latency_s)], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, text=True)
        line = self.process.stdout.readline() if self.process.stdout else ""
        if not line.startswith("ready "):
            self.close()
            raise SystemExit(f"error: the scripted server did not start ({line!r})")
        self.url = line.split()[1]

    def close(self) -> None:
        if self.process.stdin:
            self.process.stdin.close()
        self.process.wait(timeout=30)


@dataclass
class TimedClient:
    """Wraps a ChatClient and adds up the time spent inside ``complete``."""

    inner: Any
    model_s: float = 0.0
    calls: int = 0

    @property
    def model_id(self) -> str:
        return self.inner.model_id

    async def complete(self, role: str, messages: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return await self.inner.complete(role, messages, **kwargs)
        finally:
            self.model_s += time.perf_counter() - started
            self.calls += 1


def client_for(url: str) -> Any:
    from topologies.models import make_client, resolve_model

    return make_client(resolve_model("scripted-model", task_endpoints=url))


def problems(rows: int) -> list[Any]:
    from lcb.data import load_problems

    builtin = list(load_problems("builtin").problems)
    return [replace(builtin[i % len(builtin)], id=f"{builtin[i % len(builtin)].id}#{i}") for i in range(rows)]


TEAMS = (("single", 1), ("independent", 4), ("sequential", 4), ("centralized", 4), ("decentralized", 4))


async def overhead(url: str, repeats: int) -> dict[str, Any]:
    from topologies.prompts import default_team_spec
    from topologies.teams import run_team
    from topologies.types import Decoding

    client = TimedClient(client_for(url))
    batch = problems(14)
    figures: dict[str, Any] = {}
    # warm-up: imports, graph compilation, connection pool
    await run_team(default_team_spec("single"), batch[0], client, decoding=Decoding())
    for topology, size in TEAMS:
        spec = default_team_spec(topology, team_size=size, communication="structured_soft")
        client.model_s, client.calls = 0.0, 0
        started = time.perf_counter()
        for _ in range(repeats):
            for problem in batch:
                await run_team(spec, problem, client, decoding=Decoding())
        wall = time.perf_counter() - started
        figures[topology] = {
            "calls": client.calls,
            "model_ms_per_call": round(1000 * client.model_s / client.calls, 3),
            "overhead_ms_per_call": round(1000 * (wall - client.model_s) / client.calls, 3),
        }
    await client.inner.aclose()
    return figures


async def throughput(url: str, topology: str, size: int, rows: int, concurrency: int, latency_s: float,
                     critical_calls: int) -> dict[str, Any]:
    from topologies.prompts import default_team_spec
    from topologies.runner import Outputs, RecordSink, RunSettings, run_rows
    from topologies.types import Decoding

    client = client_for(url)
    spec = default_team_spec(topology, team_size=size)
    settings = RunSettings(spec, client, Decoding(), 0, "hidden")
    sink = RecordSink(Outputs(None, None), [], resume=False)
    batch = problems(rows)
    started = time.perf_counter()
    await run_rows(batch, settings, sink, concurrency)
    wall = time.perf_counter() - started
    await client.aclose()
    ideal = math.ceil(rows / concurrency) * critical_calls * latency_s
    solved = sum(r["em"] for r in sink.records)
    return {"topology": topology, "rows": rows, "concurrency": concurrency, "solved": solved,
            "errors": sum(1 for r in sink.records if r.get("error")), "wall_s": round(wall, 3),
            "ideal_s": round(ideal, 3), "efficiency": round(ideal / wall, 3)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--serve", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--rows", type=int, default=128)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3, help="passes over the 14 built-in problems in (a)")
    parser.add_argument("--latency", type=float, default=0.1)
    args = parser.parse_args()
    if args.serve is not None:
        serve(args.serve)
        return 0

    fast = ScriptedProcess(0.0)
    try:
        figures = asyncio.run(overhead(fast.url, args.repeats))
    finally:
        fast.close()
    print("(a) framework overhead per model call, zero latency (target < 5 ms):")
    for topology, row in figures.items():
        print(f"    {topology:<14} {row['overhead_ms_per_call']:7.3f} ms overhead  "
              f"({row['model_ms_per_call']:.3f} ms per model call, {row['calls']} calls)")
    worst = max(row["overhead_ms_per_call"] for row in figures.values())

    slow = ScriptedProcess(args.latency)
    try:
        # critical path: sequential (size 4, no tools) = 4 calls per row; decentralized = 2 rounds
        runs = [asyncio.run(throughput(slow.url, "sequential", 4, args.rows, args.concurrency, args.latency, 4)),
                asyncio.run(throughput(slow.url, "decentralized", 4, args.rows, args.concurrency, args.latency, 2))]
    finally:
        slow.close()
    print(f"(b) batch throughput at {args.latency * 1000:.0f} ms latency, concurrency {args.concurrency} "
          "(target >= 80 % of ideal):")
    for run in runs:
        print(f"    {run['topology']:<14} {run['rows']} rows in {run['wall_s']:.2f} s, ideal {run['ideal_s']:.2f} s "
              f"-> {100 * run['efficiency']:.1f} %  (solved {run['solved']}, errors {run['errors']})")
    print(json.dumps({"overhead_ms_per_call_worst": worst, "overhead": figures, "throughput": runs}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
