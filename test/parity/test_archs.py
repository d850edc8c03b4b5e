"""Every supported architecture against transformers, on tiny random checkpoints that
transformers itself writes with save_pretrained (test/parity/conftest.py: ARCH_FAMILIES).

Each family carries its distinguishing feature at odd sizes with GQA: Qwen2 q/k/v bias and a
sliding window on some layers only (max_window_layers), Llama 3 rope scaling and a tied
lm_head, Qwen3 head_dim != hidden / heads with per-head q/k RMSNorm, Mistral a window on every
layer. Windows are shorter than the prompts, so they change the answers.

Checked in f32 and bf16 checkpoints: the config as transformers reads it; logits at every
position (batched prefill, chunked prefill, decode) within the bound of test_tiny_qwen2; and
32 greedy tokens through llaisys.LLM identical to transformers' generate, whether a prompt
runs alone or batched, on BLOCK or SLOT KV layouts, with the prefix cache on or off."""

import json

import numpy as np
import pytest
import torch

from llaisys import LLM, SamplingParams, runtime
from llaisys.models.arch import parse_config, read_config
from llaisys.models.model import Model

from .conftest import ARCH_FAMILIES, make_tiny_arch
from .test_tiny_qwen2 import Reference, Runner

SHARED = [7, 300, 42, 42, 9, 250, 11, 64, 5, 77]  # a prefix longer than every window
PROMPTS = [SHARED + [3, 14, 15, 92, 65, 35, 89, 79, 32], [201, 99, 4, 8, 150, 160, 170, 180, 190, 33, 1],
           SHARED + [271, 82, 81, 82, 84, 59, 4, 52, 35, 360, 28, 74, 71]]
N_GEN = 32
DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16}


@pytest.fixture(scope="module", params=[(f, d) for f in ARCH_FAMILIES for d in DTYPES], ids=lambda p: "-".join(p))
def ckpt(request, tmp_path_factory):
    family, dtype = request.param
    path = tmp_path_factory.mktemp(f"tiny_{family}_{dtype}")
    hf = make_tiny_arch(path, family, DTYPES[dtype])
    return family, dtype, path, hf


def test_config_reads_as_transformers_does(ckpt):
    family, _, path, hf = ckpt
    p = read_config(path / "config.json")
    c = hf.config
    assert p.arch == family and p.architecture == type(hf).__name__
    assert (p.n_layers, p.hidden_size, p.n_heads, p.n_kv_heads) == (c.num_hidden_layers, c.hidden_size,
                                                                     c.num_attention_heads, c.num_key_value_heads)
    assert p.head_dim == hf.model.layers[0].self_attn.head_dim
    if family == "mistral":  # every layer slides
        want = [c.sliding_window or 0] * c.num_hidden_layers
    elif family == "llama":
        want = [0] * c.num_hidden_layers
    else:  # transformers' own per-layer derivation
        want = [c.sliding_window if t == "sliding_attention" and c.sliding_window else 0 for t in c.layer_types]
    assert list(p.layer_window) == want
    assert any(want) == (family in ("qwen2", "mistral"))
    assert p.rope.scaling == c.rope_parameters.get("rope_type", "default")
    assert p.qk_norm == (family == "qwen3") and p.qkv_bias == (family == "qwen2")


@pytest.fixture(scope="module")
def core(ckpt):
    family, dtype, path, hf = ckpt
    with Model.from_path(path) as m:
        yield m, Reference(hf, rounds_activations(dtype))


def check_logits_every_position(m, ref: Reference, layout: str) -> None:
    """Two rows prefilled together (one in chunks), then decoded one token at a time: every
    position's logits against `ref`."""
    runner = Runner(m, layout, 2)
    long, short = PROMPTS[2], PROMPTS[1]
    got_long, got_short = [], []
    logits, qs = runner.step([0, 1], [long[:9], short])
    got_long.append(logits[qs[0]:qs[1]])
    got_short.append(logits[qs[1]:qs[2]])
    logits, qs = runner.step([0], [long[9:15]])
    got_long.append(logits)
    for t in long[15:]:
        logits, qs = runner.step([1, 0], [[t], [t]])
        got_short.append(logits[:1])
        got_long.append(logits[1:])
    np.testing.assert_allclose(np.concatenate(got_long), ref(long), atol=ref.atol(long), rtol=0)
    short = short + long[15:]
    np.testing.assert_allclose(np.concatenate(got_short), ref(short), atol=ref.atol(short), rtol=0)


def test_logits_every_position(core):
    """Two rows prefilled together (one in chunks), then decoded one token at a time."""
    check_logits_every_position(*core, "block")


