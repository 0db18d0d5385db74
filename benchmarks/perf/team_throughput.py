"""Team framework overhead and batch throughput against the scripted model server.

    .venv/bin/python benchmarks/perf/team_throughput.py [--rows 128] [--concurrency 32]

(a) Overhead per model call at zero latency. Problems run one after another through
    ``run_team``; the client is wrapped to time every ``complete`` call and to record its
    arguments. Two figures per topology:
    - wall: (wall - time inside ``complete``) / calls. Exact for teams whose calls are serial
      (single, sequential, centralized); meaningless where agents call in parallel, so it is
      shown only for the serial ones;
    - cpu: (our process's CPU time for the team runs - its CPU time for replaying the very same
      calls straight through the client, as many at a time as the team had in flight) / calls.
      Valid for every topology.
    Both measure the team framework (graph, sessions, prompt assembly, hand-off rendering,
    recording, extraction) without the model layer. Target < 5 ms.
(b) Throughput at 100 ms simulated latency: ``--rows`` problems with ``--concurrency`` rows in
    flight, (1) team runs only and (2) the batch runner's full row path (team run + grading),
    against the ideal wall time (waves of ``concurrency`` rows x the team's critical path of
    serial calls x latency). Target >= 80 %. Each case runs ``--trials`` times; the median is
    shown. To separate the teams from the machine, the very same calls are then replayed straight
    through the client with the batch's average parallelism (concurrency x calls per row / serial
    calls per row streams): "% of the raw client" is what the team framework keeps of what the
    client and server can deliver on this machine; the same requests as bare HTTP posts (no model
    layer, bodies built beforehand) give the ceiling of the machine and the scripted server
    themselves. (With C ms of our CPU per call and N calls in flight every 100 ms, one event loop
    saturates once 10 x N x C approaches 1000 ms; the server pays its own CPU per request on the
    same cores.)

The scripted server runs in its own process (so its work does not share our GIL) and plays every
role without running programs (``use_tools=False``; the centralized manager still delegates), so
no sandbox time is mixed into the figures (except in the "team+grading" run). Both sides run on
the project's event loop (uvloop where installed, as the runner and jobs do);
``LCB_GRID_EVENT_LOOP=asyncio`` measures the standard loop instead. Our process
takes the runner's garbage-collector settings (topologies/heap.py; ``LCB_GRID_GC=default`` measures
CPython's defaults).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))


def serve(latency_s: float) -> None:
    """Child process: the scripted server with the team player, until stdin closes."""
    from topologies.scripted import ScriptedServer
    from topologies.teams.rehearsal import team_script

    with ScriptedServer(team_script(use_tools=False, delegate=True, latency_s=latency_s), keep_bodies=False) as server:
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

    def cpu_s(self) -> float:
        """User + system CPU seconds the server process has used so far."""
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def close(self) -> None:
        if self.process.stdin:
            self.process.stdin.close()
        self.process.wait(timeout=30)


@dataclass
class TimedClient:
    """Wraps a ChatClient: adds up the time spent inside ``complete`` and keeps the calls."""

    inner: Any
    model_s: float = 0.0
    calls: list[tuple[str, Any, dict[str, Any]]] = field(default_factory=list)

    @property
    def model_id(self) -> str:
        return self.inner.model_id

    async def complete(self, role: str, messages: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return await self.inner.complete(role, messages, **kwargs)
        finally:
            self.model_s += time.perf_counter() - started
            self.calls.append((role, list(messages), kwargs))

    def reset(self) -> None:
        self.model_s, self.calls = 0.0, []


def client_for(url: str) -> Any:
    from topologies.models import make_client, resolve_model

    return make_client(resolve_model("scripted-model", task_endpoints=url))


def problems(rows: int) -> list[Any]:
    from lcb.data import load_problems

    builtin = list(load_problems("builtin").problems)
    return [replace(builtin[i % len(builtin)], id=f"{builtin[i % len(builtin)].id}#{i}") for i in range(rows)]


TEAMS = (("single", 1), ("independent", 4), ("sequential", 4), ("centralized", 4), ("decentralized", 4))
SERIAL = frozenset({"single", "sequential", "centralized"})
# (topology, size, serial calls per row, grade) for (b), with the scripted player's flow (no
# programs run): single answers at once; independent's 4 replicas answer in parallel; sequential's
# 4 stages one after another; centralized's manager delegates to its 3 workers in one reply, they
# answer in parallel, the manager finishes (3 serial of 5 calls); decentralized's 4 peers debate
# 2 rounds.
THROUGHPUT_RUNS = (("single", 1, 1, False), ("independent", 4, 1, False), ("sequential", 4, 4, False),
                   ("centralized", 4, 3, False), ("decentralized", 4, 2, False), ("sequential", 4, 4, True))


async def replay(client: Any, calls: list[tuple[str, Any, dict[str, Any]]], workers: int) -> float:
    """Wall time for the same calls straight through the client, ``workers`` serial streams."""
    queue = list(calls)

    async def worker() -> None:
        while queue:
            role, messages, kwargs = queue.pop()
            await client.complete(role, messages, **kwargs)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(workers)))
    return time.perf_counter() - started


async def wire_floor(url: str, calls: list[tuple[str, Any, dict[str, Any]]], workers: int) -> float:
    """Wall time for the same requests as bare HTTP posts (bodies built beforehand): what this
    machine and the scripted server deliver with no model layer at all."""
    import aiohttp
    from langchain_core.messages import convert_to_messages
    from langchain_openai.chat_models.base import _convert_message_to_dict

    bodies = [json.dumps({"model": "scripted-model", "messages": [_convert_message_to_dict(m) for m in
                                                               convert_to_messages(messages)]}).encode()
              for _role, messages, _kwargs in calls]
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0),
                                     headers={"Content-Type": "application/json"}) as session:
        async def worker() -> None:
            while bodies:
                async with session.post(f"{url}/chat/completions", data=bodies.pop()) as reply:
                    await reply.read()

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(workers)))
        return time.perf_counter() - started


async def overhead(url: str, repeats: int) -> dict[str, Any]:
    from topologies.prompts import default_team_spec
    from topologies.teams import run_team
    from topologies.types import Decoding

    client = TimedClient(client_for(url))
    batch = problems(14)
    figures: dict[str, Any] = {}
    # warm-up: imports, graph compilation, connection pool
    for topology, size in TEAMS:
        await run_team(default_team_spec(topology, team_size=size), batch[0], client, decoding=Decoding())
    for topology, size in TEAMS:
        spec = default_team_spec(topology, team_size=size, communication="structured_soft")
        client.reset()
        cpu, started = time.process_time(), time.perf_counter()
        for _ in range(repeats):
            for problem in batch:
                await run_team(spec, problem, client, decoding=Decoding())
        wall, cpu = time.perf_counter() - started, time.process_time() - cpu
        calls = list(client.calls)
        replay_cpu = time.process_time()
        await replay(client.inner, calls, 1 if topology in SERIAL else size)  # same parallelism
        replay_cpu = time.process_time() - replay_cpu
        figures[topology] = {
            "calls": len(calls),
            "model_ms_per_call": round(1000 * client.model_s / len(calls), 3),
            "client_cpu_ms_per_call": round(1000 * replay_cpu / len(calls), 3),
            "overhead_cpu_ms_per_call": round(1000 * (cpu - replay_cpu) / len(calls), 3),
            "overhead_wall_ms_per_call": (round(1000 * (wall - client.model_s) / len(calls), 3)
                                          if topology in SERIAL else None),
        }
    await client.inner.aclose()
    return figures


async def throughput(server: ScriptedProcess, topology: str, size: int, rows: int, concurrency: int,
                     latency_s: float, critical_calls: int, *, grade: bool) -> dict[str, Any]:
    """``critical_calls``: serial calls per row (its critical path). The replays run the calls
    with the batch's average parallelism: concurrency x calls per row / critical_calls streams."""
    from topologies.prompts import default_team_spec
    from topologies.runner import Outputs, RecordSink, RunSettings, run_rows
    from topologies.teams import run_team
    from topologies.types import Decoding

    url = server.url
    client = TimedClient(client_for(url))
    spec = default_team_spec(topology, team_size=size)
    batch = problems(rows)
    await run_team(spec, batch[0], client, decoding=Decoding())  # warm-up
    client.reset()
    our_cpu, server_cpu = time.process_time(), server.cpu_s()
    started = time.perf_counter()
    if grade:
        settings = RunSettings(spec, client, Decoding(), 0, "hidden")
        sink = RecordSink(Outputs(None, None), [], resume=False)
        await run_rows(batch, settings, sink, concurrency)
        errors = sum(1 for r in sink.records if r.get("error"))
    else:
        slots = asyncio.Semaphore(concurrency)

        async def one(problem: Any) -> Any:
            async with slots:
                return await run_team(spec, problem, client, decoding=Decoding())

        results = await asyncio.gather(*(one(p) for p in batch))
        errors = sum(1 for t in results if t.error)
    wall = time.perf_counter() - started
    our_cpu, server_cpu = time.process_time() - our_cpu, server.cpu_s() - server_cpu
    streams = max(1, round(concurrency * len(client.calls) / rows / critical_calls))
    raw = await replay(client.inner, client.calls, streams)
    floor = await wire_floor(url, client.calls, streams)
    await client.inner.aclose()
    ideal = math.ceil(rows / concurrency) * critical_calls * latency_s
    return {"topology": topology, "path": "team+grading" if grade else "team only", "rows": rows,
            "concurrency": concurrency, "calls": len(client.calls), "errors": errors,
            "wall_s": round(wall, 3), "ideal_s": round(ideal, 3), "efficiency": round(ideal / wall, 3),
            "raw_client_wall_s": round(raw, 3), "efficiency_vs_raw_client": round(raw / wall, 3),
            "bare_http_wall_s": round(floor, 3), "machine_ceiling": round(min(1.0, ideal / floor), 3),
            # CPU the run itself used: ours (one event loop, plus grading) and the server's
            "our_cpu_ms_per_call": round(1000 * our_cpu / len(client.calls), 3),
            "server_cpu_ms_per_call": round(1000 * server_cpu / len(client.calls), 3),
            "cores": os.cpu_count()}


