"""``python -m optimizers.protocol.grid``: the door to ``optimizers.protocol.grid.cli``."""

from optimizers.protocol.grid.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
