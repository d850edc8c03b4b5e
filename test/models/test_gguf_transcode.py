"""GGUF types at load: IQ4_NL rewritten into Q8_0 (gguf_transcode.py), whose blocks must hold the
file's values bit for bit, as gguf-py (llama.cpp's dequantizer in Python) and the core's own
dequantizer read them, and whose file must run as its twin that stores the rewritten blocks,
through every path a matrix takes at load (fused q|k|v, llama's permuted q/k rows, a stack of
experts cut per expert, the tied embedding); Q4_1, Q5_1, Q2_K, Q3_K and IQ4_XS, which have
kernels, kept as the file's bytes; a type without kernels (MXFP4) widened to f32 at load, with
a warning, and refused where that would not fit in memory."""

import logging

import gguf
import numpy as np
import pytest

from llaisys.models import gguf_model
from llaisys.models.gguf_model import load_gguf, quant_summary
from llaisys.models.gguf_transcode import TRANSCODES, Transcoded, transcode
from llaisys.models.tensors import QuantTensor

from block_scales import put_scale
from tiny_gguf import TINY, write_tiny_gguf

Q = gguf.GGMLQuantizationType
# byte offsets of a block's f16 scales (and mins)
D_AT = {Q.Q3_K: (108,), Q.IQ4_NL: (0,), Q.Q8_0: (0,), Q.Q2_K: (80, 82), Q.IQ4_XS: (0,), Q.Q4_1: (0, 2), Q.Q5_1: (0, 2),
        Q.IQ2_XXS: (0,), Q.IQ2_XS: (0,), Q.IQ2_S: (0,), Q.IQ3_XXS: (0,), Q.IQ3_S: (0,), Q.IQ1_S: (0,),
        Q.IQ1_M: (48,)}  # IQ1_M: d in the top nibbles of its 4 uint16 scales at 48..56 (block_scales)
IQ_TYPES = [Q.IQ2_XXS, Q.IQ2_XS, Q.IQ2_S, Q.IQ3_XXS, Q.IQ3_S, Q.IQ1_S, Q.IQ1_M]
WIDE = dict(TINY, hidden=256, inter=512)  # rows that 256-weight blocks divide


def core_dequantize(raw: np.ndarray, tag: str, shape) -> np.ndarray:
    """The core's dequantizer (llaisysDequantize) over rows of blocks."""
    import llaisys
    from llaisys import ops

    with llaisys.Tensor.from_numpy(raw, tag, shape=shape) as q, llaisys.Tensor(shape, "f32") as out:
        ops.dequantize(out, q)
        return out.numpy()


