"""Figures the documentation quotes from the benchmark reports say what the latest committed
report says: each is written ``0.71×<!-- lock: pairs_typical_ratio.ours -->`` (a figure of
``benchmarks/results/lock.json``, or the ratio ``a / b`` of two), and each run it links,
``[2026-11-26](results/lock.md)``, has that report's date."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
DOCUMENTS = [ROOT / "README.md", ROOT / "benchmarks" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

#: A quoted number, an optional ×, then the comment naming its source.
QUOTED = re.compile(r"(?P<number>-?[\d,]*\d(?:\.(?P<decimals>\d+))?)×?\s*<!-- (?P<report>[\w-]+): (?P<expr>[^>]+?) -->")
#: A link to a report whose text is a date.
DATED = re.compile(r"\[(?P<date>\d{4}-\d\d-\d\d)\]\((?:\.\./benchmarks/)?results/(?P<report>[\w-]+)\.md\)")


def report(name: str) -> dict:
    return json.loads((RESULTS / f"{name}.json").read_text())


def value_of(name: str, expr: str) -> float:
    figures = report(name)["figures"]
    parts = [figures[part.strip()] for part in expr.split(" / ")]
    assert len(parts) in (1, 2), expr
    return parts[0] / parts[1] if len(parts) == 2 else parts[0]


def quotes() -> list[tuple[str, re.Match]]:
    return [(path.relative_to(ROOT).as_posix(), match) for path in DOCUMENTS
            for match in QUOTED.finditer(path.read_text())]


def test_the_benchmark_readme_quotes_its_figures_with_their_sources():
    text = (ROOT / "benchmarks" / "README.md").read_text()
    table = text[text.index("## What the latest runs show"):text.index("## Running")]
    rows = [line for line in table.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert rows and all(QUOTED.search(row) and DATED.search(row) for row in rows)


@pytest.mark.parametrize("where,match", quotes(), ids=lambda item: item if isinstance(item, str) else item["expr"])
def test_a_quoted_figure_is_the_latest_reports(where, match):
    quoted = float(match["number"].replace(",", ""))
    decimals = len(match["decimals"] or "")
    actual = value_of(match["report"], match["expr"])
    assert round(actual, decimals) == quoted, f"{where} quotes {quoted}, results/{match['report']}.json says {actual}"


def test_a_dated_link_has_its_reports_date():
    links = [(path, match) for path in DOCUMENTS for match in DATED.finditer(path.read_text())]
    assert links
    for path, match in links:
        assert report(match["report"])["machine"]["date"].startswith(match["date"]), (path.name, match[0])
