"""GGUF types rewritten at load into a type with kernels (gguf_transcode.py): Q3_K as Q6_K and
IQ4_NL as Q8_0. The rewritten blocks must hold the file's values bit for bit, as gguf-py (llama.cpp's
dequantizer in Python) and the core's own dequantizer read them; a file of them must run as its
twin that stores the rewritten blocks, through every path a matrix takes at load (fused q|k|v,
llama's permuted q/k rows, a stack of experts cut per expert, the tied embedding)."""

import logging

import gguf
import numpy as np
import pytest

from llaisys.models import gguf_model
from llaisys.models.gguf_model import load_gguf, quant_summary
from llaisys.models.gguf_transcode import TRANSCODES, Transcoded, transcode
from llaisys.models.tensors import QuantTensor

from tiny_gguf import TINY, write_tiny_gguf

Q = gguf.GGMLQuantizationType
D_AT = {Q.Q3_K: (108,), Q.IQ4_NL: (0,), Q.Q6_K: (208,), Q.Q2_K: (80, 82)}  # byte offsets of a block's f16 scales
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
        raw[:, :, at:at + 2] = scale.astype(np.float16)[..., None].view(np.uint8)
    return raw.reshape(rows, -1)


@pytest.mark.parametrize("qtype", [Q.Q3_K, Q.IQ4_NL], ids=["q3_k", "iq4_nl"])
def test_rewritten_blocks_hold_the_files_values(qtype):
    """4,096 random blocks: each of Q3_K's 16 scales takes each of its 64 values (all but surely),
    every 3-bit weight and every IQ4_NL index occur. Two readers of the rewritten blocks, gguf-py
    and the core's dequantizer, give the file's values exactly."""
    rng = np.random.default_rng(int(qtype))
    block = gguf.GGML_QUANT_SIZES[qtype][0]
    raw = random_rows(qtype, 64, 64 * 256 // 4 if block == 256 else 64 * 32, rng)
    want = gguf.quants.dequantize(raw, qtype)
    out = transcode(raw, int(qtype))
    tag = TRANSCODES[int(qtype)]
    assert out.shape == (raw.shape[0], raw.shape[1] // gguf.GGML_QUANT_SIZES[qtype][1]
                         * gguf.GGML_QUANT_SIZES[Q[tag.upper()]][1])
    assert np.array_equal(gguf.quants.dequantize(out, Q[tag.upper()]), want)
    assert np.array_equal(core_dequantize(out, tag, want.shape), want)
    assert np.abs(want).max() > 0


def test_rewriting_is_chunked_and_shaped_as_the_source(monkeypatch):
    """Rows of a stack keep their leading dims; blocks cross the chunk boundary unchanged."""
    from llaisys.models import gguf_transcode

    rng = np.random.default_rng(5)
    raw = random_rows(Q.Q3_K, 6, 512, rng).reshape(2, 3, -1)
    whole = transcode(raw, int(Q.Q3_K))
    monkeypatch.setattr(gguf_transcode, "_CHUNK", 5)  # 12 blocks in chunks of 5
    assert np.array_equal(transcode(raw, int(Q.Q3_K)), whole) and whole.shape == (2, 3, 2 * 210)
    with pytest.raises(ValueError, match="not whole 110-byte blocks"):
        transcode(raw[..., :-1], int(Q.Q3_K))


def test_a_stack_of_experts_is_cut_into_rewritten_experts():
    rng = np.random.default_rng(6)
    raw = random_rows(Q.Q3_K, 4 * 8, 256, rng)
    stack = Transcoded("model.layers.0.mlp.experts.gate_proj.weight", "q6_k", (4, 8, 256), raw.reshape(4, 8, -1),
                       int(Q.Q3_K))
    experts = gguf_model._split(stack.name, stack)
    assert len(experts) == 4
    for e, (name, t) in enumerate(sorted(experts.items())):
        assert name == f"model.layers.0.mlp.experts.{e}.gate_proj.weight" and t.shape == (8, 256)
        assert np.array_equal(t.data, transcode(raw[8 * e:8 * (e + 1)], int(Q.Q3_K)))
        assert t.nbytes == t.data.nbytes == 8 * 210


def _file_pair(tmp_path, arch: str, tied: bool, qtype):
    """(a file whose matrices are `qtype`, its twin storing the rewritten blocks), the output
    matrix Q6_K in both as in Q3_K_M files."""
    def blocks(name, data, rng, rewrite=False):
        if name == "output.weight":
            return random_rows(Q.Q6_K, *data.shape, rng), Q.Q6_K
        raw = random_rows(qtype, *data.shape, rng)
        return (transcode(raw, int(qtype)), Q[TRANSCODES[int(qtype)].upper()]) if rewrite else (raw, qtype)

    dims = WIDE if qtype == Q.Q3_K else TINY
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


@pytest.mark.parametrize("arch,tied,qtype", [("qwen2", False, Q.Q3_K), ("llama", True, Q.Q3_K),
                                             ("qwen2", True, Q.IQ4_NL)],
                         ids=["qwen2-q3_k", "llama-tied-q3_k", "qwen2-tied-iq4_nl"])
def test_a_file_runs_as_its_twin_of_rewritten_blocks(tmp_path, caplog, arch, tied, qtype):
    file, twin = _file_pair(tmp_path, arch, tied, qtype)
    tag = TRANSCODES[int(qtype)]
    with caplog.at_level(logging.INFO, logger="llaisys.models.gguf_model"):
        ours = load_gguf(file).loaded
    ref = load_gguf(twin).loaded
    n_matrices = 7 * TINY["layers"] + 1  # the embedding beside each layer's seven; the output stays Q6_K
    assert f"{n_matrices} tensors of type {qtype.name} run as {tag.upper()}" in caplog.text
    assert quant_summary(ours) == quant_summary(ref)
    for name, t in ours.tensors.items():
        r = ref.tensors[name]
        assert t.dtype == r.dtype and t.shape == r.shape, name
        if isinstance(t, Transcoded):
            assert isinstance(r, QuantTensor) and t.dtype == tag and np.array_equal(t.data, r.data), name
    assert sum(isinstance(t, Transcoded) for t in ours.tensors.values()) == n_matrices
    assert _greedy(file) == _greedy(twin)


def test_a_q2_k_file_runs_as_its_own_blocks(tmp_path):
    """Q2_K has kernels of its own: its matrices stay the file's bytes (no rewrite, no widening)."""
    path = tmp_path / "q2_k.gguf"
    stored = {}

    def blocks(name, data, rng):
        stored[name] = random_rows(Q.Q2_K, *data.shape, rng)
        return stored[name], Q.Q2_K

    write_tiny_gguf(path, tied=False, dims=WIDE, blocks=blocks)
    loaded = load_gguf(path).loaded
    q2 = [t for t in loaded.tensors.values() if isinstance(t, QuantTensor)]
    assert len(q2) == len(stored) == 7 * TINY["layers"] + 2 and {t.dtype for t in q2} == {"q2_k"}
    assert np.array_equal(loaded.tensors["model.layers.1.mlp.down_proj.weight"].data, stored["blk.1.ffn_down.weight"])
    tokens = _greedy(path)
    assert all(len(ids) == 12 for ids, _ in tokens) and tokens == _greedy(path)
