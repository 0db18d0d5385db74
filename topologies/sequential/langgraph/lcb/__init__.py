"""LiveCodeBench entry point of the sequential team."""
