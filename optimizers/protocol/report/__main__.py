"""``python -m optimizers.protocol.report``: the door to ``optimizers.protocol.report.page``."""

from optimizers.protocol.report.page import main

if __name__ == "__main__":
    raise SystemExit(main())
