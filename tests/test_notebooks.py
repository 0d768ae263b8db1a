"""Tutorial notebooks in the top-level ``notebooks/``: their stored form, and that they execute.

The documentation site renders the *stored* outputs (myst-nb with execution off), so the fast
tests check what readers see: every notebook is stored executed, without error outputs or stray
library warnings, under 1 MB, with one ``# Title`` heading in its first cell, with relative
links that point at existing pages (links into the documentation go through ``../docs/``, which
the site build rewrites to its own layout, see ``docs/conf.py``), and importing no module that
no longer exists.

The slow test executes each notebook in a temporary directory with ``nbclient`` and fails on any
cell error (the stored notebook and the repository are never written to). The kernel is the
``python3`` kernel started with *this* interpreter: ``jupyter_client`` replaces a kernel spec's
``python`` command with ``sys.executable``, and a spec that names another interpreter is
overridden to this one. A cell injected at the top asserts that the kernel runs in the same
environment (``sys.prefix``) as the tests, so a notebook can never pass by running against some
other installation.

The notebooks run NUTS and simulations, and each takes between 10 s and 1.5 min on the shared
2-core machine (``01_fit_prior_and_serve.ipynb``: about 55–80 s), so their execution is part of
the slow suite: ``make test-slow``.
"""

from __future__ import annotations

import ast
import importlib
import re
import shutil
import sys
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")

NOTEBOOK_DIR = Path(__file__).resolve().parent.parent / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))
KERNEL_NAME = "python3"
#: seconds any single cell may take
CELL_TIMEOUT = 900
#: largest stored notebook, bytes (figures at dpi <= 100 keep them well below)
MAX_BYTES = 1_000_000
#: library warnings that must not appear in stored outputs (they render on the site)
STRAY_WARNINGS = (
    "DeprecationWarning",
    "FutureWarning",
    "RuntimeWarning",
    "could not link to a BLAS",
    "features not given",  # a guess of the feature columns the notebook should not make
)

_CHECK_KERNEL = f"""\
import sys
assert sys.prefix == {sys.prefix!r}, (
    f"notebook kernel runs {{sys.executable}} (prefix {{sys.prefix}}), "
    f"not the test environment {sys.prefix!r}"
)
"""

_IDS = [p.name for p in NOTEBOOKS]
_LINK = re.compile(r"\]\(([^)#\s]+?\.(?:md|ipynb))(?:#[^)]*)?\)")


def _markdown_lines(source: str) -> list[str]:
    """The lines of a Markdown cell outside fenced code blocks."""
    out, fenced = [], False
    for line in source.splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
            continue
        if not fenced:
            out.append(line)
    return out


def test_notebooks_found():
    assert NOTEBOOKS, f"no notebooks in {NOTEBOOK_DIR}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_IDS)
def test_stored_notebook_is_executed_and_clean(path: Path):
    assert path.stat().st_size < MAX_BYTES, f"{path.name}: {path.stat().st_size} bytes"
    nb = nbformat.read(path, as_version=4)
    assert nb.metadata.get("kernelspec", {}).get("name") == KERNEL_NAME
    code = [c for c in nb.cells if c.cell_type == "code" and c.source.strip()]
    assert code, f"{path.name} has no code"
    unexecuted = [i for i, c in enumerate(code) if c.get("execution_count") is None]
    assert not unexecuted, f"{path.name}: code cells {unexecuted} are stored unexecuted"
    counts = [c.execution_count for c in code]
    assert counts == sorted(counts), f"{path.name}: cells were not executed in order: {counts}"
    for i, cell in enumerate(code):
        for out in cell.get("outputs", []):
            assert out.get("output_type") != "error", (
                f"{path.name}, code cell {i}: stored error {out.get('ename')}: {out.get('evalue')}"
            )
            _check_no_stray_warning(out, f"{path.name}, code cell {i}: stored")


