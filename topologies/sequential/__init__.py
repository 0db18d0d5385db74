"""The sequential team (CLI: python -m topologies.sequential.langgraph.lcb.langgraph_lcb)."""
