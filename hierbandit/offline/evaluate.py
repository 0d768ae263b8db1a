"""Scoring offline algorithms on a test set: average SubOpt, and the oracle γ̂ sweep of Off-C²LUB.

SubOpt as in [OFF] §3 and App. E.1 (docs/offline.md, decision 8); the sweep as in Figures 3–6.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import xarray as xr

from hierbandit.offline.base import OfflineModel
from hierbandit.offline.c2lub import OffC2LUB, gamma_grid
from hierbandit.offline.generate import OfflineTestSet, suboptimality

__all__ = ["evaluate", "gamma_sweep"]


def _check_test(test: object) -> None:
    """``test`` must be the evaluation half (an :class:`OfflineTestSet`), not a logged data set."""
    if not isinstance(test, OfflineTestSet):
        raise TypeError(
            "test must be an OfflineTestSet (the evaluation half of make_problem(...), or "
            "OfflineTestSet(theta, user_probs, n_test)): SubOpt needs the true preference vectors "
            "and fresh action sets, which a logged data set does not have; got "
            f"{type(test).__name__}"
        )


def evaluate(models: Mapping[str, OfflineModel], test: OfflineTestSet) -> xr.Dataset:
    """Average SubOpt of each fitted model on the same test decisions.

    Every test decision (u, 𝒜_test) is scored by all models chunk by chunk, so the test set is
    generated once per call and never held whole in memory.

    Parameters
    ----------
    models : mapping of str to OfflineModel
        Fitted models.
    test : OfflineTestSet
        The evaluation half (the second value of :func:`~hierbandit.offline.make_problem`); a
        logged :class:`~hierbandit.offline.OfflineDataset` raises ``TypeError``.

    Returns
    -------
    xarray.Dataset
        ``subopt`` (mean SubOpt) and ``subopt_se`` (its standard error over test decisions) along
        ``algorithm``; attrs ``n_test``.
    """
    _check_test(test)
    names = list(models)
    if not names:
        raise ValueError("models must not be empty")
    for name, m in models.items():
        if not isinstance(m, OfflineModel):
            raise TypeError(f"models[{name!r}] must be an OfflineModel, got {type(m).__name__}")
        m._check_fitted()
        if m.n_users_ != test.theta.shape[0] or m.n_features_ != test.theta.shape[1]:
            raise ValueError(
                f"models[{name!r}] was fitted on {m.n_users_} users × {m.n_features_} features, "
                f"the test set has {test.theta.shape}"
            )
    s1 = np.zeros(len(names))
    s2 = np.zeros(len(names))
    count = 0
    for users, actions in test.chunks():
        th = test.theta[users]
        for k, name in enumerate(names):
            chosen = models[name]._decide_batch(users, actions)
            so = suboptimality(th, actions, chosen)
            s1[k] += so.sum()
            s2[k] += (so * so).sum()
        count += users.size
    mean = s1 / count
    var = np.maximum(s2 / count - mean**2, 0.0)
    se = np.sqrt(var / max(count - 1, 1))
    return xr.Dataset(
        {"subopt": ("algorithm", mean), "subopt_se": ("algorithm", se)},
        coords={"algorithm": names},
        attrs={"n_test": count},
    )


def gamma_sweep(
    model: OffC2LUB, test: OfflineTestSet, grid: Sequence[float] | int = 41
) -> xr.Dataset:
    """SubOpt of Off-C²LUB over a γ̂ grid (the oracle sweep of [OFF] Figures 3–6).

    Parameters
    ----------
    model : OffC2LUB
        A fitted model (its per-user statistics are reused; only γ̂ changes).
    test : OfflineTestSet
    grid : sequence of float or int
        γ̂ values, or a number of points for :func:`~hierbandit.offline.gamma_grid`.

    Returns
    -------
    xarray.Dataset
        ``subopt`` along ``gamma``, ``n_neighbours`` (mean ñ − 1 over users) along ``gamma``;
        attrs ``best_gamma`` and ``best_subopt`` (the sweep minimum: the "Off-C²LUB lower
        bound" of Figures 4–6).
    """
    if not isinstance(model, OffC2LUB):
        raise TypeError(f"model must be a fitted OffC2LUB, got {type(model).__name__}")
    model._check_fitted()
    _check_test(test)
    g = gamma_grid(model, grid) if isinstance(grid, int | np.integer) else np.asarray(grid, float)
    if g.ndim != 1 or g.size == 0 or not np.all(np.isfinite(g)) or np.any(g < 0):
        raise ValueError("grid must be a non-empty 1-d array of finite values >= 0")
    fitted = {f"{k}": model.with_gamma(float(v)) for k, v in enumerate(g)}
    res = evaluate(fitted, test)
    nb = np.array([fitted[f"{k}"].n_neighbours_.mean() for k in range(g.size)])
    sub = res["subopt"].to_numpy()
    k = int(np.argmin(sub))
    return xr.Dataset(
        {
            "subopt": ("gamma", sub),
            "subopt_se": ("gamma", res["subopt_se"].to_numpy()),
            "n_neighbours": ("gamma", nb),
        },
        coords={"gamma": g},
        attrs={"best_gamma": float(g[k]), "best_subopt": float(sub[k]), "n_test": res.n_test},
    )
