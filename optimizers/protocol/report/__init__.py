"""What a person sees (``python -m optimizers.protocol.report``): the HTML report (``page``, its
data, plots and trust panels) and one job's W&B tracking (``tracking``).

May import: the core of ``optimizers``, ``optimizers.protocol.grid`` and ``optimizers.protocol.aggregate``.
"""
