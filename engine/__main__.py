"""``python -m engine serve|start|status|stop``, or any ``ember`` headless command.

A lone ``stop`` means the engine; ``stop ID`` stops a job, as with ``ember``.
"""

import sys

from engine.cli.main import main

argv = sys.argv[1:]
if argv and (argv[0] == "serve" or (len(argv) == 1 and argv[0] in ("start", "status", "stop"))):
    argv = ["engine", *argv]
sys.exit(main(argv))
