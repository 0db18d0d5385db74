"""LangGraph implementation of the sequential team (see topologies.teams.sequential)."""
