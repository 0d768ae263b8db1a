"""The installed distribution's version (a leaf: it imports nothing of the package)."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("hierbandit")
except PackageNotFoundError:  # pragma: no cover - running from a source tree without install
    __version__ = "0.0.0"

__all__ = ["__version__"]
