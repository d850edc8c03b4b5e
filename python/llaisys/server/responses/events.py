"""The Responses API's bodies: the response object and the streamed events, in OpenAI's
shapes (``openai.types.responses``).

Output items come in the order the model writes them: a ``reasoning`` item, a ``message``
(one ``output_text`` part), ``function_call`` items. A stream opens an item when its first
text arrives (``response.output_item.added``, then for text items
``response.content_part.added``), sends its deltas (``response.reasoning_text.delta``,
``response.output_text.delta``, ``response.function_call_arguments.delta``) and closes it
(``….done`` events) when the next item starts or the answer ends.
"""

from __future__ import annotations

import json
import uuid
from typing import Optional


def _id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def _item_id(ids: dict, key, prefix: str) -> str:
    if key not in ids:
        ids[key] = _id(prefix)
    return ids[key]


def reasoning_item(item_id: str, text: Optional[str], status: str) -> dict:
    content = [] if text is None else [{"type": "reasoning_text", "text": text}]
    return {"type": "reasoning", "id": item_id, "summary": [], "content": content, "status": status}


def message_item(item_id: str, text: Optional[str], status: str) -> dict:
    content = [] if text is None else [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]
    return {"type": "message", "id": item_id, "status": status, "role": "assistant", "content": content}


def call_item(item_id: str, call, arguments: str, status: str) -> dict:
    return {"type": "function_call", "id": item_id, "call_id": call.id, "name": call.name, "arguments": arguments,
            "status": status}


def output_items(co, ids: dict, status: str) -> list:
    """The output items of a finished choice (ChoiceOutput), ids from `ids` (kept across calls)."""
    if co is None:
        return []
    items = []
    if co.reasoning:
        items.append(reasoning_item(_item_id(ids, "reasoning", "rs"), co.reasoning, "completed"))
    if co.content or not (co.calls or co.reasoning):
        items.append(message_item(_item_id(ids, "message", "msg"), co.content, status))
    for c in co.calls:
        items.append(call_item(_item_id(ids, ("call", c.index), "fc"), c, c.arguments, "completed"))
    return items


def response_object(rid: str, created: int, model: str, body: dict, status: str, co, usage: Optional[dict],
                    ids: dict) -> dict:
    """The response object (`status` in_progress / completed / incomplete)."""
    tools = body.get("tools") or []
    return {
        "id": rid, "object": "response", "created_at": created, "status": status, "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
        "instructions": body.get("instructions"), "max_output_tokens": body.get("max_output_tokens"),
        "model": model, "output": [] if status == "in_progress" else output_items(co, ids, status),
        "parallel_tool_calls": body.get("parallel_tool_calls") is not False,
        "previous_response_id": body.get("previous_response_id"),
        "temperature": body.get("temperature", 1.0) if body.get("temperature") is not None else 1.0,
        "top_p": body.get("top_p") if body.get("top_p") is not None else 1.0,
        "tool_choice": body.get("tool_choice") or "auto", "tools": tools,
        "text": {"format": {"type": "text"}}, "truncation": "disabled", "store": body.get("store") is not False,
        "metadata": body.get("metadata") or {}, "user": body.get("user"), "usage": usage,
    }


class EventWriter:
    """Turns ChoiceDeltas into Responses stream events (see the module doc)."""

    def __init__(self, ids: dict):
        self.ids = ids  # output item ids shared with the final response object
        self.seq = 0  # sequence_number of the next event
        self.index = -1  # output_index of the open item
        self.open = None  # "reasoning" | "message" | ("call", index) | None
        self.text = ""  # the open item's text (or arguments) so far
        self.call = None  # the open function call (tool_calls.Call)

    def event(self, kind: str, **fields) -> bytes:
        data = {"type": kind, "sequence_number": self.seq, **fields}
        self.seq += 1
        return (f"event: {kind}\n".encode() + b"data: " + json.dumps(data, ensure_ascii=False).encode("utf-8")
                + b"\n\n")

    def _item_id(self) -> str:
        key = self.open
        prefix = {"reasoning": "rs", "message": "msg"}.get(key if isinstance(key, str) else "", "fc")
        return _item_id(self.ids, key, prefix)

    def _begin(self, key, call=None):
        yield from self.close_item(None)
        self.open, self.text, self.call = key, "", call
        self.index += 1
        iid = self._item_id()
        if key == "reasoning":
            item, part = reasoning_item(iid, None, "in_progress"), {"type": "reasoning_text", "text": ""}
        elif key == "message":
            item, part = message_item(iid, None, "in_progress"), {"type": "output_text", "text": "",
                                                                   "annotations": [], "logprobs": []}
        else:
            item, part = call_item(iid, call, "", "in_progress"), None
        yield self.event("response.output_item.added", output_index=self.index, item=item)
        if part is not None:
            yield self.event("response.content_part.added", item_id=iid, output_index=self.index, content_index=0,
                             part=part)

    def close_item(self, co):
        """Close the open item (`co`, the choice, is unused: the writer keeps its own text)."""
        if self.open is None:
            return
        iid, idx, text = self._item_id(), self.index, self.text
        if self.open == "reasoning":
            yield self.event("response.reasoning_text.done", item_id=iid, output_index=idx, content_index=0, text=text)
            yield self.event("response.content_part.done", item_id=iid, output_index=idx, content_index=0,
                             part={"type": "reasoning_text", "text": text})
            item = reasoning_item(iid, text, "completed")
        elif self.open == "message":
            yield self.event("response.output_text.done", item_id=iid, output_index=idx, content_index=0, text=text,
                             logprobs=[])
            part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
            yield self.event("response.content_part.done", item_id=iid, output_index=idx, content_index=0, part=part)
            item = message_item(iid, text, "completed")
        else:
            yield self.event("response.function_call_arguments.done", item_id=iid, output_index=idx, arguments=text,
                             name=self.call.name)
            item = call_item(iid, self.call, text, "completed")
        yield self.event("response.output_item.done", output_index=idx, item=item)
        self.open = None

    def delta(self, d):
        """Events for one ChoiceDelta."""
        if d.reasoning:
            if self.open != "reasoning":
                yield from self._begin("reasoning")
            self.text += d.reasoning
            yield self.event("response.reasoning_text.delta", item_id=self._item_id(), output_index=self.index,
                             content_index=0, delta=d.reasoning)
        if d.content:
            if self.open != "message":
                yield from self._begin("message")
            self.text += d.content
            yield self.event("response.output_text.delta", item_id=self._item_id(), output_index=self.index,
                             content_index=0, delta=d.content, logprobs=[])
        started = {c.index: c for c in d.started}
        order = [(c.index, 0, k, None) for k, c in enumerate(d.started)]
        order += [(index, 1, k, piece) for k, (index, piece) in enumerate(d.arguments)]
        for index, is_piece, _, piece in sorted(order, key=lambda e: e[:3]):  # a call's start, then its pieces
            if not is_piece:
                yield from self._begin(("call", index), started[index])
                continue
            if self.open != ("call", index):  # pieces of a call come after its start, in order
                continue
            self.text += piece
            yield self.event("response.function_call_arguments.delta", item_id=self._item_id(),
                             output_index=self.index, delta=piece)
