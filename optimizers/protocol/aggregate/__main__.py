"""``python -m optimizers.protocol.aggregate``: the door to ``optimizers.protocol.aggregate.summary``."""

from optimizers.protocol.aggregate.summary import main

if __name__ == "__main__":
    raise SystemExit(main())
