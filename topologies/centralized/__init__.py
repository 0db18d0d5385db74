"""The centralized team (CLI: python -m topologies.centralized.langgraph.lcb.langgraph_lcb)."""
