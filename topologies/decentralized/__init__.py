"""The decentralized team (CLI: python -m topologies.decentralized.langgraph.lcb.langgraph_lcb)."""
