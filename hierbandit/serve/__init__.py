"""The decision service: a policy behind HTTP, with durable feedback and an event log.

``hierbandit serve PRIOR --state DIR`` (or :func:`run`) serves decisions and takes rewards over
HTTP (:mod:`hierbandit.serve.app`); :class:`DecisionService` is the same service without HTTP.
See ``docs/serving.md`` for the API, the guarantees and how they are tested, and the refit
loop from the event log. Needs the ``serve`` extra.
"""

from __future__ import annotations

from typing import Any

from hierbandit._extras import require
from hierbandit.serve.app import create_app
from hierbandit.serve.eventlog import read_events
from hierbandit.serve.service import DecisionService, RequestError, ServiceConfig

__all__ = ["DecisionService", "RequestError", "ServiceConfig", "create_app", "read_events", "run"]


def run(
    service: DecisionService,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    log_level: str = "info",
    max_body: int | None = None,
) -> None:
    """Serve ``service`` with uvicorn until interrupted (SIGINT/SIGTERM: a last checkpoint is
    written and the state directory released)."""
    uvicorn = require("uvicorn", "serve", "The decision service")
    kwargs: dict[str, Any] = {} if max_body is None else {"max_body": max_body}
    uvicorn.run(
        create_app(service, **kwargs),
        host=host,
        port=port,
        log_level=log_level,
        access_log=False,
        workers=1,
    )
