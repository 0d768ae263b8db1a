"""An import-linter contract: no module imports another package's private *names*.

import-linter's own ``private_modules`` contract covers private modules (``pkg._mod``). A name
with a leading underscore (``from pkg.mod import _helper``) is private to the package that
holds ``mod``: it may be imported by that package and its descendants only. A private name
reached through a private module is judged at the first private component. Names of the form
``__x__`` are not private. The rule reads the import statements themselves (the import graph
records modules, not names), so function-level imports are covered as well.
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

from importlinter.application import output
from importlinter.domain import fields
from importlinter.domain.contract import Contract, ContractCheck


def _is_private(part: str) -> bool:
    return part.startswith("_") and not (part.startswith("__") and part.endswith("__"))


def _module_file(module: str) -> Path | None:
    spec = importlib.util.find_spec(module)
    return Path(spec.origin) if spec and spec.origin and spec.origin.endswith(".py") else None


def _is_package(module: str) -> bool:
    spec = importlib.util.find_spec(module)
    return bool(spec and spec.submodule_search_locations is not None)


def violations(root: str, modules: list[str]) -> list[tuple[str, int, str]]:
    """(importer, line, imported dotted name) for every import of another package's private
    name among ``modules`` (all inside the root package ``root``)."""
    found = []
    packages: dict[str, bool] = {}

    def is_pkg(mod: str) -> bool:
        if mod not in packages:
            try:
                packages[mod] = _is_package(mod)
            except (ImportError, ValueError):
                packages[mod] = False
        return packages[mod]

    for module in sorted(modules):
        path = _module_file(module)
        if path is None:
            continue
        own = module.split(".") if is_pkg(module) else module.split(".")[:-1]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                targets = [[*node.module.split("."), a.name] for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name.split(".") for a in node.names]
            else:
                continue
            for target in targets:
                if target[0] != root:
                    continue
                for i, part in enumerate(target):
                    if not _is_private(part):
                        continue
                    owner = target[:i]
                    if not is_pkg(".".join(owner)):
                        owner = owner[:-1]  # a name private to a module belongs to its package
                    if own[: len(owner)] != owner:
                        found.append((module, node.lineno, ".".join(target)))
                    break
    return found


class PrivateNamesContract(Contract):
    """No module imports a private name of a package that is not its own or an ancestor."""

    type_name = "private_names"
    root = fields.StringField()

    def check(self, graph, verbose: bool) -> ContractCheck:
        root = self.root  # type: ignore[attr-defined]
        modules = [m for m in graph.modules if m == root or m.startswith(root + ".")]
        found = violations(root, modules)
        return ContractCheck(kept=not found, metadata={"violations": found})

    def render_broken_contract(self, check: ContractCheck) -> None:
        for importer, line, name in check.metadata["violations"]:
            output.print_error(f"{importer}:{line} imports the private name {name}")
            output.new_line()
