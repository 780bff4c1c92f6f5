"""``python -m engine.cli ...``: the ``ember`` headless commands (as before the CLI became a package)."""

import sys

from engine.cli.main import main

sys.exit(main())
