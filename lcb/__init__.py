"""LiveCodeBench for lcb-grid: data, prompts, extraction, sandboxed grading. No LLM code here."""
