"""Run one job in its own process (for kill/resume tests): job_entry.py OUT BASE_URL JSON_OVERRIDES.

Prints the summary line on stdout, like the app. Test-only.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from job_support import fast_runtime, job_config, register_test_methods  # noqa: E402

from optimizers.protocol.job.errors import JobError  # noqa: E402
from optimizers.protocol.job.engine import run_job, summary_line  # noqa: E402


def main() -> int:
    out, base_url, overrides = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    register_test_methods()
    try:
        result = run_job(job_config(Path(out), base_url, **overrides), fast_runtime())
    except JobError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(summary_line(result)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
