"""``python -m optimizers.protocol.run``: the door to ``optimizers.protocol.run.app``."""

from optimizers.protocol.run.app import main

if __name__ == "__main__":
    main()
