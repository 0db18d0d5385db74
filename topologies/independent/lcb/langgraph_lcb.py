"""`python -m topologies.independent.lcb.langgraph_lcb [--batch ...]`: the independent team on LiveCodeBench.

A thin entry point; everything lives in ``topologies.runner`` (see ``--help``).
"""

from __future__ import annotations

from topologies.runner import main

TOPOLOGY = "independent"

if __name__ == "__main__":
    raise SystemExit(main(TOPOLOGY, prog="python -m topologies.independent.lcb.langgraph_lcb"))
