"""``python3 -m bench [--quick] [--json FILE] [--check]``: run the benchmark suite."""
import sys

from .run import main

sys.exit(main())
