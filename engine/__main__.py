"""``python -m engine serve|start|status|stop`` or any ``ember`` headless command."""

import sys

from engine.cli import main

argv = sys.argv[1:]
if argv and argv[0] in ("serve", "start", "status", "stop"):
    argv = ["engine", *argv]
sys.exit(main(argv))