@pytest.mark.parametrize("layout", ["block", "slot"])
def test_logits_every_position_on_the_gpu(ckpt, layout):
    """The same on an NVIDIA GPU (skips without one): BLOCK read through its block tables by
    the kernels, SLOT through its slot lists; the windowed families test both sources' windows,
    Qwen3 the q/k norms before the fused RoPE and KV store, Llama the scaled RoPE table."""
    from llaisys import DeviceType

    if runtime.device_count(DeviceType.NVIDIA) == 0:
        pytest.skip("no NVIDIA GPU in this build/machine")
    family, dtype, path, hf = ckpt
    with Model.from_path(path, device=DeviceType.NVIDIA) as m:  # bf16: the GPU's prefill GEMMs round activations
        check_logits_every_position(m, Reference(hf, dtype == "bf16"), layout)


def test_windows_change_the_reference(ckpt):
    """The windowed families' prompts are long enough that full attention would differ."""
    family, _, path, hf = ckpt
    if family not in ("qwen2", "mistral"):
        pytest.skip("no sliding window in this family")
    d = json.loads((path / "config.json").read_text())
    d.pop("layer_types", None)
    d.update({"qwen2": {"use_sliding_window": False}, "mistral": {"sliding_window": None}}[family])
    cfg = type(hf.config)(**d)
    cfg._attn_implementation = "eager"
    full = type(hf)(cfg).eval()
    full.load_state_dict(hf.state_dict())
    assert parse_config(d).layer_window == (0,) * cfg.num_hidden_layers
    ids = torch.tensor([PROMPTS[2]])
    with torch.no_grad():
        assert float((hf(ids).logits - full(ids).logits).abs().max()) > 1e-3


def hf_greedy(hf, prompt) -> list:
    with torch.no_grad():
        out = hf.generate(torch.tensor([prompt]), max_new_tokens=N_GEN, min_new_tokens=N_GEN, do_sample=False,
                          pad_token_id=0)
    return out[0, len(prompt):].tolist()


def rounds_activations(dtype: str) -> bool:
    """Whether llaisys rounds the activations of these weights to bf16 (the AVX512_BF16 dot
    products), which transformers' bf16 forward rounds elsewhere."""
    return dtype == "bf16" and runtime.cpu_isa() == "avx512bf16"


def assert_greedy(got: list, want: list, prompt: list, ref: Reference, what: str) -> None:
    """Token for token. Where llaisys rounds activations to bf16 (ref.rounds), the first
    difference may only fall on a near tie of transformers' own logits: the two tokens within
    2 x the bf16-rounding bound of that position (each side's logits within ref.atol of
    transformers', test_logits_every_position), after which the continuations part."""
    if got == want:
        return
    i = next((j for j, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
    assert ref.rounds and i < min(len(got), len(want)), f"{what}: greedy differs from transformers at token {i}"
    ids = list(prompt) + list(want[:i])
    logits = ref(ids)[-1]
    gap, bound = float(logits[want[i]] - logits[got[i]]), 2 * ref.atol(ids)
    assert gap <= bound, f"{what}: token {i} is {got[i]}, transformers' {want[i]} leads it by {gap:.4f} > {bound:.4f}"


def test_greedy_matches_generate_batched_alone_layouts_prefix_cache(ckpt):
    """transformers' 32 greedy tokens, from llaisys.LLM batched with the prefix cache on (BLOCK),
    alone with it off (BLOCK), and batched on SLOT (up to a near tie where llaisys rounds the
    activations to bf16: assert_greedy)."""
    _, dtype, path, hf = ckpt
    ref = Reference(hf, rounds_activations(dtype))
    want = [hf_greedy(hf, p) for p in PROMPTS]
    sp = SamplingParams(temperature=0.0, max_tokens=N_GEN, ignore_eos=True)
    longest_window = max(read_config(path / "config.json").layer_window)

    def llm(layout, prefix):
        # f32 KV: this checks the forward itself, token for token (the default KV dtype is
        # test/engine/test_kv_dtype.py's)
        return LLM(str(path), kv_layout=layout, kv_dtype="f32", enable_prefix_caching=prefix, block_size=4,
                   kv_cache_memory=4 << 20, max_num_seqs=4)

    def check(got, what):
        for g, w, p in zip(got, want, PROMPTS, strict=True):
            assert_greedy(list(g), w, p, ref, what)

    with llm("block", True) as engine:
        check([o.outputs[0].token_ids for o in engine.generate(PROMPTS, sp)], "BLOCK, batched, prefix cache on")
        again = engine.generate(PROMPTS[2], sp)[0]  # a prefix-cache hit longer than any window
        assert again.usage.cached_tokens > longest_window
        assert_greedy(list(again.outputs[0].token_ids), want[2], PROMPTS[2], ref, "BLOCK, prefix-cache hit")
    with llm("block", False) as engine:
        check([engine.generate(p, sp)[0].outputs[0].token_ids for p in PROMPTS], "BLOCK, alone, prefix cache off")
    with llm("slot", False) as engine:
        check([o.outputs[0].token_ids for o in engine.generate(PROMPTS, sp)], "SLOT, batched")
