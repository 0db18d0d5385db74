"""LangGraph implementation of the centralized team (see topologies.teams.centralized)."""
