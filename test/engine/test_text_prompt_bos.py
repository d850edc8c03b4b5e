"""A text prompt is tokenized with the tokenizer's special tokens, as transformers and vLLM do:
a model whose tokenizer adds a BOS (Llama, Mistral: a TemplateProcessing post-processor, or a
GGUF's add_bos_token) gets it, offline and through /v1/completions; a tokenizer without one
(Qwen2's) is unchanged; a rendered chat and token-id prompts are taken as they are."""

from __future__ import annotations

import pytest

from llaisys import LLM, SamplingParams
from tiny_checkpoint import make_bos_model

ONE = SamplingParams(max_tokens=1, temperature=0.0)


@pytest.mark.parametrize("bos", [True, False])
def test_text_prompts_get_the_tokenizers_special_tokens(tmp_path, bos):
    with LLM(str(make_bos_model(tmp_path / "m", bos)), kv_cache_memory="64MiB") as llm:
        plain = llm.tokenizer.encode("hello world", add_special_tokens=False)
        [text] = llm.generate(["hello world"], ONE)
        assert text.prompt_token_ids == ([0] if bos else []) + plain
        [ids] = llm.generate([plain], ONE)  # token ids go in as they are
        assert ids.prompt_token_ids == plain
