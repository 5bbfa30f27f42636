"""``python -m dprivacy``: the same as the ``dprivacy`` command (see :mod:`dprivacy.cli`)."""

import sys

from dprivacy.cli import main

sys.exit(main())
