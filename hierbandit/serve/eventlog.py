"""The decision service's event log: Parquet files of what it decided and what it learned.

Two tables, one folder each under ``<state>/events/``:

``decisions/``
    one row per decision: ``event``, ``decided_at`` (UTC timestamp), ``instance``, ``arm``, the
    context under the policy's feature names, and ``propensity`` (the probability with which the
    policy chose that arm, NaN where the policy cannot compute it): the input of off-policy
    evaluation.
``rewards/``
    one row per reward applied: ``instance``, ``arm``, the features and ``reward`` — the
    columns :func:`hierbandit.fit_prior` reads — then ``event``, ``decided_at``,
    ``rewarded_at`` and ``propensity``. ``hierbandit fit-prior <state>/events/rewards`` refits
    the prior from served traffic.

Rows are buffered in memory and written at each checkpoint as one file per table,
``part-<first>-<end>.parquet``, named by the range of write-ahead-log records they come from;
the checkpoint written just after says up to which record the files are committed. A file
written after the last checkpoint (the service died between the two) is removed on restart,
and its rows come back from the write-ahead log's replay: no row is lost or written twice.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np

from hierbandit._extras import require
from hierbandit._io import atomic_write

__all__ = ["EventLog", "read_events"]

_PART = re.compile(r"part-(\d{20})-(\d{20})\.parquet")
TABLES = ("decisions", "rewards")


class EventLog:
    """Buffered writer of the two tables in ``directory`` (``<state>/events``).

    Parameters
    ----------
    directory : path
    features : sequence of str
        Column names of the context.
    """

    def __init__(self, directory: str | Path, features: list[str]) -> None:
        self.directory = Path(directory)
        self.features = [str(f) for f in features]
        for table in TABLES:
            (self.directory / table).mkdir(parents=True, exist_ok=True)
        self._buf: dict[str, list[dict[str, Any]]] = {t: [] for t in TABLES}
        self.rows_written = {t: 0 for t in TABLES}

    def decisions(
        self,
        first_event: int,
        decided_at: int,
        instances: list[Any],
        contexts: np.ndarray,
        arms: list[Any],
        propensity: np.ndarray,
    ) -> None:
        """Buffer the rows of a batch of decisions."""
        self._buf["decisions"].append(
            {
                "event": np.arange(first_event, first_event + len(instances), dtype=np.int64),
                "decided_at": np.full(len(instances), decided_at, dtype="datetime64[ns]"),
                "instance": list(instances),
                "arm": list(arms),
                "contexts": contexts,
                "propensity": np.asarray(propensity, dtype=np.float64),
            }
        )

    def rewards(
        self,
        events: list[int],
        rewarded_at: int,
        instances: list[Any],
        contexts: np.ndarray,
        arms: list[Any],
        rewards: np.ndarray,
        decided_at: np.ndarray,
        propensity: np.ndarray,
    ) -> None:
        """Buffer the rows of a batch of rewards."""
        self._buf["rewards"].append(
            {
                "instance": list(instances),
                "arm": list(arms),
                "contexts": contexts,
                "reward": np.asarray(rewards, dtype=np.float64),
                "event": np.asarray(events, dtype=np.int64),
                "decided_at": np.asarray(decided_at).astype("datetime64[ns]"),
                "rewarded_at": np.full(len(events), rewarded_at, dtype="datetime64[ns]"),
                "propensity": np.asarray(propensity, dtype=np.float64),
            }
        )

    @property
    def buffered(self) -> int:
        return sum(len(b["event"]) for t in TABLES for b in self._buf[t])

    def take(self) -> dict[str, list[dict[str, Any]]]:
        """The buffered rows, handed over (the buffer starts empty again)."""
        out = self._buf
        self._buf = {t: [] for t in TABLES}
        return out

    def flush(self, first: int, end: int) -> None:
        """Write the buffered rows, which come from log records ``[first, end)``."""
        self.write(self.take(), first, end)

    def write(self, buf: dict[str, list[dict[str, Any]]], first: int, end: int) -> None:
        """Write rows handed over by :meth:`take` (from log records ``[first, end)``), one
        file per table; safe in another thread than the one buffering new rows."""
        pa = require("pyarrow", "serve", "The decision service's event log")
        pq = require("pyarrow.parquet", "serve", "The decision service's event log")
        for table in TABLES:
            batches = buf[table]
            if not batches:
                continue
            cols: dict[str, Any] = {}
            for name in batches[0]:
                if name == "contexts":
                    X = np.concatenate([b["contexts"] for b in batches])
                    for i, f in enumerate(self.features):
                        cols[f] = X[:, i]
                elif isinstance(batches[0][name], list):
                    cols[name] = [v for b in batches for v in b[name]]
                else:
                    cols[name] = np.concatenate([b[name] for b in batches])
            tab = pa.table(cols)
            path = self.directory / table / f"part-{first:020d}-{end:020d}.parquet"
            atomic_write(path, lambda tmp, tab=tab: pq.write_table(tab, tmp))
            self.rows_written[table] += tab.num_rows

    def discard_after(self, committed: int) -> list[Path]:
        """Remove the files of records at or after ``committed`` (written after the last
        checkpoint) and every half-written temporary file; the paths removed."""
        removed = []
        for table in TABLES:
            for path in (self.directory / table).iterdir():
                m = _PART.fullmatch(path.name)
                if (m is not None and int(m.group(1)) >= committed) or path.name.endswith(".tmp"):
                    path.unlink()
                    removed.append(path)
        return removed


def committed_record(state_dir: str | Path) -> int:
    """The log record up to which the state directory's checkpoint in force is committed."""
    current = Path(state_dir) / "CURRENT"
    if not current.is_file():
        raise FileNotFoundError(f"{state_dir} holds no decision service (no CURRENT file)")
    name = current.read_text().strip()
    if not re.fullmatch(r"checkpoint-\d{20}", name):
        raise ValueError(f"{current} names {name!r:.60}, not a checkpoint folder")
    return int(name[11:])


def read_events(state_dir: str | Path, table: str = "rewards") -> Any:
    """The committed rows of one table of a service's event log, as a pandas DataFrame.

    ``table``: ``"rewards"`` (one row per reward applied: ``instance``, ``arm``, the features,
    ``reward``, ``event``, ``decided_at``, ``rewarded_at``, ``propensity``) or
    ``"decisions"``. Only files covered by the checkpoint in force are read (a running service
    may be writing the next ones), in log order. A running service can be read.
    """
    if table not in TABLES:
        raise ValueError(f"table must be one of {TABLES}, got {table!r}")
    pd = require("pandas", "serve", "Reading the event log")
    pq = require("pyarrow.parquet", "serve", "Reading the event log")
    end = committed_record(state_dir)
    folder = Path(state_dir) / "events" / table
    parts = []
    for path in folder.iterdir():
        m = _PART.fullmatch(path.name)
        if m is not None and int(m.group(2)) <= end:
            parts.append((int(m.group(1)), path))
    frames = [pq.read_table(path).to_pandas() for _, path in sorted(parts)]
    if not frames:
        return pd.DataFrame()
    return pd.concat(frames, ignore_index=True)
