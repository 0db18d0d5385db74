"""A prefix-cache model for the scripted server: what automatic prefix caching (vLLM, SGLang) does
to a reply's latency, so routing can be measured without GPUs.

A request's prompt (tools, then every message with its role, in order — what a chat template
renders) is cut into blocks of ``block_chars`` characters (about ``block_chars / 4`` tokens). A
block is cached when the whole prefix up to and including it was seen before on this server:
blocks are identified by a chained hash (a block's key covers every block before it), so only a
shared *prefix* hits, never a shared middle. The cache holds ``capacity_blocks`` blocks and
evicts the least recently used. Like vLLM, the blocks of a generated reply stay cached too: after
answering, the server caches the prompt followed by its reply as the next turn's request renders
it, so a conversation that continues on the same server prefills only its new messages.

Latency: the uncached part must be prefilled, and prefill is the server's compute: requests queue
for it one after another (a GPU batches prefill, but its throughput in tokens per second is what
it is), at ``prefill_tokens_per_s``. The cached part costs nothing. Decoding is the script's own
``latency_s``, paid concurrently (it does not compete for the prefill queue).
"""

from __future__ import annotations

import asyncio
import json
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

CHARS_PER_TOKEN = 4  # the usual rule of thumb for English text and code with BPE tokenizers


@dataclass(frozen=True, slots=True)
class PrefixCacheModel:
    """The knobs. Defaults: 16-token blocks (vLLM's default), room for 2 M tokens of prefixes,
    a prefill rate of 20 k tokens per second (a 7-9B model on one modern GPU)."""

    block_chars: int = 64
    capacity_blocks: int = 2_000_000 * CHARS_PER_TOKEN // 64
    prefill_tokens_per_s: float = 20_000.0

    def __post_init__(self) -> None:
        if self.block_chars < 1 or self.capacity_blocks < 1:
            raise ValueError("block_chars and capacity_blocks must be >= 1")
        if self.prefill_tokens_per_s <= 0:
            raise ValueError("prefill_tokens_per_s must be > 0")


@dataclass(frozen=True, slots=True)
class CacheLookup:
    prompt_tokens: int
    cached_tokens: int

    @property
    def uncached_tokens(self) -> int:
        return self.prompt_tokens - self.cached_tokens


def prompt_text(body: Mapping[str, Any]) -> str:
    """The prompt as a chat template would lay it out: tools first, then the messages in order."""
    parts: list[str] = []
    tools = body.get("tools")
    if tools:
        parts.append("<tools>" + json.dumps(tools, sort_keys=True, separators=(",", ":")))
    for message in body.get("messages") or []:
        if not isinstance(message, Mapping):
            continue
        content = message.get("content")
        if not isinstance(content, str):
            content = json.dumps(content, sort_keys=True, separators=(",", ":"))
        extra = ""
        if message.get("tool_calls"):
            extra = json.dumps(message["tool_calls"], sort_keys=True, separators=(",", ":"))
        parts.append(f"<|{message.get('role')}|>{message.get('tool_call_id') or ''}{content}{extra}")
    return "".join(parts)


def continued_text(body: Mapping[str, Any], reply_message: Mapping[str, Any]) -> str:
    """The prompt followed by the reply, as the next turn of this conversation renders it."""
    return prompt_text({**body, "messages": [*(body.get("messages") or []), reply_message]})


def _tokens(chars: int) -> int:
    return -(-chars // CHARS_PER_TOKEN)


class PrefixCache:
    """One server's cache (LRU over chained block keys) and its counters. Single-threaded: the
    scripted server calls it from its event loop."""

    def __init__(self, model: PrefixCacheModel) -> None:
        self.model = model
        self._blocks: OrderedDict[int, None] = OrderedDict()
        self.requests = 0
        self.hit_requests = 0  # requests with at least one cached block
        self.prompt_tokens = 0
        self.cached_tokens = 0

    def lookup(self, text: str) -> CacheLookup:
        """Count the cached prefix of ``text``, then cache all of its full blocks (a request's
        prompt is in the cache once it has been prefilled)."""
        size = self.model.block_chars
        keys = _chained_keys(text, size)
        cached_blocks = 0
        for key in keys:
            if key not in self._blocks:
                break
            cached_blocks += 1
        self._touch(keys)
        prompt = _tokens(len(text))
        cached = min(prompt, cached_blocks * size // CHARS_PER_TOKEN)
        self.requests += 1
        self.hit_requests += cached > 0
        self.prompt_tokens += prompt
        self.cached_tokens += cached
        return CacheLookup(prompt, cached)

    def insert(self, text: str) -> None:
        """Cache ``text``'s full blocks without counting a request (a generated reply's KV)."""
        self._touch(_chained_keys(text, self.model.block_chars))

    def _touch(self, keys: Sequence[int]) -> None:
        """Mark ``keys`` most recently used (adding the missing ones), then evict the least recent."""
        for key in keys:
            if key in self._blocks:
                self._blocks.move_to_end(key)
            else:
                self._blocks[key] = None
        while len(self._blocks) > self.model.capacity_blocks:
            self._blocks.popitem(last=False)

    @property
    def hit_rate(self) -> float:
        """Share of prompt tokens served from the cache (vLLM's prefix-cache hit rate)."""
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    def stats(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "hit_requests": self.hit_requests,
            "prompt_tokens": self.prompt_tokens,
            "cached_tokens": self.cached_tokens,
            "hit_rate": round(self.hit_rate, 6),
            "blocks": len(self._blocks),
        }


def _chained_keys(text: str, size: int) -> list[int]:
    # A block's key hashes its text with the previous block's key: equal keys mean equal prefixes
    # (up to hash collisions, which only make the model slightly optimistic).
    keys: list[int] = []
    previous = 0
    for start in range(0, len(text) - size + 1, size):
        previous = hash((previous, text[start:start + size]))
        keys.append(previous)
    return keys


class PrefillQueue:
    """The server's prefill compute: one request's uncached tokens at a time, in arrival order."""

    def __init__(self, tokens_per_s: float) -> None:
        self.tokens_per_s = tokens_per_s
        self._lock: asyncio.Lock | None = None
        self.busy_s = 0.0

    async def prefill(self, tokens: int) -> None:
        if tokens <= 0:
            return
        if self._lock is None:
            self._lock = asyncio.Lock()  # created in the server's own loop
        seconds = tokens / self.tokens_per_s
        async with self._lock:
            await asyncio.sleep(seconds)
            self.busy_s += seconds


def summarize(stats: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Pool-wide figures from several servers' ``stats()``."""
    prompt = sum(int(s["prompt_tokens"]) for s in stats)
    cached = sum(int(s["cached_tokens"]) for s in stats)
    requests = [int(s["requests"]) for s in stats]
    total = sum(requests)
    mean = total / len(requests) if requests else 0.0
    return {
        "requests": total,
        "prompt_tokens": prompt,
        "cached_tokens": cached,
        "hit_rate": cached / prompt if prompt else 0.0,
        "max_share": (max(requests) / mean) if mean else 0.0,  # busiest server vs the mean
    }
