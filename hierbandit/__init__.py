"""hierbandit: bandit learning that shares strength across users, instances and arms."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("hierbandit")
except PackageNotFoundError:  # pragma: no cover - running from a source tree without install
    __version__ = "0.0.0"

from ._numba_cache import configure_numba_cache

# before any kernel is compiled: a cache folder per version of the kernels' sources
configure_numba_cache()

from . import stats  # noqa: E402


def load_prior(path):  # type: ignore[no-untyped-def]
    """Load a :class:`~hierbandit.bayes.HierarchicalPrior` saved with ``prior.save(path)``."""
    from .bayes.prior import load_prior as _load

    return _load(path)


def fit_prior(data, **kwargs):  # type: ignore[no-untyped-def]
    """Fit a hierarchical prior to a historical log; see :func:`hierbandit.bayes.fit_prior`."""
    from .bayes.fit import fit_prior as _fit

    return _fit(data, **kwargs)


__all__ = ["__version__", "fit_prior", "load_prior", "stats"]
