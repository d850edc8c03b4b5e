"""tools/bench_tunable.py's arithmetic on made-up runs (medians, ranges, each decode's share of its
own round's bandwidth) and its environment handling (VAR set, or removed for "unset", and put
back as it was after each worker)."""

from __future__ import annotations

import os

import pytest

bench_tunable = pytest.importorskip("bench_tunable")  # tools/ is on pytest's pythonpath


def runs(value: str, decodes: list) -> list:
    return [{"round": i, "value": value, "result": {"decode": d, "prefill": 100.0 + i}} for i, d in enumerate(decodes)]


def test_medians_ranges_and_per_round_shares():
    res = {"values": ["0", "2048"], "weight_bytes_per_token": 1_000_000_000, "bandwidth": [10.0, 20.0, 40.0, 30.0],
           "runs": runs("0", [4.0, 8.0, 10.0]) + runs("2048", [5.0, 16.0, 20.0])}
    rows = {r["value"]: r for r in bench_tunable.summarise(res)}
    assert rows["0"]["decode"] == {"median": 8.0, "min": 4.0, "max": 10.0, "n": 3}
    assert rows["0"]["prefill"]["median"] == pytest.approx(101.0)
    # each run against the bandwidth read at the start of its round (the last reading is the one after)
    assert rows["0"]["decode bandwidth share"] == pytest.approx(0.4)  # 0.4, 0.4, 0.25
    assert rows["2048"]["decode bandwidth share"] == pytest.approx(0.5)  # 0.5, 0.8, 0.5


def test_a_value_is_set_or_removed_and_the_environment_restored(monkeypatch):
    seen = []
    monkeypatch.setattr(bench_tunable.bench_compare, "run_worker",
                        lambda backend, target, spec, threads: seen.append(os.environ.get("LLAISYS_T")) or {})
    monkeypatch.setenv("LLAISYS_T", "mine")
    bench_tunable.run_value("LLAISYS_T", "7", "f.gguf", {}, 2)
    bench_tunable.run_value("LLAISYS_T", bench_tunable.UNSET, "f.gguf", {}, 2)
    assert seen == ["7", None] and os.environ["LLAISYS_T"] == "mine"
    monkeypatch.delenv("LLAISYS_T")
    bench_tunable.run_value("LLAISYS_T", "8", "f.gguf", {}, 2)
    assert seen[-1] == "8" and "LLAISYS_T" not in os.environ


def test_bad_arguments_are_refused(tmp_path, capsys):
    with pytest.raises(SystemExit):
        bench_tunable.main(["--var", "X", "--values", "1", "--gguf", str(tmp_path / "none.gguf")])
    assert "not an existing .gguf file" in capsys.readouterr().err
    (tmp_path / "f.gguf").write_bytes(b"")
    with pytest.raises(SystemExit):
        bench_tunable.main(["--var", "X", "--values", "1", "--gguf", str(tmp_path / "f.gguf"), "--rounds", "0"])
    assert "--rounds: 1 to 50" in capsys.readouterr().err
