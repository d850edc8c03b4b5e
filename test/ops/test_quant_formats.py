"""GGUF block formats: llaisys's dequantize bit for bit against gguf-py (random blocks, edge
cases, real tensors of both cached GGUF files, every ISA path), its quantizers bit for bit
against gguf-py (Q4_0, Q5_0, Q8_0) and llama.cpp's reference (the K-quants: against
libggml-base where it is at hand, else against digests of its output taken from it), and the
round-trip error of each format within a stated bound."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from llaisys.dtypes import f32_to_bf16_bits
from quant_cases import (FORMATS, GGUF_QUANTIZES, MODELS, QUANTIZERS, as_rows, dequantize, digest, edge_blocks, gguf,
                         gguf_file, libggml, libggml_quantize, quantize, random_blocks, real_rows,
                         reference_dequantize, sizes)

from cpu_features import run_on_isa


def model_gguf(model: str, request) -> Path:
    """The cached GGUF of `model`: the 0.5B through the session fixture (which downloads it
    where it is missing, as in a fresh CI run), the 1.5B only where already cached."""
    return request.getfixturevalue("qwen05_gguf") if model == "0.5b" else gguf_file(model)


def bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)


# ------------------------------------------------------------------------------------------
# dequantize


@pytest.mark.parametrize("fmt", FORMATS)
def test_dequantize_random_blocks_bit_identical(fmt):
    rng = np.random.default_rng(sum(map(ord, fmt)))
    for blocks_per_row, scale in [(1, 0.05), (3, 1.0), (8, 1e-4), (2, 3e4)]:
        raw, shape = as_rows(random_blocks(fmt, 8 * blocks_per_row, rng, scale), fmt, blocks_per_row)
        got = dequantize(raw, fmt, shape)
        assert got.shape == shape
        np.testing.assert_array_equal(bits(got), bits(reference_dequantize(raw, fmt).reshape(shape)))


@pytest.mark.parametrize("fmt", FORMATS)
def test_dequantize_edge_blocks_bit_identical(fmt):
    """Zero, negative, largest, subnormal, NaN and +-Inf scales; all quant bits set or clear."""
    raw = edge_blocks(fmt, np.random.default_rng(7))
    shape = (raw.shape[0], sizes(fmt)[0])
    got = dequantize(raw, fmt, shape)
    ref = reference_dequantize(raw, fmt).reshape(shape)
    np.testing.assert_array_equal(bits(got), bits(ref))
    assert np.isnan(got[6]).any() and not np.isfinite(got[7]).all(), "NaN / Inf scales propagate"


@pytest.mark.parametrize("out_dtype", ["f16", "bf16"])
@pytest.mark.parametrize("fmt", FORMATS)
def test_dequantize_to_16_bit_rounds_once(fmt, out_dtype):
    raw = np.concatenate([random_blocks(fmt, 6, np.random.default_rng(3)), edge_blocks(fmt, np.random.default_rng(4))])
    shape = (raw.shape[0], sizes(fmt)[0])
    ref = reference_dequantize(raw, fmt).reshape(shape)
    got = dequantize(raw, fmt, shape, out_dtype)
    if out_dtype == "f16":
        with np.errstate(over="ignore"):
            np.testing.assert_array_equal(got.view(np.uint16), ref.astype(np.float16).view(np.uint16))
    else:
        np.testing.assert_array_equal(got, f32_to_bf16_bits(ref))


@pytest.mark.slow  # reads the cached GGUF files (gguf.GGUFReader: ~30 s each, once)
@pytest.mark.parametrize("model", list(MODELS))
@pytest.mark.parametrize("fmt", FORMATS)
def test_dequantize_real_tensors(model, fmt, request):
    path = model_gguf(model, request)
    if not path.is_file():
        pytest.skip(f"{path} is not cached (llaisys download {MODELS[model]} keeps it)")
    found = real_rows(path, fmt)
    if found is None:
        pytest.skip(f"{path.name} has no {fmt} tensor")
    name, raw, shape = found
    got = dequantize(raw, fmt, shape)
    np.testing.assert_array_equal(bits(got), bits(reference_dequantize(raw, fmt).reshape(shape)), err_msg=name)


@pytest.mark.slow  # reads SmolLM2's Q4_1 file where test/smollm2_files.py has fetched it
def test_dequantize_real_q4_1_tensors():
    path = Path.home() / ".cache" / "llaisys" / "test-models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if not path.is_file():
        pytest.skip(f"{path} is not cached (test/models/test_smollm2_real.py fetches it)")
    name, raw, shape = real_rows(path, "q4_1")
    got = dequantize(raw, "q4_1", shape)
    np.testing.assert_array_equal(bits(got), bits(reference_dequantize(raw, "q4_1").reshape(shape)), err_msg=name)


CHILD = """
import json, sys
import numpy as np
sys.path[:0] = [sys.argv[1], sys.argv[1] + "/.."]
from llaisys import runtime
print(runtime.cpu_isa())
from quant_cases import FORMATS, as_rows, dequantize, edge_blocks, random_blocks, reference_dequantize, sizes
same = {}
for fmt in FORMATS:
    rng = np.random.default_rng(11)
    raw = np.concatenate([random_blocks(fmt, 40, rng), edge_blocks(fmt, rng)])
    shape = (raw.shape[0], sizes(fmt)[0])
    got, ref = dequantize(raw, fmt, shape), reference_dequantize(raw, fmt).reshape(shape)
    same[fmt] = bool(np.array_equal(got.view(np.uint32), ref.view(np.uint32)))
