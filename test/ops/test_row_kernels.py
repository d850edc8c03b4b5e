"""The f32 row kernels (src/ops/cpu_simd) on every SIMD path the CPU can run: SwiGLU, the
residual add + RMSNorm (f32, f16 and bf16 weights), and the sampler's greedy argmax (the NaN
rule: first NaN, else first maximum) and log-sum-exp over a whole vocabulary. (The activation
quantizers are checked byte for byte by ctest's test_quantize_rows.) The path is chosen once per process, so each runs in a child process under
LLAISYS_ISA; float64 numpy is the reference."""

import json
import os
import subprocess
import sys

import pytest

from cpu_features import skip_unless_cpu_runs

CHILD = r"""
import json, numpy as np, llaisys
from llaisys import ops
from llaisys.models.qwen2 import RowSampling
from llaisys.sampler import sample
rng = np.random.default_rng(0)
res = {"swiglu": 0.0, "logprob": 0.0, "greedy_ok": True, "norm": 0.0, "residual_ok": True}
for n in (1, 15, 16, 17, 896, 1537):
    for wdt in ("f32", "f16", "bf16"):
        r = (rng.standard_normal((2, n)) * 3).astype(np.float32)
        x = rng.standard_normal((2, n)).astype(np.float32)
        w = llaisys.Tensor.from_numpy(rng.standard_normal(n).astype(np.float32), wdt)
        wd = w.numpy().astype(np.float64)  # the weight as stored (rounded to f16 / bf16)
        res_t, out = llaisys.Tensor.from_numpy(r), llaisys.Tensor((2, n), "f32")
        ops.add_rms_norm(out, res_t, llaisys.Tensor.from_numpy(x), w, 1e-6)
        summed = r + x  # f32, as the kernel stores it
        res["residual_ok"] &= bool(np.array_equal(res_t.numpy(), summed))
        sd = summed.astype(np.float64)
        ref = sd / np.sqrt((sd * sd).mean(-1, keepdims=True) + 1e-6) * wd
        res["norm"] = max(res["norm"], float((np.abs(out.numpy() - ref) / (1e-6 + 1e-5 * np.abs(ref))).max()))
for n in (1, 7, 16, 17, 33, 4097, 8960):
    g = (rng.standard_normal((3, n)) * 6).astype(np.float32)
    g[0, : min(n, 4)] = [-200.0, 200.0, -88.0, 0.0][: min(n, 4)]  # exp's clamps, both signs
    u = rng.standard_normal((3, n)).astype(np.float32)
    out = llaisys.Tensor((3, n), "f32")
    ops.swiglu(out, llaisys.Tensor.from_numpy(g), llaisys.Tensor.from_numpy(u))
    gd = g.astype(np.float64)
    ref = u * gd / (1.0 + np.exp(-gd))
    res["swiglu"] = max(res["swiglu"], float((np.abs(out.numpy() - ref) / (1e-6 + 1e-5 * np.abs(ref))).max()))
for vocab in (1, 5, 16, 100, 101, 151936):
    l = (rng.standard_normal((6, vocab)) * 4).astype(np.float32)
    l[4, vocab - 1] = np.nan                   # a NaN last (in the vector tail of 5, 101)
    l[5, -min(vocab, 3):] = np.inf             # +inf ties, no NaN
    if vocab > 20:
        l[1, [3, vocab - 2]] = l[1].max() + 1  # a tie: the first wins
        l[2, :vocab // 2] = -np.inf           # masked logits
        l[3, [vocab // 3, 7]] = np.nan         # NaNs win over every number: the first
        l[3, 2] = np.inf
        l[5, 1] = -np.inf
    got = sample(l, [RowSampling() for _ in range(6)])
    ld = l.astype(np.float64)
    for r in range(6):
        want = int(np.argmax(ld[r]))           # numpy's rule is the NaN rule: first NaN, else first max
        res["greedy_ok"] &= int(got.token_ids[r]) == want
        if np.isfinite(ld[r]).any() and not np.isnan(ld[r]).any() and not np.isposinf(ld[r]).any():
            m = ld[r].max()
            lp = ld[r, want] - m - np.log(np.exp(ld[r] - m).sum())
            res["logprob"] = max(res["logprob"], abs(float(got.logprobs[r]) - lp) / 1e-5)
print(json.dumps(res))
"""


@pytest.mark.parametrize("isa", ["scalar", "avx2", "avx512"])
def test_row_kernels_on_every_simd_path(isa):
    skip_unless_cpu_runs(isa)
    child = subprocess.run([sys.executable, "-c", CHILD], env=dict(os.environ, LLAISYS_ISA=isa),
                           capture_output=True, text=True, timeout=300)
    assert child.returncode == 0, child.stderr[-4000:]
    res = json.loads(child.stdout.splitlines()[-1])
    assert res["greedy_ok"], f"greedy argmax on {isa}"
    assert res["residual_ok"], f"add_rms_norm's residual on {isa}"
    assert res["norm"] <= 1.0, f"add_rms_norm on {isa}: error {res['norm']:.3g} x the bound"
    assert res["swiglu"] <= 1.0, f"swiglu on {isa}: error {res['swiglu']:.3g} x the bound"
    assert res["logprob"] <= 1.0, f"logprob on {isa}: error {res['logprob']:.3g} x 1e-5"
