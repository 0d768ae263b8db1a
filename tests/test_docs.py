"""The documentation site builds without a warning, and its key pages exist.

The site is built from a copy of ``docs/`` and ``notebooks/`` in a temporary directory (the
repository is never written to), with the command line of ``python -m sphinx -W --keep-going``
(:func:`sphinx.cmd.build.build_main`, which restores docutils' registries when it returns) run in
the test process: autodoc then finds the package, PyMC, ArviZ and Matplotlib already imported by
the other tests instead of importing all of them again in a new interpreter (a third of the
build's CPU time). The build runs in a thread under the same 900 s limit as a subprocess had, with
its warnings written to a buffer, and the interpreter's ``sys.path`` (which ``conf.py`` extends)
and environment are restored afterwards. Notebooks are rendered from their stored outputs
(``nb_execution_mode = "off"``); ``tests/test_notebooks.py`` executes them in the slow suite.

Without a build, the tests here also check that every public name of every package is listed on
its reference page, that every public class's signature is its ``__init__``'s (not the
``(*args, **kwargs)`` of a generic ``__new__``), and that the package's docstrings cite only
documentation that ships.

The build takes 26-32 s of CPU time in the test process, against 38-42 s in its own interpreter
(measured on a shared 2-core machine; 36-60 s wall).
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import io
import re
import shutil
import sys
import threading
from pathlib import Path

import pytest

import hierbandit

pytest.importorskip("sphinx")
pytest.importorskip("myst_nb")
pytest.importorskip("numpydoc")
pytest.importorskip("pydata_sphinx_theme")

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
NOTEBOOKS = ROOT / "notebooks"
REFERENCE = DOCS / "reference"
#: every public package, each with its page ``docs/reference/<name>.rst``
SUBPACKAGES = [*hierbandit._SUBPACKAGES, "checkpoint", "errors"]
#: the top-level facade's page (its names are documented where they are defined)
FACADE = "hierbandit"
PAPER_PAGES = ["ebm", "cascading", "sclub", "offline", "boc"]
KEY_PAGES = [
    "index",
    "getting-started",
    "workflow",
    "api",
    "architecture",
    "bayes",
    "experiments",
    "maths/ebm",
    "decisions/ebm",
    "notebooks",
    "reference/index",
    f"reference/{FACADE}",
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


def _home(subpackage: str, name: str) -> str:
    """The package whose reference page documents ``hierbandit.<subpackage>.<name>``.

    A package's own names are documented on its page. A re-export (an object another public
    package defines and exports too, e.g. ``hierbandit.bayes.CascadeLog`` from
    ``hierbandit.data``) is documented once, on its defining package's page; documenting it
    twice would describe one class under two names.
    """
    obj = getattr(importlib.import_module(f"hierbandit.{subpackage}"), name)
    module = getattr(obj, "__module__", None) or ""
    for other in SUBPACKAGES:
        if (
            other != subpackage
            and (module == f"hierbandit.{other}" or module.startswith(f"hierbandit.{other}."))
            and name in _public_names(other)
            and getattr(importlib.import_module(f"hierbandit.{other}"), name) is obj
        ):
            return other
    return subpackage


def _public_objects() -> list[tuple[str, object]]:
    """``(documented name, object)`` of every public name of every package, each once."""
    found = {}
    for sub in SUBPACKAGES:
        module = importlib.import_module(f"hierbandit.{sub}")
        for name in module.__all__:
            found[f"hierbandit.{_home(sub, name)}.{name}"] = getattr(module, name)
    return list(found.items())


def _facade_pages() -> dict[str, str]:
    """Each name of the facade -> the generated page documenting it (without ``.html``).

    A name that a package also exports is documented on that package's page; the others get
    a page of their own under ``hierbandit.``.
    """
    import hierbandit

    pages = {}
    for name in hierbandit.__all__:
        if name == "__version__":
            continue
        obj = getattr(hierbandit, name)
        home = next(
            (
                sub
                for sub in SUBPACKAGES
                if name in _public_names(sub)
                and getattr(importlib.import_module(f"hierbandit.{sub}"), name) is obj
            ),
            None,
        )
        pages[name] = f"hierbandit.{home}.{name}" if home else f"hierbandit.{name}"
    return pages


def _build(root: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Build a copy of ``docs/`` (with ``notebooks/`` beside it) under ``root``; return the HTML."""
    src = root / "docs"
    shutil.copytree(
        DOCS,
        src,
        ignore=shutil.ignore_patterns(
            "_build", "generated", ".ipynb_checkpoints", "results", "notebooks"
        ),
    )
    shutil.copytree(
        NOTEBOOKS, root / "notebooks", ignore=shutil.ignore_patterns(".ipynb_checkpoints")
    )
    out = root / "html"
    from sphinx.cmd.build import build_main

    argv = ["-W", "--keep-going", "-q", "--no-color", "-b", "html", str(src), str(out)]
    stderr = io.StringIO()
    result: list[int] = []
    monkeypatch.delenv("HIERBANDIT_DOCS_EXECUTE", raising=False)
    monkeypatch.setattr(sys, "path", list(sys.path))  # conf.py inserts its root
    with contextlib.redirect_stderr(stderr):
        worker = threading.Thread(target=lambda: result.append(build_main(argv)), daemon=True)
        worker.start()
        worker.join(timeout=900)
    assert not worker.is_alive(), "sphinx-build did not finish in 900 s"
    err = stderr.getvalue()
    assert result == [0], f"sphinx-build failed:\n{err[-6000:]}"
    assert "WARNING" not in err and "ERROR" not in err, err[-6000:]
    return out


