"""The documentation site builds without a warning, and its key pages exist.

The site is built from a copy of ``docs/`` in a temporary directory (the repository is never
written to), with ``python -m sphinx -W --keep-going`` in a subprocess so that Sphinx runs
isolated from the test process. Notebooks are rendered from their stored outputs
(``nb_execution_mode = "off"``); ``tests/test_notebooks.py`` executes them in the slow suite.

The build takes about 30 s of CPU time (measured: 40-50 s wall on a shared 2-core machine).
"""

from __future__ import annotations

import importlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("sphinx")
pytest.importorskip("myst_nb")
pytest.importorskip("numpydoc")
pytest.importorskip("pydata_sphinx_theme")

DOCS = Path(__file__).resolve().parent.parent / "docs"
REFERENCE = DOCS / "reference"
SUBPACKAGES = [
    "policies",
    "stats",
    "bayes",
    "envs",
    "data",
    "experiments",
    "offline",
    "exploration",
    "checkpoint",
    "errors",
]
PAPER_PAGES = ["ebm", "cascading", "sclub", "offline", "boc"]
KEY_PAGES = [
    "index",
    "getting-started",
    "workflow",
    "api",
    "bayes",
    "experiments",
    "maths/ebm",
    "decisions/ebm",
    "notebooks/index",
    "reference/index",
    *PAPER_PAGES,
    *(f"reference/{name}" for name in SUBPACKAGES),
]
#: hand-written pages whose Python cross-references must all resolve
LINKED_PAGES = ["index", "getting-started", "workflow"]
#: a resolved reference is a link wrapping the ``code`` element; an unresolved one is bare
_XREF = re.compile(r'(<a class="reference internal"[^>]*>)?<code class="xref py[^"]*"[^>]*>')


def _public_names(subpackage: str) -> list[str]:
    module = importlib.import_module(f"hierbandit.{subpackage}")
    return list(module.__all__)


def _build(root: Path) -> Path:
    """Build a copy of ``docs/`` under ``root``; return the HTML folder."""
    src = root / "docs"
    shutil.copytree(
        DOCS,
        src,
        ignore=shutil.ignore_patterns("_build", "generated", ".ipynb_checkpoints", "results"),
    )
    out = root / "html"
    env = {k: v for k, v in os.environ.items() if k != "HIERBANDIT_DOCS_EXECUTE"}
    proc = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", src, out],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    assert proc.returncode == 0, f"sphinx-build failed:\n{proc.stderr[-6000:]}"
    assert "WARNING" not in proc.stderr and "ERROR" not in proc.stderr, proc.stderr[-6000:]
    return out


def _read(site: Path, page: str) -> str:
    return (site / f"{page}.html").read_text(encoding="utf-8")


def _check_key_pages(site: Path) -> list[str]:
    return [f"page missing: {page}" for page in KEY_PAGES if not (site / f"{page}.html").is_file()]


def _check_notebooks(site: Path) -> list[str]:
    notebooks = sorted((DOCS / "notebooks").glob("*.ipynb"))
    problems = [] if notebooks else ["no notebooks in docs/notebooks"]
    index = _read(site, "notebooks/index")
    for nb in notebooks:
        if not (site / "notebooks" / f"{nb.stem}.html").is_file():
            problems.append(f"notebook page missing: {nb.name}")
        if f'href="{nb.stem}.html"' not in index:
            problems.append(f"{nb.name} is not linked from notebooks/index")
    return problems


def _check_reference_pages(site: Path) -> list[str]:
    generated = site / "reference" / "generated"
    return [
        f"no reference page for hierbandit.{sub}.{name}"
        for sub in SUBPACKAGES
        for name in _public_names(sub)
        if not (generated / f"hierbandit.{sub}.{name}.html").is_file()
    ]


def _check_policy_page(site: Path) -> list[str]:
    html = _read(site, "reference/generated/hierbandit.ebm.EbmTS")
    return [
        f"EbmTS reference page does not document {member}"
        for member in ("select", "update", "posterior", "hyperparameters", "predict")
        if f'id="hierbandit.ebm.EbmTS.{member}"' not in html
    ]


def _check_cross_references(site: Path) -> list[str]:
    problems = []
    for page in LINKED_PAGES:
        refs = _XREF.findall(_read(site, page))
        unresolved = sum(1 for link in refs if not link)
        if unresolved:
            problems.append(f"{page}: {unresolved} of {len(refs)} Python references unresolved")
    return problems


def _check_index_links(site: Path) -> list[str]:
    html = _read(site, "index")
    return [
        f"index does not link {page}" for page in PAPER_PAGES if f'href="{page}.html"' not in html
    ]


@pytest.mark.parametrize("subpackage", SUBPACKAGES)
def test_reference_lists_every_public_name(subpackage: str):
    """Every name in ``__all__`` is listed on its subpackage's reference page."""
    page = (REFERENCE / f"{subpackage}.rst").read_text(encoding="utf-8")
    listed = set(re.findall(r"^\s{3}(\w+)\s*$", page, flags=re.MULTILINE))
    missing = sorted(set(_public_names(subpackage)) - listed)
    assert not missing, f"add to docs/reference/{subpackage}.rst: {missing}"


def test_site_builds_without_warnings(tmp_path: Path):
    """One build (so parallel test workers never build twice), then every check on it."""
    site = _build(tmp_path)
    problems = [
        *_check_key_pages(site),
        *_check_notebooks(site),
        *_check_reference_pages(site),
        *_check_policy_page(site),
        *_check_cross_references(site),
        *_check_index_links(site),
    ]
    assert not problems, "\n".join(problems)
