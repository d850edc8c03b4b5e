"""Block-quantized weights (GGUF Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS, the
i-quants IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S and IQ1_M;
IQ4_NL as the loader rewrites it) through the whole forward,
against transformers running the same weights dequantized by gguf-py.

Every linear weight of a small random Qwen2 is a random but valid block tensor of the format
under test (random quantized values, scales sized so weights come out near 0.05); gguf-py
dequantizes it for transformers, and llaisys gets the raw blocks. The CPU kernels quantize
activations to int8 per block before the integer dot products, so llaisys cannot follow the
float reference exactly. The bound is that rounding's own noise measured on transformers: the
same model with every nn.Linear's input rounded to int8 per block (32 elements for the 32-blocks,
256 for the K-quants, one scale per block as the kernels do) against without, times
NOISE_FACTOR; the greedy token must agree wherever the reference's top two logits are further
apart than twice that bound. Mixed formats in one fused weight (q, k Q4_K with v Q6_K, as in the real
Q4_K_M files) and a block-quantized embedding are covered too, on both KV layouts.

Each case runs on the CPU and, where one is present, on an NVIDIA GPU, which keeps the weights
as blocks in device memory (models/decoder/weights.hpp), runs the quantized GEMV for the decode
step and dequantized bf16 panels through cuBLAS for the batched prefill. The bound is the
same: the GPU's decode sums exact products in f32, and its prefill rounds each activation and
weight once to bf16 (at most 2^-9 of each value, where the int8 blocks move a value by up to
max|block| / 254), so its error is expected to be the smaller of the two."""

import numpy as np
import pytest
import torch
from types import SimpleNamespace

gguf = pytest.importorskip("gguf")

from block_scales import put_scale  # noqa: E402
from llaisys import DeviceType  # noqa: E402
from llaisys import runtime as rt  # noqa: E402
from llaisys.models.arch import parse_config  # noqa: E402
from llaisys.models.gguf_transcode import TRANSCODES, transcode  # noqa: E402
from llaisys.models.model import Model  # noqa: E402

from .test_tiny_qwen2 import PROMPTS, Runner, hf_logits, logits_with_rounded_inputs  # noqa: E402

HIDDEN, INTER, VOCAB = 256, 512, 512  # row lengths divisible by the K-quants' 256
NOISE_FACTOR = 1.5  # llaisys lands within ~1.0x of it (the kernels round exactly so)
MIN_ATOL = 1e-3

# the largest |multiplier of d| a format's block can produce: scales chosen so weights ~0.05
MAX_MULT = {"q8_0": 127, "q4_0": 8, "q5_0": 16, "q4_1": 15, "q5_1": 31, "q2_k": 15 * 3, "q4_k": 63 * 15, "q5_k": 63 * 31, "q6_k": 127 * 32, "q3_k": 32 * 4, "iq4_xs": 32 * 127,
            "iq4_nl": 127, "iq2_xxs": 167, "iq2_xs": 167, "iq2_s": 167, "iq3_xxs": 480, "iq3_s": 465, "iq1_s": 17,
            "iq1_m": 17}
# byte offsets of the f16 super-scales in a block
SCALE_AT = {"q8_0": (0,), "q4_0": (0,), "q5_0": (0,), "q4_1": (0, 2), "q5_1": (0, 2), "q2_k": (80, 82), "q4_k": (0, 2), "q5_k": (0, 2), "q6_k": (208,), "q3_k": (108,), "iq4_xs": (0,),
            "iq4_nl": (0,), "iq2_xxs": (0,), "iq2_xs": (0,), "iq2_s": (0,), "iq3_xxs": (0,), "iq3_s": (0,),
            "iq1_s": (0,), "iq1_m": (48,)}  # IQ1_M: d in the top nibbles of the 4 uint16 scales at 48..56

DEVICES = [DeviceType.CPU, pytest.param(DeviceType.NVIDIA, marks=pytest.mark.skipif(
    rt.device_count(DeviceType.NVIDIA) == 0, reason="no NVIDIA GPU in this build/machine"))]


