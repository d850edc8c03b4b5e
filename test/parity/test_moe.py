"""Mixture-of-experts models against transformers, on tiny random f32 checkpoints that
transformers writes with save_pretrained (per-expert 2-D tensors, stacked into the core's 3-D
expert slots at load):

- Qwen3-MoE: 8 experts, top 2, renormalised (norm_topk_prob), q/k norm, head_dim != H / heads;
- Qwen2-MoE: 6 experts, top 2, not renormalised, the sigmoid-gated shared expert, q/k/v bias,
  one dense layer among sparse ones (mlp_only_layers);
- Mixtral: 4 experts, top 2 (always renormalised), block_sparse_moe names.

Routers are drawn wide (std 1), so no token sits on a near tie between two experts' scores
(a tie would let rounding pick either expert). Checked: the config as transformers reads it;
logits at every position (batched prefill, chunked prefill, decode) on BLOCK and SLOT; 32
greedy tokens through llaisys.LLM identical to transformers' generate, batched and alone, BLOCK
and SLOT, prefix cache on and off; then each config contradiction as a ValueError naming it."""

import pytest
import torch

from llaisys import LLM, SamplingParams
from llaisys.models.arch import read_config
from llaisys.models.model import Model

from .conftest import write_word_tokenizer
from .test_archs import N_GEN, PROMPTS, check_logits_every_position, hf_greedy
from .test_tiny_qwen2 import Reference

VOCAB = 384
COMMON = dict(vocab_size=VOCAB, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
              max_position_embeddings=512, rms_norm_eps=1e-6, bos_token_id=None, eos_token_id=None,
              pad_token_id=None)
# family -> (config class, model class, config kwargs)
MOE_FAMILIES = {
    "qwen3_moe": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM", dict(
        head_dim=24, intermediate_size=96, moe_intermediate_size=40, num_experts=8, num_experts_per_tok=2,
        norm_topk_prob=True, num_hidden_layers=3)),
    "qwen2_moe": ("Qwen2MoeConfig", "Qwen2MoeForCausalLM", dict(
        intermediate_size=96, moe_intermediate_size=40, shared_expert_intermediate_size=56, num_experts=6,
        num_experts_per_tok=2, norm_topk_prob=False, mlp_only_layers=[1], num_hidden_layers=3)),
    "mixtral": ("MixtralConfig", "MixtralForCausalLM", dict(
        intermediate_size=48, num_local_experts=4, num_experts_per_tok=2, num_hidden_layers=2)),
}


def make_tiny_moe(path, family: str, seed: int = 0, **change):
    """A random `family` checkpoint (f32; config kwargs `change`d) saved by transformers, with a
    word-level tokenizer; returns transformers' model read back from it (eager attention)."""
    import transformers

    cfg_name, model_name, kwargs = MOE_FAMILIES[family]
    torch.manual_seed(seed)
    cfg = getattr(transformers, cfg_name)(**COMMON, **{**kwargs, **change})
    model = getattr(transformers, model_name)(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.add_(torch.randn_like(p) * 0.2)
            elif name.endswith("bias"):
                p.normal_(0, 0.5)
            elif name.endswith(("mlp.gate.weight", "shared_expert_gate.weight")):
                p.normal_(0, 1.0)  # wide router scores: no near ties between experts
            elif "experts" in name:
                p.normal_(0, 0.1)
    model.save_pretrained(path, safe_serialization=True)
    write_word_tokenizer(path, VOCAB)
    ref = getattr(transformers, model_name).from_pretrained(path, dtype=torch.float32, attn_implementation="eager")
    return ref.eval()


@pytest.fixture(scope="module", params=list(MOE_FAMILIES))
def ckpt(request, tmp_path_factory):
    path = tmp_path_factory.mktemp(f"tiny_{request.param}")
    return request.param, path, make_tiny_moe(path, request.param)


def test_config_reads_as_transformers_does(ckpt):
    family, path, hf = ckpt
    p = read_config(path / "config.json")
    c = hf.config
    assert p.arch == family and p.architecture == type(hf).__name__
    n_experts = getattr(c, "num_experts", None) or c.num_local_experts
    assert (p.n_experts, p.n_experts_per_tok) == (n_experts, c.num_experts_per_tok)
    sparse = tuple(type(layer.mlp).__name__.endswith("SparseMoeBlock") for layer in hf.model.layers)
    assert p.layer_sparse == sparse
    assert p.layer_sparse == ((True, False, True) if family == "qwen2_moe" else (True,) * c.num_hidden_layers)
    assert p.norm_topk_prob == (family != "qwen2_moe")
    assert p.shared_expert_intermediate_size == (56 if family == "qwen2_moe" else 0)
    assert p.moe_intermediate_size == (48 if family == "mixtral" else 40)
    assert p.qkv_bias == (family == "qwen2_moe") and p.qk_norm == (family == "qwen3_moe")


@pytest.fixture(scope="module")
def core(ckpt):
    _, path, hf = ckpt
    with Model.from_path(path) as m:
        yield m, Reference(hf, False)


@pytest.mark.parametrize("layout", ["block", "slot"])
def test_logits_every_position(core, layout):
    """Two rows prefilled together (one in chunks), then decoded one token at a time: prefill
    routes many tokens to each expert, decode one or two."""
    check_logits_every_position(*core, layout)


def test_greedy_matches_generate(ckpt):
    """transformers' 32 greedy tokens, from llaisys.LLM batched with the prefix cache on (BLOCK,
    then a prefix-cache hit), alone with it off (BLOCK), and batched on SLOT."""
    _, path, hf = ckpt
    want = [hf_greedy(hf, p) for p in PROMPTS]
    sp = SamplingParams(temperature=0.0, max_tokens=N_GEN, ignore_eos=True)

    def llm(layout, prefix):
        return LLM(str(path), kv_layout=layout, kv_dtype="f32", enable_prefix_caching=prefix, block_size=4,
                   kv_cache_memory=4 << 20, max_num_seqs=4)

    with llm("block", True) as engine:
        assert [list(o.outputs[0].token_ids) for o in engine.generate(PROMPTS, sp)] == want
        again = engine.generate(PROMPTS[2], sp)[0]
        assert again.usage.cached_tokens > 0 and list(again.outputs[0].token_ids) == want[2]
    with llm("block", False) as engine:
        assert [list(engine.generate(p, sp)[0].outputs[0].token_ids) for p in PROMPTS] == want
    with llm("slot", False) as engine:
        assert [list(o.outputs[0].token_ids) for o in engine.generate(PROMPTS, sp)] == want
