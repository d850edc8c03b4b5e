"""A tiny random Qwen2 checkpoint with the real Qwen2.5 tokenizer, for engine tests that need
the real core but many runs: two layers of width 64 (its greedy answers are nonsense but
deterministic), the real vocabulary (151,936 logits rows), the tokenizer files copied from
the converted 0.5B directory."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "generation_config.json")


def make_tiny_checkpoint(path: Path, tokenizer_dir: Path, seed: int = 0) -> Path:
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    vocab = json.loads((Path(tokenizer_dir) / "config.json").read_text())["vocab_size"]
    torch.manual_seed(seed)
    cfg = Qwen2Config(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                      rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=False, torch_dtype="float32")
    Qwen2ForCausalLM(cfg).eval().save_pretrained(path, safe_serialization=True)
    for name in TOKENIZER_FILES:
        if (Path(tokenizer_dir) / name).is_file():
            shutil.copy(Path(tokenizer_dir) / name, Path(path) / name)
    return Path(path)
