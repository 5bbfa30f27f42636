"""``python -m dprivacy.local``: the ``dprivacy local`` commands standalone."""

import sys

from dprivacy.local.cli import main

sys.exit(main())
