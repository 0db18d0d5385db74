"""LiveCodeBench entry point of the centralized team."""
