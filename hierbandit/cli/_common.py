"""Option types and helpers shared by the ``hierbandit`` command and its sub-commands."""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Annotated

import typer

__all__ = ["Out", "Scale", "Seed", "Seeds", "fail"]

Seeds = Annotated[int, typer.Option("--seeds", min=1, help="Number of random seeds.")]
Out = Annotated[Path, typer.Option("--out", help="Output folder.")]
Seed = Annotated[int, typer.Option("--seed", min=0, help="Base seed.")]


class Scale(enum.StrEnum):
    """Experiment scales: ``small`` runs in minutes, ``paper`` is the paper's protocol."""

    small = "small"
    paper = "paper"


def fail(message: str) -> typer.Exit:
    """Print a clean error message (no traceback) and return the exit to raise (code 2)."""
    typer.echo(f"Error: {message}", err=True)
    return typer.Exit(code=2)
