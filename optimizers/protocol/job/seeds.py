"""Request seeds, derived by SHA-256 so they never depend on process state or ordering.

- Optimization rollouts: ``request_seed(job_id, phase, candidate_id, problem_id, sample)``; the
  attempt index is deliberately absent, so an infrastructure retry repeats the same request.
- Validation and test: ``evaluation_seed(condition_id, split, problem_id, seed)`` is paired: it
  does not depend on the method or the candidate, so seed and deployed prompts see the same
  per-problem seed, and the seed prompts' evaluation of a condition is one shareable object.
"""

from __future__ import annotations

import hashlib

SEED_MODULUS = 2**31 - 1


def _seed_of(*parts: object) -> int:
    digest = hashlib.sha256("|".join(str(p) for p in parts).encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % SEED_MODULUS


def request_seed(job_id: str, phase: str, candidate_id: str, problem_id: str, sample: int = 0) -> int:
    return _seed_of("rollout/v1", job_id, phase, candidate_id, problem_id, sample)


def evaluation_seed(condition_id: str, split: str, problem_id: str, seed: int, sample: int = 0) -> int:
    """Sample 0 is the single-sample seed (unchanged); each further sample of a problem gets its own."""
    if sample == 0:
        return _seed_of("evaluation/v1", condition_id, split, problem_id, seed)
    return _seed_of("evaluation/v1", condition_id, split, problem_id, seed, sample)


def reflection_seed(job_id: str, purpose: str, text: str, occurrence: int = 0) -> int:
    """A seed for a reflection call, keyed by what is asked (for methods that want one)."""
    prompt_hash = hashlib.sha256(text.encode("utf-8")).hexdigest()
    return _seed_of("reflection/v1", job_id, purpose, prompt_hash, occurrence)
