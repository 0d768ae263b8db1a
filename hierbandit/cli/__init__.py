"""The ``hierbandit`` command (see :mod:`hierbandit.cli.main`)."""

from hierbandit.cli.main import app

__all__ = ["app"]
