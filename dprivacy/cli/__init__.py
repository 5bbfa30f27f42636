"""The ``dprivacy`` command: design, export, verify and apply d_X-private Laplace mechanisms.

``dprivacy --help`` lists the subcommands and the exit codes; ``dprivacy <command> --help``
describes each. Every failure is reported as one line on stderr with a documented exit code.
"""

from dprivacy.cli.app import COMMANDS, build_parser, main
from dprivacy.cli.inputs import load_universe, load_workload
from dprivacy.cli.params import make_metric
from dprivacy.cli.report import design_table

__all__ = ["COMMANDS", "build_parser", "design_table", "load_universe", "load_workload",
           "main", "make_metric"]
