"""POST /completion: llama-server's native completion, for the scripts and clients written
against it. The prompt is the text as it is (no chat template; the model's BOS added if its
tokenizer adds one, special tokens in the text read as such, as llama-server tokenizes) or its
token ids; every other field, and the answer (one JSON result, or server-sent events of pieces
and a final ``stop: true`` event), are /infill's (routes.py, run.py).
"""

from __future__ import annotations

from flask import current_app

from ...models.fim import FimPrompt
from ..protocol.errors import bad_request
from ..protocol.schema import validate
from .routes import parse_llama_body, run_llama
from .schema import completion_request_schema


def completion():
    """POST /completion (openai/routes.py registers it beside /infill)."""
    st = current_app.extensions["llaisys"]
    body = st.read_json()
    validate(completion_request_schema(st.request_limits), body)
    req = parse_llama_body(body)
    served = st.registry.get(req.model)
    raw = body["prompt"]
    text = raw if isinstance(raw, str) else None

    def make_prompt():
        ids = served.engine.tokenizer.encode(raw, add_special_tokens=True) if text is not None else list(raw)
        if len(ids) >= served.max_model_len:
            raise bad_request(f"the prompt is {len(ids)} tokens; the context is {served.max_model_len}, and the "
                              "answer needs one more", param="prompt", code="context_length_exceeded")
        return FimPrompt.whole(ids), text, []

    return run_llama(st, served, req, "cmpl", make_prompt)
