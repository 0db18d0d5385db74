"""`python -m topologies.decentralized.langgraph.lcb.langgraph_lcb [--batch ...]`: the decentralized team on LiveCodeBench.

A thin entry point; everything lives in ``topologies.runner`` (see ``--help``).
"""

from __future__ import annotations

from topologies.runner import main

TOPOLOGY = "decentralized"

if __name__ == "__main__":
    raise SystemExit(main(TOPOLOGY, prog="python -m topologies.decentralized.langgraph.lcb.langgraph_lcb"))
