"""The structured-output constraint for forced tool calls (``tool_choice`` "required" or a named
function), in Qwen2.5's tool-call format, and the checks every request's tools get.

Strictness follows OpenAI: a function is strict only with ``"strict": true``. A strict
function's parameters must meet OpenAI's strict rules (every object ``additionalProperties:
false``, every property required; ``strict_schema.check_strict_schema``), checked whether or
not the call is forced, and a keyword the grammar compiler does not implement is refused. A
function without ``strict`` (or ``false``) is lenient: such keywords (``uniqueItems``...) are
ignored when its calls are forced.
"""

from __future__ import annotations

import json
from typing import Optional

from .strict_schema import check_strict_schema
from .structured import _bound_integers, _check_numbers, grammar_of
from .structured_spec import DATA_KEYWORDS, JSON_OPTIONS, NAME_MAPS, StructuredOutputError, StructuredSpec

# Qwen2.5's markers around each call: its special tokens <tool_call> and </tool_call> (by
# name, as the model emits them), each followed / preceded by a newline
CALL_RULE = 'call: <tool_call> "\\n" body "\\n" </tool_call>'
# Most calls one reply may hold (forced: the grammar's repetition bound; "auto": the parser
# ends the list there). Small models given parallel calls repeat or invent calls until
# max_tokens; 8 is more than any request here needs at once.
MAX_TOOL_CALLS = 8
ARGUMENTS_BASE = "#/properties/arguments"  # where a function's parameters sit in its call's schema


def check_strict_tool(params: dict, index: int) -> None:
    """OpenAI's strict rules on the parameters of tools[index] (``"strict": true``);
    StructuredOutputError whose param is "tools" and whose message names the JSON path of the
    first breach (``tools[0].function.parameters.properties.x: ...``)."""
    try:
        check_strict_schema(params, f"tools[{index}].function.parameters")
    except StructuredOutputError as e:
        raise StructuredOutputError("tools", str(e)) from None


def _functions(tools) -> dict:
    """name -> (parameters schema, strict) of OpenAI `tools`; StructuredOutputError naming
    "tools" for a malformed list or a strict function whose parameters break the strict rules."""
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
        strict = fn.get("strict") is True  # OpenAI's default: absent = not strict
        if params is None:
            params = {"type": "object", "properties": {}, "additionalProperties": False}
        if not isinstance(params, dict):
            raise StructuredOutputError("tools", f"tools[{i}].function.parameters must be a JSON schema object")
        if strict:
            check_strict_tool(params, i)
        out[name] = (params, strict)
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


def rebase_refs(schema, base: str):
    """A copy of `schema` whose local references ("$ref": "#" or "#/...") still resolve once
    the schema sits at JSON pointer `base` of an enclosing schema ("#/$defs/A" becomes
    base + "/$defs/A"): pydantic's `$defs` and recursive "#" references. Data ("enum",
    "const", "default", "examples") is not touched, nor is `schema` itself. Iterative: the
    depth is the request's."""
    holder = [schema]
    stack = [(holder, 0, False)]  # (container, key, whether the node is a name -> schema map)
    while stack:
        parent, key, name_map = stack.pop()
        node = parent[key]
        if isinstance(node, list):
            node = parent[key] = list(node)
            stack.extend((node, i, False) for i in range(len(node)))
        elif isinstance(node, dict):
            node = parent[key] = dict(node)
            for k, v in node.items():
                if name_map:  # every value is a schema, whatever its name
                    stack.append((node, k, False))
                elif k == "$ref" and isinstance(v, str) and (v == "#" or v.startswith("#/")):
                    node[k] = base + v[1:]
                elif k not in DATA_KEYWORDS and isinstance(v, (dict, list)):
                    stack.append((node, k, k in NAME_MAPS))
    return holder[0]


def _call_schema(name: str, params: dict, strict: bool) -> dict:
    """The JSON of one call: {"name": <name>, "arguments": <params>}, in that order, compact;
    the parameters' local references rebased to where they now sit, their open integers bounded
    to JSON's safe range (as response_format's: unbounded, a small model writes digits until
    max_tokens) and bounds the grammar cannot honour refused, naming "tools"."""
    arguments = _bound_integers(rebase_refs(params, ARGUMENTS_BASE))  # a copy: the request's schema stays
    _check_numbers(arguments, "tools")
    return {"type": "object", "properties": {"name": {"const": name}, "arguments": arguments},
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
      parallel: ``parallel_tool_calls``: True allows one to MAX_TOOL_CALLS calls, False
        exactly one. A named function always gets exactly one call.

    Returns a ``StructuredSpec`` (kind "lark") for ``SamplingParams(structured=...)`` whose
    output is exactly, with nothing before or after it::

        <tool_call>\\n{"name": "<function>", "arguments": {...}}\\n</tool_call>

    where <tool_call> and </tool_call> are the tokenizer's added tokens of that text (as
    Qwen2.5 emits them, and as its decode shows them; a tokenizer without them cannot build
    the matcher: ``LLMEngine.check_request`` refuses the request), repeated with "\\n"
    between calls when ``parallel`` (at most MAX_TOOL_CALLS calls), after which the model
    can only end (eos; the engine stops the sequence as soon as the grammar is complete).
    Small models given ``parallel`` may repeat a call: the server's parser ends the list at
    the first repeat (server/openai/tool_parser.py). The JSON is compact (", " and ": "
    separators), "name" comes first and is one of the allowed functions, and "arguments"
    always parses (``json.loads``) and matches that function's ``parameters`` schema
    (local ``$ref``s such as pydantic's ``#/$defs/...`` included); a strict function
    (``"strict": true``) refuses schema keywords llguidance does not implement, others
    ignore them. Parse the text between the markers with ``json.loads``.

    Raises ``StructuredOutputError`` (a ValueError) whose ``param`` is "tools" for a
    malformed tool list, a strict function breaking OpenAI's strict rules or a parameters
    schema llguidance rejects, and "tool_choice" for an unknown name or a malformed choice."""
    names = _functions(tools)
    chosen = _chosen(tool_choice, names)
    if chosen is None:
        return None
    alts = " | ".join(f"fn_{i}" for i in range(len(chosen)))
    many = parallel and tool_choice == "required"
    rules = [f"start: call (\"\\n\" call){{0,{MAX_TOOL_CALLS - 1}}}" if many else "start: call",
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
