"""The single team (CLI: python -m topologies.single.lcb.langgraph_lcb)."""