def _check_no_stray_warning(out: dict, where: str) -> None:
    """A stream on standard error shows none of :data:`STRAY_WARNINGS`."""
    if out.get("output_type") == "stream" and out.get("name") == "stderr":
        stray = [w for w in STRAY_WARNINGS if w in out.get("text", "")]
        assert not stray, f"{where} warning {stray}: {out.get('text', '')[:500]}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_IDS)
def test_notebook_title_and_links(path: Path):
    nb = nbformat.read(path, as_version=4)
    first = nb.cells[0]
    assert first.cell_type == "markdown", f"{path.name}: the first cell must be Markdown"
    assert first.source.startswith("# "), f"{path.name}: the first cell must start with '# Title'"
    titles = [
        line
        for cell in nb.cells
        if cell.cell_type == "markdown"
        for line in _markdown_lines(cell.source)
        if line.startswith("# ")
    ]
    assert len(titles) == 1, f"{path.name}: one '# ' heading expected (the page title): {titles}"
    for cell in nb.cells:
        if cell.cell_type != "markdown":
            continue
        for target in _LINK.findall(cell.source):
            if "://" in target:
                continue
            assert (path.parent / target).resolve().is_file(), f"{path.name}: broken link {target}"


def _hierbandit_imports(source: str) -> list[tuple[str, list[str]]]:
    """``(module, names)`` of every ``import hierbandit…`` / ``from hierbandit… import`` of a cell.

    IPython magics (``%…``) are dropped before parsing.
    """
    code = "\n".join(line for line in source.splitlines() if not line.lstrip().startswith("%"))
    found = []
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Import):
            found += [(a.name, []) for a in node.names if a.name.split(".")[0] == "hierbandit"]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "hierbandit":
            found.append((node.module, [a.name for a in node.names]))
    return found


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_IDS)
def test_notebook_imports_exist(path: Path):
    """Every hierbandit module a notebook imports exists and has the names it takes from it.

    Only modules are imported here, so names the package loads lazily on first use (PyMC) are
    looked up without loading what they need; the slow test runs the notebooks in full.
    """
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        for module_name, names in _hierbandit_imports(cell.source):
            module = importlib.import_module(module_name)
            public = set(getattr(module, "__all__", ())) | set(vars(module))
            missing = [n for n in names if n not in public]
            assert not missing, f"{path.name}: {module_name} has no {missing}"


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=_IDS)
def test_notebook_executes(path: Path, tmp_path: Path):
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    from jupyter_client.manager import KernelManager

    km = KernelManager(kernel_name=KERNEL_NAME)
    argv = km.kernel_spec.argv
    if argv and argv[0] not in ("python", "python3", sys.executable):
        argv[0] = sys.executable  # a spec pinned to some other Python
    work = tmp_path / path.name
    shutil.copy(path, work)
    nb = nbformat.read(work, as_version=4)
    nb.cells.insert(0, nbformat.v4.new_code_cell(_CHECK_KERNEL))
    client = nbclient.NotebookClient(
        nb,
        km=km,
        kernel_name=KERNEL_NAME,
        timeout=CELL_TIMEOUT,
        allow_errors=False,
        resources={"metadata": {"path": str(tmp_path)}},
    )
    try:
        client.execute()
    except nbclient.exceptions.CellExecutionError as exc:
        pytest.fail(f"{path.name}: a cell raised\n{exc}", pytrace=False)
    errors = [
        out
        for cell in nb.cells
        if cell.cell_type == "code"
        for out in cell.get("outputs", [])
        if out.get("output_type") == "error"
    ]
    assert not errors, f"{path.name}: {len(errors)} cell error(s): {errors[0].get('ename')}"
    # what a reader would see if the notebook were stored from this run
    for i, cell in enumerate(c for c in nb.cells[1:] if c.cell_type == "code"):
        for out in cell.get("outputs", []):
            _check_no_stray_warning(out, f"{path.name}, code cell {i}: executed, shows a")
