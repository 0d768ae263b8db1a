"""The decision service's state machine: decisions, rewards, the write-ahead log, checkpoints.

:class:`DecisionService` wraps one online policy of the :class:`hierbandit.ebm.Policy` contract
(``EbmTS`` built from a fitted prior by default) and keeps it in a *state directory*::

    <state>/CURRENT                 name of the checkpoint in force (replaced atomically)
    <state>/checkpoint-<n>/         policy.nc (the policy's checkpoint), ledger.nc (pending
                                    decisions and counters): the state after log record n − 1
    <state>/wal/                    the write-ahead log (:mod:`hierbandit.serve.wal`)
    <state>/events/                 the Parquet event log (:mod:`hierbandit.serve.eventlog`)
    <state>/LOCK                    held (``flock``) by the one service using the directory

Every change goes through one lock, in one order, and is written to the log before it is
acknowledged:

* **decide**: the policy chooses (``select_batch``; Thompson draws advance its generators),
  the record ``{"op": "decide", ...}`` with the requests and the chosen arms is appended, the
  decisions enter the ledger under consecutive event ids, and the reply is sent;
* **reward**: the events are checked (issued, pending, not repeated), the record
  ``{"op": "reward", ...}`` is appended *and synced*, the rows are applied to the policy
  (``update_batch``) and the acknowledgement is sent.

A checkpoint (every ``checkpoint_every`` records, and at shutdown) takes a snapshot under the
lock (the policy and the ledger copied, the event-log buffer handed over, a new log segment
started), then — in a background thread for the periodic ones, while requests go on — writes
the event-log files, the policy and the ledger into a new ``checkpoint-<n>`` folder, then
points ``CURRENT`` at it, then drops the log segments and checkpoints it covers. A restart loads the
checkpoint in force and replays the log after it through the same code as live requests —
including the decisions, so the policy's random generators end where an uninterrupted
service's would: the state is that service's, bit for bit, and so are the decisions that
follow. A replayed decision whose arms differ from its record refuses the restart.

A refused request (:class:`RequestError`) changes nothing. If the log cannot be written, the
service stops accepting changes (:attr:`DecisionService.failed`); a restart recovers the state
of the last record written.
"""

from __future__ import annotations

import contextlib
import copy
import fcntl
import json
import logging
import math
import os
import shutil
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

import numpy as np

from hierbandit._io import atomic_write
from hierbandit._labels import as_label
from hierbandit._validation import MAX_ABS, MAX_FEATURE
from hierbandit.checkpoint import load_checkpoint
from hierbandit.ebm import EbmTS, EbmUCB, Policy
from hierbandit.errors import InvalidFileError
from hierbandit.serve.eventlog import EventLog, committed_record
from hierbandit.serve.ledger import Ledger
from hierbandit.serve.wal import WriteAheadLog

__all__ = ["DecisionService", "RequestError", "ServiceConfig"]

log = logging.getLogger("hierbandit.serve")


