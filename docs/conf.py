"""Sphinx configuration of the dprivacy documentation.

Build (from the project root, after ``pip install ".[docs]"`` or ``".[dev]"``)::

    sphinx-build -W --keep-going -b html docs docs/_build/html

Pages are Markdown (MyST); the API reference is generated from the docstrings of every public
module of ``dprivacy`` and ``solvers`` (autosummary, recursive), so new modules appear on their
own.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.abspath(".."))  # a source checkout documents itself

from dprivacy import __version__  # noqa: E402

project = "dprivacy"
author = "dprivacy developers"
copyright = "2026, dprivacy developers (MIT licence)"  # noqa: A001
version = release = __version__

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",
    "sphinx.ext.mathjax",
    "sphinx.ext.viewcode",
]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store"]
templates_path = ["_templates"]

myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence", "deflist"]
myst_heading_anchors = 3

autosummary_generate = True
# The API summaries show each docstring's first sentence; autosummary ends it at the first ". "
# unless the text before is a known abbreviation. The docstrings cite the papers as "eq. (5)",
# "Def. 3", "Fig. 1", "Theorem 1" or "§4.1.": without these, a summary such as "The d_X-private
# Laplace mechanism, eq." is cut mid-sentence. (tests/test_docs_examples.py checks the tuple
# still exists in the installed Sphinx.)
import sphinx.ext.autosummary as _autosummary  # noqa: E402

_autosummary.WELL_KNOWN_ABBREVIATIONS = tuple(_autosummary.WELL_KNOWN_ABBREVIATIONS) + (
    "eq.", "Eq.", "eqs.", "Def.", "Fig.", "Figs.", "Sec.", "Alg.", "Thm.", "cf.", "resp.", "no.")
autosummary_imported_members = False
# Document each object once, where it is defined: a package's ``__all__`` re-exports names of its
# modules (``dprivacy.Universe`` is ``dprivacy.universe.Universe``), which would otherwise be
# documented twice and make every cross-reference to them ambiguous.
autodoc_default_options = {"members": True, "show-inheritance": True, "ignore-module-all": True}
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_mock_imports: list[str] = []
napoleon_google_docstring = True
napoleon_numpy_docstring = True
# Docstrings written for readers of the code name types informally ("histograms over universe",
# "float or array"); do not turn those phrases into cross-references that cannot resolve.
napoleon_preprocess_types = False
napoleon_use_param = False
napoleon_use_rtype = False
nitpicky = False

html_theme = "furo"
html_title = f"dprivacy {release}"
html_static_path: list[str] = []


# ---------------------------------------------------------------------------------------------
# Docstrings are written for readers of the code and use plain-text maths such as
# ``|F_ki - F_kj|``; in reStructuredText ``|...|`` is a substitution reference. Escape the bars
# outside inline literals, literal blocks and doctests before autodoc hands the text to docutils.
def _escape_bars(line: str) -> str:
    parts = line.split("``")
    for k in range(0, len(parts), 2):  # even parts are outside ``inline literals``
        parts[k] = parts[k].replace("\\|", "|").replace("|", "\\|")
    return "``".join(parts)


def _plain_maths(app, what, name, obj, options, lines: list[str]) -> None:  # noqa: ANN001
    literal_indent: int | None = None
    for i, line in enumerate(lines):
        stripped = line.lstrip()
        indent = len(line) - len(stripped)
        if literal_indent is not None:
            if stripped and indent <= literal_indent:
                literal_indent = None
            else:
                continue
        if stripped.startswith((">>>", "...")) or stripped.startswith(("+-", "+=")):
            continue
        lines[i] = _escape_bars(line)
        if stripped.endswith("::"):
            literal_indent = indent


def setup(app):  # noqa: ANN001, ANN201
    app.connect("autodoc-process-docstring", _plain_maths)
