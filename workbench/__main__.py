"""`python -m workbench`: the same as the `workbench` command (the window when no verb is given)."""

import sys

from workbench.cli import main

sys.exit(main())
