"""LiveCodeBench entry point of the independent team."""
