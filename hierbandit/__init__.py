"""hierbandit: bandit learning that shares strength across users, instances and arms.

The papers' algorithms are importable from here, each from its own folder (see
``docs/architecture.md``)::

    from hierbandit import EbmTS, UCBBP, SCLUB, OffC2LUB, BOC, fit_prior, load_prior

Every name is imported on first use: ``import hierbandit`` loads none of the algorithms and none
of PyMC, PyTensor, ArviZ, JAX or Dask, and changes no process-wide setting.

=================  ==================================================================
folder             contents
=================  ==================================================================
``stats``          the statistics core shared by every algorithm
``data``           historical logs (interactions, cascades) and the MovieLens data
``ebm``            EbmTS, EbmUCB, LinUCB, LinTS, OLSBandit, RMBandit and their envs
``cascade``        UCBBP, AUCBBP, the cascade baselines, backward planning, the env
``sclub``          SCLUB, CLUB, LinUCBOne, LinUCBInd and the clustered-users envs
``offline``        Off-C2LUB, Off-CLUB and their offline baselines
``boc``            BOC, BOCLE, the lower bound, stopping rules and instances
``bayes``          PyMC beside: fitted priors, full Bayes, audits and diagnostics
``experiments``    the reproductions of the papers, run by ``hierbandit experiment``
=================  ==================================================================
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from hierbandit._version import __version__

if TYPE_CHECKING:  # what the names are, for type checkers and IDEs
    from hierbandit._numba_cache import configure_numba_cache
    from hierbandit._progress import show_progress
    from hierbandit.bayes.fit import fit_prior
    from hierbandit.bayes.prior import load_prior
    from hierbandit.boc import BOC, BOCLE
    from hierbandit.cascade import AUCBBP, UCBBP
    from hierbandit.ebm import EbmTS, EbmUCB, LinTS, LinUCB, OLSBandit, RMBandit
    from hierbandit.offline import OffC2LUB, OffCLUB
    from hierbandit.sclub import CLUB, SCLUB, LinUCBInd, LinUCBOne

#: public name -> module that defines it
_LAZY = {
    "EbmTS": "hierbandit.ebm",
    "EbmUCB": "hierbandit.ebm",
    "LinUCB": "hierbandit.ebm",
    "LinTS": "hierbandit.ebm",
    "OLSBandit": "hierbandit.ebm",
    "RMBandit": "hierbandit.ebm",
    "UCBBP": "hierbandit.cascade",
    "AUCBBP": "hierbandit.cascade",
    "SCLUB": "hierbandit.sclub",
    "CLUB": "hierbandit.sclub",
    "LinUCBOne": "hierbandit.sclub",
    "LinUCBInd": "hierbandit.sclub",
    "OffC2LUB": "hierbandit.offline",
    "OffCLUB": "hierbandit.offline",
    "BOC": "hierbandit.boc",
    "BOCLE": "hierbandit.boc",
    "fit_prior": "hierbandit.bayes",  # through its lazy names, which name the missing extra
    "load_prior": "hierbandit.bayes",
    "configure_numba_cache": "hierbandit._numba_cache",
    "show_progress": "hierbandit._progress",
}
_SUBPACKAGES = (
    "stats",
    "data",
    "ebm",
    "cascade",
    "sclub",
    "offline",
    "boc",
    "bayes",
    "experiments",
)

__all__ = [
    "AUCBBP",
    "BOC",
    "BOCLE",
    "CLUB",
    "SCLUB",
    "UCBBP",
    "EbmTS",
    "EbmUCB",
    "LinTS",
    "LinUCB",
    "LinUCBInd",
    "LinUCBOne",
    "OLSBandit",
    "OffC2LUB",
    "OffCLUB",
    "RMBandit",
    "__version__",
    "configure_numba_cache",
    "fit_prior",
    "load_prior",
    "show_progress",
]
assert set(__all__) == {"__version__", *_LAZY}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
    elif name in _SUBPACKAGES:
        value = importlib.import_module(f"hierbandit.{name}")
    else:
        raise AttributeError(f"module 'hierbandit' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY) | set(_SUBPACKAGES))
