"""The decisions awaiting their reward: what a reward needs to become a row of the policy.

A decision's event id maps to its instance, context, chosen arm, propensity and time. A reward
for the event takes the entry out (so a second reward for it is refused); when more than
``max_pending`` decisions wait, the oldest expire. The ledger is saved beside the policy in
every checkpoint as a sealed netCDF file of numeric arrays only (instance ids as ``int64``, or
as UTF-8 bytes and end offsets, as :mod:`hierbandit._labels` stores labels), and every array of
a loaded file is checked before the ledger is used.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr

from hierbandit._container import read_netcdf
from hierbandit._io import write_sealed_netcdf
from hierbandit._labels import Labels
from hierbandit.errors import InvalidFileError

__all__ = ["Ledger", "PendingRows"]

KIND = "service-ledger"


class PendingRows:
    """Rows taken out of the ledger for a batch of rewards (arrays in request order)."""

    def __init__(
        self,
        instances: list[Any],
        contexts: np.ndarray,
        arms: np.ndarray,
        propensity: np.ndarray,
        decided_at: np.ndarray,
    ) -> None:
        self.instances = instances
        self.contexts = contexts
        self.arms = arms
        self.propensity = propensity
        self.decided_at = decided_at


class Ledger:
    """Pending decisions by event id, oldest first.

    Parameters
    ----------
    n_features : int
        Width of the contexts.
    max_pending : int
        Most decisions kept; beyond, the oldest expire (their rewards are then refused).
    """

    def __init__(self, n_features: int, max_pending: int) -> None:
        self.n_features = int(n_features)
        self.max_pending = int(max_pending)
        self._rows: dict[int, tuple[Any, np.ndarray, int, float, int]] = {}
        self.expired = 0

    def __len__(self) -> int:
        return len(self._rows)

    def __contains__(self, event: int) -> bool:
        return event in self._rows

    def add(
        self,
        first_event: int,
        instances: list[Any],
        contexts: np.ndarray,
        arms: np.ndarray,
        propensity: np.ndarray,
        decided_at: int,
    ) -> None:
        """Record decisions ``first_event, first_event + 1, ...``; expire the oldest if full."""
        for i, inst in enumerate(instances):
            self._rows[first_event + i] = (
                inst,
                contexts[i].copy(),
                int(arms[i]),
                float(propensity[i]),
                int(decided_at),
            )
        excess = len(self._rows) - self.max_pending
        if excess > 0:
            for event in list(self._rows)[:excess]:
                del self._rows[event]
            self.expired += excess

    def copy(self) -> Ledger:
        """A copy to save while this one changes (the rows are never modified in place)."""
        out = Ledger(self.n_features, self.max_pending)
        out._rows = dict(self._rows)
        out.expired = self.expired
        return out

    def take(self, events: list[int]) -> PendingRows:
        """Remove and return the rows of ``events`` (all must be pending: check first)."""
        rows = [self._rows.pop(e) for e in events]
        return PendingRows(
            [r[0] for r in rows],
            np.array([r[1] for r in rows], dtype=np.float64).reshape(len(rows), self.n_features),
            np.array([r[2] for r in rows], dtype=np.int64),
            np.array([r[3] for r in rows], dtype=np.float64),
            np.array([r[4] for r in rows], dtype=np.int64),
        )

    # ------------------------------------------------------------------ files
    def save(self, path: str | os.PathLike[str], attrs: dict[str, Any]) -> Path:
        """Write the ledger and the service's counters ``attrs`` (ints) atomically."""
        events = np.fromiter(self._rows, dtype=np.int64, count=len(self._rows))
        rows = list(self._rows.values())
        n, d = len(rows), self.n_features
        labels = Labels(dict.fromkeys(r[0] for r in rows), name="instance")
        index = {v: i for i, v in enumerate(labels.values())}
        data: dict[str, Any] = {
            "event": ("pending", events),
            "instance": ("pending", np.array([index[r[0]] for r in rows], dtype=np.int64)),
            "context": (("pending", "feature"), np.array([r[1] for r in rows]).reshape(n, d)),
            "arm": ("pending", np.array([r[2] for r in rows], dtype=np.int64)),
            "propensity": ("pending", np.array([r[3] for r in rows], dtype=np.float64)),
            "decided_at": ("pending", np.array([r[4] for r in rows], dtype=np.int64)),
        }
        if labels.kind == "str":
            raw = [str(v).encode() for v in labels.values()]
            data["label_utf8"] = ("byte", np.frombuffer(b"".join(raw), dtype=np.uint8).copy())
            data["label_end"] = ("label", np.cumsum([len(b) for b in raw], dtype=np.int64))
        else:
            data["label_int"] = ("label", np.array(labels.values(), dtype=np.int64))
        ds = xr.Dataset(data)
        ds.attrs = {k: int(v) for k, v in attrs.items()}
        ds.attrs.update(n_features=d, max_pending=self.max_pending, expired=self.expired)
        return write_sealed_netcdf(ds, path, KIND)

    @classmethod
    def load(
        cls, path: str | os.PathLike[str], n_features: int, n_arms: int, max_pending: int
    ) -> tuple[Ledger, dict[str, int]]:
        """Read a ledger written by :meth:`save`, checked; and its counters."""
        path = Path(path)
        ds = read_netcdf(path, KIND).to_dataset()

        def refuse(reason: str) -> InvalidFileError:
            return InvalidFileError(path, reason)

        def arr(name: str, dtype: str, ndim: int) -> np.ndarray:
            if name not in ds:
                raise refuse(f"lacks the variable {name!r}")
            a = ds[name].values
            if a.dtype != np.dtype(dtype) or a.ndim != ndim:
                raise refuse(f"{name} must be a {ndim}-D {dtype} array, got {a.dtype} {a.shape}")
            return a

        counters = {}
        for key, value in ds.attrs.items():
            if not isinstance(value, int | np.integer) or value < 0:
                raise refuse(f"attribute {key} must be a non-negative integer")
            counters[key] = int(value)
        if counters.get("n_features") != n_features:
            raise refuse(f"holds contexts of width {counters.get('n_features')}, not {n_features}")
        event = arr("event", "int64", 1)
        n = event.shape[0]
        inst = arr("instance", "int64", 1)
        ctx = arr("context", "float64", 2)
        arm = arr("arm", "int64", 1)
        prop = arr("propensity", "float64", 1)
        when = arr("decided_at", "int64", 1)
        if inst.shape != (n,) or ctx.shape != (n, n_features) or arm.shape != (n,):
            raise refuse("its pending arrays disagree in length")
        if prop.shape != (n,) or when.shape != (n,):
            raise refuse("its pending arrays disagree in length")
        if "label_int" in ds:
            values: list[Any] = arr("label_int", "int64", 1).tolist()
        else:
            raw = arr("label_utf8", "uint8", 1).tobytes()
            ends = arr("label_end", "int64", 1)
            if ends.size and (np.any(np.diff(ends) < 0) or ends[0] < 0 or ends[-1] != len(raw)):
                raise refuse("its label offsets do not cut its bytes")
            starts = np.concatenate([[0], ends[:-1]]).astype(int)
            try:
                values = [raw[a:b].decode() for a, b in zip(starts, ends.tolist(), strict=True)]
            except UnicodeDecodeError:
                raise refuse("its labels are not UTF-8") from None
        try:
            labels = Labels(values, name="instance")
        except (TypeError, ValueError) as exc:
            raise refuse(f"its instance labels are invalid ({exc})") from None
        L = len(labels)
        nxt = counters.get("next_event", -1)
        if n and (inst.min() < 0 or inst.max() >= L):
            raise refuse("an instance code is out of range")
        if n and (arm.min() < 0 or arm.max() >= n_arms):
            raise refuse("an arm code is out of range")
        if n and (event.min() < 0 or event.max() >= nxt or np.any(np.diff(event) <= 0)):
            raise refuse("its event ids are not increasing ids below next_event")
        if not np.all(np.isfinite(ctx)) or np.any(np.abs(ctx) > 1e6):
            raise refuse("a context is not finite or exceeds 1e6")
        if np.any(~np.isnan(prop) & ((prop < 0) | (prop > 1))):
            raise refuse("a propensity is outside [0, 1]")
        if n > max_pending:
            raise refuse(f"holds {n} pending decisions, more than max_pending={max_pending}")
        ledger = cls(n_features, max_pending)
        ledger.expired = counters.get("expired", 0)
        names = labels.values()
        for i in range(n):
            ledger._rows[int(event[i])] = (
                names[int(inst[i])],
                ctx[i].copy(),
                int(arm[i]),
                float(prop[i]),
                int(when[i]),
            )
        return ledger, counters
