"""The console entry point of ``hierbandit``: the command needs the ``experiments`` extra.

Installed with the core only, ``hierbandit`` exits with status 1 and one line naming the
extra, instead of a traceback from ``import typer``. The libraries are found, not imported,
before :mod:`hierbandit.cli.main` is.
"""

from __future__ import annotations

import sys

from hierbandit._extras import check_installed
from hierbandit.errors import MissingExtraError

#: what every subcommand imports when it starts (the parser, the terminal, the figures)
_NEEDED = ("typer", "rich", "matplotlib")


def main() -> None:
    """Run the command, or exit with the missing extra named."""
    try:
        for module in _NEEDED:
            check_installed(module, "experiments", "The hierbandit command")
        from hierbandit.cli.main import main as run

        run()
    except MissingExtraError as exc:
        sys.exit(str(exc))
