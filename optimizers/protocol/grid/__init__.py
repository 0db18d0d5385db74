"""The experiment's design: what a job is (``config.JobConfig``, frozen) and which jobs make the
grid (``cells``: registry keys, grid cells, conformance).

May import: ``lcb``, ``topologies``, the core of ``optimizers`` (not ``optimizers.protocol``'s
other rooms). ``cli`` (``python -m optimizers.protocol.grid``) is a door and may import any room.
"""
