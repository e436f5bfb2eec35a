"""``python -m jaxcoll``: check every algorithm against the lax built-ins on fake CPU devices
(the command line itself: jaxcoll/tools/cli.py)."""

import sys

from jaxcoll.tools.cli import main

if __name__ == "__main__":
    sys.exit(main())
