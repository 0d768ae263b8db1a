"""hierbandit: bandit learning that shares strength across users, instances and arms."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("hierbandit")
except PackageNotFoundError:  # pragma: no cover - running from a source tree without install
    __version__ = "0.0.0"

from . import stats

__all__ = ["__version__", "stats"]
