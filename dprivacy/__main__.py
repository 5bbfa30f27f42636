"""``python -m dprivacy``: the same as the ``dprivacy`` command (see :mod:`dprivacy.cli`)."""

import sys

from dprivacy.cli import main

if __name__ == "__main__":  # importing this module (e.g. by documentation tools) runs nothing
    sys.exit(main())
