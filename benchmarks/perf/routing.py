"""Endpoint routing against prefix-caching model servers: least-in-flight vs session affinity.

    .venv/bin/python benchmarks/perf/routing.py [--rows 48] [--concurrency 16]

Four scripted servers (one child process) model automatic prefix caching
(topologies/scripted/prefix_cache.py): a reply waits until the prompt tokens that server has not
cached are prefilled — one request at a time per server, at ``--prefill-tokens-per-s`` — then for
``--decode-s`` of decoding, paid concurrently. The same batch of team rollouts (``--rows``
problems for each of the centralized and decentralized teams of four, ``--concurrency`` rollouts in
flight, the project's seed prompts) runs once per routing policy through one client over the four
endpoints, each policy against freshly started servers (empty caches).

Problems: the built-in ones, each row made distinct by a unique first line (so rows do not share
a statement; a real batch of LCB problems does not either) — the scripted player still recognises
the statement and answers it.

Figures per policy: prefix-cache hit rate over all four servers (cached prompt tokens / prompt
tokens), rollouts per second, the busiest server's share of requests relative to the mean.
Targets for affinity: hit rate >= 80 %, >= 1.5x the rollouts per second of least-in-flight,
busiest share <= 1.25x the mean. The last line reads ``hit_rate=H speedup=S max_share=M`` for the
affinity run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

ENDPOINTS = 4
TEAMS = (("centralized", 4), ("decentralized", 4))
POLICIES = ("least_in_flight", "affinity")


def padded_player(reply_tokens: int) -> Any:
    """The team player, its replies opened by ``reply_tokens`` tokens of reasoning (a model
    explains before it answers; the scripted player alone answers in a dozen words). The text
    differs per reply, as a model's does."""
    from topologies.scripted import FunctionRule, Script
    from topologies.scripted.prefix_cache import CHARS_PER_TOKEN
    from topologies.scripted.script import as_reply
    from topologies.teams.rehearsal import team_player

    player = team_player(use_tools=False, delegate=True)
    words = ("consider", "the", "input", "bounds", "then", "check", "each", "sample", "against",
             "our", "reading", "of", "statement", "edge", "cases", "first")

    def answer(request: Any) -> Any:
        reply = player.function(request)
        if reply is None or reply_tokens <= 0:
            return reply
        reply = as_reply(reply)
        text, step = [], request.number
        while sum(len(w) + 1 for w in text) < reply_tokens * CHARS_PER_TOKEN:
            step = (step * 1103515245 + 12345) % 2**31
            text.append(words[step % len(words)])
        return replace(reply, content=f"Reasoning: {' '.join(text)}.\n\n{reply.content or ''}")

    return Script([FunctionRule("padded_player", answer)])


def serve(count: int, decode_s: float, prefill_tokens_per_s: float, reply_tokens: int) -> None:
    """Child process: ``count`` prefix-caching scripted servers, until stdin closes."""
    from contextlib import ExitStack

    from topologies.scripted import ScriptedServer
    from topologies.scripted.prefix_cache import PrefixCacheModel

    model = PrefixCacheModel(prefill_tokens_per_s=prefill_tokens_per_s)
    script = replace(padded_player(reply_tokens), latency_s=decode_s)
    with ExitStack() as stack:
        servers = [stack.enter_context(ScriptedServer(script, keep_bodies=False, prefix_cache=model))
                   for _ in range(count)]
        print("ready " + " ".join(s.base_url for s in servers), flush=True)
        sys.stdin.read()


