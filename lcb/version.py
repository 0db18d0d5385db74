"""The scorer's behaviour version.

``SCORER_VERSION`` enters every job's runtime condition (and so the shared evaluation cache's
keys and every job id): bump it whenever a change to extraction, the sandbox, comparison or
grading can change a verdict, so no stale cached evaluation is reused and no interrupted job
resumes under a different scorer. ``tests/protocol/test_code_versions.py`` grades a fixed set of
programs and fails when the verdicts change while this version does not.
"""

SCORER_VERSION = "2"  # 2: answers out of the child, CPU-time limit, top-level code as a function body
