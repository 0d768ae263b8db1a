"""``hierbandit serve``: the decision service over HTTP (docs/serving.md).

Created from a fitted prior (an ``EbmTS``, or ``EbmUCB`` with ``--policy ucb``) or a policy
checkpoint the first time; after that the state directory alone restores it (its last
checkpoint and the write-ahead log after it), so the same command restarts it.
"""

from __future__ import annotations

import enum
import logging
from pathlib import Path
from typing import Annotated

import typer

from hierbandit.cli._common import fail


class PolicyKind(enum.StrEnum):
    """Policies built from a prior."""

    ts = "ts"
    ucb = "ucb"


def serve_cmd(
    state: Annotated[
        Path, typer.Option("--state", help="State directory (checkpoints, log, event log).")
    ],
    source: Annotated[
        Path | None,
        typer.Argument(
            help="A fitted prior (.nc of fit-prior) or a policy checkpoint; needed only to "
            "create the service (a state directory that holds one restores it)."
        ),
    ] = None,
    policy: Annotated[
        PolicyKind, typer.Option("--policy", help="Policy built from a prior: EbmTS or EbmUCB.")
    ] = PolicyKind.ts,
    seed: Annotated[int | None, typer.Option("--seed", help="Seed of the policy.")] = None,
    host: Annotated[str, typer.Option("--host", help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=0, max=65535, help="TCP port.")] = 8000,
    checkpoint_every: Annotated[
        int, typer.Option("--checkpoint-every", min=1, help="Log records between checkpoints.")
    ] = 10_000,
    max_batch: Annotated[
        int, typer.Option("--max-batch", min=1, help="Most requests in one call.")
    ] = 10_000,
    max_pending: Annotated[
        int,
        typer.Option(
            "--max-pending", min=1, help="Most decisions awaiting a reward (oldest expire)."
        ),
    ] = 1_000_000,
    max_body: Annotated[
        int,
        typer.Option(
            "--max-body",
            min=1,
            help="Largest request body in bytes (a larger one is refused with 413).",
        ),
    ] = 32 * 1024 * 1024,
    fsync: Annotated[
        bool,
        typer.Option(
            "--fsync/--no-fsync",
            help="Force each reward to the disk before acknowledging it (--no-fsync: it survives "
            "the death of the process, not a crash of the machine).",
        ),
    ] = True,
) -> None:
    """Serve decisions and take rewards over HTTP, durably (POST /v1/decide, /v1/reward)."""
    from hierbandit.errors import InvalidFileError
    from hierbandit.serve import DecisionService, ServiceConfig, run

    logging.getLogger("hierbandit.serve").setLevel(logging.INFO)
    config = ServiceConfig(
        checkpoint_every=checkpoint_every, max_batch=max_batch, max_pending=max_pending, fsync=fsync
    )
    try:
        service = DecisionService.open(state, source, policy=str(policy), seed=seed, config=config)
    except (InvalidFileError, FileNotFoundError, ValueError, RuntimeError) as exc:
        raise fail(str(exc)) from None
    run(service, host=host, port=port, max_body=max_body)
