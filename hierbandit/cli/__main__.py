"""``python -m hierbandit.cli``: the same entry point as the ``hierbandit`` command, so that
without the ``experiments`` extra it exits with the extra named instead of a traceback."""

from hierbandit.cli._entry import main

main()
