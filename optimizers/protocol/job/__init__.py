"""One job's life: its identity (``jobspec``), splits, seeds, the optimize -> validate -> test engine
(``engine.run_job``), evaluations, keep-or-reject, the job folder (``store``) and its errors.

May import: ``lcb``, ``topologies``, the core of ``optimizers``, and ``optimizers.protocol.grid``.
"""