def _read(site: Path, page: str) -> str:
    return (site / f"{page}.html").read_text(encoding="utf-8")


def _check_key_pages(site: Path) -> list[str]:
    return [f"page missing: {page}" for page in KEY_PAGES if not (site / f"{page}.html").is_file()]


def _check_notebooks(site: Path) -> list[str]:
    notebooks = sorted(NOTEBOOKS.glob("*.ipynb"))
    problems = [] if notebooks else ["no notebooks in notebooks/"]
    index = _read(site, "notebooks")
    for nb in notebooks:
        page = site / "notebooks" / f"{nb.stem}.html"
        if not page.is_file():
            problems.append(f"notebook page missing: {nb.name}")
            continue
        if f'href="notebooks/{nb.stem}.html"' not in index:
            problems.append(f"{nb.name} is not linked from the notebooks page")
        # links into docs/ (right in the repository) are rewritten for the site
        if 'href="../docs/' in page.read_text(encoding="utf-8"):
            problems.append(f"{nb.name}: a link into ../docs/ was not rewritten for the site")
    return problems


def _check_reference_pages(site: Path) -> list[str]:
    generated = site / "reference" / "generated"
    problems = [
        f"no reference page for hierbandit.{sub}.{name}"
        for sub in SUBPACKAGES
        for name in _public_names(sub)
        if not (generated / f"hierbandit.{_home(sub, name)}.{name}.html").is_file()
    ]
    facade = _read(site, f"reference/{FACADE}")
    for name, page in _facade_pages().items():
        if not (generated / f"{page}.html").is_file():
            problems.append(f"no reference page for hierbandit.{name} ({page})")
        elif f'href="generated/{page}.html' not in facade:
            problems.append(f"reference/{FACADE} does not link hierbandit.{name} to {page}")
    return problems


def _signature_text(html: str, object_id: str) -> str:
    """The rendered signature line of the object ``object_id`` on a page, as plain text."""
    match = re.search(
        rf'<dt class="sig sig-object py" id="{re.escape(object_id)}">(.*?)</dt>', html, re.S
    )
    if match is None:
        return ""
    text = re.sub(r"<a class=\"headerlink\".*?</a>", "", match.group(1), flags=re.S)
    text = re.sub(r"<[^>]+>", "", text)
    return re.sub(r"\s+", " ", text.replace("&#8217;", "'")).strip()


def _check_signatures(site: Path) -> list[str]:
    """Class pages show the constructor's arguments, never a generic ``(*args, **kwargs)``."""
    problems = []
    ebm_ts = _signature_text(
        _read(site, "reference/generated/hierbandit.ebm.EbmTS"), "hierbandit.ebm.EbmTS"
    )
    if "EbmTS(n_instances=None, n_arms=None, n_features=None, lam=0.001, a=0.1, *," not in ebm_ts:
        problems.append(f"EbmTS's page shows the signature {ebm_ts!r}")
    for name, obj in _public_objects():
        if not inspect.isclass(obj):
            continue
        text = _signature_text(_read(site, f"reference/generated/{name}"), name)
        if not text:
            problems.append(f"{name}: no signature on its page")
        elif "(*args, **kwargs)" in text:
            problems.append(f"{name}: its page shows {text!r}")
    return problems


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
    """Every name in ``__all__`` is listed on its subpackage's reference page: in an autosummary
    table, or, for a re-export, as a link to the page of the package that defines it."""
    page = (REFERENCE / f"{subpackage}.rst").read_text(encoding="utf-8")
    listed = set(re.findall(r"^\s{3}(\w+)\s*$", page, flags=re.MULTILINE))
    for name in _public_names(subpackage):
        home = _home(subpackage, name)
        if home != subpackage and f"`~hierbandit.{home}.{name}`" in page:
            listed.add(name)
    missing = sorted(set(_public_names(subpackage)) - listed)
    assert not missing, f"add to docs/reference/{subpackage}.rst: {missing}"


