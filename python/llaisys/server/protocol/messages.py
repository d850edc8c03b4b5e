"""Which fields of a chat message the server keeps: only what a chat template renders.

Unknown keys on a message, on a tool call or on a text content part are dropped, not
refused, as unknown top-level body fields are: clients append the assistant message they got
back (with ``refusal``, ``annotations``, ``audio``, ...) to their next request, and OpenAI
accepts those. Dropped at parse time, such a field is neither rendered nor stored in a
session, so it cannot grow the server's memory. Content parts of another type than text
(images, audio) are refused by the schema instead: dropping one would change what the model
is asked. /v1/responses input items follow the same rule (``responses/routes.input_messages``
reads only the fields it renders).
"""

from __future__ import annotations

# the message fields chat templates read (reasoning_content: Qwen3's template renders it on
# assistant turns after the last user message)
RENDERED_FIELDS = ("role", "content", "name", "tool_calls", "tool_call_id", "reasoning_content")
TOOL_CALL_FIELDS = ("id", "type", "function")  # an OpenAI tool call
FUNCTION_FIELDS = ("name", "arguments")  # its function


def rendered_message(m: dict) -> dict:
    """A copy of message `m` with only RENDERED_FIELDS (tool calls likewise trimmed); values
    are not checked here (the schema and template_messages do that)."""
    out = {k: m[k] for k in RENDERED_FIELDS if k in m}
    calls = out.get("tool_calls")
    if isinstance(calls, list):
        out["tool_calls"] = [_tool_call(c) for c in calls]
    return out


def _tool_call(c):
    if not isinstance(c, dict):
        return c  # left for the validation to refuse
    out = {k: c[k] for k in TOOL_CALL_FIELDS if k in c}
    fn = out.get("function")
    if isinstance(fn, dict):
        out["function"] = {k: fn[k] for k in FUNCTION_FIELDS if k in fn}
    return out