def median_run(trials: list[dict[str, Any]]) -> dict[str, Any]:
    """The trial with the median efficiency, with every trial's efficiency beside it."""
    ranked = sorted(trials, key=lambda run: run["efficiency"])
    return {**ranked[len(ranked) // 2], "efficiency_trials": [run["efficiency"] for run in trials]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--serve", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--rows", type=int, default=128)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3, help="passes over the 14 built-in problems in (a)")
    parser.add_argument("--latency", type=float, default=0.1)
    parser.add_argument("--trials", type=int, default=3,
                        help="runs per case in (b); the median run is shown (short runs are noisy)")
    args = parser.parse_args()
    from topologies import aio  # the event loop the runner and jobs use (uvloop where installed)

    if args.serve is not None:
        serve(args.serve)
        return 0
    from topologies.heap import settle_for_batches

    settle_for_batches()  # as the runner and jobs do before their first batch

    fast = ScriptedProcess(0.0)
    try:
        figures = aio.run(overhead(fast.url, args.repeats))
    finally:
        fast.close()
    print("(a) team framework overhead per model call, zero latency (target < 5 ms):")
    for topology, row in figures.items():
        wall = row["overhead_wall_ms_per_call"]
        print(f"    {topology:<14} cpu {row['overhead_cpu_ms_per_call']:6.2f} ms"
              + (f", wall {wall:6.2f} ms" if wall is not None else " " * 17)
              + f"   (model call {row['model_ms_per_call']:.2f} ms, client cpu "
              f"{row['client_cpu_ms_per_call']:.2f} ms, {row['calls']} calls)")
    worst = max(row["overhead_cpu_ms_per_call"] for row in figures.values())

    slow = ScriptedProcess(args.latency)
    try:
        runs = [median_run([aio.run(throughput(slow, topology, size, args.rows, args.concurrency, args.latency,
                                                   depth, grade=grade))
                            for _ in range(max(1, args.trials))])
                for topology, size, depth, grade in THROUGHPUT_RUNS]
    finally:
        slow.close()
    print(f"(b) batch throughput at {args.latency * 1000:.0f} ms latency, concurrency {args.concurrency} "
          "(target >= 80 % of ideal):")
    for run in runs:
        print(f"    {run['topology']:<14} {run['path']:<13} {run['rows']} rows in {run['wall_s']:.2f} s, "
              f"ideal {run['ideal_s']:.2f} s -> {100 * run['efficiency']:.1f} %; the same {run['calls']} calls "
              f"straight through the client: {run['raw_client_wall_s']:.2f} s -> team at "
              f"{100 * run['efficiency_vs_raw_client']:.1f} % of the raw client; as bare HTTP posts: "
              f"{run['bare_http_wall_s']:.2f} s -> this machine and server allow at most "
              f"{100 * run['machine_ceiling']:.1f} % of ideal (errors {run['errors']}; median of "
              f"{', '.join(f'{100 * e:.1f}' for e in run['efficiency_trials'])} %)")
        print(f"    {'':<14} {'':<13} CPU per call: ours {run['our_cpu_ms_per_call']:.2f} ms + server "
              f"{run['server_cpu_ms_per_call']:.2f} ms on {run['cores']} cores; the ideal needs "
              f"{run['calls'] / run['ideal_s']:.0f} calls/s")
    print(json.dumps({"overhead_ms_per_call_worst": worst, "overhead": figures, "throughput": runs}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
