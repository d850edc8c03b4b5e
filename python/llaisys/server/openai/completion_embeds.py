"""``prompt_embeds`` on POST /v1/completions: prompts given as input embeddings (vLLM's field).

Each item is base64 of a little-endian float32 array [n, hidden_size], row after row (raw bytes:
vLLM sends a ``torch.save`` file instead, which is a pickle and is not read here). One string is
one prompt, an array of strings one prompt each; ``prompt`` and ``prompt_embeds`` do not mix in
one request. Bounded by ``--max-body-bytes`` (the whole body) and the model's context (n rows
count as n prompt tokens). Every fault is a 400 naming ``prompt_embeds``. The rows then go to the
engine as {"prompt_embeds": rows} (engine/prompt_embeds.py); echo and suffix need text.
"""

from __future__ import annotations

import base64
import binascii

import numpy as np

from ...engine.prompt_embeds import check_prompt_embeds
from ..protocol.errors import bad_request


def embeds_prompts(raw, hidden_size, max_model_len) -> list:
    """([{"prompt_embeds": rows}, None) per prompt (the route's (prompt, text) pairs), or a 400."""
    items = [raw] if isinstance(raw, str) else list(raw)
    out = []
    for i, item in enumerate(items):
        where = "prompt_embeds" if isinstance(raw, str) else f"prompt_embeds[{i}]"
        try:
            data = base64.b64decode(item, validate=True)
        except (binascii.Error, ValueError) as e:
            raise bad_request(f"{where} is not valid base64: {e}", param="prompt_embeds") from None
        if hidden_size is None:
            raise bad_request("this model takes no prompt_embeds", param="prompt_embeds")
        row = 4 * hidden_size
        if not data or len(data) % row:
            raise bad_request(f"{where} holds {len(data)} bytes, not a whole number of float32 rows of the model's "
                              f"hidden_size {hidden_size} ({row} bytes each)", param="prompt_embeds")
        try:
            rows = check_prompt_embeds(np.frombuffer(data, "<f4").reshape(-1, hidden_size), hidden_size, max_model_len)
        except ValueError as e:
            raise bad_request(f"{where}: {e}", param="prompt_embeds") from None
        out.append(({"prompt_embeds": rows}, None))
    return out


def prompt_len(prompt) -> int:
    """Prompt tokens of a route's prompt: ids, or {"prompt_embeds": rows} (one token a row)."""
    return int(prompt["prompt_embeds"].shape[0]) if isinstance(prompt, dict) else len(prompt)
