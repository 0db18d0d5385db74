"""The embedded models side by side: decode speed and, with ``--pass1``, pass@1 of the single team
on the built-in problems.

    .venv/bin/python benchmarks/perf/embedded_models.py [--models local,local-1.5b] [--trials 3] [--pass1]

Decode speed: one streamed chat request per trial (temperature 0, ``--tokens`` new tokens, a short
coding prompt) to the model's own llama.cpp server, started as the project starts it; the tokens
after the first one divided by the time from the first to the last (llama.cpp streams one token
per chunk), median over the trials. Time to the first token is printed beside it. pass@1 runs
``python -m topologies.single.lcb.langgraph_lcb --batch --data builtin`` (14 problems, reply cap
1024 tokens as in conf/model) in a child process. Prints one JSON line per model, then the speed
ratio of each model to the first. On a 2-core machine run it alone: a busy neighbour halves the
figures.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from topologies.local_model import EMBEDDED_MODELS, embedded_model, ensure_server, stop_server  # noqa: E402

PROMPT = "Write a Python program that reads n and prints the first n prime numbers, one per line. Explain it."


def stream_once(base_url: str, model_id: str, tokens: int) -> tuple[float, float, int]:
    """(seconds to the first token, decode tokens/second after it, tokens received)."""
    body = json.dumps({
        "model": model_id, "stream": True, "temperature": 0.0, "max_tokens": tokens, "seed": 0,
        "messages": [{"role": "user", "content": PROMPT}],
    }).encode()
    request = urllib.request.Request(base_url + "/chat/completions", data=body,
                                     headers={"Content-Type": "application/json"})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: no proxy
    started = time.perf_counter()
    stamps: list[float] = []
    with opener.open(request, timeout=600) as response:
        for raw in response:
            line = raw.decode("utf-8", "replace").strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            delta = json.loads(line[6:])["choices"][0].get("delta") or {}
            if delta.get("content"):
                stamps.append(time.perf_counter())
    if len(stamps) < 2:
        raise RuntimeError(f"{model_id}: the stream carried {len(stamps)} token(s)")
    return stamps[0] - started, (len(stamps) - 1) / (stamps[-1] - stamps[0]), len(stamps)


def pass_at_1(alias: str) -> dict[str, object]:
    command = [sys.executable, "-m", "topologies.single.lcb.langgraph_lcb", "--batch", "--data", "builtin",
               "--model", alias, "--max-tokens", "1024", "--concurrency", "2"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{alias}: the team run failed: {done.stderr.strip().splitlines()[-1:]}")
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    return {"pass@1": round(summary["pass@1"], 4), "solved": summary["solved"], "problems": summary["n"],
            "team_wall_s": summary["wall_s"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join(EMBEDDED_MODELS), help="comma-separated aliases")
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=200, help="new tokens per decode trial")
    parser.add_argument("--pass1", action="store_true", help="also run the single team on the built-in problems")
    args = parser.parse_args(argv)
    rows = []
    for alias in [a.strip() for a in args.models.split(",") if a.strip()]:
        model = embedded_model(alias)
        started = time.perf_counter()
        base_url = ensure_server(model=model)
        row: dict[str, object] = {"model": alias, "id": model.id,
                                  "server_start_s": round(time.perf_counter() - started, 1)}
        try:
            stream_once(base_url, model.id, 8)  # warm-up: load pages, fill caches
            trials = [stream_once(base_url, model.id, args.tokens) for _ in range(args.trials)]
        finally:
            stop_server()
        row["decode_tok_s"] = round(statistics.median(t[1] for t in trials), 1)
        row["first_token_s"] = round(statistics.median(t[0] for t in trials), 2)
        if args.pass1:
            row.update(pass_at_1(alias))
        print(json.dumps(row), flush=True)
        rows.append(row)
    for row in rows[1:]:
        ratio = float(row["decode_tok_s"]) / float(rows[0]["decode_tok_s"])  # type: ignore[arg-type]
        print(f"decode speed {row['model']} / {rows[0]['model']}: {ratio:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
