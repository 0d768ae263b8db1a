"""The package's shape is a checked contract (docs/architecture.md): the import-linter contracts
of pyproject.toml, the private-names rule, and the facade."""

from __future__ import annotations

import importlib
import inspect
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from hierbandit import _numba_cache as nc
from tests.architecture.private_names import violations

ROOT = Path(__file__).resolve().parents[2]

#: the issue's list of names the package root must export, by the folder that defines them
FACADE_BY_HOME = {
    "hierbandit.ebm": "EbmTS EbmUCB LinUCB LinTS OLSBandit RMBandit",
    "hierbandit.cascade": "UCBBP AUCBBP",
    "hierbandit.sclub": "SCLUB CLUB LinUCBOne LinUCBInd",
    "hierbandit.offline": "OffC2LUB OffCLUB",
    "hierbandit.boc": "BOC BOCLE",
    "hierbandit.bayes": "fit_prior load_prior",
}
FACADE = {name: home for home, names in FACADE_BY_HOME.items() for name in names.split()}


def _lint_imports() -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).with_name("lint-imports")
    return subprocess.run(
        [str(exe), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300
    )


def test_the_import_contracts_hold():
    """Layers (stats → data → the paper folders → bayes → experiments → cli), nothing below
    bayes importing the PyMC stack, no cycles between siblings, private modules and names
    imported from their own package only."""
    proc = _lint_imports()
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    assert "0 broken" in proc.stdout


def _package(tmp_path: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))


def test_the_private_names_rule_tells_own_package_from_another(tmp_path, monkeypatch):
    _package(
        tmp_path,
        {
            "toypkg/__init__.py": "",
            "toypkg/_infra.py": "def _shared(): pass\n",
            "toypkg/wing/__init__.py": "",
            "toypkg/wing/core.py": "def _helper(): pass\n__version__ = '1'\n",
            "toypkg/wing/sibling.py": "from toypkg.wing.core import _helper\n",
            "toypkg/other.py": (
                "from toypkg.wing.core import _helper, __version__\n"
                "from toypkg._infra import _shared\n"
                "def f():\n    from toypkg.wing import core as _core\n"
            ),
            "toypkg/deep/__init__.py": "",
            "toypkg/deep/mod.py": "import toypkg.wing._hidden\nfrom toypkg._infra import _shared\n",
        },
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    mods = [
        "toypkg",
        "toypkg._infra",
        "toypkg.wing",
        "toypkg.wing.core",
        "toypkg.wing.sibling",
        "toypkg.other",
        "toypkg.deep",
        "toypkg.deep.mod",
    ]
    found = violations("toypkg", mods)
    assert found == [
        ("toypkg.deep.mod", 1, "toypkg.wing._hidden"),
        ("toypkg.other", 1, "toypkg.wing.core._helper"),
    ]


def test_the_facade_exports_the_papers_classes_with_their_real_signatures():
    import hierbandit

    for name, home in FACADE.items():
        obj = getattr(hierbandit, name)
        assert obj is getattr(importlib.import_module(home), name), name
        params = inspect.signature(obj).parameters
        assert not any(p.kind is p.VAR_POSITIONAL for p in params.values()), name
    assert "method" in inspect.signature(hierbandit.fit_prior).parameters
    assert list(inspect.signature(hierbandit.load_prior).parameters) == ["path"]
    assert set(FACADE) <= set(hierbandit.__all__) <= set(dir(hierbandit))
    with pytest.raises(AttributeError, match="no attribute 'policies'"):
        hierbandit.policies  # noqa: B018


def test_importing_the_package_loads_no_heavy_library_and_changes_no_setting(tmp_path):
    """The facade, every paper's folder and the experiments layer import without the PyMC stack
    or Dask, and change neither the environment nor numba's cache folder; the keyed folder
    (hierbandit/_numba_cache.py) is taken only when asked for, as the command and the test run
    do. One interpreter checks all of it."""
    code = textwrap.dedent(
        """
        import os, sys
        import numba
        env, before = dict(os.environ), numba.config.CACHE_DIR
        import hierbandit
        from hierbandit import EbmTS, UCBBP, SCLUB, OffC2LUB, BOC, fit_prior, load_prior
        import hierbandit.stats, hierbandit.data, hierbandit.ebm, hierbandit.cascade
        import hierbandit.sclub, hierbandit.offline, hierbandit.boc, hierbandit.experiments
        heavy = ("pymc", "pytensor", "arviz", "jax", "numpyro", "nutpie", "dask")
        loaded = sorted(m for m in sys.modules if m.split(".")[0] in heavy)
        assert not loaded, loaded
        assert dict(os.environ) == env
        assert numba.config.CACHE_DIR == before, numba.config.CACHE_DIR
        print(hierbandit.configure_numba_cache())
        print(numba.config.CACHE_DIR)
        """
    )
    env = {
        k: v
        for k, v in os.environ.items()
        if k != "XLA_FLAGS" and not k.startswith(("NUMBA_", "HIERBANDIT_NUMBA"))
    }
    env["HIERBANDIT_NUMBA_CACHE"] = str(tmp_path / "c")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    folder = tmp_path / "c" / nc.sources_digest()
    assert proc.stdout.split() == [str(folder), str(folder)]
    assert folder.is_dir()


@pytest.mark.parametrize(
    ("wing", "classes"),
    [
        ("ebm", ["EbmTS", "EbmUCB", "LinUCB", "LinTS", "OLSBandit", "RMBandit"]),
        ("ebm", ["HierarchicalLinearEnv", "PriorDrawnEnv"]),
        ("cascade", ["UCBBP", "AUCBBP", "CascadeLinUCB", "CascadeEnv"]),
        ("sclub", ["SCLUB", "CLUB", "LinUCBOne", "LinUCBInd", "ClusteredLinearEnv"]),
        ("offline", ["OffC2LUB", "OffCLUB", "CLUBOffline", "OfflineDataset"]),
        ("boc", ["BOC", "BOCLE", "Uniform", "ClusterBandit"]),
    ],
)
def test_each_papers_algorithms_baselines_and_environment_live_in_its_folder(wing, classes):
    module = importlib.import_module(f"hierbandit.{wing}")
    for name in classes:
        assert getattr(module, name).__module__.startswith(f"hierbandit.{wing}."), name


def test_no_library_module_prints_or_draws():
    """Library code reports through logging; only the command (hierbandit/cli/) writes to the
    terminal, with rich."""
    import ast

    offenders = []
    for path in sorted((ROOT / "hierbandit").rglob("*.py")):
        if path.relative_to(ROOT).parts[1] == "cli":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "print"
            ):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} print")
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            offenders += [
                f"{path.relative_to(ROOT)}:{node.lineno} imports {n}"
                for n in names
                if n.split(".")[0] in ("rich", "tqdm")
            ]
    assert not offenders, offenders