def test_facade_page_lists_every_name():
    """Every name of ``hierbandit.__all__`` is on the facade's reference page."""
    page = (REFERENCE / f"{FACADE}.rst").read_text(encoding="utf-8")
    listed = set(re.findall(r"``(\w+)``", page)) | set(
        re.findall(r"^\s{3}(\w+)\s*$", page, flags=re.MULTILINE)
    )
    missing = sorted(set(_public_names_of("hierbandit")) - listed)
    assert not missing, f"add to docs/reference/{FACADE}.rst: {missing}"


def _public_names_of(module_name: str) -> list[str]:
    return list(importlib.import_module(module_name).__all__)


def _init_signature(cls: type) -> inspect.Signature:
    sig = inspect.signature(cls.__init__)
    return sig.replace(parameters=list(sig.parameters.values())[1:])


def test_public_class_signatures_are_their_constructors():
    """``inspect.signature(cls)`` (what ``help()`` and the reference show) is the signature of
    ``cls.__init__`` without ``self``, for every public class of every package; a class without
    an ``__init__`` of its own (a named tuple, built by its ``__new__``) never shows only
    ``(*args, **kwargs)``."""
    import hierbandit

    objects = _public_objects()
    objects += [(f"hierbandit.{n}", getattr(hierbandit, n)) for n in hierbandit.__all__]
    wrong = []
    classes = 0
    for name, obj in objects:
        if not inspect.isclass(obj):
            continue
        classes += 1
        shown = inspect.signature(obj)
        if inspect.isfunction(obj.__init__):
            if shown != _init_signature(obj):
                wrong.append(f"{name}{shown} is not {name}{_init_signature(obj)}")
        elif [p.kind for p in shown.parameters.values()] == [
            inspect.Parameter.VAR_POSITIONAL,
            inspect.Parameter.VAR_KEYWORD,
        ]:
            wrong.append(f"{name}{shown}")
    assert classes > 50
    assert not wrong, "\n".join(wrong)
    # what help() prints
    import pydoc

    from hierbandit.ebm import EbmTS

    text = pydoc.render_doc(EbmTS, renderer=pydoc.plaintext)
    assert "EbmTS(n_instances: 'int | None' = None, n_arms: 'int | None' = None" in text, text[:400]


#: a documentation page named in the package's source
_DOCS_PATH = re.compile(r"\bdocs/[\w./-]*?\.md\b")


def test_docstrings_cite_shipped_docs():
    """No module of the package cites the ``specs/`` documents (they do not ship), and every
    ``docs/….md`` page a module names exists."""
    problems = []
    for path in sorted((ROOT / "hierbandit").rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        where = path.relative_to(ROOT)
        for lineno, line in enumerate(text.splitlines(), 1):
            if "specs/" in line:
                problems.append(f"{where}:{lineno}: cites specs/: {line.strip()}")
            for cited in _DOCS_PATH.findall(line):
                if not (ROOT / cited).is_file():
                    problems.append(f"{where}:{lineno}: {cited} does not exist")
    assert not problems, "\n".join(problems)


# Python's deprecation notices of Sphinx's extension API (myst-parser's use of it): hidden by the
# default filters when the build ran as its own interpreter, and no warning of the site
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")
def test_site_builds_without_warnings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """One build (so parallel test workers never build twice), then every check on it."""
    site = _build(tmp_path, monkeypatch)
    problems = [
        *_check_key_pages(site),
        *_check_notebooks(site),
        *_check_reference_pages(site),
        *_check_policy_page(site),
        *_check_signatures(site),
        *_check_cross_references(site),
        *_check_index_links(site),
    ]
    assert not problems, "\n".join(problems)
