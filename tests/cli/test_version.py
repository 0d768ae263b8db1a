"""``hierbandit --version`` and the typing marker a user's type checker reads."""

from __future__ import annotations

import platform
import tomllib
from importlib.metadata import version
from importlib.resources import files
from pathlib import Path

from typer.testing import CliRunner

from hierbandit._version import __version__
from hierbandit.cli.main import app


def test_version_names_the_package_python_and_the_stack():
    res = CliRunner().invoke(app, ["--version"])
    assert res.exit_code == 0, res.output
    first, second = res.output.strip().splitlines()
    assert first == f"hierbandit {__version__}" == f"hierbandit {version('hierbandit')}"
    assert second.startswith(f"Python {platform.python_version()}; ")
    assert f"numpy {version('numpy')}" in second and "pymc " in second


def test_the_package_ships_its_typing_marker():
    assert files("hierbandit").joinpath("py.typed").is_file()
    pyproject = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    assert "py.typed" in pyproject["tool"]["setuptools"]["package-data"]["hierbandit"]