def random_rows(qtype, rows: int, k: int, rng, d: float = 0.004) -> np.ndarray:
    """uint8 [rows, row bytes]: every bit random but the f16 scale, kept finite and near d."""
    block, nbytes = gguf.GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, (rows, k // block, nbytes), dtype=np.uint8)
    for at in D_AT[qtype]:
        scale = (rng.uniform(0.5, 1.5, (rows, k // block)) * d * rng.choice([-1, 1], (rows, k // block)))
        put_scale(raw, qtype.name.lower(), at, scale)
    return raw.reshape(rows, -1)


def test_rewritten_blocks_hold_the_files_values():
    """4,096 random blocks: every IQ4_NL index occurs. Two readers of the rewritten blocks, gguf-py
    and the core's dequantizer, give the file's values exactly."""
    rng = np.random.default_rng(20)
    raw = random_rows(Q.IQ4_NL, 64, 64 * 32, rng)
    want = gguf.quants.dequantize(raw, Q.IQ4_NL)
    out = transcode(raw, int(Q.IQ4_NL))
    assert TRANSCODES == {int(Q.IQ4_NL): "q8_0"} and out.shape == (64, 64 * 34)
    assert np.array_equal(gguf.quants.dequantize(out, Q.Q8_0), want)
    assert np.array_equal(core_dequantize(out, "q8_0", want.shape), want)
    assert np.abs(want).max() > 0


def test_rewriting_is_chunked_and_shaped_as_the_source(monkeypatch):
    """Rows of a stack keep their leading dims; blocks cross the chunk boundary unchanged."""
    from llaisys.models import gguf_transcode

    rng = np.random.default_rng(5)
    raw = random_rows(Q.IQ4_NL, 6, 64, rng).reshape(2, 3, -1)
    whole = transcode(raw, int(Q.IQ4_NL))
    monkeypatch.setattr(gguf_transcode, "_CHUNK", 5)  # 12 blocks in chunks of 5
    assert np.array_equal(transcode(raw, int(Q.IQ4_NL)), whole) and whole.shape == (2, 3, 2 * 34)
    with pytest.raises(ValueError, match="not whole 18-byte blocks"):
        transcode(raw[..., :-1], int(Q.IQ4_NL))


def test_a_stack_of_experts_is_cut_into_rewritten_experts():
    rng = np.random.default_rng(6)
    raw = random_rows(Q.IQ4_NL, 4 * 8, 256, rng)
    stack = Transcoded("model.layers.0.mlp.experts.gate_proj.weight", "q8_0", (4, 8, 256), raw.reshape(4, 8, -1),
                       int(Q.IQ4_NL))
    experts = gguf_model._split(stack.name, stack)
    assert len(experts) == 4
    for e, (name, t) in enumerate(sorted(experts.items())):
        assert name == f"model.layers.0.mlp.experts.{e}.gate_proj.weight" and t.shape == (8, 256)
        assert np.array_equal(t.data, transcode(raw[8 * e:8 * (e + 1)], int(Q.IQ4_NL)))
        assert t.nbytes == t.data.nbytes == 8 * 8 * 34


def _file_pair(tmp_path, arch: str, tied: bool, qtype):
    """(a file whose matrices are `qtype`, its twin storing the rewritten blocks), the output
    matrix Q8_0 in both."""
    def blocks(name, data, rng, rewrite=False):
        if name == "output.weight":
            return random_rows(Q.Q8_0, *data.shape, rng), Q.Q8_0
        raw = random_rows(qtype, *data.shape, rng)
        return (transcode(raw, int(qtype)), Q[TRANSCODES[int(qtype)].upper()]) if rewrite else (raw, qtype)

    dims = TINY
    paths = tmp_path / f"{arch}-file.gguf", tmp_path / f"{arch}-twin.gguf"
    write_tiny_gguf(paths[0], tied=tied, dims=dims, arch=arch, blocks=blocks)
    write_tiny_gguf(paths[1], tied=tied, dims=dims, arch=arch, blocks=lambda *a: blocks(*a, rewrite=True))
    return paths


def _greedy(path):
    from llaisys.engine import LLM, SamplingParams

    prompts = [[1, 5, 260, 262, 100, 7], [3, 4, 5], list(range(40, 70))]
    with LLM(str(path), kv_cache_memory="16MiB", max_num_batched_tokens=256, max_num_seqs=4) as llm:
        outs = llm.generate(prompts, SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True, logprobs=1))
        return [(o.outputs[0].token_ids, [next(iter(lp.values())) for lp in o.outputs[0].logprobs]) for o in outs]


@pytest.mark.parametrize("arch,tied,qtype", [("qwen2", False, Q.IQ4_NL), ("llama", True, Q.IQ4_NL)],
                         ids=["qwen2", "llama-tied"])
def test_a_file_runs_as_its_twin_of_rewritten_blocks(tmp_path, caplog, arch, tied, qtype):
    file, twin = _file_pair(tmp_path, arch, tied, qtype)
    tag = TRANSCODES[int(qtype)]
    with caplog.at_level(logging.INFO, logger="llaisys.models.gguf_model"):
        ours = load_gguf(file).loaded
    ref = load_gguf(twin).loaded
    n_matrices = 7 * TINY["layers"] + 1  # the embedding beside each layer's seven; the output stays Q8_0
    assert f"{n_matrices} tensors of type {qtype.name} run as {tag.upper()}" in caplog.text
    assert quant_summary(ours) == quant_summary(ref)
    for name, t in ours.tensors.items():
        r = ref.tensors[name]
        assert t.dtype == r.dtype and t.shape == r.shape, name
        if isinstance(t, Transcoded):
            assert isinstance(r, QuantTensor) and t.dtype == tag and np.array_equal(t.data, r.data), name
    assert sum(isinstance(t, Transcoded) for t in ours.tensors.values()) == n_matrices
    assert _greedy(file) == _greedy(twin)


@pytest.mark.parametrize("qtype", [Q.Q4_1, Q.Q5_1, Q.Q2_K, Q.Q3_K, Q.IQ4_XS] + IQ_TYPES,
                         ids=lambda q: q.name.lower())
def test_a_file_of_a_type_with_kernels_runs_as_its_own_blocks(tmp_path, caplog, qtype):
    """Q4_1, Q5_1, Q2_K, Q3_K, IQ4_XS and the i-quants have kernels of their own: their matrices
    stay the file's bytes (no rewrite, no widening: nothing logged)."""
    path = tmp_path / "k.gguf"
    stored = {}

    def blocks(name, data, rng):
        stored[name] = random_rows(qtype, *data.shape, rng)
        return stored[name], qtype

    write_tiny_gguf(path, tied=False, dims=WIDE, blocks=blocks)
    with caplog.at_level(logging.INFO, logger="llaisys.models.gguf_model"):
        loaded = load_gguf(path).loaded
    assert "widened" not in caplog.text and " run as " not in caplog.text
    kq = [t for t in loaded.tensors.values() if isinstance(t, QuantTensor)]
    assert len(kq) == len(stored) == 7 * TINY["layers"] + 2 and {t.dtype for t in kq} == {qtype.name.lower()}
    assert np.array_equal(loaded.tensors["model.layers.1.mlp.down_proj.weight"].data, stored["blk.1.ffn_down.weight"])
    tokens = _greedy(path)
    assert all(len(ids) == 12 for ids, _ in tokens) and tokens == _greedy(path)


def test_a_type_without_kernels_is_widened_and_bounded_by_the_memory(tmp_path, caplog, monkeypatch):
    """MXFP4 has no llaisys kernel and gguf-py dequantizes it: its matrices are widened to f32 at
    load with a warning naming the type, and the file is refused where that would take more than
    the memory available."""
    path = tmp_path / "mxfp4.gguf"

    def blocks(name, data, rng):
        raw = rng.integers(0, 256, (data.shape[0], data.shape[1] // 32, 17), dtype=np.uint8)
        raw[:, :, 0] = 120  # the E8M0 scale 2^-8: values up to 12 / 256
        return raw.reshape(data.shape[0], -1), Q.MXFP4

    write_tiny_gguf(path, tied=False, blocks=blocks)
    with caplog.at_level(logging.WARNING, logger="llaisys.models.gguf_model"):
        loaded = load_gguf(path).loaded
    n_matrices = 7 * TINY["layers"] + 2
    assert f"{n_matrices} tensors of type MXFP4 have no llaisys kernel: widened to f32" in caplog.text
    assert set(quant_summary(loaded)) == {"f32"}
    monkeypatch.setattr(gguf_model, "_available_bytes", lambda: 64 << 10)
    with pytest.raises(ValueError, match=r"type MXFP4 have no llaisys kernel, and widening .* more than the 0 MiB"):
        load_gguf(path)
