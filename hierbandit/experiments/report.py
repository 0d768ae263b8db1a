"""Markdown tables and text files of the reports: one table format for every experiment.

Every table the experiments write is a pipe table with a ``|---|`` rule under its header::

    | policy | overall |
    |---|---|
    | EbmTS | 12.3 ± 0.4 |

Callers format the numbers of each cell (:func:`cell_text` for the common cases); this module
only lays the cells out, so that one layout serves every report.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from hierbandit._io import atomic_write

__all__ = ["cell_text", "frame_table", "markdown_table", "write_text"]


def markdown_table(header: Sequence[Any], rows: Iterable[Sequence[Any]]) -> str:
    """A pipe table: ``header`` and each row's cells as text (``str``), lines joined by newlines,
    no trailing newline."""
    head = [str(h) for h in header]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def cell_text(
    value: Any,
    float_format: str = "{:.4g}",
    *,
    booleans: tuple[str, str] | None = None,
    non_finite: str | None = None,
    escape: bool = False,
) -> str:
    """One cell: floats with ``float_format`` (``non_finite`` instead for NaN and infinities,
    when given), booleans as ``booleans`` = (true, false) when given, anything else with
    ``str`` (with ``|`` escaped when ``escape``)."""
    if booleans is not None and isinstance(value, bool | np.bool_):
        return booleans[0] if value else booleans[1]
    if isinstance(value, float | np.floating):
        if non_finite is not None and not np.isfinite(value):
            return non_finite
        return float_format.format(float(value))
    text = str(value)
    return text.replace("|", "\\|") if escape else text


def frame_table(
    df: pd.DataFrame,
    *,
    index_header: str | None = None,
    float_format: str = "{:.4g}",
    booleans: tuple[str, str] | None = None,
    non_finite: str | None = None,
    escape: bool = False,
) -> str:
    """:func:`markdown_table` of a DataFrame: its columns, preceded by the index (under
    ``index_header``) when that is given; cells by :func:`cell_text`."""
    header = [str(c) for c in df.columns]
    rows = []
    for idx, row in df.iterrows():
        cells = [
            cell_text(v, float_format, booleans=booleans, non_finite=non_finite, escape=escape)
            for v in row.tolist()
        ]
        rows.append(cells if index_header is None else [str(idx), *cells])
    return markdown_table(header if index_header is None else [index_header, *header], rows)


def write_text(path: Path, text: str) -> Path:
    """Write ``text`` (UTF-8) atomically; returns ``path``."""
    return atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))
