"""Every default of a reproduction has one home: its shipped ``configs/NAME.toml``.

* each experiment's resolved defaults are exactly the file's values (``[defaults]`` then
  ``[scale.NAME]``; ``"none"`` is ``None``);
* no function of the paper's module, and no option of the command, repeats one of those values
  as a default of a parameter of the same name: they take it as an argument or read the file;
* no float of a file (the noise level of ``sclub``) is written as a literal in its module.

The root seed is the exception by design: ``seed = 0`` is the package-wide default of every
random stream (every simulator takes ``seed=0``), which the files record so that a run's
``config.toml`` is complete.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import tomllib
from pathlib import Path

import pytest

from hierbandit.experiments.catalog import list_experiments
from hierbandit.experiments.registry import SCALES, config_path

#: experiment → the module that defines it
MODULES = {
    "ebm-synthetic": "hierbandit.experiments.ebm",
    "ebm-real": "hierbandit.experiments.ebm_real",
    "cascade": "hierbandit.experiments.cascade",
    "sclub": "hierbandit.experiments.sclub",
    "offline": "hierbandit.experiments.offline",
    "boc": "hierbandit.experiments.boc",
}
CLI_MODULES = (
    "hierbandit.cli.main",
    "hierbandit.cli.experiment",
    "hierbandit.cli.sclub",
    "hierbandit.cli.cascade",
    "hierbandit.cli.boc",
)
#: function parameter → the configuration keys it stands for
ALIASES = {
    "n_seeds": ("seeds",),
    "n_trials": ("seeds", "table2_trials"),
    "names": ("policies", "algorithms"),
    "users": ("n_users",),
    "episodes": ("n_episodes",),
}
#: the package-wide root seed (see the module docstring)
CONVENTIONS = {"seed"}


def _file_values(name: str) -> dict[str, dict]:
    with open(config_path(name), "rb") as fh:
        raw = tomllib.load(fh)
    out = {}
    for scale in SCALES:
        table = {**raw["defaults"], **raw["scale"][scale]}
        out[scale] = {k: None if v == "none" else v for k, v in table.items()}
    return out


def _norm(value):
    return list(value) if isinstance(value, tuple | list) else value


def _functions(module):
    for _, obj in vars(module).items():
        if inspect.isfunction(obj) and obj.__module__ == module.__name__:
            yield obj


def test_the_catalog_lists_every_shipped_file():
    shipped = sorted(p.stem for p in config_path("sclub").parent.glob("*.toml"))
    assert sorted(e.name for e in list_experiments()) == shipped == sorted(MODULES)


@pytest.mark.parametrize("name", sorted(MODULES))
def test_the_defaults_are_the_files_values(name):
    exp = next(e for e in list_experiments() if e.name == name)
    files = _file_values(name)
    for scale in SCALES:
        assert exp.defaults[scale] == files[scale], scale
        assert exp.resolve(scale) == files[scale]


@pytest.mark.parametrize("module_name", [*MODULES.values(), *CLI_MODULES])
def test_no_function_repeats_a_shipped_default(module_name):
    module = importlib.import_module(module_name)
    names = [k for k, v in MODULES.items() if v == module_name] or list(MODULES)
    shipped: dict[str, list] = {}
    for name in names:
        for values in _file_values(name).values():
            for key, value in values.items():
                shipped.setdefault(key, []).append(_norm(value))
    found = []
    for fn in _functions(module):
        for param in inspect.signature(fn).parameters.values():
            default = param.default
            if default is inspect.Parameter.empty or default is None:
                continue
            default = getattr(default, "default", default)  # a typer.Option's own default
            if default is None or isinstance(default, Path):
                continue
            for key in (param.name, *ALIASES.get(param.name, ())):
                if key in CONVENTIONS or key not in shipped:
                    continue
                if _norm(default) in shipped[key]:
                    found.append(f"{fn.__name__}({param.name}={default!r})")
    assert not found, f"{module_name} repeats defaults of its configuration: {found}"


@pytest.mark.parametrize("name", sorted(MODULES))
def test_no_float_of_the_file_is_a_literal_of_its_module(name):
    floats = {
        v for values in _file_values(name).values() for v in values.values() if type(v) is float
    }
    source = Path(importlib.import_module(MODULES[name]).__file__).read_text()
    literals = {
        node.value
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Constant) and type(node.value) is float
    }
    assert not (floats & literals), floats & literals


def test_the_noise_level_of_sclub_lives_in_its_file_only():
    """The example of the issue: ``noise_sd = 0.05`` was written in six places."""
    assert _file_values("sclub")["small"]["noise_sd"] == 0.05
    for module_name in ("hierbandit.experiments.sclub", *CLI_MODULES):
        text = Path(importlib.import_module(module_name).__file__).read_text()
        assert "0.05" not in text, module_name
