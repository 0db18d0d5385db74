"""The independent team (CLI: python -m topologies.independent.lcb.langgraph_lcb)."""