class RequestError(Exception):
    """A refused request: ``status`` is the HTTP status (4xx), the message says why."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = int(status)
        self.message = message


class ServiceConfig:
    """Settings of a :class:`DecisionService` (none is part of the saved state).

    Parameters
    ----------
    checkpoint_every : int
        Log records between checkpoints (default 10,000).
    max_batch : int
        Most requests (decisions or rewards) in one call (default 10,000).
    max_pending : int
        Most decisions awaiting a reward; beyond, the oldest expire (default 10⁶).
    fsync : bool
        Force each reward's record to the disk before acknowledging it (default True). Without,
        acknowledged rewards survive the death of the process, not a crash of the machine.
    """

    def __init__(
        self,
        *,
        checkpoint_every: int = 10_000,
        max_batch: int = 10_000,
        max_pending: int = 1_000_000,
        fsync: bool = True,
    ) -> None:
        for name, value in (
            ("checkpoint_every", checkpoint_every),
            ("max_batch", max_batch),
            ("max_pending", max_pending),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        self.checkpoint_every = checkpoint_every
        self.max_batch = max_batch
        self.max_pending = max_pending
        self.fsync = bool(fsync)


def _now() -> int:
    return time.time_ns()


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def loads(payload: bytes | str) -> Any:
    """Strict JSON: NaN/Infinity and duplicate keys are refused."""

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        out = dict(items)
        if len(out) != len(items):
            raise ValueError("an object repeats a key")
        return out

    return json.loads(payload, parse_constant=_refuse_constant, object_pairs_hook=pairs)


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), allow_nan=False).encode()


def _as_list(body: dict[str, Any], key: str, n: int | None, limit: int) -> list[Any]:
    value = body.get(key)
    if not isinstance(value, list):
        raise RequestError(400, f"{key} must be a JSON array")
    if not value:
        raise RequestError(400, f"{key} must not be empty")
    if len(value) > limit:
        raise RequestError(413, f"{key} holds {len(value)} items; at most {limit} per request")
    if n is not None and len(value) != n:
        raise RequestError(400, f"{key} must hold {n} items, one per request, got {len(value)}")
    return value


def _check_keys(body: Any, allowed: set[str], required: set[str]) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise RequestError(400, "the body must be a JSON object")
    unknown = sorted(set(body) - allowed)
    if unknown:
        raise RequestError(400, f"unknown fields {unknown}; expected {sorted(allowed)}")
    missing = sorted(required - set(body))
    if missing:
        raise RequestError(400, f"missing fields {missing}")
    return body


def _number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


class DecisionService:
    """A policy behind a durable decide/reward interface, in a state directory.

    Build it with :meth:`open`; :func:`hierbandit.serve.create_app` puts it behind HTTP.
    """

    def __init__(self) -> None:  # use DecisionService.open
        raise TypeError("use DecisionService.open(state_dir, source=...)")

    # ------------------------------------------------------------------ opening
    @classmethod
    def open(
        cls,
        state_dir: str | os.PathLike[str],
        source: str | os.PathLike[str] | Policy | None = None,
        *,
        policy: str = "ts",
        seed: int | None = None,
        config: ServiceConfig | None = None,
    ) -> DecisionService:
        """Open (or create) the service kept in ``state_dir``.

        Parameters
        ----------
        state_dir : path
            The state directory. If it holds a service, that service is restored (its last
            checkpoint, then the write-ahead log replayed) and ``source`` is not read.
        source : path or Policy, optional
            Needed only to create the service: a fitted prior (``.nc`` of
            :func:`hierbandit.fit_prior`, from which an ``EbmTS``/``EbmUCB`` is built), a policy
            checkpoint (any :class:`~hierbandit.ebm.Policy` saved with ``save``), or a policy
            object.
        policy : {"ts", "ucb"}
            The policy built from a prior: ``EbmTS`` or ``EbmUCB``.
        seed : int, optional
            Seed of the policy built from a prior.
        config : ServiceConfig, optional
        """
        self = object.__new__(cls)
        self.config = config if config is not None else ServiceConfig()
        if not isinstance(self.config, ServiceConfig):
            raise TypeError("config must be a ServiceConfig")
        self.state_dir = Path(state_dir)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._ckpt_lock = threading.Lock()
        self._ckpt_thread: threading.Thread | None = None
        self._lockfile = open(self.state_dir / "LOCK", "a")  # noqa: SIM115 - held while open
        try:
            fcntl.flock(self._lockfile, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            self._lockfile.close()
            raise RuntimeError(
                f"the state directory {self.state_dir} is used by another service"
            ) from None
        try:
            self._start(source, policy, seed)
            self._warm_up()
        except BaseException:
            self._lockfile.close()
            raise
        return self

    def _start(self, source: Any, policy: str, seed: int | None) -> None:
        self.failed: str | None = None
        self.started_at = time.time()
        self.metrics = _Metrics()
        current = self.state_dir / "CURRENT"
        self.wal = WriteAheadLog(self.state_dir / "wal", fsync=self.config.fsync)
        if current.exists():
            if source is not None:
                log.info("%s holds a service: restoring it, not reading the source", self.state_dir)
            self._restore(current)
        else:
            if source is None:
                raise ValueError(
                    f"{self.state_dir} holds no service yet: give a source (a prior or a "
                    "policy checkpoint) to create one"
                )
            self._set_policy(_build_policy(source, policy, seed))
            self.ledger = Ledger(self.policy.n_features, self.config.max_pending)
            self.next_event = 0
            self.counters = {"decisions": 0, "rewards": 0}
            self.committed = 0
            self.events = EventLog(self.state_dir / "events", self._feature_names())
            self.events.discard_after(0)
            self.wal.start_segment(0)
            self._ckpt_from = 0
            self.checkpoint()

    def _set_policy(self, policy: Policy) -> None:
        self.policy = policy
        self._arm_labels = policy.arms.labels(np.arange(policy.n_arms))
        self._has_probabilities = _computes_probabilities(policy)

    def _warm_up(self) -> None:
        """Compile the policy's kernels now (on a fresh copy of its configuration), so that the
        first request does not wait for them."""
        t0 = time.perf_counter()
        p = self.policy
        try:
            twin = p.clone(rng=0)
        except Exception:  # a policy that cannot be cloned: skip the warm-up
            return
        inst = [p.instances.label(0) if p.instances.n else 0]
        X = np.zeros((1, p.n_features))
        arm = twin.select_batch(inst, X)
        if self._has_probabilities:
            twin.choice_probabilities(inst, X, arms=arm)
        twin.update_batch(inst, X, arm, np.zeros(1))
        log.info("kernels ready in %.1f s", time.perf_counter() - t0)

    def _feature_names(self) -> list[str]:
        f = self.policy.features
        return list(f) if f is not None else [f"x{i}" for i in range(self.policy.n_features)]

    def _restore(self, current: Path) -> None:
        try:
            committed = committed_record(self.state_dir)
        except ValueError as exc:
            raise InvalidFileError(current, str(exc)) from None
        name = f"checkpoint-{committed:020d}"
        folder = self.state_dir / name
        policy = load_checkpoint(folder / "policy.nc")
        if not isinstance(policy, Policy):
            raise InvalidFileError(folder / "policy.nc", "does not hold a policy")
        self._set_policy(policy)
        self.ledger, counters = Ledger.load(
            folder / "ledger.nc", policy.n_features, policy.n_arms, self.config.max_pending
        )
        if counters.get("committed") != committed:
            raise InvalidFileError(folder / "ledger.nc", "belongs to another checkpoint")
        self.next_event = counters["next_event"]
        self.counters = {
            "decisions": counters.get("decisions", 0),
            "rewards": counters.get("rewards", 0),
        }
        self.committed = committed
        self._ckpt_from = committed
        self.events = EventLog(self.state_dir / "events", self._feature_names())
        for path in self.events.discard_after(committed):
            log.info("removed %s (written after the last checkpoint)", path)
        for other in self.state_dir.glob("checkpoint-*"):
            if other.name != name:
                shutil.rmtree(other, ignore_errors=True)
        records = self.wal.records(committed)
        end = committed
        for index, payload in records:
            self._replay(index, payload)
            end = index + 1
        self.wal.start_segment(end)
        self.wal.drop_before(committed)
        log.info(
            "restored %s: checkpoint %d, %d records replayed",
            self.state_dir,
            committed,
            end - committed,
        )

    def _replay(self, index: int, payload: bytes) -> None:
        where = self.state_dir / "wal"
        try:
            rec = loads(payload)
            op = rec["op"] if isinstance(rec, dict) else None
            if op == "decide":
                arms = self._decide_apply(
                    rec["first"], rec["instances"], rec["contexts"], rec.get("allowed"), rec["time"]
                )[0]
                if [a for a in arms] != rec["arms"]:
                    raise InvalidFileError(
                        where, f"record {index}: the replayed decisions differ from the logged ones"
                    )
            elif op == "reward":
                self._reward_check(rec["events"], rec["rewards"])
                self._reward_apply(rec["events"], rec["rewards"], rec["time"])
            else:
                raise InvalidFileError(where, f"record {index} has no known op")
        except InvalidFileError:
            raise
        except (KeyError, TypeError, ValueError, RequestError) as exc:
            raise InvalidFileError(where, f"record {index} cannot be replayed ({exc})") from None

    # ------------------------------------------------------------------ requests
    def decide(self, body: Any) -> dict[str, Any]:
        """Choose an arm for each request of ``body``:
        ``{"instances": [...], "contexts": [[...], ...], "allowed": [[arm, ...], ...] | null}``.

        Returns ``{"events": [...], "arms": [...], "probabilities": [...] | null}``.
        """
        t0 = time.perf_counter()
        try:
            body = _check_keys(
                body, {"instances", "contexts", "allowed"}, {"instances", "contexts"}
            )
            instances = _as_list(body, "instances", None, self.config.max_batch)
            B = len(instances)
            contexts = _as_list(body, "contexts", B, self.config.max_batch)
            allowed = body.get("allowed")
            if allowed is not None:
                allowed = _as_list(body, "allowed", B, self.config.max_batch)
                if not all(isinstance(a, list) for a in allowed):
                    raise RequestError(400, "allowed must hold one array of arm ids per request")
            with self._lock:
                self._check_open()
                first = self.next_event
                when = _now()
                arms, probs = self._decide_apply(first, instances, contexts, allowed, when)
                record = {
                    "op": "decide",
                    "first": first,
                    "time": when,
                    "instances": instances,
                    "contexts": contexts,
                    "allowed": allowed,
                    "arms": arms,
                }
                self._append(record, sync=False)
                self._maybe_checkpoint()
            events = list(range(first, first + B))
            return {"events": events, "arms": arms, "probabilities": probs}
        finally:
            self.metrics.observe("decide", time.perf_counter() - t0)

    def _decide_apply(
        self, first: int, instances: list[Any], contexts: list[Any], allowed: Any, when: int
    ) -> tuple[list[Any], list[float] | None]:
        """Validate and decide (the policy's generators advance only if everything is valid)."""
        if first != self.next_event:
            raise RequestError(400, f"decisions must start at event {self.next_event}")
        ids = []
        for i, v in enumerate(instances):
            try:
                ids.append(as_label(v, f"instances[{i}]"))
            except TypeError as exc:
                raise RequestError(400, str(exc)) from None
        _check_ids(ids)
        X = _context_array(contexts, self.policy.n_features)
        try:
            chosen = self.policy.select_batch(ids, X, allowed=allowed)
        except (TypeError, ValueError) as exc:
            raise RequestError(400, str(exc)) from None
        probs = None
        if self._has_probabilities:
            probs = self.policy.choice_probabilities(ids, X, allowed=allowed, arms=chosen)
        arms = [a.item() if isinstance(a, np.generic) else a for a in chosen.tolist()]
        codes = np.array([self.policy.arms.get(a) for a in arms], dtype=np.int64)
        p = np.full(len(ids), np.nan) if probs is None else np.asarray(probs, dtype=np.float64)
        # a policy's probabilities can leave [0, 1] by a rounding error (stats.choice gave
        # 1.0000000000000002 for a sure choice): such a propensity would be served, and make
        # Ledger.load refuse every later restart
        p = np.clip(p, 0.0, 1.0)
        self.ledger.add(first, ids, X, codes, p, when)
        self.events.decisions(first, when, ids, X, arms, p)
        self.next_event = first + len(ids)
        self.counters["decisions"] += len(ids)
        return arms, (None if probs is None else [float(v) for v in p])

    def reward(self, body: Any) -> dict[str, Any]:
        """Apply rewards: ``{"events": [...], "rewards": [...]}``; returns ``{"applied": n}``
        once the rewards are in the log (synced) and in the policy."""
        t0 = time.perf_counter()
        try:
            body = _check_keys(body, {"events", "rewards"}, {"events", "rewards"})
            events = _as_list(body, "events", None, self.config.max_batch)
            rewards = _as_list(body, "rewards", len(events), self.config.max_batch)
            with self._lock:
                self._check_open()
                self._reward_check(events, rewards)
                when = _now()
                self._append(
                    {"op": "reward", "time": when, "events": events, "rewards": rewards}, sync=True
                )
                try:
                    self._reward_apply(events, rewards, when)
                except Exception as exc:  # checked above: a failure here is a defect
                    # the log holds the reward and the policy may hold part of it: stop, so
                    # that a restart rebuilds the state from the log
                    self.failed = f"applying a logged reward failed ({exc!r:.200})"
                    log.exception("%s", self.failed)
                    raise RequestError(503, self.failed) from None
                self._maybe_checkpoint()
            return {"applied": len(events)}
        finally:
            self.metrics.observe("reward", time.perf_counter() - t0)

    def _reward_check(self, events: list[Any], rewards: list[Any]) -> None:
        seen = set()
        for i, e in enumerate(events):
            if isinstance(e, bool) or not isinstance(e, int):
                raise RequestError(400, f"events[{i}] must be an integer event id, got {e!r:.40}")
            if e in seen:
                raise RequestError(400, f"events[{i}]: event {e} appears twice in the request")
            seen.add(e)
            if e < 0 or e >= self.next_event:
                raise RequestError(404, f"events[{i}]: event {e} was never issued")
            if e not in self.ledger:
                raise RequestError(
                    409, f"events[{i}]: event {e} was already rewarded or has expired"
                )
        for i, y in enumerate(rewards):
            # magnitude first: math.isfinite overflows on an integer beyond the float range
            if not _number(y) or abs(y) > MAX_ABS or not math.isfinite(y):
                raise RequestError(400, f"rewards[{i}] must be a finite number, got {y!r:.40}")

    def _reward_apply(self, events: list[int], rewards: list[float], when: int) -> None:
        rows = self.ledger.take(events)
        Y = np.asarray(rewards, dtype=np.float64)
        arms = self._arm_labels[rows.arms]
        self.policy.update_batch(rows.instances, rows.contexts, arms, Y)
        self.events.rewards(
            events,
            when,
            rows.instances,
            rows.contexts,
            arms.tolist(),
            Y,
            rows.decided_at,
            rows.propensity,
        )
        self.counters["rewards"] += len(events)

    def _append(self, record: dict[str, Any], *, sync: bool) -> None:
        try:
            self.wal.append(_dumps(record))
            if sync:
                self.wal.sync()
        except OSError as exc:  # the state may now be ahead of the log: stop until restarted
            self.failed = f"the write-ahead log cannot be written ({exc})"
            log.error("%s", self.failed)
            raise RequestError(503, self.failed) from None

    def _check_open(self) -> None:
        if self.failed is not None:
            raise RequestError(503, f"the service has stopped: {self.failed}; restart it")
        if self.wal.next_index is None:
            raise RequestError(503, "the service is closed")

    # ------------------------------------------------------------------ checkpoints
    # A checkpoint is taken in three steps: a snapshot under the service's lock (a copy of the
    # policy and the ledger, the event-log buffer handed over, a new log segment started), the
    # files written without it (requests go on meanwhile), then, under the lock again, the log
    # segments and checkpoint folders it covers dropped. Periodic checkpoints write in a
    # background thread; ``checkpoint()``, ``close()`` and the first one write in the caller's.
    # One checkpoint at a time (``_ckpt_lock``, always taken before the service's lock), so
    # CURRENT only ever moves forward.
    def _maybe_checkpoint(self) -> None:
        """Start a background checkpoint if one is due and none is being written (locked)."""
        if self.wal.next_index - self._ckpt_from < self.config.checkpoint_every:
            return
        if not self._ckpt_lock.acquire(blocking=False):
            return  # one is being written: the next request starts the next
        try:
            snap = self._snapshot()
        except Exception as exc:  # the request that triggered it is done: report, then stop
            self._ckpt_lock.release()
            self.failed = f"a checkpoint could not be started ({exc!r:.200})"
            log.exception("%s", self.failed)
            return
        thread = threading.Thread(
            target=self._checkpoint_in_background, args=(snap,), name="hierbandit-checkpoint"
        )
        self._ckpt_thread = thread
        thread.start()

    def _checkpoint_in_background(self, snap: dict[str, Any]) -> None:
        try:
            self._write_checkpoint(snap)
            with self._lock:
                self._finish_checkpoint(snap)
        except Exception as exc:  # the log still holds everything: stop, a restart recovers
            with self._lock:
                self.failed = f"a checkpoint could not be written ({exc!r:.200})"
            log.exception("%s", self.failed)
        finally:
            self._ckpt_lock.release()

    def checkpoint(self) -> None:
        """Write a checkpoint now, in this thread (periodic ones are written in the
        background every ``checkpoint_every`` records)."""
        with self._ckpt_lock:
            with self._lock:
                self._check_open()
                snap = self._snapshot()
            self._write_checkpoint(snap)
            with self._lock:
                self._finish_checkpoint(snap)

    def _snapshot(self) -> dict[str, Any]:
        """What a checkpoint at the current log position writes (under the lock)."""
        end = self.wal.next_index
        snap = {
            "t0": time.perf_counter(),
            "first": self._ckpt_from,
            "end": end,
            "policy": copy.deepcopy(self.policy),
            "ledger": self.ledger.copy(),
            "events": self.events.take(),
            "counters": {"committed": end, "next_event": self.next_event, **self.counters},
        }
        self._ckpt_from = end
        self.wal.start_segment(end)
        return snap

    def _write_checkpoint(self, snap: dict[str, Any]) -> None:
        """The event-log files, then the checkpoint folder, then CURRENT (no lock needed)."""
        end = snap["end"]
        folder = self.state_dir / f"checkpoint-{end:020d}"
        if end == self.committed and folder.exists():
            return  # nothing happened since the checkpoint in force: it stays as it is
        self.events.write(snap["events"], snap["first"], end)
        if folder.exists():  # a folder a crash left before CURRENT named it
            shutil.rmtree(folder)
        folder.mkdir()
        snap["policy"].save(folder / "policy.nc")
        snap["ledger"].save(folder / "ledger.nc", snap["counters"])
        atomic_write(self.state_dir / "CURRENT", lambda tmp: tmp.write_text(folder.name + "\n"))

    def _finish_checkpoint(self, snap: dict[str, Any]) -> None:
        """Drop what the checkpoint covers (under the lock)."""
        end = snap["end"]
        self.wal.drop_before(end)
        for other in self.state_dir.glob("checkpoint-*"):
            if other.name != f"checkpoint-{end:020d}":
                shutil.rmtree(other, ignore_errors=True)
        self.committed = end
        self.metrics.last_checkpoint = {
            "record": end,
            "time": time.time(),
            "seconds": time.perf_counter() - snap["t0"],
        }

    def close(self) -> None:
        """Write a last checkpoint and release the state directory."""
        with self._ckpt_lock, self._lock:  # a background checkpoint finishes first
            try:
                if self.failed is None and self.wal.next_index is not None:
                    snap = self._snapshot()
                    self._write_checkpoint(snap)
                    self._finish_checkpoint(snap)
            finally:
                self.wal.close()
                self.wal.next_index = None
                with contextlib.suppress(OSError):
                    self._lockfile.close()

    # ------------------------------------------------------------------ read-outs
    def info(self) -> dict[str, Any]:
        p = self.policy
        return {
            "policy": type(p).__name__,
            "arms": [
                a.item() if isinstance(a, np.generic) else a for a in self._arm_labels.tolist()
            ],
            "features": self._feature_names(),
            "probabilities": self._has_probabilities,
            "max_batch": self.config.max_batch,
        }

    def state(self) -> dict[str, Any]:
        """Counters of the state (all of them restored by a restart)."""
        with self._lock:
            return {
                "t": int(self.policy.t),
                "next_event": self.next_event,
                "decisions": self.counters["decisions"],
                "rewards": self.counters["rewards"],
                "pending": len(self.ledger),
                "expired": self.ledger.expired,
                "records": self.wal.next_index,
                "committed": self.committed,
            }

    def health(self) -> dict[str, Any]:
        return {"status": "failed" if self.failed else "ok", "reason": self.failed}

    def metrics_report(self) -> dict[str, Any]:
        out = self.metrics.report()
        out.update(
            uptime_seconds=time.time() - self.started_at,
            state=self.state(),
            events_buffered=self.events.buffered,
            events_written=dict(self.events.rows_written),
        )
        return out


def _context_array(contexts: list[Any], d: int) -> np.ndarray:
    for i, row in enumerate(contexts):
        if not isinstance(row, list) or len(row) != d:
            raise RequestError(400, f"contexts[{i}] must be an array of {d} numbers")
        for v in row:
            if not _number(v):
                raise RequestError(400, f"contexts[{i}] must hold numbers only, got {v!r:.40}")
    try:
        X = np.array(contexts, dtype=np.float64)
    except OverflowError:  # an integer beyond the float range
        X = np.full((1, d), np.inf)
    if not np.all(np.isfinite(X)) or np.any(np.abs(X) > MAX_FEATURE):
        raise RequestError(
            400, f"contexts must be finite with entries of magnitude at most {MAX_FEATURE:g}"
        )
    return X


def _check_ids(ids: list[int | str]) -> None:
    """Instance ids that the policy, the ledger and the event log can all hold: all integers
    (64-bit) or all strings (Unicode without lone surrogates, so that they encode to UTF-8).
    Checked before the policy sees them: NumPy would turn a mix into strings, and an id that
    cannot be stored would fail only when its reward is applied (after the record is logged)
    or at the next checkpoint."""
    strings = 0
    for i, v in enumerate(ids):
        if isinstance(v, str):
            strings += 1
            try:
                v.encode("utf-8")
            except UnicodeEncodeError:
                raise RequestError(
                    400, f"instances[{i}] is not valid Unicode (a lone surrogate)"
                ) from None
        elif not -(2**63) <= v < 2**63:
            raise RequestError(400, f"instances[{i}] = {v!s:.40} does not fit in 64 bits")
    if 0 < strings < len(ids):
        raise RequestError(400, "instances must be all integers or all strings, not a mix")


def _computes_probabilities(policy: Policy) -> bool:
    return type(policy)._choice_probabilities is not Policy._choice_probabilities


def _build_policy(source: Any, kind: str, seed: int | None) -> Policy:
    if isinstance(source, Policy):
        return source
    path = Path(source)
    if kind not in ("ts", "ucb"):
        raise ValueError(f"policy must be 'ts' or 'ucb', got {kind!r}")
    try:
        from hierbandit.bayes import load_prior

        prior = load_prior(path)
    except InvalidFileError as prior_error:
        try:
            policy = load_checkpoint(path)
        except InvalidFileError:
            raise InvalidFileError(
                path, f"is neither a fitted prior nor a policy checkpoint ({prior_error})"
            ) from None
        if not isinstance(policy, Policy):
            raise InvalidFileError(
                path, "holds a checkpoint of something other than a policy"
            ) from None
        return policy
    cls = EbmTS if kind == "ts" else EbmUCB
    return cls(prior=prior, rng=seed)


class _Metrics:
    """Request counts and latencies (the last 10,000 of each endpoint)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.latency: dict[str, deque[float]] = {}
        self.count: dict[str, int] = {}
        self.status: dict[str, int] = {}
        self.last_checkpoint: dict[str, float] | None = None

    def observe(self, endpoint: str, seconds: float) -> None:
        with self._lock:
            self.latency.setdefault(endpoint, deque(maxlen=10_000)).append(seconds)
            self.count[endpoint] = self.count.get(endpoint, 0) + 1

    def status_seen(self, status: int) -> None:
        with self._lock:
            key = str(status)
            self.status[key] = self.status.get(key, 0) + 1

    def report(self) -> dict[str, Any]:
        with self._lock:
            lat = {}
            for k, v in self.latency.items():
                a = np.fromiter(v, dtype=float) * 1e3
                q = np.quantile(a, [0.5, 0.9, 0.99]) if a.size else [math.nan] * 3
                lat[k] = {
                    "p50_ms": float(q[0]),
                    "p90_ms": float(q[1]),
                    "p99_ms": float(q[2]),
                    "max_ms": float(a.max()),
                }
            return {
                "requests": dict(self.count),
                "responses": dict(self.status),
                "latency": lat,
                "last_checkpoint": self.last_checkpoint,
            }