def random_blocks(fmt: str, rows: int, k: int, rng) -> np.ndarray:
    """uint8 [rows, k / block * block_bytes]: random quantized values, sane f16 scales."""
    qtype = gguf.GGMLQuantizationType[fmt.upper()]
    block, nbytes = gguf.GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, size=(rows, k // block, nbytes), dtype=np.uint8)
    for at in SCALE_AT[fmt]:
        # Q2_K/Q4_K/Q5_K: d and dmin both positive (their dequantization is d*sc*q - dmin*m)
        scale = rng.uniform(0.5, 1.5, size=(rows, k // block)) * (0.05 / MAX_MULT[fmt])
        if fmt in ("q4_1", "q5_1") and at == 2:  # the min m: either sign, half the span d q covers
            scale *= MAX_MULT[fmt] / 2
        if fmt not in ("q2_k", "q4_k", "q5_k"):
            scale *= rng.choice([-1.0, 1.0], size=scale.shape)
        put_scale(raw, fmt, at, scale)  # IQ1_M: d in the top nibbles of its scale words
    return raw.reshape(rows, -1)


def dequantized(fmt: str, blocks: np.ndarray, k: int) -> np.ndarray:
    qtype = gguf.GGMLQuantizationType[fmt.upper()]
    return gguf.quants.dequantize(blocks, qtype).reshape(blocks.shape[0], k).astype(np.float32)


def build(fmts: dict, tie: bool, embed_fmt, seed: int = 0, device=DeviceType.CPU):
    """(HF model in f32 on the dequantized values, llaisys Model on the blocks, on `device`).
    fmts maps a projection name (q_proj, ..., down_proj, lm_head) to its format."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    cfg = Qwen2Config(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=INTER, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                      rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=tie, torch_dtype="float32")
    hf = Qwen2ForCausalLM(cfg).eval()
    tensors = {}

    def put(name, module_weight, fmt):
        rows, k = module_weight.shape
        if fmt is None:
            tensors[name] = SimpleNamespace(name=name, dtype="f32", shape=(rows, k),
                                            data=module_weight.detach().numpy().astype(np.float32))
            return
        blocks = random_blocks(fmt, rows, k, rng)
        with torch.no_grad():
            module_weight.copy_(torch.from_numpy(dequantized(fmt, blocks, k)))
        qtype = int(gguf.GGMLQuantizationType[fmt.upper()])
        if qtype in TRANSCODES:  # a GGUF type without kernels, rewritten as the loader does (gguf_transcode.py)
            fmt, blocks = TRANSCODES[qtype], transcode(blocks, qtype)
        tensors[name] = SimpleNamespace(name=name, dtype=fmt, shape=(rows, k), data=blocks)

    with torch.no_grad():
        for layer in hf.model.layers:
            for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                proj.bias.normal_(0, 0.5)
    for i, layer in enumerate(hf.model.layers):
        pre = f"model.layers.{i}."
        for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
            put(pre + f"self_attn.{proj}.weight", getattr(layer.self_attn, proj).weight, fmts[proj])
        for proj in ("gate_proj", "up_proj", "down_proj"):
            put(pre + f"mlp.{proj}.weight", getattr(layer.mlp, proj).weight, fmts[proj])
    put("model.embed_tokens.weight", hf.model.embed_tokens.weight, fmts["lm_head"] if tie else embed_fmt)
    if not tie:
        put("lm_head.weight", hf.lm_head.weight, fmts["lm_head"])
    for name, value in hf.state_dict().items():  # norms and biases: f32
        if name not in tensors and not (tie and name == "lm_head.weight"):
            v = value.numpy().astype(np.float32)
            tensors[name] = SimpleNamespace(name=name, dtype="f32", shape=v.shape, data=v)
    params = parse_config(cfg.to_dict())
    loaded = SimpleNamespace(config=params, tensors=tensors, dtype="f32", path=None)
    return hf, Model(loaded, device=device)


def rounded_inputs(x: torch.Tensor, block: int) -> torch.Tensor:
    """x with each run of `block` values along the last dim rounded to int8 steps of max|run| / 127."""
    runs = x.reshape(*x.shape[:-1], -1, block)
    d = runs.abs().amax(-1, keepdim=True) / 127
    q = torch.where(d > 0, torch.round(runs / torch.where(d > 0, d, 1)), 0)
    return (q * d).reshape(x.shape)


class Reference:
    """transformers' logits, and the bound: NOISE_FACTOR x what rounding every linear's input
    to int8 blocks moves them on transformers itself."""

    def __init__(self, hf, fmts):
        self.hf = hf
        self.block = 256 if any(f and (f.endswith("_k") or f.startswith("iq") and f != "iq4_nl") for f in fmts.values()) else 32

    def __call__(self, ids):
        return hf_logits(self.hf, ids)

    def atol(self, ids) -> float:
        rounded = logits_with_rounded_inputs(self.hf, ids, lambda x: rounded_inputs(x, self.block))
        return max(MIN_ATOL, NOISE_FACTOR * float(np.abs(rounded - hf_logits(self.hf, ids)).max()))


def check_prompts(ref, model, layout):
    runner = Runner(model, layout, n_seqs=len(PROMPTS))
    logits, qs = runner.step(list(range(len(PROMPTS))), PROMPTS)
    for i, ids in enumerate(PROMPTS):
        want, atol = ref(ids), ref.atol(ids)
        got = logits[qs[i]:qs[i + 1]]
        err = float(np.abs(got - want).max())
        assert err <= atol, f"prompt {i}: worst logit error {err:.5f} > bound {atol:.5f}"
        top2 = np.sort(want, axis=-1)[:, -2:]
        clear = (top2[:, 1] - top2[:, 0]) > 2 * atol
        assert (got.argmax(-1) == want.argmax(-1))[clear].all(), f"prompt {i}: greedy token differs"
    # then one decode step per row on top of the prefill
    nxt = [[int(np.argmax(logits[qs[i + 1] - 1]))] for i in range(len(PROMPTS))]
    dec, _ = runner.step(list(range(len(PROMPTS))), nxt)
    for i, ids in enumerate(PROMPTS):
        want = ref(ids + nxt[i])[-1]
        assert np.abs(dec[i] - want).max() <= ref.atol(ids + nxt[i])


ALL = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "lm_head")


@pytest.mark.parametrize("device", DEVICES, ids=["cpu", "nvidia"])
@pytest.mark.parametrize("fmt", ["q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q2_k", "q4_k", "q5_k", "q6_k", "q3_k", "iq4_nl",
                                 "iq4_xs"])
@pytest.mark.parametrize("layout", ["block", "slot"])
def test_every_linear_in_one_format(fmt, layout, device):
    check_one_format(fmt, layout, device)


# The i-quants: the same check, on the BLOCK layout (the layouts do not reach the weights' kernels).
@pytest.mark.parametrize("device", DEVICES, ids=["cpu", "nvidia"])
@pytest.mark.parametrize("fmt", ["iq2_xxs", "iq2_xs", "iq2_s", "iq3_xxs", "iq3_s", "iq1_s", "iq1_m"])
def test_every_linear_in_one_i_quant(fmt, device):
    check_one_format(fmt, "block", device)


def check_one_format(fmt, layout, device):
    fmts = {p: fmt for p in ALL}
    hf, model = build(fmts, tie=False, embed_fmt=None, device=device)
    try:
        check_prompts(Reference(hf, fmts), model, layout)
    finally:
        model.close()


@pytest.mark.parametrize("device", DEVICES, ids=["cpu", "nvidia"])
@pytest.mark.parametrize("tie", [False, True], ids=["untied", "tied"])
@pytest.mark.parametrize("recipe", [("q4_k", "q6_k", "q6_k"), ("q3_k", "q5_k", "q4_k"), ("q2_k", "q3_k", "q3_k"),
                                    ("q5_1", "q8_0", "q6_k")],
                         ids=["q4_k_m", "q3_k_m", "q2_k", "q5_k_m-fallback"])
def test_mixed_formats_like_a_q4_k_m_file(tie, device, recipe):
    """Q4_K_M: v and down Q6_K beside Q4_K (one fused qkv with two formats), lm_head Q6_K, embedding
    Q4_K (untied) or the quantized lm_head read back as the embedding (tied). Q3_K_M: Q3_K with v
    Q5_K and down Q4_K. Q2_K: Q2_K with v and down Q3_K, as llama.cpp's recipe. Q5_K_M on rows
    that 256 does not divide (Qwen2.5-0.5B's 896): Q5_1 with v Q8_0 (Q6_K's fallback), down
    (4864-wide rows there) Q6_K."""
    most, v, down = recipe
    fmts = dict.fromkeys(ALL, most)
    fmts.update(v_proj=v, down_proj=down, lm_head="q6_k")
    hf, model = build(fmts, tie=tie, embed_fmt=most, device=device)
    try:
        check_prompts(Reference(hf, fmts), model, "block")
    finally:
        model.close()


@pytest.mark.parametrize("device", DEVICES, ids=["cpu", "nvidia"])
def test_quantized_and_float_weights_in_one_fused_linear_are_refused(device):
    from llaisys import LlaisysInputError

    fmts = dict.fromkeys(ALL, "q8_0")
    fmts["k_proj"] = None  # q and v quantized, k float: one fused qkv cannot hold both
    with pytest.raises(LlaisysInputError, match="fused"):
        build(fmts, tie=False, embed_fmt=None, device=device)


@pytest.mark.parametrize("fmt", ["q8_0", "q4_k"])
def test_quantized_weight_with_a_row_length_off_the_block_is_refused(fmt):
    """hidden 80: not a multiple of 32 nor of 256"""
    from transformers import Qwen2Config

    from llaisys import LlaisysInputError

    cfg = Qwen2Config(vocab_size=VOCAB, hidden_size=80, intermediate_size=160, num_hidden_layers=1,
                      num_attention_heads=4, num_key_value_heads=2)
    block, nbytes = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[fmt.upper()]]
    data = np.zeros((80, -(-80 // block) * nbytes), np.uint8)
    name = "model.layers.0.self_attn.o_proj.weight"
    loaded = SimpleNamespace(config=parse_config(cfg.to_dict()), dtype="f32", path=None,
                             tensors={name: SimpleNamespace(name=name, dtype=fmt, shape=(80, 80), data=data)})
    with pytest.raises(LlaisysInputError, match=f"divisible by {block}"):
        Model(loaded)
