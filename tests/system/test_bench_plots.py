"""benchmarks/plots.py draws the benchmarks page's plots from make bench's JSON results."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import plots  # noqa: E402


def test_each_plot_is_drawn_from_the_committed_results(tmp_path: Path) -> None:
    assert (
        plots.main(["--results", str(ROOT / "benchmarks" / "results"), "--out", str(tmp_path)]) == 0
    )
    for target, _ in plots.PLOTS.values():
        svg = (tmp_path / target).read_text()
        assert svg.startswith("<?xml") and "<svg" in svg
        assert "benchmarks/" in svg  # the caption names the command


def test_the_page_shows_the_plots_it_is_given() -> None:
    page = (ROOT / "docs" / "benchmarks.md").read_text()
    for target, _ in plots.PLOTS.values():
        assert f"](img/{target})" in page
        assert (ROOT / "docs" / "img" / target).exists()


def test_a_missing_result_skips_its_plot(tmp_path: Path) -> None:
    assert plots.main(["--results", str(tmp_path / "none"), "--out", str(tmp_path / "out")]) == 0
    assert not list((tmp_path / "out").iterdir())
