"""The outputs printed on the getting-started page are what its code prints today.

``docs/getting-started.md`` shows two simulations with their printed results: one seed of
``EbmTS`` against ``LinTS``, and the regret table of ``simulate`` over 10 seeds. Both are
deterministic functions of their seeds, so a change to a policy that moves them (a new estimator
default, another use of the random streams) must come with the page's numbers regenerated. This
test runs each of those code blocks as a reader would and compares what it prints with the text
block under it, character for character after trailing spaces are dropped.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import re
from pathlib import Path

import pytest

PAGE = Path(__file__).resolve().parent.parent / "docs" / "getting-started.md"
_BLOCK = re.compile(r"```(python|text)\n(.*?)```", re.DOTALL)
#: a code block whose output the page shows, recognised by a phrase of its code
CHECKED = {"one seed": "cumulative regret", "the regret table": "regret_table(ds"}


def _pairs() -> dict[str, tuple[str, str]]:
    """Each checked code block and the text block that follows it on the page."""
    blocks = [(m.group(1), m.group(2)) for m in _BLOCK.finditer(PAGE.read_text())]
    found = {}
    for name, phrase in CHECKED.items():
        hits = [
            (code, text)
            for (kind, code), (next_kind, text) in itertools.pairwise(blocks)
            if kind == "python" and next_kind == "text" and phrase in code
        ]
        assert len(hits) == 1, f"{PAGE.name}: expected one code block with {phrase!r}"
        found[name] = hits[0]
    return found


def _normalise(text: str) -> str:
    return "\n".join(line.rstrip() for line in text.strip().splitlines())


@pytest.mark.parametrize("name", list(CHECKED))
def test_the_page_shows_what_its_code_prints(name: str, tmp_path, monkeypatch):
    code, shown = _pairs()[name]
    monkeypatch.chdir(tmp_path)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, f"{PAGE.name}:{name}", "exec"), {"__name__": "__main__"})
    assert _normalise(out.getvalue()) == _normalise(shown), (
        f"{PAGE.name}, {name}: the page shows\n{shown}\nbut the code prints\n{out.getvalue()}"
    )
