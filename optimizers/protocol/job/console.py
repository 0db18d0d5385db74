"""What a job says while it runs: log lines and progress bars on stderr (stdout is for results)."""

from __future__ import annotations

import sys
from typing import Any

from optimizers.protocol.grid.config import JobConfig


def log(cfg: JobConfig, text: str) -> None:
    if not cfg.quiet:
        print(f"[job] {text}", file=sys.stderr, flush=True)


def progress(description: str, total: int) -> Any:
    from tqdm import tqdm

    return tqdm(total=total, desc=description, file=sys.stderr, leave=False, dynamic_ncols=True)
