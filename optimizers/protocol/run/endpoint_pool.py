"""Per-job endpoint assignment: N jobs of a sweep share M model servers.

With ``endpoint_pool: [url1, url2, ...]`` in the config and no explicit ``task_endpoints``, job
number ``i`` of a sweep (Hydra's ``hydra.job.num``) talks to ``pool[i % M]``, so a SLURM array or a
joblib sweep spreads its jobs evenly over the servers. Which server a job uses never changes its
results (endpoints are not part of the job identity), so a re-launched sweep may number its jobs
differently without harm.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


class EndpointPoolError(ValueError):
    """A pool that cannot be used; the message is one line."""


def endpoint_for_job(pool: Sequence[str], job_num: int | None) -> str:
    """``pool[job_num % len(pool)]``; the first server outside a sweep (``job_num`` None)."""
    urls = [str(url).strip() for url in pool if str(url).strip()]
    if not urls:
        raise EndpointPoolError("endpoint_pool is empty")
    for url in urls:
        if not url.startswith(("http://", "https://")):
            raise EndpointPoolError(f"endpoint_pool: {url!r} is not an http(s) URL")
    index = 0 if job_num is None else int(job_num)
    if index < 0:
        raise EndpointPoolError(f"job number must be >= 0, not {index}")
    return urls[index % len(urls)]


def apply_endpoint_pool(raw: Mapping[str, Any], job_num: int | None) -> dict[str, Any]:
    """The plain config with ``task_endpoints`` filled from ``endpoint_pool`` when it is empty.

    Explicit ``task_endpoints`` win (the pool is then ignored); the result records the choice in
    ``task_endpoints`` only, so the job folder's config.yaml says which server the job used.
    """
    data = dict(raw)
    pool = data.get("endpoint_pool") or []
    if isinstance(pool, str):
        pool = [part for part in pool.split(",") if part.strip()]
    if not pool or data.get("task_endpoints"):
        return data
    data["task_endpoints"] = [endpoint_for_job(pool, job_num)]
    return data


def hydra_job_num() -> int | None:
    """Hydra's job number inside a multirun job, else None."""
    try:
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode
    except ImportError:
        return None
    if not HydraConfig.initialized():
        return None
    config = HydraConfig.get()
    if config.mode != RunMode.MULTIRUN:
        return None
    return int(config.job.num)
