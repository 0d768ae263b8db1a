"""Strategies and checks shared by the property-based tests of this folder."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from tests.conftest import snapshot

#: documented magnitude bound of data values (contexts, features, rewards)
MAX_DATA = 1e100
#: the seven cascade policies of hierbandit.cascade.policies
CASCADE_POLICIES = (
    "UCBBP",
    "AUCBBP",
    "CascadeEpsilonGreedy",
    "CascadeGreedy",
    "CascadeRandom",
    "CascadeLinUCB",
    "CascadeLinTS",
)

SETTINGS = settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
    ],
)
SMALL = settings(SETTINGS, max_examples=25)

special_floats = st.sampled_from(
    [np.nan, np.inf, -np.inf, 1e308, -1e308, 1e150, 1e-300, -1e-300, 0.0, 5e-324]
)
floats = st.one_of(st.floats(allow_nan=True, allow_infinity=True), special_floats)
ids = st.one_of(
    st.integers(-5, 10),
    st.sampled_from([True, False, 1.0, 0.5, "0", None, np.int64(1), np.uint8(2), 2**70]),
)
odd_values = st.sampled_from(
    [
        "ab",
        None,
        {"a": 1},
        np.array([1, 2], dtype=np.complex128),
        np.array(["a", "b"]),
        np.array([True, False]),
        np.zeros((0,)),
    ]
)
rewards = st.one_of(
    floats,
    st.floats(-1e3, 1e3),
    st.sampled_from(["1", None, [1.0], np.array([1.0, 2.0]), 1 + 2j]),
)
#: finite values within the documented bound, extremes included
finite_floats = st.one_of(
    st.floats(-10, 10),
    st.sampled_from([1e100, -1e100, 1e-300, -1e-300, 5e-324, 0.0, 1e6, -1e-6]),
)


def index(upper: int) -> st.SearchStrategy[Any]:
    """Ids in range (two thirds of the draws) or anything from :data:`ids`."""
    valid = st.integers(0, upper - 1)
    return st.one_of(valid, valid, ids)


def matrices(n_cols: int, max_rows: int = 3) -> st.SearchStrategy[Any]:
    """Nested lists of floats of 0..max_rows rows and n_cols (or a wrong number of) columns,
    plus arrays of wrong dtypes."""
    rows = st.integers(0, max_rows)
    cols = st.sampled_from([n_cols, n_cols, n_cols, 0, n_cols + 1])
    lists = st.tuples(rows, cols).flatmap(
        lambda rc: st.lists(
            st.lists(st.one_of(st.floats(-3, 3), floats), min_size=rc[1], max_size=rc[1]),
            min_size=rc[0],
            max_size=rc[0],
        )
    )
    finite = st.integers(1, max(1, max_rows)).flatmap(
        lambda n: st.lists(
            st.lists(finite_floats, min_size=n_cols, max_size=n_cols), min_size=n, max_size=n
        )
    )
    return st.one_of(
        finite,
        finite,
        lists,
        odd_values,
        st.sampled_from(
            [
                np.ones((2, n_cols), dtype=np.int8),
                np.ones((2, n_cols), dtype=bool),
                np.ones((2, n_cols), dtype=np.complex64),
                np.ones(n_cols),
                np.ones((1, 2, n_cols)),
            ]
        ),
    )


def vectors(length: int) -> st.SearchStrategy[Any]:
    """Lists of floats of lengths 0..length+1 (often the right one) and odd values."""
    finite = st.lists(finite_floats, min_size=length, max_size=length)
    return st.one_of(
        finite,
        finite,
        st.lists(floats, min_size=0, max_size=length + 1),
        st.lists(floats, min_size=length, max_size=length),
        st.lists(st.floats(-5, 5), min_size=length, max_size=length),
        odd_values,
        st.sampled_from([np.ones(length, dtype=np.int8), [[1.0] * length]]),
    )


def valid_array(x: Any, shape: tuple[int | None, ...], *, min_rows: int = 0) -> bool:
    """Whether ``x`` is a finite real array of ``shape`` (None: any length) within MAX_DATA."""
    if isinstance(x, str | dict) or x is None:
        return False
    try:
        arr = np.asarray(x)
    except Exception:
        return False
    return (
        arr.dtype.kind in "iuf"
        and arr.ndim == len(shape)
        and all(s is None or s == a for s, a in zip(shape, arr.shape, strict=True))
        and (arr.ndim == 0 or arr.shape[0] >= min_rows)
        and bool(np.all(np.isfinite(arr)))
        and (arr.size == 0 or float(np.max(np.abs(arr))) <= MAX_DATA)
    )


def valid_id(v: Any, upper: int) -> bool:
    return (
        isinstance(v, int | np.integer)
        and not isinstance(v, bool | np.bool_)
        and 0 <= int(v) < upper
    )


def valid_real(v: Any, *, low: float | None = None, high: float | None = None) -> bool:
    """A finite real number (not a bool) in [low, high]."""
    if isinstance(v, bool | np.bool_) or not isinstance(v, int | float | np.integer | np.floating):
        return False
    f = float(v)
    return (
        math.isfinite(f)
        and (low is None or f >= low)
        and (high is None or f <= high)
        and abs(f) <= MAX_DATA
    )


def check_outcome(obj: Any, before: Any, call: Any, valid: bool, names: tuple[str, ...]) -> Any:
    """Run ``call``: a valid input must succeed; an invalid one must raise ValueError/TypeError
    naming one of ``names`` and leave ``obj`` bit-identical to ``before``."""
    try:
        out = call()
    except (ValueError, TypeError) as exc:
        assert not valid, f"valid input rejected: {exc!r}"
        assert any(n in str(exc) for n in names), f"message does not name the argument: {exc}"
        if before is not None:
            assert snapshot(obj) == before, "a rejected call changed the state"
        return None
    assert valid, "invalid input accepted"
    return out


def pairs(*items: tuple[Any, bool]) -> st.SearchStrategy[tuple[Any, bool]]:
    """Sample ``(value, is_valid)`` pairs (constructor arguments with a known verdict)."""
    return st.sampled_from(list(items))
