"""tools/bench_sitting.py's arithmetic on a made-up sitting: weight GB/s and bandwidth shares
from tok/s, the ratio against llama.cpp at its best (bindings or its C++ tools), and the flag
where the bindings and the C++ tools disagree by more than 3%."""

from __future__ import annotations

import pytest

bench_sitting = pytest.importorskip("bench_sitting")  # tools/ is on pytest's pythonpath


def sitting(bindings_decode: float) -> dict:
    run = lambda **kv: dict(kv, meta={"anon_huge_kib": 0})  # noqa: E731
    return {
        "bandwidth_before": {"read_gb_s": 19.0}, "bandwidth_after": {"read_gb_s": 21.0},
        "weight_bytes_per_token": 1_000_000_000,
        "compare": {"models": {"m": {
            "llaisys": [run(decode=10.0, prefill=100.0, **{"batch-1": 9.0, "batch-4": 30.0, "batch-16": 80.0})] * 3,
            "llama.cpp": [run(decode=6.0, prefill=90.0, **{"batch-1": 8.0, "batch-4": 20.0, "batch-16": 40.0})] * 3,
            "llama.cpp-kvf16": [run(decode=bindings_decode, prefill=91.0)] * 3}}},
        "llama_bench": [{"n_prompt": 0, "n_gen": 128, "flash_attn": 0, "avg_ts": 7.5},
                        {"n_prompt": 0, "n_gen": 128, "flash_attn": 1, "avg_ts": 8.0},
                        {"n_prompt": 512, "n_gen": 0, "flash_attn": 0, "avg_ts": 95.0},
                        {"n_prompt": 512, "n_gen": 0, "flash_attn": 1, "avg_ts": 120.0}],
        "batched_bench": {"rows": [{"b": 1, "s_tg": 8.1}, {"b": 4, "s_tg": 25.0}, {"b": 16, "s_tg": 50.0}]},
    }


def test_shares_ratios_and_the_disagreement_flag():
    s = bench_sitting.summarise(sitting(bindings_decode=7.0))
    assert s["read_gb_s"] == pytest.approx(20.0)
    rows = {r["workload"]: r for r in s["rows"]}
    dec = rows["decode (tg128)"]
    assert dec["llaisys_gb_s"] == pytest.approx(10.0) and dec["llaisys_share"] == pytest.approx(0.5)
    assert dec["peer_best"] == "llama-bench fa1 f16 KV" and dec["ratio_vs_best"] == pytest.approx(10 / 8)
    assert dec["peer_share"] == pytest.approx(0.4)
    assert dec["bindings_vs_tools"] == pytest.approx(7 / 8 - 1) and dec["disagree"]  # the f16-KV bindings
    pre = rows["prefill (pp512)"]
    assert pre["ratio_vs_best"] == pytest.approx(100 / 120) and "llaisys_gb_s" not in pre
    b16 = rows["batch-16 decode"]
    assert b16["peer_best"] == "llama-batched-bench" and b16["ratio_vs_best"] == pytest.approx(1.6)
    assert b16["bindings_vs_tools"] == pytest.approx(-0.2)
    assert not rows["batch-1 decode"]["disagree"]  # 8.0 vs 8.1: within 3%
    assert s["anon_huge_kib"] == {"llaisys": [0, 0, 0], "llama.cpp": [0, 0, 0], "llama.cpp-kvf16": [0, 0, 0]}


def test_agreeing_peers_are_not_flagged():
    s = bench_sitting.summarise(sitting(bindings_decode=7.9))
    dec = next(r for r in s["rows"] if r["workload"] == "decode (tg128)")
    assert not dec["disagree"] and dec["peer_best"] == "llama-bench fa1 f16 KV"


def test_rounds_give_medians_and_every_bandwidth_counts():
    """A sitting in rounds: batched-bench rows of every round give their median per batch, and
    the bandwidth is the mean of every round's measurement and the last one."""
    res = sitting(bindings_decode=7.0)
    res["bandwidth_rounds"] = [{"read_gb_s": 10.0}, {"read_gb_s": 20.0}, {"read_gb_s": 30.0}]
    res["bandwidth_after"] = {"read_gb_s": 40.0}
    res["batched_bench"]["rows"] = [{"b": 16, "s_tg": v} for v in (40.0, 60.0, 50.0)]
    s = bench_sitting.summarise(res)
    assert s["read_gb_s"] == pytest.approx(25.0)
    b16 = next(r for r in s["rows"] if r["workload"] == "batch-16 decode")
    assert b16["peers"]["llama-batched-bench"] == pytest.approx(50.0)
    assert b16["ratio_vs_best"] == pytest.approx(80 / 50)
