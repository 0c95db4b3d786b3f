"""``python -m reference_impl``: start the reference server."""

import sys

from reference_impl.launcher import main

sys.exit(main())
