"""What a caller may pass as prompts, turned into token ids (offline API and server alike)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass
class PromptInput:
    text: Optional[str]  # the prompt as text (rendered chat template for conversations), if known
    token_ids: Optional[list]  # the ids the engine computes (None for a prompt given as embeddings)
    embeds: object = None  # {"prompt_embeds": x}: x as given, [n, hidden] (checked by the engine)


def _is_conversation(x) -> bool:  # a list of embeddings prompts is not one
    return isinstance(x, list) and len(x) > 0 and all(isinstance(m, dict) and not _is_embeds(m) for m in x)


def _is_token_ids(x) -> bool:
    return isinstance(x, list) and len(x) > 0 and all(isinstance(t, int) and not isinstance(t, bool) for t in x)


def _is_embeds(x) -> bool:
    return isinstance(x, dict) and "prompt_embeds" in x


def _one(p, tokenizer) -> PromptInput:
    if _is_embeds(p):
        extra = sorted(set(p) - {"prompt_embeds"})
        if extra:
            raise ValueError(f"an embeddings prompt is {{'prompt_embeds': array}}; unknown key(s) {extra}")
        return PromptInput(None, None, p["prompt_embeds"])
    if isinstance(p, str):
        if not p:
            raise ValueError("a prompt must not be empty")
        # with the tokenizer's special tokens (a BOS where it has one: Llama, Mistral), as a
        # text prompt is tokenized by transformers and vLLM; a rendered chat carries its own
        return PromptInput(p, tokenizer.encode(p, add_special_tokens=True))
    if _is_token_ids(p):
        return PromptInput(None, list(p))
    if _is_conversation(p):
        text = tokenizer.apply_chat_template(p, add_generation_prompt=True)
        return PromptInput(text, tokenizer.encode(text))
    raise ValueError("a prompt must be a non-empty string, a non-empty list of token ids, a chat "
                     "conversation (a list of {'role', 'content'} messages) or {'prompt_embeds': "
                     "float32 [n, hidden]}; got "
                     f"{type(p).__name__}")


def normalize_prompts(prompts, tokenizer) -> list:
    """One PromptInput per prompt. A single string, token-id list, conversation or
    {"prompt_embeds": array} is one prompt; a list of those is many."""
    if isinstance(prompts, str) or _is_token_ids(prompts) or _is_conversation(prompts) or _is_embeds(prompts):
        return [_one(prompts, tokenizer)]
    if isinstance(prompts, (list, tuple)) and len(prompts) > 0:
        return [_one(p, tokenizer) for p in prompts]
    raise ValueError("prompts must be a prompt or a non-empty list of prompts")
