"""`python -m topologies.centralized.langgraph.lcb.langgraph_lcb [--batch ...]`: the centralized team on LiveCodeBench.

A thin entry point; everything lives in ``topologies.runner`` (see ``--help``).
"""

from __future__ import annotations

from topologies.runner import main

TOPOLOGY = "centralized"

if __name__ == "__main__":
    raise SystemExit(main(TOPOLOGY, prog="python -m topologies.centralized.langgraph.lcb.langgraph_lcb"))