class ServerPool:
    def __init__(self, count: int, decode_s: float, prefill_tokens_per_s: float, reply_tokens: int) -> None:
        self.process = subprocess.Popen(
            [sys.executable, __file__, "--serve", str(count), str(decode_s), str(prefill_tokens_per_s),
             str(reply_tokens)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        line = self.process.stdout.readline() if self.process.stdout else ""
        if not line.startswith("ready "):
            self.close()
            raise SystemExit(f"error: the scripted servers did not start ({line!r})")
        self.urls = line.split()[1:]

    def stats(self) -> list[dict[str, Any]]:
        import httpx

        return [httpx.get(url.removesuffix("/v1") + "/_scripted/stats", timeout=10).json()["prefix_cache"]
                for url in self.urls]

    def close(self) -> None:
        if self.process.stdin:
            self.process.stdin.close()
        self.process.wait(timeout=30)


def problems(rows: int) -> list[Any]:
    from lcb.data import load_problems

    builtin = list(load_problems("builtin").problems)
    chosen = []
    for i in range(rows):
        base = builtin[i % len(builtin)]
        chosen.append(replace(base, id=f"{base.id}#{i}",
                              statement=f"(Batch item {i}; instance {i * 7919 % 10007}.)\n{base.statement}"))
    return chosen


async def run_policy(urls: list[str], policy: str, rows: int, concurrency: int) -> dict[str, Any]:
    from topologies.models import make_client, resolve_model
    from topologies.prompts import default_team_spec
    from topologies.teams import run_team
    from topologies.types import Decoding

    config = replace(resolve_model("scripted-model", task_endpoints=urls), routing=policy)
    client = make_client(config, route_salt="routing-benchmark")
    batch = problems(rows)
    slots = asyncio.Semaphore(concurrency)
    errors = 0

    async def one(spec: Any, problem: Any) -> None:
        nonlocal errors
        async with slots:
            trajectory = await run_team(spec, problem, client, decoding=Decoding())
            errors += trajectory.error is not None

    started = time.perf_counter()
    # Both teams' rollouts interleaved, as a sweep's jobs share the servers.
    work = [(default_team_spec(topology, team_size=size), problem)
            for problem in batch for topology, size in TEAMS]
    await asyncio.gather(*(one(spec, problem) for spec, problem in work))
    wall = time.perf_counter() - started
    await client.aclose()
    spills = getattr(client.router, "spills", 0)
    return {"policy": policy, "rollouts": len(work), "wall_s": round(wall, 3),
            "rollouts_per_s": round(len(work) / wall, 3), "errors": errors, "spills": spills}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--serve", nargs=4, help=argparse.SUPPRESS)
    parser.add_argument("--rows", type=int, default=48, help="problems per team (default 48)")
    parser.add_argument("--concurrency", type=int, default=16, help="rollouts in flight (default 16)")
    parser.add_argument("--decode-s", type=float, default=0.05, help="decode time per reply (default 0.05)")
    parser.add_argument("--prefill-tokens-per-s", type=float, default=10_000.0,
                        help="prefill rate per server (default 10000: a 7-9B model on one GPU, roughly)")
    parser.add_argument("--reply-tokens", type=int, default=0,
                        help="reasoning tokens opening every reply (default 0: the scripted player's own)")
    args = parser.parse_args()
    if args.serve is not None:
        serve(int(args.serve[0]), float(args.serve[1]), float(args.serve[2]), int(args.serve[3]))
        return 0
    from topologies import aio
    from topologies.scripted.prefix_cache import summarize

    results = {}
    for policy in POLICIES:
        pool = ServerPool(ENDPOINTS, args.decode_s, args.prefill_tokens_per_s, args.reply_tokens)
        try:
            run = aio.run(run_policy(pool.urls, policy, args.rows, args.concurrency))
            per_server = pool.stats()
        finally:
            pool.close()
        results[policy] = {**run, **summarize(per_server),
                           "requests_per_server": [s["requests"] for s in per_server],
                           "hit_rate_per_server": [s["hit_rate"] for s in per_server]}
    base, affinity = results["least_in_flight"], results["affinity"]
    speedup = affinity["rollouts_per_s"] / base["rollouts_per_s"]
    print(f"{ENDPOINTS} prefix-caching scripted servers, prefill {args.prefill_tokens_per_s:g} tokens/s each, "
          f"decode {args.decode_s * 1000:.0f} ms per reply"
          + (f" (+{args.reply_tokens} reasoning tokens)" if args.reply_tokens else "") + f"; {args.rows} problems x {len(TEAMS)} teams "
          f"({', '.join(t for t, _ in TEAMS)}), {args.concurrency} rollouts in flight")
    for policy in POLICIES:
        row = results[policy]
        print(f"  {policy:<16} hit rate {100 * row['hit_rate']:5.1f} %  {row['rollouts_per_s']:6.2f} rollouts/s "
              f"({row['rollouts']} in {row['wall_s']:.1f} s, errors {row['errors']})  busiest server "
              f"{row['max_share']:.2f}x the mean (requests {row['requests_per_server']}, spills {row['spills']})")
    print(json.dumps(results))
    print(f"hit_rate={affinity['hit_rate']:.3f} speedup={speedup:.2f} max_share={affinity['max_share']:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
