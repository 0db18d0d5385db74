"""LiveCodeBench entry point of the single team."""
