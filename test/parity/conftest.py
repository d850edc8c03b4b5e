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
