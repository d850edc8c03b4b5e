"""Linear with block-quantized weights (src/ops/linear/cpu/quant_*): every format on every SIMD
path this CPU can run (the path is chosen once per process, so each runs in a child under
LLAISYS_ISA), against x @ dequantize(W)^T in float64 with gguf-py's dequantizer.

The bound. The kernels quantize each activation block (32 values for Q4_0/Q4_1/Q5_0/Q5_1/Q8_0,
256 for the K-quants) to int8 with d = max|x| / 127, so each value moves by at most d / 2, and
the rest is exact integer arithmetic scaled in f32 (Q4_1 / Q5_1: d (q . x_q) + m sum(x_q), which
is (d q + m) . x_q, the weights against the same rounded x). Hence per output
    |got - ref| <= sum_blocks d_b / 2 * sum_{i in b} |W_i|  +  1e-4 |x| . |W|
(the second term covers the f32 scaling and summation). The test reports the worst ratio of
the error to this bound, which must stay below 1; typically it is 0.05 to 0.2.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import llaisys
from llaisys import ops
from llaisys.models.gguf_check import read_gguf
from cpu_features import cpu_flags, skip_unless_cpu_runs
from quant_linear_harness import COMMON, repacked, run_child

CHILD = COMMON + r"""
import sys
import os
from llaisys import runtime
print(runtime.cpu_isa())
rng = np.random.default_rng(20)
res = {}
# the largest batch: 300 rows; 130 in the sanitizer run (still past the float crossovers and two
# of AVX2's 64-row i-quant chunks, at under half the kernels' time there)
big = 130 if os.environ.get("LLAISYS_TEST_SANITIZED") == "1" else 300
real_k = {"q4_0": 4864, "q4_1": 576, "q5_0": 896, "q5_1": 4864, "q8_0": 4864, "q2_k": 1536, "q3_k": 8960, "q4_k": 8960,
          "q5_k": 1536, "q6_k": 8960, "iq4_xs": 1536, "iq2_xxs": 1536, "iq2_xs": 8960, "iq2_s": 1536, "iq3_xxs": 8960,
          "iq3_s": 1536, "iq1_s": 8960, "iq1_m": 1536}
for fmt, (qt, bs, bb) in FORMATS.items():
    worst = 0.0
    for k in (256, real_k[fmt]):
        n = 29 if k == 256 else 37  # not multiples of the 16-row groups: last ones of 13 and 5 rows
        blocks = rand_blocks(fmt, n, k, rng)
        W = gguf.quants.dequantize(blocks, qt)
        w = llaisys.Tensor.from_numpy(blocks, fmt, shape=(n, k))
        with ops.PackedLinear(w) as packed:  # its own copy, repacked 16 rows at a time for x16 formats
            for m in (1, 3, 5, 16, 64, big):
                x = rng.standard_normal((m, k)).astype(np.float32)
                xt = llaisys.Tensor.from_numpy(x)
                for apply in (lambda o: ops.linear(o, xt, w), lambda o: packed(o, xt)):
                    out = llaisys.Tensor((m, n), "f32")
                    apply(out)
                    r, _ = bound_ratio(out.numpy(), x, W, act_block(fmt))
                    worst = max(worst, r)
    res[fmt] = worst
