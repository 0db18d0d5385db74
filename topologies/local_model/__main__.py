"""``python -m topologies.local_model``: the door to ``topologies.local_model.cli``."""

import sys

from topologies.local_model.cli import main

if __name__ == "__main__":
    sys.exit(main())
