"""Constructor-parameter introspection shared by policies, explorers and environments."""

from __future__ import annotations

import inspect
from typing import Any

__all__ = ["ParamsMixin"]


class ParamsMixin:
    """``get_params()`` and ``clone(rng="same")`` (scikit-learn style).

    A class using it stores every constructor argument under an attribute of the same name.
    """

    def get_params(self) -> dict[str, Any]:
        """Constructor arguments of this object (scikit-learn style)."""
        sig = inspect.signature(type(self).__init__)
        return {
            name: getattr(self, name)
            for name, p in sig.parameters.items()
            if name != "self" and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)
        }

    def clone(self, rng: Any = "same") -> Any:
        """A fresh, untrained object with the same configuration.

        ``rng="same"`` (default) reuses the original ``rng`` argument, so an object built from
        an int seed clones into an identical one; pass a seed or Generator for new randomness.
        """
        params = self.get_params()
        if not (isinstance(rng, str) and rng == "same"):
            params["rng"] = rng
        return type(self)(**params)