print(json.dumps(res))
""".replace("import sys", "import sys, json")


# The AVX2 cases run the kernels' walks without (0) and with (1024) software prefetches, whatever
# this CPU's table says; the others take the table's value. On AVX-512 VNNI the i-quants' one-row
# walks run from the AVX-512 build (iq_walk_avx2 0), from the AVX2 one under the AVX-512 plan (1),
# and as this CPU chooses (None). Without AVX-512 VNNI (Skylake-SP) the first avx512 case runs that
# CPU's own path: AVX2's int8 kernels below the crossovers, AVX-512's f32 GEMM from them.
@pytest.mark.parametrize("isa,split,avx_vnni,gfni,prefetch,iq_walk_avx2", [
    ("scalar", "0", "0", "0", None, None),
    ("avx2", "0", "0", "0", "0", None), ("avx2", "1", "0", "0", "1024", None), ("avx2", "0", "1", "0", "1024", None),
    ("avx512", "0", "0", "0", None, "0"), ("avx512", "0", "0", "1", None, "1"), ("avx512", "1", "0", "0", None, None)])
def test_every_format_within_the_activation_quantization_bound(isa, split, avx_vnni, gfni, prefetch, iq_walk_avx2):
    if isa == "avx512" and "avx512_vnni" not in cpu_flags() and (split, gfni, iq_walk_avx2) != ("0", "0", "0"):
        pytest.skip("no avx512_vnni in /proc/cpuinfo: the VNNI kernels this case varies cannot run here")
    if avx_vnni == "1" and "avx_vnni" not in cpu_flags():
        pytest.skip("no avx_vnni in /proc/cpuinfo: the AVX-VNNI x16 kernels cannot run here")
    if gfni == "1" and "gfni" not in cpu_flags():
        pytest.skip("no gfni in /proc/cpuinfo: the GFNI build of the AVX-512 x16 kernels cannot run here")
    res = run_child(isa, CHILD, split, avx_vnni, gfni, prefetch, iq_walk_avx2)
    assert set(res) == {"q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q2_k", "q3_k", "q4_k", "q5_k", "q6_k", "iq4_xs",
                        "iq2_xxs", "iq2_xs", "iq2_s", "iq3_xxs", "iq3_s", "iq1_s", "iq1_m"}
    for fmt, ratio in res.items():
        assert ratio < 1.0, (fmt, ratio)


# The float path (quant_gemm.cpp: W dequantized to f32 and run through the packed GEMM's
# register tiles) rounds nothing but f32 sums: forced at every m (LLAISYS_QUANT_F32_ROWS=0),
# and taken by default at m = 128 and 300 (past every format's crossover), each output is within
# 1e-5 |x| . |W| of the float64 product, far inside the int8 bound; below the crossover (m = 2)
# the default is the int8 path, whose error is larger. Tail panels (m = 5, 17, 40), a last
# k-block of 128 (k = 896) and row groups cut by n = 53 included.
F32_CHILD = COMMON + r"""
import sys, json
from llaisys import runtime
print(runtime.cpu_isa())
print("amx" if runtime.cpu_amx() else "no amx")
rng = np.random.default_rng(21)
ms = [int(a) for a in sys.argv[1:]]
res = {}
for fmt, (qt, bs, bb) in FORMATS.items():
    for k in ((256, 896) if bs == 32 else (256, 768)):
        n = 53
        blocks = rand_blocks(fmt, n, k, rng)
        W = gguf.quants.dequantize(blocks, qt).astype(np.float64)
        w = llaisys.Tensor.from_numpy(blocks, fmt, shape=(n, k))
        packed = ops.PackedLinear(w)  # x16 formats: the float path unpacks the file's blocks
        for m in ms:
            x = rng.standard_normal((m, k)).astype(np.float32)
            bias = rng.standard_normal(n).astype(np.float32)
            xt, bt = llaisys.Tensor.from_numpy(x), llaisys.Tensor.from_numpy(bias)
            errs = []
            for apply in (lambda o: ops.linear(o, xt, w, bt), lambda o: packed(o, xt, bt)):
                out = llaisys.Tensor((m, n), "f32")
                apply(out)
                err = np.abs(out.numpy() - bias - x.astype(np.float64) @ W.T) / (np.abs(x.astype(np.float64)) @ np.abs(W).T)
                errs.append(float(err.max()))
            res[f"{fmt} k{k} m{m}"] = errs
        packed.close()
