"""Statistics over sealed ``result.json`` files (``python -m optimizers.protocol.aggregate``):
pairing seeds and arms (``summary``), paired tests (``stats``), cost/optimism/power (``trust``).

May import: the core of ``optimizers`` and ``optimizers.protocol.grid``; never a job's engine.
"""
