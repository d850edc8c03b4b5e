"""Fixtures for parity tests: small random Qwen2 checkpoints written by transformers."""

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM


def make_tiny_qwen2(path, tie: bool, seed: int = 0, layers: int = 3, dtype=torch.float32):
    """A random Qwen2 (GQA 4 query / 2 kv heads) saved as safetensors; returns the HF model (f32)."""
    torch.manual_seed(seed)
    cfg = Qwen2Config(vocab_size=512, hidden_size=64, intermediate_size=160, num_hidden_layers=layers,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                      rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=tie, torch_dtype="float32")
    model = Qwen2ForCausalLM(cfg).eval()
    with torch.no_grad():  # biases are zero at init; make them matter
        for layer in model.model.layers:
            for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                proj.bias.normal_(0, 0.5)
    model.to(dtype).save_pretrained(path, safe_serialization=True)
    return model.float()


@pytest.fixture(scope="module", params=[True, False], ids=["tied", "untied"])
def tiny_qwen2(request, tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny_qwen2")
    model = make_tiny_qwen2(path, tie=request.param)
    return path, model


# ---- tiny checkpoints of every supported family (test_archs.py) -------------------------------

ARCH_VOCAB = 384  # small vocabulary: the word-level tokenizer below knows every id
# family -> (HF config class name, HF model class name, config kwargs). Odd sizes, GQA, and in
# each family the feature that sets it apart; windows shorter than the test prompts.
ARCH_FAMILIES = {
    # q/k/v bias; window 6 on layers >= max_window_layers=1 (layer 0 stays full)
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", dict(
        hidden_size=80, num_attention_heads=5, num_key_value_heads=1, intermediate_size=136, num_hidden_layers=3,
        use_sliding_window=True, sliding_window=6, max_window_layers=1)),
    # llama3 rope scaling (original context 32, so most bands are rescaled); tied lm_head
    "llama": ("LlamaConfig", "LlamaForCausalLM", dict(
        hidden_size=96, num_attention_heads=6, num_key_value_heads=2, intermediate_size=136, num_hidden_layers=2,
        tie_word_embeddings=True, rope_parameters={"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0,
                                                   "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                                   "original_max_position_embeddings": 32})),
    # head_dim 24 != hidden / heads (20); per-head q/k RMSNorm
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", dict(
        hidden_size=80, num_attention_heads=4, num_key_value_heads=2, head_dim=24, intermediate_size=136,
        num_hidden_layers=2)),
    # one window of 7 on every layer
    "mistral": ("MistralConfig", "MistralForCausalLM", dict(
        hidden_size=96, num_attention_heads=6, num_key_value_heads=3, intermediate_size=136, num_hidden_layers=2,
        sliding_window=7)),
}


def write_word_tokenizer(path, vocab: int = ARCH_VOCAB) -> None:
    """A word-level tokenizer ("t0" .. "t{vocab-1}", space separated) so llaisys.LLM can load
    the directory and detokenize every id the tiny model can produce."""
    import json

    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({f"t{i}": i for i in range(vocab)}, unk_token="t0"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece()  # joins with spaces
    tok.save(str(path / "tokenizer.json"))
    (path / "tokenizer_config.json").write_text(json.dumps({"model_max_length": 512}))


def make_tiny_arch(path, family: str, dtype=torch.float32, seed: int = 0):
    """A random `family` checkpoint saved (in `dtype`) by transformers' save_pretrained, with a
    word-level tokenizer. Returns the HF model in f32 over the saved (rounded) weights, eager
    attention (the reference for sliding windows)."""
    import transformers

    cfg_name, model_name, kwargs = ARCH_FAMILIES[family]
    torch.manual_seed(seed)
    cfg = getattr(transformers, cfg_name)(vocab_size=ARCH_VOCAB, max_position_embeddings=512, rms_norm_eps=1e-6,
                                          bos_token_id=None, eos_token_id=None, pad_token_id=None, **kwargs)
    model = getattr(transformers, model_name)(cfg).eval()
    with torch.no_grad():  # norms start at 1 and biases at 0: make every tensor matter
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.add_(torch.randn_like(p) * 0.2)
            elif name.endswith("bias"):
                p.normal_(0, 0.5)
    model.to(dtype).save_pretrained(path, safe_serialization=True)
    write_word_tokenizer(path)
    ref = getattr(transformers, model_name).from_pretrained(path, dtype=torch.float32, attn_implementation="eager")
    return ref.eval()
