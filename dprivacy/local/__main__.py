"""``python -m dprivacy.local``: the ``dprivacy local`` commands standalone, with the same one-line
errors and exit codes (0 ok, 2 usage, 3 input file, 4 refused matrix)."""

import sys

from dprivacy.cli import main

if __name__ == "__main__":  # importing this module (e.g. by documentation tools) runs nothing
    sys.exit(main(["local", *sys.argv[1:]]))
