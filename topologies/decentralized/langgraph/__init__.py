"""LangGraph implementation of the decentralized team (see topologies.teams.decentralized)."""
