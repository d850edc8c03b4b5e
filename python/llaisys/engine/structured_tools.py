"""The structured-output constraint for forced tool calls (``tool_choice`` "required" or a named
function), in Qwen2.5's tool-call format."""

from __future__ import annotations

import json
from typing import Optional

from .structured import JSON_OPTIONS, StructuredOutputError, StructuredSpec, grammar_of

# Qwen2.5's markers around each call: its special tokens <tool_call> and </tool_call> (by
# name, as the model emits them), each followed / preceded by a newline
CALL_RULE = 'call: <tool_call> "\\n" body "\\n" </tool_call>'


def _functions(tools) -> dict:
    """name -> (parameters schema, strict) of OpenAI `tools`; StructuredOutputError naming "tools"."""
    if not isinstance(tools, list) or not tools:
        raise StructuredOutputError("tools", "tools must be a non-empty list of function tools")
    out = {}
    for i, t in enumerate(tools):
        fn = t.get("function") if isinstance(t, dict) and t.get("type", "function") == "function" else None
        name = fn.get("name") if isinstance(fn, dict) else None
        if not isinstance(name, str) or not name:
            raise StructuredOutputError("tools", f"tools[{i}] must be {{\"type\": \"function\", \"function\": "
                                                 f"{{\"name\": ..., \"parameters\": {{...}}}}}}")
        if name in out:
            raise StructuredOutputError("tools", f"tools[{i}]: function name {name!r} is given twice")
        params = fn.get("parameters")
        if params is None:
            params = {"type": "object", "properties": {}}
        if not isinstance(params, dict):
            raise StructuredOutputError("tools", f"tools[{i}].function.parameters must be a JSON schema object")
        out[name] = (params, fn.get("strict") is not False)
    return out


def _chosen(tool_choice, names) -> Optional[list]:
    """The function names the call may use: all of them for "required", one for a named
    choice, None for "auto" / "none" / None (no constraint)."""
    if tool_choice in (None, "auto", "none"):
        return None
    if tool_choice == "required":
        return list(names)
    fn = tool_choice.get("function") if isinstance(tool_choice, dict) else None
    name = fn.get("name") if isinstance(fn, dict) else None
    if not isinstance(name, str):
        raise StructuredOutputError("tool_choice", 'tool_choice must be "auto", "none", "required" or '
                                                   '{"type": "function", "function": {"name": ...}}')
    if name not in names:
        raise StructuredOutputError("tool_choice", f"tool_choice names function {name!r}, which is not in tools")
    return [name]


def _call_schema(name: str, params: dict, strict: bool) -> dict:
    """The JSON of one call: {"name": <name>, "arguments": <params>}, in that order, compact."""
    return {"type": "object", "properties": {"name": {"const": name}, "arguments": params},
            "required": ["name", "arguments"], "additionalProperties": False,
            "x-guidance": dict(JSON_OPTIONS, lenient=not strict)}


def tool_call_spec(tools, tool_choice, parallel: bool = True) -> Optional[StructuredSpec]:
    """The constraint that forces a tool call, or None when `tool_choice` forces none.

    Args:
      tools: OpenAI's ``tools`` list: ``[{"type": "function", "function": {"name": str,
        "parameters": <JSON schema object, optional: no parameters>, "strict": bool,
        optional}}]``.
      tool_choice: ``"required"`` (any of the tools), ``{"type": "function", "function":
        {"name": str}}`` (that one), or ``"auto"`` / ``"none"`` / None (returns None: the
        model is free, nothing is constrained).
      parallel: ``parallel_tool_calls``: True allows one or more calls, False exactly one. A
        named function always gets exactly one call.

    Returns a ``StructuredSpec`` (kind "lark") for ``SamplingParams(structured=...)`` whose
    output is exactly, with nothing before or after it::

        <tool_call>\\n{"name": "<function>", "arguments": {...}}\\n</tool_call>

    where <tool_call> and </tool_call> are the tokenizer's added tokens of that text (as
    Qwen2.5 emits them, and as its decode shows them; a tokenizer without them cannot build
    the matcher: ``LLMEngine.check_request`` refuses the request), repeated with "\\n"
    between calls when ``parallel``, after which the model can only end (eos; the engine
    stops the sequence as soon as the grammar is complete). Small models given ``parallel``
    may repeat calls until ``max_tokens``; ``parallel=False`` always ends after one call. The JSON is
    compact (", " and ": " separators), "name" comes first and is one of the allowed
    functions, and "arguments" always parses (``json.loads``) and matches that function's
    ``parameters`` schema; a function with ``"strict": false`` lets llguidance skip schema
    keywords it does not implement, otherwise they are an error. Parse the text between the
    markers with ``json.loads``.

    Raises ``StructuredOutputError`` (a ValueError) whose ``param`` is "tools" for a
    malformed tool list or a parameters schema llguidance rejects, and "tool_choice" for an
    unknown name or a malformed choice."""
    names = _functions(tools)
    chosen = _chosen(tool_choice, names)
    if chosen is None:
        return None
    alts = " | ".join(f"fn_{i}" for i in range(len(chosen)))
    many = parallel and tool_choice == "required"
    rules = ["start: call (\"\\n\" call)*" if many else "start: call",
             CALL_RULE, f"body: {alts}"]
    for i, name in enumerate(chosen):
        params, strict = names[name]
        rules.append(f"fn_{i}: %json {json.dumps(_call_schema(name, params, strict))}")
    spec = StructuredSpec.lark("\n".join(rules) + "\n")
    try:
        grammar_of(spec, "tools")
    except StructuredOutputError as e:
        raise StructuredOutputError("tools", f"{e}") from None
    return spec
