"""``python -m dprivacy.local``: the ``dprivacy local`` commands standalone."""

import sys

from dprivacy.local.cli import main

if __name__ == "__main__":
    sys.exit(main())