print(json.dumps(same))
"""


@pytest.mark.parametrize("isa", ["scalar", "avx2", "avx512"])
def test_dequantize_on_every_isa(isa):
    same = run_on_isa(isa, CHILD, str(Path(__file__).parent))
    assert same == {fmt: True for fmt in FORMATS}


# ------------------------------------------------------------------------------------------
# quantize


def random_rows(fmt: str) -> np.ndarray:
    """[32, 8 blocks] f32: rows of assorted scales, an all-zero row, a half-zero block, an
    all-positive row, a row of 1e-30-sized values (subnormal d), a row with repeated outliers."""
    rng = np.random.default_rng(sum(map(ord, fmt)))
    bs = sizes(fmt)[0]
    x = (rng.standard_normal((32, bs * 8)) * rng.uniform(0.001, 3, (32, 1))).astype(np.float32)
    x[0] = 0
    x[1, :bs // 2] = 0
    x[2] = np.abs(x[2])
    x[3] *= 1e-30
    x[4, ::7] = 50
    return x


# sha256[:16] of llama.cpp's quantize_row_<fmt>_ref (libggml-base, build-avx2) on random_rows(fmt)
LLAMA_CPP_RANDOM = {
    "q4_0": "34b8b7c95d5ba555", "q5_0": "46a14f14f4f2d0d8", "q8_0": "bd3c4ce43bb2e732",
    "q4_k": "5d36d1e0ad16e104", "q5_k": "6230568993795989", "q6_k": "a9448664fec08014",
}
# ... and on the dequantized real rows real_rows(file, fmt) of the cached GGUF files
LLAMA_CPP_REQUANT = {
    ("0.5b", "q5_0"): "c9719ae36d3ace0c", ("0.5b", "q8_0"): "3594a43784433469",
    ("0.5b", "q4_k"): "769efe0214bdba3b", ("0.5b", "q6_k"): "3d570ffcebc7689e",
    ("1.5b", "q4_k"): "00d773cc5a19f243", ("1.5b", "q6_k"): "5302f309a51f42c5",
}


@pytest.mark.parametrize("in_dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("fmt", GGUF_QUANTIZES)
def test_quantize_matches_gguf_py(fmt, in_dtype):
    x = random_rows(fmt)
    if in_dtype == "f16":
        x = x.astype(np.float16).astype(np.float32)
    elif in_dtype == "bf16":
        x = (f32_to_bf16_bits(x).astype(np.uint32) << 16).view(np.float32)
    got = quantize(x, fmt, in_dtype)
    np.testing.assert_array_equal(got, gguf.quants.quantize(x, gguf.GGMLQuantizationType[fmt.upper()]))


@pytest.mark.parametrize("fmt", QUANTIZERS)
def test_quantize_matches_llama_cpp(fmt):
    got = quantize(random_rows(fmt), fmt)
    assert digest(got) == LLAMA_CPP_RANDOM[fmt]
    lib = libggml()
    if lib is not None:  # the library itself, where it is built
        np.testing.assert_array_equal(got, libggml_quantize(lib, random_rows(fmt), fmt))


@pytest.mark.slow  # reads the cached GGUF files (gguf.GGUFReader: ~30 s each, once)
@pytest.mark.parametrize("model, fmt", sorted(LLAMA_CPP_REQUANT))
def test_requantize_real_rows_as_llama_cpp(model, fmt, request):
    """quantize(dequantize(real block)) gives llama.cpp's bytes, and so reproduces the stored
    block wherever llama.cpp's quantizer does (every block for Q8_0 and Q5_0; the files' K-quant
    blocks were made with an importance matrix, so some come out otherwise)."""
    path = model_gguf(model, request)
    if not path.is_file():
        pytest.skip(f"{path} is not cached")
    name, raw, shape = real_rows(path, fmt)
    values = reference_dequantize(raw, fmt).reshape(shape)
    got = quantize(values, fmt)
    assert digest(got) == LLAMA_CPP_REQUANT[(model, fmt)], name
    if fmt in GGUF_QUANTIZES:
        np.testing.assert_array_equal(got, raw)
    lib = libggml()
    if lib is not None:
        np.testing.assert_array_equal(got, libggml_quantize(lib, values, fmt))


# Round-trip error bounds, per block, as a fraction of the block's largest |x|. Q8_0: half a
# step of d = max/127; Q5_0, Q4_0: a full step of max/16, max/8 (the value opposite the largest
# is clamped to 15 or 31); each plus d's f16 rounding (2^-11 relative) times the largest level.
# K-quants (no closed form) and all formats: the RMS error over the block's RMS, about 1.5x the
# worst measured on normal rows and on real weight rows.
F16_EPS = 2.0 ** -11
MAX_BOUND = {"q8_0": (0.5 + 127 * F16_EPS) / 127, "q5_0": (1 + 16 * F16_EPS) / 16, "q4_0": (1 + 8 * F16_EPS) / 8}
# Worst block measured on random_rows: q4_0 0.123, q5_0 0.062, q8_0 0.0083, q4_k 0.079,
# q5_k 0.041, q6_k 0.020 (per block of 32 or 256, so Q4_0's worst 32 reads above Q4_K's).
RMS_BOUND = {"q4_0": 0.18, "q5_0": 0.09, "q8_0": 0.0125, "q4_k": 0.12, "q5_k": 0.062, "q6_k": 0.03}


def check_round_trip(x: np.ndarray, fmt: str, what: str):
    bs = sizes(fmt)[0]
    back = dequantize(quantize(x, fmt), fmt, x.shape)
    xb, eb = x.reshape(-1, bs).astype(np.float64), (back - x).reshape(-1, bs).astype(np.float64)
    live = np.abs(xb).max(1) > 0
    assert not eb[~live].any(), f"{what}: an all-zero block must come back zero"
    rms = np.sqrt((eb[live] ** 2).mean(1) / (xb[live] ** 2).mean(1))
    assert rms.max() <= RMS_BOUND[fmt], f"{what}: relative RMS error {rms.max():.4f} > {RMS_BOUND[fmt]}"
    if fmt in MAX_BOUND:
        worst = (np.abs(eb[live]).max(1) / np.abs(xb[live]).max(1)).max()
        assert worst <= MAX_BOUND[fmt], f"{what}: max error {worst:.5f} of the block max > {MAX_BOUND[fmt]:.5f}"


@pytest.mark.parametrize("fmt", QUANTIZERS)
def test_round_trip_error_random(fmt):
    x = random_rows(fmt)
    check_round_trip(np.delete(x, 3, axis=0), fmt, "random rows")  # (row 3: subnormal d loses all)


@pytest.mark.slow  # reads the cached GGUF files (gguf.GGUFReader: ~30 s each, once)
@pytest.mark.parametrize("fmt", QUANTIZERS)
def test_round_trip_error_real_weights(fmt, request):
    path = model_gguf("0.5b", request)
    if not path.is_file():
        pytest.skip(f"{path} is not cached")
    found = real_rows(path, "q8_0")  # the nearest to the original weights in that file
    check_round_trip(reference_dequantize(found[1], "q8_0").reshape(found[2])[:, :sizes(fmt)[0] * 3], fmt,
                     found[0])

