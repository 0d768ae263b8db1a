"""The ``hierbandit`` command (see :mod:`hierbandit.cli.main`).

``app`` is imported on first use: the console entry point (:mod:`hierbandit.cli._entry`) checks
for the ``experiments`` extra before typer is imported.
"""

from __future__ import annotations

from typing import Any

__all__ = ["app"]


def __getattr__(name: str) -> Any:
    if name == "app":
        from hierbandit.cli.main import app

        return app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
