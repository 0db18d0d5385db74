import sys

from benchmarks.gym.cli import main

sys.exit(main())
