"""``python -m fpipe ...`` runs the ``fpipe`` command, as ``python -m pip`` runs pip (useful
where the console script is not on PATH, or to pick the interpreter explicitly)."""

import sys

from fpipe.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
