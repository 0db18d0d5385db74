"""The run protocol: one job of the LCB grid from the command line to ``result.json``, and what is
read back from many of them. Six rooms, each importing only the rooms below it:

- ``grid``       the experiment's design: the typed job record (``JobConfig``), the grid's cells,
                 conformance. Imports no other room.
- ``job``        one job's life: identity, splits, seeds, optimize -> validate -> test, the job folder.
                 Imports ``grid``.
- ``aggregate``  statistics over sealed ``result.json`` files. Imports ``grid``.
- ``report``     what is shown: the HTML report, W&B tracking. Imports ``grid``, ``aggregate``.
- ``run``        the Hydra app: command line -> ``JobConfig`` -> the job. Imports every room below.
- ``grid_command`` the grid command (``--list``, ``--status``, ``--commands``, ``--check``): composes
                 and pre-flights sweeps through ``run``, reads results through ``aggregate``. The top.

Doors (``python -m optimizers.protocol.run | grid | aggregate | report``) are the rooms'
``__main__`` modules; they may import any room, and nothing imports them.
"""
