"""A tiny random Qwen2 checkpoint with the real Qwen2.5 tokenizer, for tests that need the real
core, the real tokenizer and many fast runs (engine failure isolation, server edge tests):
two layers of width 64 (its greedy answers are nonsense but deterministic), the real
vocabulary (151,936 logits rows), the tokenizer files copied from the converted 0.5B
directory (so chat templates, special tokens and Unicode handling are the real ones)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "generation_config.json")
MAX_POSITIONS = 512  # the tiny model's context


def make_tiny_checkpoint(path: Path, tokenizer_dir: Path, seed: int = 0, tie: bool = False) -> Path:
    """Write the checkpoint into `path` (tied or separate lm_head) and return it."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    vocab = json.loads((Path(tokenizer_dir) / "config.json").read_text())["vocab_size"]
    torch.manual_seed(seed)
    cfg = Qwen2Config(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=MAX_POSITIONS,
                      rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=tie, torch_dtype="float32")
    Qwen2ForCausalLM(cfg).eval().save_pretrained(path, safe_serialization=True)
    for name in TOKENIZER_FILES:
        if (Path(tokenizer_dir) / name).is_file():
            shutil.copy(Path(tokenizer_dir) / name, Path(path) / name)
    return Path(path)


def make_bos_model(path: Path, bos: bool) -> Path:
    """tools/bench_engine_cost.py's numpy-written tiny model (no torch), its tokenizer given a
    BOS ("<|endoftext|>", id 0) as a Llama tokenizer's TemplateProcessing adds one (bos=True)."""
    import bench_engine_cost  # tools/, on pytest's pythonpath

    model = bench_engine_cost.write_tiny_model(path)
    if bos:  # "<|endoftext|>" (id 0) as the BOS a Llama tokenizer's post-processor adds
        tj = json.loads((model / "tokenizer.json").read_text())
        tj["post_processor"] = {"type": "TemplateProcessing",
                                "single": [{"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}},
                                           {"Sequence": {"id": "A", "type_id": 0}}],
                                "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
                                "special_tokens": {"<|endoftext|>": {"id": "<|endoftext|>", "ids": [0],
                                                                     "tokens": ["<|endoftext|>"]}}}
        (model / "tokenizer.json").write_text(json.dumps(tj))
    return model
