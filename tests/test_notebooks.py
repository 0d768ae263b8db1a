"""Execute every tutorial notebook in ``docs/notebooks/`` and fail on any cell error.

Each notebook is copied to a temporary directory and executed there with ``nbclient`` (the stored
notebook and the repository are never written to). The kernel is the ``python3`` kernel started
with *this* interpreter: ``jupyter_client`` replaces a kernel spec's ``python`` command with
``sys.executable``, and a spec that names another interpreter is overridden to this one. A cell
injected at the top asserts that the kernel runs in the same environment (``sys.prefix``) as the
tests, so a notebook can never pass by running against some other installation.

The notebooks run NUTS and take longer than a minute (``01_fit_prior_and_serve.ipynb``: about
55–80 s on 2 cores), so this is part of the slow suite: ``make test-slow``.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

from jupyter_client.manager import KernelManager  # noqa: E402  (after the importorskips)

NOTEBOOK_DIR = Path(__file__).resolve().parent.parent / "docs" / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))
KERNEL_NAME = "python3"
#: seconds any single cell may take
CELL_TIMEOUT = 900

_CHECK_KERNEL = f"""\
import sys
assert sys.prefix == {sys.prefix!r}, (
    f"notebook kernel runs {{sys.executable}} (prefix {{sys.prefix}}), "
    f"not the test environment {sys.prefix!r}"
)
"""


def _kernel_manager() -> KernelManager:
    """A manager for the ``python3`` kernel that always starts this interpreter."""
    km = KernelManager(kernel_name=KERNEL_NAME)
    argv = km.kernel_spec.argv
    if argv and argv[0] not in ("python", "python3", sys.executable):
        argv[0] = sys.executable  # a spec pinned to some other Python
    return km


def test_notebooks_found():
    assert NOTEBOOKS, f"no notebooks in {NOTEBOOK_DIR}"


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_executes(path: Path, tmp_path: Path):
    work = tmp_path / path.name
    shutil.copy(path, work)
    nb = nbformat.read(work, as_version=4)
    nb.cells.insert(0, nbformat.v4.new_code_cell(_CHECK_KERNEL))
    client = nbclient.NotebookClient(
        nb,
        km=_kernel_manager(),
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