print(json.dumps(res))
"""


@pytest.mark.parametrize("isa", ["scalar", "avx2", "avx512", "avx512bf16"])
def test_float_path_is_f32_exact(isa):
    """(avx512bf16 with LLAISYS_AMX=0: an AMX CPU's float path back on the f32 GEMM)"""
    skip_unless_cpu_runs(isa)
    forced = subprocess.run([sys.executable, "-c", F32_CHILD, "1", "5", "17", "40"], capture_output=True, text=True,
                            timeout=900, env=dict(os.environ, LLAISYS_ISA=isa, LLAISYS_QUANT_F32_ROWS="0",
                                                  LLAISYS_AMX="0"))
    assert forced.returncode == 0, forced.stderr[-4000:]
    assert forced.stdout.splitlines()[:2] == [isa, "no amx"]
    for case, errs in json.loads(forced.stdout.splitlines()[-1]).items():
        for err in errs:  # the tensor's own bytes, the packed handle's copy
            assert err < 1e-5, (case, err)
    env = {k: v for k, v in os.environ.items() if k != "LLAISYS_QUANT_F32_ROWS"}
    dflt = subprocess.run([sys.executable, "-c", F32_CHILD, "2", "128", "300"], capture_output=True, text=True,
                          timeout=900, env=dict(env, LLAISYS_ISA=isa, LLAISYS_AMX="0"))
    assert dflt.returncode == 0, dflt.stderr[-4000:]
    res = json.loads(dflt.stdout.splitlines()[-1])
    for case, (plain, packed) in res.items():
        fmt, m = case.split()[0], int(case.split()[-1][1:])
        for err, f32_from in ((plain, plain_f32_from(fmt, isa)), (packed, x16_f32_from(fmt, isa))):
            if m >= f32_from:
                assert err < 1e-5, (case, err)  # the float path
            else:
                assert err > 1e-5, (case, err)  # the int8 path: activations rounded to 8 bits


def plain_f32_from(fmt, isa):
    """From how many rows a tensor's own bytes take the float path under isa without AMX (128
    stands for the crossovers within 2 < m <= 128): never for the i-quants from AVX2 on (their
    expanded int8 groups, 16 rows on AVX-512 VNNI, 8 on AVX2: quant_f32_min_rows in quant_plan.cpp),
    nor for Q6_K on AVX2 where 256-bit ops are whole and on AVX-512 without VNNI."""
    if fmt.startswith("iq") and fmt != "iq4_xs" and isa != "scalar":
        return float("inf")
    if fmt == "q6_k" and (isa == "avx2" and not llaisys.runtime.cpu_splits_256()
                          or isa.startswith("avx512") and "avx512_vnni" not in cpu_flags()):
        return float("inf")
    return 128


def x16_f32_from(fmt, isa):
    """From how many rows a packed handle of fmt takes the float path under isa without AMX
    (quant_f32_min_rows in src/ops/linear/cpu/quant_gemm.cpp; 128 stands for the file layout's
    crossovers, all within 2 < m <= 128)."""
    if not repacked(fmt, isa):
        return plain_f32_from(fmt, isa)  # not repacked: as the tensor's own bytes
    if isa.startswith("avx512") and "avx512_vnni" in cpu_flags() or isa == "avx2" and "avx_vnni" in cpu_flags():
        return float("inf")  # the VNNI kernels (LLAISYS_AVX_VNNI unset: on where the CPU has it)
    return {"q8_0": 128}.get(fmt, float("inf"))


# On a CPU with AMX (quant_amx.cpp) the float path rounds the dequantized weights and the
# activations to bf16, each value by at most 2^-9 of itself, and sums the products in f32
# (TDPBF16PS): each output is within 2^-8 |x| . |W| (+ 2^-18 for the product of both roundings
# and 1e-5 for the f32 sums) of the float64 product. And it no longer is within 1e-5 of it:
# the check that the tiles, not the f32 GEMM, ran. Forced at every m (1 to 40 and 300), and by
# default from the AMX crossover (12 rows for the K-quants, 8 for the 32-blocks: m = 128, 300;
# m = 2 stays on the int8 path).
@pytest.mark.parametrize("forced", [True, False])
def test_float_path_on_amx_tiles(forced):
    skip_unless_cpu_runs("avx512bf16")
    if not {"amx_tile", "amx_bf16"} <= cpu_flags():
        pytest.skip("no amx_tile / amx_bf16 in /proc/cpuinfo")
    if not llaisys.runtime.amx_built():
        pytest.skip("this library was built without the AMX kernel (CMake LLAISYS_AMX=OFF)")
    env = {k: v for k, v in os.environ.items() if k not in ("LLAISYS_QUANT_F32_ROWS", "LLAISYS_AMX")}
    if forced:
        env["LLAISYS_QUANT_F32_ROWS"] = "0"
    ms = ["1", "5", "17", "40", "300"] if forced else ["2", "128", "300"]
    child = subprocess.run([sys.executable, "-c", F32_CHILD, *ms], capture_output=True, text=True, timeout=900,
                           env=dict(env, LLAISYS_ISA="avx512bf16"))
    assert child.returncode == 0, child.stderr[-4000:]
    assert child.stdout.splitlines()[:2] == ["avx512bf16", "amx"], "the kernel did not grant AMX"
    res = json.loads(child.stdout.splitlines()[-1])
    assert len(res) == 2 * len(FORMATS) * len(ms)  # two k a format
    for case, errs in res.items():
        for err in errs:
            if case.endswith("m2"):
                assert err > 1e-5, (case, err)  # the int8 path
            else:
                assert 1e-5 < err < 2 ** -8 + 2 ** -18 + 1e-5, (case, err)


# The in-process tests below run the default (best) path.
exec(COMMON)


@pytest.mark.parametrize("fmt", list(FORMATS))
@pytest.mark.parametrize("act", ["f32", "f16", "bf16"])
def test_bias_and_activation_dtypes(fmt, act):
    import torch
    rng = np.random.default_rng(3)
    n, k, m = 19, 512, 5
    blocks = rand_blocks(fmt, n, k, rng)
    W = gguf.quants.dequantize(blocks, FORMATS[fmt][0]).astype(np.float64)
    w = llaisys.Tensor.from_numpy(blocks, fmt, shape=(n, k))
    tdt = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[act]
    x = torch.randn(m, k).to(tdt)
    bias = torch.randn(n).to(torch.bfloat16)
    xt = llaisys.Tensor.from_numpy(x.float().numpy(), act)
    out = llaisys.Tensor((m, n), act)
    ops.linear(out, xt, w, llaisys.Tensor.from_numpy(bias.float().numpy(), "bf16"))
    got = out.numpy().astype(np.float64)  # bf16 read back as f32
    xd = x.double().numpy()
    ref = xd @ W.T + bias.double().numpy()
    d = np.abs(xd).reshape(m, -1, act_block(fmt)).max(-1) / 127
    bound = 0.5 * d @ np.abs(W).reshape(n, -1, act_block(fmt)).sum(-1).T + 1e-4 * np.abs(xd) @ np.abs(W).T
    out_ulp = {"f32": 1e-6, "f16": 1e-3, "bf16": 8e-3}[act] * np.abs(ref)  # the output's one rounding
    assert (np.abs(got - ref) <= bound + out_ulp).all()


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_packed_handle_apply_and_argmax(fmt):
    rng = np.random.default_rng(4)
    n, k = 301, 256
    blocks = rand_blocks(fmt, n, k, rng)
    W = gguf.quants.dequantize(blocks, FORMATS[fmt][0])
    w = llaisys.Tensor.from_numpy(blocks, fmt, shape=(n, k))
    bias = rng.standard_normal(n).astype(np.float32)
    with ops.PackedLinear(w) as packed:
        for m in (1, 16):
            x = rng.standard_normal((m, k)).astype(np.float32)
            xt = llaisys.Tensor.from_numpy(x)
            out = llaisys.Tensor((m, n), "f32")
            packed(out, xt, llaisys.Tensor.from_numpy(bias))
            r, _ = bound_ratio(out.numpy() - bias, x, W, act_block(fmt))
            assert r < 1.0
            plain = llaisys.Tensor((m, n), "f32")
            ops.linear(plain, xt, w)  # the tensor's own bytes: the same kernels, or the file's layout's
            if repacked(fmt, llaisys.runtime.cpu_isa()):  # the handle's copy is repacked (quant_x16.hpp)
                assert bound_ratio(plain.numpy(), x, W, act_block(fmt))[0] < 1.0
                plain = llaisys.Tensor((m, n), "f32")
                packed(plain, xt)
            else:
                np.testing.assert_array_equal(plain.numpy() + bias, out.numpy())
            ids, screened = packed.argmax(xt)
            assert not screened  # quantized weights have no screen: every output computed
            if m < 8:  # argmax runs the rows through the same kernels as the plain call
                np.testing.assert_array_equal(ids, np.argmax(plain.numpy(), axis=1))
            else:  # argmax takes 8 rows a call (the int8 path), plain all 16 (the float path):
                # the chosen logit is the maximum to within the int8 path's error bound
                got = plain.numpy()[np.arange(m), ids]
                assert (got >= plain.numpy().max(1) - 2 * int8_bound(x, W, act_block(fmt)).max(1)).all()


GGUF_DIR = Path.home() / ".cache" / "llaisys" / "gguf"
SMOLLM2_Q4_1 = Path.home() / ".cache" / "llaisys" / "test-models" / "SmolLM2-135M-Instruct.Q4_1.gguf"  # smollm2_files


@pytest.mark.parametrize("path", [GGUF_DIR / "qwen2.5-coder-0.5b-instruct.gguf",
                                  GGUF_DIR / "qwen2.5-coder-1.5b-instruct.gguf", SMOLLM2_Q4_1],
                         ids=["qwen0.5b", "qwen1.5b", "smollm2-q4_1"])
def test_real_weights_from_the_cached_gguf(path):
    if not path.exists():
        pytest.skip(f"{path} is not cached")
    file = read_gguf(path)  # the library's reader: gguf.GGUFReader takes ~25 s on the vocabulary
    names = {f: qt for f, (qt, _, _) in FORMATS.items()}
    seen = set()
    rng = np.random.default_rng(5)
    for t in file.tensors:
        fmt = next((f for f, q in names.items() if q == t.type_id), None)
        if fmt is None or fmt in seen or len(t.dims) != 2:
            continue
        seen.add(fmt)
        k, n = int(t.dims[0]), int(t.dims[1])
        rows = min(n, 67)
        blocks = file.tensor_bytes(t).reshape(n, -1)[:rows]
        W = gguf.quants.dequantize(blocks, Q(t.type_id))
        w = llaisys.Tensor.from_numpy(np.ascontiguousarray(blocks), fmt, shape=(rows, k))
        for m in (1, 7):
            x = (rng.standard_normal((m, k)) * 0.5).astype(np.float32)
            out = llaisys.Tensor((m, rows), "f32")
            ops.linear(out, llaisys.Tensor.from_numpy(x), w)
            r, _ = bound_ratio(out.numpy(), x, W, act_block(fmt))
            assert r < 1.0, (t.name, fmt, r)
    assert seen, "no quantized 2-d tensor in the file"


def test_malformed_inputs_are_errors():
    rng = np.random.default_rng(6)
    blocks = rand_blocks("q4_k", 8, 512, rng)
    w = llaisys.Tensor.from_numpy(blocks, "q4_k", shape=(8, 512))
    x = llaisys.Tensor.from_numpy(rng.standard_normal((2, 512)).astype(np.float32))
    with pytest.raises(ValueError, match="inner dimension"):
        ops.linear(llaisys.Tensor((2, 8), "f32"), llaisys.Tensor.from_numpy(np.zeros((2, 256), np.float32)), w)
    with pytest.raises(ValueError, match="out"):
        ops.linear(llaisys.Tensor((2, 9), "f32"), x, w)
    with pytest.raises(ValueError, match="dtypes differ"):
        ops.linear(llaisys.Tensor((2, 8), "f16"), x, w)
    with pytest.raises(ValueError, match="bias"):
        ops.linear(llaisys.Tensor((2, 8), "f32"), x, w, llaisys.Tensor((9,), "f32"))
    with pytest.raises(ValueError, match="f32, f16 or bf16"):
        ops.linear(llaisys.Tensor((2, 8), "f32"), x, w, w)  # a quantized bias
    with ops.PackedLinear(w) as packed:
        with pytest.raises(ValueError, match="inner dimension"):
            packed(llaisys.Tensor((2, 8), "f32"), llaisys.Tensor.from_numpy(np.zeros((2, 256), np.float32)))
        with pytest.raises(ValueError, match="in must be f32"):
            packed(llaisys.Tensor((2, 8), "f32"), llaisys.Tensor((2, 512), "bf16"))
        with pytest.raises(ValueError, match="bias"):
            packed(llaisys.Tensor((2, 8), "f32"), x, llaisys.Tensor((7,), "f32"))
        with pytest.raises(ValueError, match="inner dimension"):
            packed.argmax(llaisys.Tensor.from_numpy(np.zeros((1, 256), np.float32)))


def test_stacked_parts_of_mixed_dtypes():
    # a fused q|k|v: q4_k rows, q6_k rows, q4_k rows again (ranges of 37, 16 and 5 rows: chunk edges)
    rng = np.random.default_rng(7)
    k = 512
    parts = [("q4_k", 37), ("q6_k", 16), ("q4_k", 5)]
    blocks = [rand_blocks(f, n, k, rng) for f, n in parts]
    W = np.concatenate([gguf.quants.dequantize(b, FORMATS[f][0]) for b, (f, _) in zip(blocks, parts)])
    tensors = [llaisys.Tensor.from_numpy(b, f, shape=(n, k)) for b, (f, n) in zip(blocks, parts)]
    with ops.PackedLinear.stacked(tensors) as packed:
        assert (packed.n, packed.k) == (58, k)
        for m in (1, 6):
            x = rng.standard_normal((m, k)).astype(np.float32)
            xt = llaisys.Tensor.from_numpy(x)
            out = llaisys.Tensor((m, 58), "f32")
            packed(out, xt)
            r, _ = bound_ratio(out.numpy(), x, W, 256)
            assert r < 1.0
            row0 = 0
            for t, (f, n) in zip(tensors, parts):  # each range as its own weight: bit for bit
                part = llaisys.Tensor((m, n), "f32")
                with ops.PackedLinear(t) as alone:
                    alone(part, xt)
                np.testing.assert_array_equal(part.numpy(), out.numpy()[:, row0:row0 + n])
                row0 += n
    # 32-blocks beside K-quants: both activation forms in one call
    b0, b1 = rand_blocks("q8_0", 9, k, rng), rand_blocks("q5_k", 7, k, rng)
    W = np.concatenate([gguf.quants.dequantize(b0, Q.Q8_0), gguf.quants.dequantize(b1, Q.Q5_K)])
    with ops.PackedLinear.stacked([llaisys.Tensor.from_numpy(b0, "q8_0", shape=(9, k)),
                                   llaisys.Tensor.from_numpy(b1, "q5_k", shape=(7, k))]) as packed:
        x = rng.standard_normal((3, k)).astype(np.float32)
        out = llaisys.Tensor((3, 16), "f32")
        packed(out, llaisys.Tensor.from_numpy(x))
        ref = x.astype(np.float64) @ W.T.astype(np.float64)
        assert np.abs(out.numpy() - ref).max() < 0.05 * np.abs(ref).max()


def test_stacked_parts_are_checked():
    rng = np.random.default_rng(8)
    a = llaisys.Tensor.from_numpy(rand_blocks("q4_k", 4, 512, rng), "q4_k", shape=(4, 512))
    b = llaisys.Tensor.from_numpy(rand_blocks("q4_k", 4, 256, rng), "q4_k", shape=(4, 256))
    with pytest.raises(ValueError, match="another k"):
        ops.PackedLinear.stacked([a, b])
    with pytest.raises(ValueError, match="block-quantized"):
        ops.PackedLinear.stacked([a, llaisys.Tensor((4, 512), "f32")])
    with pytest.raises(ValueError, match="no weight parts"):
        ops.PackedLinear.stacked([])
