"""LiveCodeBench entry point of the decentralized team."""
