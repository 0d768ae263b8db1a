"""Historical cascade logs: one row per displayed position of a cascading-bandit session.

A session is an (episode, user) pair: the user, with one context ``x``, is shown arms
``k_1, k_2, …`` and examines them in order until the first click (the cascade rule;
``docs/cascading.md``, The Bayesian side). :func:`read_cascade_log` validates such a log once and
returns a :class:`CascadeLog`: plain NumPy arrays sorted by (episode, user, position), the
flattened regression table ``[x; onehot(k)]`` the logistic click model is fitted on
(:meth:`CascadeLog.design`), the session arrays of the cascade likelihood
(:meth:`CascadeLog.sessions`) and a content hash recorded in every prior fitted from it.

The inputs are those of :func:`hierbandit.data.read_log` (DataFrame, xarray Dataset, CSV,
Parquet or netCDF file), read by the same loader; nothing here imports PyMC.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from hierbandit._validation import MAX_ABS, check_positive_int
from hierbandit.data.log import _ids, _load, _missing_column, _numeric, _readonly

__all__ = ["CascadeLog", "read_cascade_log"]

_HASH_TAG = b"hierbandit.CascadeLog/v1\x00"


@dataclass(frozen=True, eq=False)
class CascadeLog:
    """A validated cascade log, one row per displayed position, sorted by
    (episode, user, position). Build one with :func:`read_cascade_log`.

    Attributes
    ----------
    X : ndarray, shape (n, d)
        Context of the session each row belongs to.
    arm : ndarray of int64, shape (n,)
        Displayed arm, in ``[0, K)``.
    click : ndarray of int8, shape (n,)
        1 on the clicked row of a session.
    episode, user, position : ndarray of int64, shape (n,)
        The original ids (``position`` is 0-based within its session after reading).
    session : ndarray of int64, shape (n,)
        Session code ``0..S-1`` in sorted order.
    n_arms : int
        ``K``.
    features : tuple of str
        Context column names.
    source : str
    data_hash : str
        SHA-256 of the content (independent of ``source`` and column names).
    columns : dict
        The column names read.
    """

    X: np.ndarray
    arm: np.ndarray
    click: np.ndarray
    episode: np.ndarray
    user: np.ndarray
    position: np.ndarray
    session: np.ndarray
    n_arms: int
    features: tuple[str, ...]
    source: str = "arrays"
    data_hash: str = ""
    columns: dict[str, Any] = field(default_factory=dict)

    @property
    def n_rows(self) -> int:
        """Number of displayed positions."""
        return int(self.X.shape[0])

    @property
    def n_features(self) -> int:
        """``d``."""
        return int(self.X.shape[1])

    @property
    def n_params(self) -> int:
        """``d + K``."""
        return self.n_features + self.n_arms

    @property
    def n_sessions(self) -> int:
        """Number of (episode, user) sessions."""
        return int(self.session[-1]) + 1 if self.n_rows else 0

    @property
    def horizon(self) -> int:
        """Longest session."""
        return int(self.position.max()) + 1 if self.n_rows else 0

    @property
    def n_clicks(self) -> int:
        return int(self.click.sum())

    def design(self) -> tuple[np.ndarray, np.ndarray]:
        """The flattened regression table: ``Z (n, d + K)`` rows ``[x; onehot(k)]`` and ``y (n,)``."""
        n, d = self.X.shape
        Z = np.zeros((n, d + self.n_arms))
        Z[:, :d] = self.X
        Z[np.arange(n), d + self.arm] = 1.0
        return Z, self.click.astype(float)

    def sessions(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Session arrays: contexts ``(S, d)``, arms ``(S, H)`` (``-1`` after the session ended)
        and clicks ``(S, H)``."""
        S, H = self.n_sessions, self.horizon
        first = np.searchsorted(self.session, np.arange(S))
        Xs = self.X[first]
        arms = np.full((S, H), -1, dtype=np.int64)
        clicks = np.zeros((S, H), dtype=np.int8)
        arms[self.session, self.position] = self.arm
        clicks[self.session, self.position] = self.click
        return Xs, arms, clicks

    def episode_batches(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """``(Z, y)`` of every episode in order (to replay an online learner)."""
        Z, y = self.design()
        bounds = np.flatnonzero(np.diff(self.episode)) + 1
        return [
            (Zb, yb)
            for Zb, yb in zip(np.split(Z, bounds), np.split(y, bounds), strict=True)
            if yb.size
        ]

    def to_dataframe(self) -> pd.DataFrame:
        """The log as a DataFrame with the columns it was read with."""
        c = self.columns or {}
        out = {
            c.get("episode", "episode"): self.episode.copy(),
            c.get("user", "user"): self.user.copy(),
            c.get("position", "position"): self.position.copy(),
            c.get("arm", "arm"): self.arm.copy(),
            c.get("click", "click"): self.click.astype(np.int64),
        }
        for j, name in enumerate(self.features):
            out[name] = self.X[:, j].copy()
        return pd.DataFrame(out)

    def provenance(self) -> dict[str, Any]:
        """A JSON-serialisable record of the log."""
        return {
            "source": self.source,
            "data_hash": self.data_hash,
            "n_rows": self.n_rows,
            "n_sessions": self.n_sessions,
            "n_clicks": self.n_clicks,
            "n_arms": self.n_arms,
            "n_features": self.n_features,
            "features": list(self.features),
            "columns": dict(self.columns),
        }

    def __repr__(self) -> str:
        return (
            f"CascadeLog(n_rows={self.n_rows}, n_sessions={self.n_sessions}, "
            f"n_clicks={self.n_clicks}, n_arms={self.n_arms}, features={list(self.features)}, "
            f"data_hash={self.data_hash[:12]}…)"
        )


def _content_hash(log_arrays: dict[str, np.ndarray], features: tuple[str, ...]) -> str:
    h = hashlib.sha256(_HASH_TAG)
    h.update(json.dumps({"features": list(features)}).encode())
    for name in ("episode", "user", "position", "arm", "click"):
        h.update(np.ascontiguousarray(log_arrays[name], dtype="<i8").tobytes())
    h.update((np.ascontiguousarray(log_arrays["X"], dtype="<f8") + 0.0).tobytes())
    return h.hexdigest()


def read_cascade_log(
    data: Any,
    *,
    episode: str = "episode",
    user: str = "user",
    position: str = "position",
    arm: str = "arm",
    click: str = "click",
    features: Any = None,
    n_arms: int | None = None,
    position_base: int = 0,
) -> CascadeLog:
    """Read and validate a historical cascade log (one row per displayed position).

    Parameters
    ----------
    data : DataFrame, xarray.Dataset, path (.csv[.gz], .parquet, .nc) or CascadeLog
    episode, user, position, arm, click : str
        Column names. ``episode`` and ``user`` identify a session; ``position`` is its display
        step (contiguous from ``position_base``); ``arm`` the displayed arm id (a non-negative
        integer, the index of the arm's reward ``e_k``); ``click`` 0/1.
    features : list of str, optional
        Context columns (default: every other numeric column).
    n_arms : int, optional
        ``K``; arm ids must be below it (default: the largest id plus one).
    position_base : {0, 1}
        The first position's value.

    Returns
    -------
    CascadeLog

    Raises
    ------
    ValueError, TypeError
        Missing or duplicate columns, non-integer or negative ids, unknown arms, clicks other
        than 0/1, NaN/inf contexts, duplicate (episode, user, position) rows, and any violation
        of the cascade rule: positions not contiguous from ``position_base`` within a session,
        more than one click in a session, a displayed row after a click, a context that
        changes within a session.
    """
    if isinstance(data, CascadeLog):
        return data
    for name, value in (
        ("episode", episode),
        ("user", user),
        ("position", position),
        ("arm", arm),
        ("click", click),
    ):
        if not isinstance(value, str):
            raise TypeError(f"{name} must be a column name (str), got {type(value).__name__}")
    if position_base not in (0, 1) or isinstance(position_base, bool):
        raise ValueError(f"position_base must be 0 or 1, got {position_base!r}")
    frame, source = _load(data)
    if len(frame) == 0:
        raise ValueError("data is empty (0 rows)")
    columns = [str(c) for c in frame.columns]
    if len(set(columns)) != len(columns):
        raise ValueError(f"data has duplicate column names: {columns}")
    roles = {"episode": episode, "user": user, "position": position, "arm": arm, "click": click}
    if len(set(roles.values())) != len(roles):
        raise ValueError(f"the episode/user/position/arm/click columns must differ, got {roles}")
    for role, col in roles.items():
        if col not in columns:
            raise _missing_column(role, col, columns)
    if features is None:
        feats = [
            c
            for c in columns
            if c not in roles.values() and getattr(frame[c].dtype, "kind", "O") in "biuf"
        ]
        if not feats:
            raise ValueError("features: no numeric context columns besides the id columns")
    else:
        feats = [features] if isinstance(features, str) else list(features)
        if not feats:
            raise ValueError("features must name at least one column")
        for f in feats:
            if not isinstance(f, str):
                raise TypeError(f"features must hold column names (str), got {f!r}")
            if f in roles.values():
                raise ValueError(f"features must not include the id column {f!r}")
            if f not in columns:
                raise _missing_column("features", f, columns)
        if len(set(feats)) != len(feats):
            raise ValueError(f"features has duplicate names: {feats}")
    ep = _ids(frame[episode], episode, "episode")
    us = _ids(frame[user], user, "user")
    pos = _ids(frame[position], position, "position")
    ar = _ids(frame[arm], arm, "arm")
    if n_arms is None:
        K = int(ar.max()) + 1
    else:
        K = check_positive_int(n_arms, "n_arms")
        if ar.max() >= K:
            bad = int(np.flatnonzero(ar >= K)[0])
            raise ValueError(
                f"arm column {arm!r} holds unknown arms: ids must be in [0, {K}), got "
                f"{int(ar[bad])} at row {bad}"
            )
    cl_raw = frame[click]
    if getattr(cl_raw.dtype, "kind", "O") not in "biuf":
        raise TypeError(f"click column {click!r} must be 0/1, got dtype {cl_raw.dtype}")
    cl = _numeric(cl_raw, click, "click")
    if not np.all((cl == 0) | (cl == 1)):
        bad = int(np.flatnonzero((cl != 0) & (cl != 1))[0])
        raise ValueError(f"click column {click!r} must hold 0/1, got {cl[bad]!r} at row {bad}")
    X = np.column_stack([_numeric(frame[f], f, "feature") for f in feats])
    big = np.abs(X) > MAX_ABS  # squares of larger contexts overflow the information matrix
    if big.any():
        r, c = (int(v[0]) for v in np.nonzero(big))
        raise ValueError(
            f"feature column {feats[c]!r} must have magnitude <= {MAX_ABS:g}, got "
            f"{X[r, c]:g} at row {r}"
        )
    pos = pos - position_base
    if np.any(pos < 0):
        raise ValueError(f"position column {position!r} must start at {position_base}")

    order = np.lexsort((pos, us, ep))
    ep, us, pos, ar, cl, X = ep[order], us[order], pos[order], ar[order], cl[order], X[order]
    new_session = np.ones(len(ep), dtype=bool)
    new_session[1:] = (ep[1:] != ep[:-1]) | (us[1:] != us[:-1])
    session = np.cumsum(new_session) - 1
    starts = np.flatnonzero(new_session)
    first_of = starts[session]
    expected = np.arange(len(ep)) - first_of
    if np.any(pos != expected):
        i = int(np.flatnonzero(pos != expected)[0])
        dup = i > 0 and not new_session[i] and pos[i] == pos[i - 1]
        what = "duplicate position" if dup else "positions not contiguous"
        raise ValueError(
            f"{what} in session (episode={int(ep[i])}, user={int(us[i])}): positions must be "
            f"{position_base}, {position_base + 1}, … without gaps or repeats"
        )
    ends = np.append(starts[1:], len(ep)) - 1
    n_click = np.add.reduceat(cl, starts)
    if np.any(n_click > 1):
        s = int(np.flatnonzero(n_click > 1)[0])
        raise ValueError(
            f"session (episode={int(ep[starts[s]])}, user={int(us[starts[s]])}) has "
            f"{int(n_click[s])} clicks; a cascade session stops at its first click"
        )
    late = (n_click == 1) & (cl[ends] != 1)
    if np.any(late):
        s = int(np.flatnonzero(late)[0])
        raise ValueError(
            f"session (episode={int(ep[starts[s]])}, user={int(us[starts[s]])}) has rows after "
            "its click (cascade rule: every displayed item up to and including the click, "
            "nothing after)"
        )
    changed = np.any(X[first_of] != X, axis=1)
    if changed.any():
        i = int(np.flatnonzero(changed)[0])
        raise ValueError(
            f"the context changes within session (episode={int(ep[i])}, user={int(us[i])}); "
            "a session has one context"
        )
    arrays = {"episode": ep, "user": us, "position": pos, "arm": ar, "click": cl, "X": X}
    feats_t = tuple(feats)
    return CascadeLog(
        X=_readonly(X),
        arm=_readonly(ar),
        click=_readonly(cl.astype(np.int8)),
        episode=_readonly(ep),
        user=_readonly(us),
        position=_readonly(pos),
        session=_readonly(session.astype(np.int64)),
        n_arms=K,
        features=feats_t,
        source=source,
        data_hash=_content_hash(arrays, feats_t),
        columns={**roles, "features": list(feats), "position_base": position_base},
    )
