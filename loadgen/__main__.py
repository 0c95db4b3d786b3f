"""`python -m loadgen` runs the command line."""

import sys

from loadgen.cli import main

sys.exit(main())
