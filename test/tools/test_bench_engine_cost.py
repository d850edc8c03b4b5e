"""tools/bench_engine_cost.py runs end to end on its own tiny model (written with numpy and a
BPE trained on the spot): one step per token at batch 1, all rows in each step at batch 3, and
the engine's share is the wall time outside the runner's execute."""

from __future__ import annotations

import json

import bench_engine_cost  # tools/ is on pytest's pythonpath


def test_the_tool_counts_steps_and_splits_the_time(tmp_path):
    out = tmp_path / "cost.json"
    assert bench_engine_cost.main(["--batches", "1", "3", "--tokens", "6", "--repeats", "1", "--out", str(out)]) == 0
    rows = {r["batch"]: r for r in json.loads(out.read_text())["rows"]}
    one, three = rows[1]["runs"][0], rows[3]["runs"][0]
    assert one["tokens"] == 6 and one["steps"] == 6  # prefill + 5 decode steps, one token each
    assert three["tokens"] == 18 and three["steps"] == 6  # the 3 requests share every step
    for r in (one, three):
        assert 0 < r["execute_s"] < r["wall_s"]
    assert rows[1]["engine_us"] > 0 and rows[1]["per"] == "token" and rows[3]["per"] == "step"


def test_the_engines_alternate_and_the_simulated_wait_counts_as_the_step(tmp_path):
    out = tmp_path / "cost.json"
    modes = ["sync", "async_output", "async_scheduling"]
    assert bench_engine_cost.main(["--batches", "2", "--tokens", "4", "--repeats", "2", "--modes", *modes,
                                   "--device-wait-us", "2000", "--out", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [(r["batch"], r["mode"]) for r in rows] == [(2, m) for m in modes]
    for r in rows:
        assert len(r["runs"]) == 2
        for run in r["runs"]:
            assert run["tokens"] == 8 and run["steps"] == 4  # the same steps in every order
            assert run["execute_s"] >= 4 * 0.002  # every step waited inside execute
