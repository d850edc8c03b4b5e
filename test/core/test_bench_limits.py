"""tools/bench_limits: limits.c runs on this CPU and reports a peak for exactly the instruction
families cpuid has (null with a reason for the others); bench_limits.py holds prefill against
the ceiling of the kernel path that ran (its ISA and weight dtype), decode against bandwidth.
No timing thresholds: the figures are only checked to be positive numbers."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cpu_features import cpu_flags

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "tools" / "bench_limits" / "bench_limits.py"
QWEN05 = "qwen2.5-coder-0.5b-instruct"
# limits.c's families and the /proc/cpuinfo flags each needs
FAMILIES = {"f32_fma_ymm": {"avx2", "fma"}, "f32_fma_zmm": {"avx512f"}, "bf16_dot_zmm": {"avx512f", "avx512_bf16"},
            "int8_vnni_zmm": {"avx512f", "avx512_vnni"}, "int8_vnni_ymm": {"avx2", "avx_vnni"},
            "int8_maddubs_ymm": {"avx2"}, "f32_muladd_scalar": set()}


def load_tool():
    spec = importlib.util.spec_from_file_location("bench_limits", TOOL)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["bench_limits"] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def tool():
    return load_tool()


@pytest.fixture(scope="module")
def limits(tool):
    return tool.measure(2, quick=True)


def test_limits_reports_every_family_the_cpu_has_and_only_those(limits):
    assert limits["threads"] == 2 and limits["quick"] is True
    for key in ("read_bandwidth_gb_s", "plain_read_gb_s", "prefetched_read_gb_s"):
        assert limits[key] > 0, key
    assert 0 < limits["read_cpu_share"] <= 1.05
    assert limits["read_bandwidth_gb_s"] == max(limits["plain_read_gb_s"], limits["prefetched_read_gb_s"])
    assert set(limits["peaks"]) == set(FAMILIES)
    flags = cpu_flags()
    for key, needs in FAMILIES.items():
        p = limits["peaks"][key]
        assert p["instruction"] and p["unit"] in ("GFLOP/s", "GOP/s"), key
        if needs <= flags:
            assert isinstance(p["peak"], float) and p["peak"] > 0, (key, p)
            assert 0 < p["cpu_share"] <= 1.05, (key, p)  # thread CPU time / wall time of the best run
        else:
            assert p["peak"] is None and "lacks" in p["reason"], (key, p)


@pytest.mark.parametrize("isa,dtype,ceiling", [
    ("scalar", "bf16", "f32_muladd_scalar"), ("avx2", "f32", "f32_fma_ymm"), ("avx2", "f16", "f32_fma_ymm"),
    ("avx2", "bf16", "f32_fma_ymm"), ("avx512", "bf16", "f32_fma_zmm"), ("avx512bf16", "f16", "f32_fma_zmm"),
    ("avx512bf16", "f32", "f32_fma_zmm"), ("avx512bf16", "bf16", "bf16_dot_zmm")])
def test_kernel_path_follows_the_linear_dispatch(tool, isa, dtype, ceiling):
    path = tool.kernel_path(isa, dtype)
    assert path.ceiling == ceiling and path.ceiling in FAMILIES
    assert path.description.startswith(f"{dtype} weights on {isa}:")


def test_kernel_path_names_a_bad_field(tool):
    with pytest.raises(ValueError, match="weight_dtype"):
        tool.kernel_path("avx2", "q8_0")
    with pytest.raises(ValueError, match="isa"):
        tool.kernel_path("neon", "bf16")


def test_bench_compare_report_gives_llaisys_medians_and_isa(tool):
    report = {"threads": 2, "isa": "avx2", "models": {"m": {
        "llaisys": [{"prefill": 100.0, "decode": 9.0}, {"prefill": 300.0, "decode": 11.0}, {"prefill": 200.0}],
        "llama.cpp-bf16": [{"prefill": 999.0, "decode": 99.0}]}}}
    assert tool.figures_from(report) == [{"model": "m", "prefill_tok_s": 200.0, "decode_tok_s": 10.0,
                                          "threads": 2, "isa": "avx2"}]
    with pytest.raises(ValueError, match="models-json"):
        tool.figures_from({"rows": []})


def judge_json(tmp_path, doc) -> tuple[dict, str]:
    """bench_limits.py --quick --models-json over `doc` (written to a file), as a process with
    LLAISYS_ISA=scalar; the JSON it wrote and its stdout."""
    (tmp_path / "models.json").write_text(json.dumps(doc))
    out = tmp_path / "limits.json"
    proc = subprocess.run([sys.executable, str(TOOL), "--quick", "--threads", "2", "--models-json",
                           str(tmp_path / "models.json"), "--out", str(out)],
                          capture_output=True, text=True, timeout=600, env=dict(os.environ, LLAISYS_ISA="scalar"))
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(out.read_text()), proc.stdout


@pytest.mark.slow
def test_models_json_is_judged_against_the_path_that_ran(tmp_path, qwen05_dir, limits):
    """End to end: bench_models.py-style rows from an avx2 run, an avx512bf16 run and a run
    that names no ISA (it takes this process's: LLAISYS_ISA=scalar) of the bf16 0.5B model;
    each prefill is held against its own path's ceiling."""
    rows = [{"model": QWEN05, "prefill_tok_s": 100.0, "decode_tok_s": 10.0, "isa": "avx2"},
            {"model": QWEN05, "prefill_tok_s": 100.0, "decode_tok_s": 10.0, "isa": "avx512bf16"},
            {"model": QWEN05, "prefill_tok_s": 100.0, "decode_tok_s": 10.0}]
    doc, stdout = judge_json(tmp_path, rows)
    assert set(doc["machine"]["peaks"]) == set(FAMILIES)
    avx2, bf16, scalar = doc["models"]
    assert doc["machine"]["isa"] == "scalar" and scalar["path"]["ceiling"] == "f32_muladd_scalar"
    assert avx2["path"]["ceiling"] == "f32_fma_ymm" and avx2["weight_dtype"] == "bf16"
    assert bf16["path"]["ceiling"] == "bf16_dot_zmm"
    assert "bf16 weights on avx2: widened to f32" in stdout
    for r in (avx2, bf16, scalar):
        assert r["prefill_gflop_s"] == round(100.0 * r["prefill_flops_per_token"] / 1e9, 1)
        assert 0.70e9 < r["prefill_flops_per_token"] < 0.73e9  # 2 x 358M parameters past the tied embedding
        peak = doc["machine"]["peaks"][r["path"]["ceiling"]]["peak"]
        assert r["ceiling_gflop_s"] == peak
        if peak is None:
            assert r["prefill_fraction"] is None and r["ceiling_missing_reason"]
        else:
            assert r["prefill_fraction"] == round(r["prefill_gflop_s"] / peak, 3)
        bw = doc["machine"]["read_bandwidth_gb_s"] * 1e9
        assert r["decode_fraction"] == round(10.0 * r["decode_bytes_per_token"] / bw, 3)


def test_quant_report_is_judged_against_the_gguf_that_ran(tmp_path, qwen05_gguf, limits):
    """bench_compare.py --quant reports: decode is held against the bytes of the GGUF file that
    ran (every weight but an untied token embedding), whatever format the name resolves to by
    default, and the path named is the int8 one."""
    import gguf

    from llaisys.models import hub

    reader = gguf.GGUFReader(str(qwen05_gguf))
    tied = "output.weight" not in {t.name for t in reader.tensors}
    want = sum(int(t.n_bytes) for t in reader.tensors if tied or t.name != "token_embd.weight")
    assert Path(hub.resolve_model(QWEN05, quant="q4_k_m")) == Path(qwen05_gguf)
    report = {"threads": 2, "spec": {"quant": "q4_k_m"},
              "models": {QWEN05: {"llaisys": [{"decode": 10.0, "meta": {"isa": "avx2"}}]}}}
    row = judge_json(tmp_path, report)[0]["models"][0]
    assert row["decode_bytes_per_token"] == want
    assert row["weight_dtype"] == "quantized" and row["path"]["ceiling"] == "int8_maddubs_ymm"
    assert row["decode_gb_s"] == round(10.0 * want / 1e9, 2)

