"""Exit codes of the ``dprivacy`` command and the errors that carry them.

Every failure is reported as ONE line on stderr, ``dprivacy <command>: error: <what> -- <fix>``,
and the process exits with a code that says which kind of failure it was:

====  =======================================================================================
code  meaning
====  =======================================================================================
0     success (``verify``: the config is private for the inputs given)
1     internal error: a bug in dprivacy (``DPRIVACY_DEBUG=1`` shows the traceback)
2     usage: a missing or malformed flag or value (also argparse's own usage errors)
3     input: a file is missing, unreadable, empty or malformed
4     refused: the config does not verify for the inputs given (nothing is released)
5     budget: the release would exceed the ledger's budget (nothing is charged or released)
130   interrupted (Ctrl-C)
====  =======================================================================================
"""

from __future__ import annotations

import os
import re
import sys
import traceback

from dprivacy.errors import DPrivacyError

OK, INTERNAL, USAGE, INPUT, REFUSED, BUDGET, INTERRUPTED = 0, 1, 2, 3, 4, 5, 130

#: The table above, as the ``--help`` epilog shows it.
EXIT_CODES_HELP = """exit codes:
  0  success (verify: the config is private for the inputs given)
  1  internal error, a bug: set DPRIVACY_DEBUG=1 to see the traceback and report it
  2  usage: a missing or malformed flag or value
  3  input: a file is missing, unreadable, empty or malformed
  4  refused: the config does not verify for the inputs given (nothing released)
  5  budget: the release would exceed the ledger's budget (nothing charged)
errors are printed as one line on stderr."""

DEBUG_ENV = "DPRIVACY_DEBUG"


class CLIError(DPrivacyError):
    """A failure of the command, reported as one line with exit code :attr:`code`."""

    code = INPUT


class UsageError(CLIError):
    """A missing or malformed flag or value (exit 2)."""

    code = USAGE


class InputError(CLIError):
    """A file that is missing, unreadable, empty or malformed (exit 3)."""

    code = INPUT


class RefusedError(CLIError):
    """A config that does not verify for the inputs given (exit 4)."""

    code = REFUSED


class BudgetError(CLIError):
    """A release the ledger cannot pay for (exit 5)."""

    code = BUDGET


def one_line(text: object, limit: int = 600) -> str:
    """``text`` on one line (whitespace runs collapsed), cut to ``limit`` characters.

    A leftover reference to the developers' internal specification (the word "spec" followed by
    a section sign and a number), which users do not have, is dropped from library messages.
    """
    s = " ".join(str(text).split())
    s = re.sub(r"\s*\((?:see )?spec \u00a7[^)]*\)", "", s)  # \u00a7 is the section sign
    s = re.sub(r"\s*\(?spec \u00a7[\d.]+\)?", "", s)
    return s if len(s) <= limit else s[: limit - 3] + "..."


def debug() -> bool:
    """True when ``DPRIVACY_DEBUG`` asks for tracebacks."""
    return os.environ.get(DEBUG_ENV, "").strip().lower() not in ("", "0", "false", "no")


def report(command: str, message: str, exc: BaseException | None = None) -> None:
    """Print one error line on stderr (and the traceback too under ``DPRIVACY_DEBUG=1``)."""
    if exc is not None and debug():
        traceback.print_exception(exc, file=sys.stderr)
    print(f"dprivacy{' ' + command if command else ''}: error: {one_line(message)}",
          file=sys.stderr)
