"""Tool calling: the request's `tools` / `tool_choice` checked, conversation messages made
ready for the model's own chat template, and the model's `<tool_call>{json}</tool_call>`
blocks (Qwen2.5's format, also Hermes' and Qwen3's) parsed into OpenAI `tool_calls`.

The parser reads text as it streams and emits each call once it is complete: its id and
function name, then its arguments text (a stream sends the head chunk and the arguments chunk
together). The arguments string is exactly the JSON text the model wrote between
`"arguments": ` and the closing `}`, so the streamed value is the non-streamed one. A call
cut by max_tokens or a stop string is dropped: no half-written call is returned, and its
markup never reaches the content. A call repeating an earlier one of the reply (same name,
same arguments JSON) ends the list and is dropped, as does the MAX_TOOL_CALLS-th call (8;
1 with parallel_tool_calls false); the route then stops the generation.
Text before the first call is the message's content; a closed block that does not hold a
call (`{"name": <a request function>, "arguments": <a JSON object>}`) is left in the content
as written. An answer that opens with such an object without the tags (Qwen2.5-Coder 0.5B
answers so) is read as a call too, when the name is one of the request's functions; it ends
where the object closes.

Strictness is OpenAI's: a function is strict only with `"strict": true`, and its parameters
must then follow OpenAI's strict rules (checked here for every request, 400 naming `tools`).
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass
from typing import Optional

from ..protocol.errors import bad_request
from .tool_parser import ToolCallParser  # noqa: F401  (the parser; re-exported for chat_output)

NAME_RE = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")  # OpenAI's rule for function names


@dataclass
class ToolConfig:
    """A chat request's tool settings, checked."""

    tools: list  # [{"type": "function", "function": {...}}] as given (rendered into the prompt)
    choice: object = "auto"  # "auto" | "none" | "required" | the named function's name (str in `named`)
    named: Optional[str] = None  # tool_choice {"type": "function", "function": {"name": ...}}
    parallel: bool = True  # parallel_tool_calls

    @property
    def parse(self) -> bool:
        """Whether the output is parsed for calls (tools given, tool_choice not "none")."""
        return bool(self.tools) and self.choice != "none"

    @property
    def names(self) -> list:
        return [t["function"]["name"] for t in self.tools]


def check_tools(tools, tool_choice, parallel) -> Optional[ToolConfig]:
    """ToolConfig from a body's (schema-checked) fields, None without tools; 400 naming
    `tools` or `tool_choice` for what the schema cannot see."""
    tools = tools or []
    names = set()
    for i, t in enumerate(tools):
        name = t["function"]["name"]
        if not NAME_RE.match(name):
            raise bad_request(f"tools[{i}].function.name must be 1 to 64 letters, digits, '_' or '-', got {name!r}",
                              param="tools")
        if name in names:
            raise bad_request(f"tools[{i}].function.name {name!r} is given twice", param="tools")
        names.add(name)
        params = t["function"].get("parameters")
        if params is not None and params.get("type", "object") != "object":
            raise bad_request(f"tools[{i}].function.parameters must be a JSON Schema of type 'object'",
                              param="tools")
        if t["function"].get("strict") is True and params is not None:  # whatever tool_choice is, as OpenAI
            _check_strict(params, i)
    named = None
    if isinstance(tool_choice, dict):
        named = tool_choice["function"]["name"]
        if named not in names:
            raise bad_request(f"tool_choice names function {named!r}, which is not among the tools", param="tool_choice")
    elif tool_choice == "required" and not tools:
        raise bad_request("tool_choice 'required' needs tools", param="tool_choice")
    if not tools:
        return None
    choice = "named" if named is not None else (tool_choice or "auto")
    return ToolConfig(tools=tools, choice=choice, named=named, parallel=True if parallel is None else parallel)


def _check_strict(params: dict, index: int) -> None:
    """OpenAI's strict rules on a `"strict": true` function's parameters; 400 naming `tools`
    whose message gives the JSON path of the breach."""
    from ...engine.structured_spec import StructuredOutputError
    from ...engine.structured_tools import check_strict_tool

    try:
        check_strict_tool(params, index)
    except StructuredOutputError as e:
        raise bad_request(str(e), param="tools") from None


def template_messages(messages: list) -> list:
    """Messages as chat templates expect them: an assistant turn's tool call arguments (a JSON
    string in OpenAI's API) as the object they encode (Qwen2.5's template writes them with
    `tojson`). 400 naming `messages` for arguments that are not a JSON object."""
    out = []
    for i, m in enumerate(messages):
        calls = m.get("tool_calls")
        if not calls:
            out.append(m)
            continue
        fixed = []
        for j, c in enumerate(calls):
            if not isinstance(c, dict) or not isinstance(c.get("function"), dict) \
                    or not isinstance(c["function"].get("name"), str):
                raise bad_request(f"messages[{i}].tool_calls[{j}] must be {{'id', 'type': 'function', 'function': "
                                  "{'name', 'arguments'}}", param="messages")
            args = c["function"].get("arguments", "{}")
            if isinstance(args, str):
                try:
                    args = json.loads(args) if args.strip() else {}
                except ValueError:
                    raise bad_request(f"messages[{i}].tool_calls[{j}].function.arguments is not valid JSON",
                                      param="messages") from None
            if not isinstance(args, dict):
                raise bad_request(f"messages[{i}].tool_calls[{j}].function.arguments must encode a JSON object",
                                  param="messages")
            fixed.append(dict(c, function=dict(c["function"], arguments=args)))
        out.append(dict(m, tool_calls=fixed))
    return out


def with_tool_constraint(sp, tools: Optional[ToolConfig]):
    """SamplingParams `sp`, constrained for tool_choice "required" / a named function so that
    the output is `<tool_call>` blocks whose arguments parse against the function's
    parameters schema (engine/structured_tools.py's tool_call_spec, a grammar the sampler
    applies as a per-row token mask). Other requests are returned as they are; a parameters
    schema the grammar compiler refuses is a 400 naming `tools`."""
    if tools is None or tools.choice not in ("required", "named"):
        return sp
    from ...engine.structured_spec import StructuredOutputError
    from ...engine.structured_tools import tool_call_spec

    choice = {"type": "function", "function": {"name": tools.named}} if tools.named else "required"
    try:
        spec = tool_call_spec(tools.tools, choice, tools.parallel)
    except StructuredOutputError as e:
        raise bad_request(str(e), param=e.param or "tools") from None
    return dataclasses.replace(sp, structured=spec)
