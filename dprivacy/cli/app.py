"""The ``dprivacy`` parser and entry point: one-line errors and documented exit codes.

To add a subcommand, write ``register(subparsers)`` (add a parser and ``set_defaults(func=...)``,
where ``func(args) -> int``) and append it to :data:`COMMANDS`.
"""

from __future__ import annotations

import argparse
import sys
import textwrap
import warnings
from collections.abc import Callable, Sequence
from typing import NoReturn

from dprivacy.cli import (
    cmd_budgets,
    cmd_demo,
    cmd_design,
    cmd_local,
    cmd_release,
    cmd_reproduce,
    cmd_verify,
)
from dprivacy.cli.exits import (
    BUDGET,
    EXIT_CODES_HELP,
    INPUT,
    INTERNAL,
    INTERRUPTED,
    REFUSED,
    USAGE,
    CLIError,
    UsageError,
    one_line,
    report,
)
from dprivacy.errors import (
    BudgetExceededError,
    ConfigMismatchError,
    DPrivacyError,
    PrivacyViolationError,
)
from dprivacy.service import serve as service_cli

DESCRIPTION = """Design, verify and apply d_X-private Laplace mechanisms.

  demo       the main job: a design for the shipped US cities with the geodesic metric
  design     universe CSV + metric + query matrix -> mechanism config JSON and a report
  verify     config + YOUR universe, metric and queries -> re-checks privacy (Theorem 1)
  release    verify, charge a budget ledger, and write noisy answers (eq. (5))
  reproduce  the paper's experiments (from a source checkout)
  local      the local model (PreTPost): aggregator service, user agent, cost of a randomiser
  serve      serve protected tables (PINQ / ProPer) to remote analysts holding a key
  budgets    the data owner's view of a service's budgets (PINQ per analyst, ProPer per person)

Privacy condition checked before anything is written or released (Theorem 1):
sum_k beta_k w_k |F_ki - F_kj| <= eps_ij for every constrained pair (i, j)."""

#: ``register(subparsers)`` functions, one per subcommand, in the order --help lists them.
COMMANDS: list[Callable[[argparse._SubParsersAction], object]] = [
    cmd_demo.register, cmd_design.register, cmd_verify.register, cmd_release.register,
    cmd_reproduce.register, cmd_local.register, service_cli.register, cmd_budgets.register,
]


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors raise :class:`UsageError` (one line, exit 2)."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see {self.prog} --help)")


def version() -> str:
    """The installed distribution's version (the package's ``__version__`` from a checkout)."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version("dprivacy")
    except PackageNotFoundError:
        import dprivacy

        return dprivacy.__version__


def build_parser() -> argparse.ArgumentParser:
    """The ``dprivacy`` parser with every registered subcommand."""
    p = Parser(prog="dprivacy", description=DESCRIPTION, epilog=EXIT_CODES_HELP,
               formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=f"dprivacy {version()}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True,
                           parser_class=Parser)
    for register in COMMANDS:
        register(sub)
    for s in sub.choices.values():
        if s.description and "\n" not in s.description:
            s.description = textwrap.fill(s.description, 88)
        s.epilog = ((s.epilog or "").rstrip() + "\n\n" + EXIT_CODES_HELP).lstrip()
        s.formatter_class = argparse.RawDescriptionHelpFormatter
    return p


def _subcommands(parser: argparse.ArgumentParser) -> set[str]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return set(action.choices)
    return set()


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``dprivacy`` console script; returns the exit code.

    Every failure is one line on stderr (``DPRIVACY_DEBUG=1`` adds the traceback); the exit codes
    are listed in ``dprivacy --help``.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    command = next((a for a in argv if not a.startswith("-")), "")
    with warnings.catch_warnings(record=True) as caught:
        code = _run(argv, command)
    if code == 0:  # a failed run prints its one error line only
        seen: set[str] = set()
        for w in caught:
            text = one_line(w.message)
            if text not in seen:
                seen.add(text)
                print(f"dprivacy{' ' + command if command else ''}: warning: {text}",
                      file=sys.stderr)
    return code


def _run(argv: list[str], command: str) -> int:
    try:
        parser = build_parser()
        if command not in _subcommands(parser):
            command = ""
        args = parser.parse_args(argv)
        command = args.command
        return int(args.func(args))
    except SystemExit as exc:  # --help and --version
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else USAGE)
    except CLIError as exc:
        report(command, str(exc), exc)
        return exc.code
    except BudgetExceededError as exc:
        report(command, str(exc), exc)
        return BUDGET
    except (ConfigMismatchError, PrivacyViolationError) as exc:
        report(command, f"REFUSED: {exc}", exc)
        return REFUSED
    except DPrivacyError as exc:
        report(command, str(exc), exc)
        return INPUT
    except KeyboardInterrupt as exc:
        report(command, "interrupted; nothing was written", exc)
        return INTERRUPTED
    except BrokenPipeError:  # e.g. `dprivacy design ... | head`: stop quietly
        import os

        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return 0
    except MemoryError as exc:
        report(command, "out of memory: the inputs are too large for this machine", exc)
        return INPUT
    except Exception as exc:  # noqa: BLE001 (the last resort: never a traceback)
        report(command, f"internal error ({type(exc).__name__}: {one_line(exc, 200)}); this is "
               "a bug in dprivacy: rerun with DPRIVACY_DEBUG=1 and report the traceback", exc)
        return INTERNAL


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
