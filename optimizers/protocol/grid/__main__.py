"""``python -m optimizers.protocol.grid``: the door to the grid command (``optimizers.protocol.grid_command.cli``)."""

from optimizers.protocol.grid_command.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
