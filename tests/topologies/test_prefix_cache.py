"""The scripted server's prefix-cache model: only shared prefixes hit, LRU eviction, replies stay
cached, uncached tokens cost prefill time, the hit rate is reported."""

from __future__ import annotations

import time

import httpx
import pytest

from topologies.scripted import Reply, Script, ScriptedServer
from topologies.scripted.prefix_cache import (
    PrefixCache,
    PrefixCacheModel,
    continued_text,
    prompt_text,
    summarize,
)


def test_only_a_shared_prefix_hits() -> None:
    cache = PrefixCache(PrefixCacheModel(block_chars=8))
    first = cache.lookup("A" * 32 + "B" * 32)
    assert (first.prompt_tokens, first.cached_tokens) == (16, 0)
    again = cache.lookup("A" * 32 + "B" * 32 + "C" * 16)
    assert again.cached_tokens == 16 and again.uncached_tokens == 4
    # the same middle behind a different start is not a prefix: no hit at all
    assert cache.lookup("X" * 8 + "A" * 32 + "B" * 32).cached_tokens == 0
    assert cache.requests == 3 and cache.hit_requests == 1
    assert cache.hit_rate == pytest.approx(16 / (16 + 20 + 18))


def test_least_recently_used_blocks_are_evicted() -> None:
    cache = PrefixCache(PrefixCacheModel(block_chars=4, capacity_blocks=4))
    cache.lookup("aaaabbbb")  # 2 blocks
    cache.lookup("ccccdddd")  # 2 blocks: full
    cache.lookup("aaaabbbb")  # refreshes a/b
    cache.lookup("eeeeffff")  # evicts c/d, the least recently used
    assert cache.lookup("aaaabbbb").cached_tokens == 2
    assert cache.lookup("ccccdddd").cached_tokens == 0


def test_a_reply_stays_cached_for_the_next_turn() -> None:
    cache = PrefixCache(PrefixCacheModel(block_chars=4))
    body = {"messages": [{"role": "system", "content": "s" * 40}, {"role": "user", "content": "u" * 40}]}
    cache.lookup(prompt_text(body))
    reply = {"role": "assistant", "content": "r" * 80}
    cache.insert(continued_text(body, reply))
    follow = {"messages": [*body["messages"], reply, {"role": "user", "content": "next " * 8}]}
    lookup = cache.lookup(prompt_text(follow))
    assert lookup.cached_tokens >= len(continued_text(body, reply)) // 4 - 1
    assert cache.requests == 2  # insert is not a request


def test_model_rejects_bad_knobs() -> None:
    with pytest.raises(ValueError, match="prefill_tokens_per_s"):
        PrefixCacheModel(prefill_tokens_per_s=0)
    with pytest.raises(ValueError, match="block_chars"):
        PrefixCacheModel(block_chars=0)


def test_summarize_reports_pool_hit_rate_and_busiest_share() -> None:
    stats = [{"requests": 30, "prompt_tokens": 100, "cached_tokens": 90},
             {"requests": 10, "prompt_tokens": 100, "cached_tokens": 50}]
    pool = summarize(stats)
    assert pool["hit_rate"] == pytest.approx(0.7)
    assert pool["max_share"] == pytest.approx(1.5)


def _post(srv: ScriptedServer, messages: list[dict[str, str]]) -> float:
    started = time.perf_counter()
    reply = httpx.post(srv.base_url + "/chat/completions", json={"model": "m", "messages": messages}, timeout=30)
    assert reply.status_code == 200, reply.text
    return time.perf_counter() - started


def test_server_waits_for_uncached_prefill_and_reports_hit_rate() -> None:
    # 4000 tokens at 20 k tokens/s: 0.2 s of prefill when nothing is cached, none when all is.
    model = PrefixCacheModel(prefill_tokens_per_s=20_000)
    messages = [{"role": "system", "content": "You are a careful coder. " * 640}]
    with ScriptedServer(Script([], default=Reply("ok")), prefix_cache=model) as srv:
        cold = _post(srv, messages)
        warm = _post(srv, messages)
        stats = httpx.get(srv.base_url.removesuffix("/v1") + "/_scripted/stats", timeout=10).json()
        assert srv.cache_stats == stats["prefix_cache"]
    assert cold >= 0.2
    assert warm < cold - 0.1
    assert stats["prefix_cache"]["requests"] == 2 and stats["prefix_cache"]["hit_requests"] == 1
    assert 0.45 < stats["prefix_cache"]["hit_rate"] < 0.5  # the partial last block never hits


def test_without_the_model_no_cache_stats() -> None:
    with ScriptedServer(Script([], default=Reply("ok"))) as srv:
        _post(srv, [{"role": "user", "content": "hi"}])
        stats = httpx.get(srv.base_url.removesuffix("/v1") + "/_scripted/stats", timeout=10).json()
        assert srv.cache_stats is None and "prefix_cache" not in stats
