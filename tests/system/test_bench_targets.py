"""benchmarks/targets.py prints issue 28's targets as ratios, from make bench's JSON results."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import targets  # noqa: E402


def _zre(rows: list[tuple[str, str, dict[str, list[float]]]]) -> dict[str, object]:
    return {"rows": [{"scenario": s, "measure": m, "values": v} for s, m, v in rows]}


def test_each_ratio_divides_trizre_by_the_figure_beside_it(tmp_path: Path) -> None:
    (tmp_path / "zre.json").write_text(
        json.dumps(
            _zre(
                [
                    ("pingpong", "round trips/s", {"zyre": [4000.0, 5000.0, 6000.0]}),
                    ("flood 100,000", "received msg/s", {"trizre": [150.0], "zyre": [100.0]}),
                    ("SHOUT to 5 (processes)", "deliveries/s", {"trizre": [50.0], "zyre": [100.0]}),
                ]
            )
        )
    )
    lowlat = {
        "runs": {
            "zyre": {"rate": [4000.0, 5000.0, 6000.0]},
            "trizre busy_poll=0 µs": {"rate": [9000.0]},  # off: not the mode
            "trizre busy_poll=100 µs": {"rate": [5500.0]},
            "trizre busy_poll=200 µs": {"rate": [5000.0, 5200.0]},
        }
    }
    (tmp_path / "lowlat.json").write_text(json.dumps(lowlat))
    floor = {"pingpong": {"trizre": {"rate": 900.0}, "trio floor": {"rate": 1000.0}}}
    (tmp_path / "trio_floor.json").write_text(json.dumps(floor))
    (tmp_path / "titanic.json").write_text(json.dumps({"completed_per_s": 1200}))
    found = {row.measure: row for row in targets.rows(tmp_path)}

    low_latency = found["WHISPER round trips/s, low-latency mode (its best busy_poll), vs zyre"]
    assert (low_latency.ratio, low_latency.status) == (
        1.1,
        "met",
    )  # the best mode, 5,500 / zyre's 5,000
    assert found["WHISPER flood, received/s vs zyre"].status == "met"  # 1.5 is the target itself
    assert found["SHOUT to 5 (processes), deliveries/s vs zyre"].ratio == 0.5
    assert found["SHOUT to 5 (processes), deliveries/s vs zyre"].status == "missed"
    assert found["WHISPER round trips/s vs the Trio floor"].status == "met"  # 0.9 times
    assert found["Titanic end to end, completed requests/s, synchronous=FULL"].status == "met"
    # Nothing measured, nothing claimed: no services row in the floor, no audit file.
    assert (
        found["services, pipelined, 4 workers, req/s vs the Trio floor's"].status == "not measured"
    )
    assert found["audit, 10 M lines, local mode, lines/s"].status == "not measured"


def test_the_table_names_what_each_ratio_is_divided_by(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    floor = {"services": {"trizre": {"rate": 15000.0}, "trio floor": {"rate": 20000.0}}}
    (tmp_path / "trio_floor.json").write_text(json.dumps(floor))
    assert targets.main(["--results", str(tmp_path), "--json", str(tmp_path / "t.json")]) == 0
    out = capsys.readouterr().out
    cells = ["services, pipelined, 4 workers, req/s vs the Trio floor's", "15,000"]
    cells += ["the Trio floor: 20,000", "0.75\u00d7", "\u2265 0.75\u00d7", "met"]
    assert "| " + " | ".join(cells) + " |" in out
    records = json.loads((tmp_path / "t.json").read_text())
    assert len(records) == 12 and all("status" in r for r in records)


def test_a_fan_out_row_shows_raw_pyzmqs_figure_from_the_same_run(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    # raw pyzmq's SHOUT frames (no Trio, no ZRE state) over zyre's figure:
    # how far any Python peer on pyzmq could go, beside trizre's ratio.
    values = {"trizre": [90.0], "zyre": [100.0], "raw": [130.0, 140.0, 150.0]}
    (tmp_path / "zre.json").write_text(
        json.dumps(_zre([("SHOUT to 10 (processes)", "deliveries/s", values)]))
    )
    found = {row.measure: row for row in targets.rows(tmp_path)}
    row = found["SHOUT to 10 (processes), deliveries/s vs zyre"]
    assert (row.ratio, row.ceiling, row.ceiling_ratio) == (0.9, 140.0, 1.4)
    assert targets.main(["--results", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "| missed | 140 (1.40\u00d7) |" in out
    # No raw figure: nothing shown, nothing claimed.
    assert found["SHOUT to 2 (processes), deliveries/s vs zyre"].ceiling is None
