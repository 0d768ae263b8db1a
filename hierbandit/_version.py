"""The installed distribution's version (a leaf: it imports nothing of the package), and the
versions of the libraries a run depends on."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("hierbandit")
except PackageNotFoundError:  # pragma: no cover - running from a source tree without install
    __version__ = "0.0.0"

#: the libraries whose versions ``hierbandit --version``, reports and model cards give
LIBRARIES = ("numpy", "numba", "xarray", "pymc", "pytensor", "arviz", "nutpie", "numpyro", "jax")


def library_versions(names: tuple[str, ...] = LIBRARIES) -> dict[str, str | None]:
    """The installed version of each library in ``names`` (``None`` when not installed), read
    from the distributions' metadata without importing them."""
    out: dict[str, str | None] = {}
    for name in names:
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    return out


__all__ = ["LIBRARIES", "__version__", "library_versions"]
