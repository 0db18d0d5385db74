"""Framework overhead per model call: OpenAIChatClient vs raw HTTP, against the scripted server.

The scripted server runs as a separate process at zero latency, so the difference between the
client's time per call and a raw HTTP POST of the same request is what our layer (LangChain's
ChatOpenAI, the openai SDK, retries bookkeeping, usage ledger) costs. Target: < 5 ms per call.

    .venv/bin/python benchmarks/perf/model_overhead.py [--calls 300] [--concurrency 200]

Prints one JSON object on stdout (figures in milliseconds) and a short summary on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

SCRIPT = {
    "rules": [
        {"name": "code", "when": {"user": "sum"}, "reply": {"content": "```python\nprint(sum(map(int, input().split())))\n```"}},
    ],
    "default": {"content": "ok"},
}
SYSTEM = "You are a careful competitive programmer. Answer with one fenced python block."
USER = "Read two integers on one line and print their sum. " * 20


def start_server() -> tuple[subprocess.Popen[str], str, Path]:
    handle = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)
    json.dump(SCRIPT, handle)
    handle.close()
    process = subprocess.Popen(
        [sys.executable, "-m", "topologies.scripted.server", "--script", handle.name, "--port", "0"],
        cwd=REPO, stdout=subprocess.PIPE, text=True,
    )
    assert process.stdout is not None
    line = process.stdout.readline().strip()
    if not line.startswith("ready "):
        process.kill()
        raise SystemExit(f"error: scripted server did not start: {line!r}")
    return process, line.split(" ", 1)[1], Path(handle.name)


async def time_pairs(first, second, count: int) -> tuple[list[float], list[float]]:
    """Alternate the two calls so machine load drifts hit both series alike."""
    for _ in range(20):  # warm up connections and caches
        await first()
        await second()
    samples: tuple[list[float], list[float]] = ([], [])
    for _ in range(count):
        for call, series in ((first, samples[0]), (second, samples[1])):
            started = time.perf_counter()
            await call()
            series.append((time.perf_counter() - started) * 1000)
    return samples


async def measure(base_url: str, calls: int, concurrency: int) -> dict[str, float]:
    from langchain_openai._compat import httpx as sdk_httpx

    from topologies.models import ModelConfig, make_client
    from topologies.types import Decoding

    body = {
        "model": "scripted",
        "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": USER}],
        "temperature": 0.2, "top_p": 0.95, "max_completion_tokens": 512, "seed": 1, "stream": False,
    }
    http = sdk_httpx.AsyncClient(timeout=30)

    async def raw() -> None:
        response = await http.post(base_url + "/chat/completions", json=body)
        response.raise_for_status()
        json.loads(response.content)["choices"][0]["message"]["content"]

    client = make_client(ModelConfig(id="scripted", endpoints=(base_url,), timeout_s=30))
    decoding = Decoding(temperature=0.2, top_p=0.95, max_tokens=512, seed=1)
    messages = [("system", SYSTEM), ("user", USER)]

    async def ours() -> None:
        await client.complete("solver", messages, decoding=decoding)

    raw_ms, client_ms = await time_pairs(raw, ours, calls)
    await http.aclose()

    started = time.perf_counter()
    await asyncio.gather(*(ours() for _ in range(concurrency)))
    burst_s = time.perf_counter() - started
    await client.aclose()
    raw_median = statistics.median(raw_ms)
    client_median = statistics.median(client_ms)
    return {
        "raw_http_median_ms": round(raw_median, 3),
        "client_median_ms": round(client_median, 3),
        "overhead_median_ms": round(client_median - raw_median, 3),
        "client_p90_ms": round(statistics.quantiles(client_ms, n=10)[-1], 3),
        "client_over_raw_ratio": round(client_median / raw_median, 2),
        "concurrent_calls": concurrency,
        "concurrent_wall_s": round(burst_s, 3),
        "concurrent_calls_per_s": round(concurrency / burst_s, 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--concurrency", type=int, default=200)
    args = parser.parse_args()
    process, base_url, script_path = start_server()
    try:
        result = asyncio.run(measure(base_url, args.calls, args.concurrency))
    finally:
        process.terminate()
        process.wait(timeout=10)
        os.unlink(script_path)
    verdict = "OK" if result["overhead_median_ms"] < 5 else "ABOVE TARGET"
    print(
        f"overhead per call: {result['overhead_median_ms']:.2f} ms (target < 5 ms: {verdict}); "
        f"client {result['client_median_ms']:.2f} ms vs raw HTTP {result['raw_http_median_ms']:.2f} ms "
        f"(x{result['client_over_raw_ratio']}); {args.concurrency} concurrent calls in "
        f"{result['concurrent_wall_s']:.2f} s",
        file=sys.stderr,
    )
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
