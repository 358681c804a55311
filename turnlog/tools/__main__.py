"""``python -m turnlog.tools``: the ``turnlog`` command."""

import sys

from turnlog.tools._cli import main

__all__: list[str] = []

if __name__ == "__main__":
    sys.exit(main())
