"""Real chat templates: every model template llama.cpp keeps for its own chat tests
(models/templates/*.jinja: Qwen2.5, Qwen3, QwQ, DeepSeek-R1, Llama 3.x, Mistral, Phi-3.5, Hermes,
Gemma, Granite and ~60 more), rendered by our sandboxed ChatTemplate and by transformers'
render_jinja_template on the same conversations: a plain turn, a system prompt with turns, and a
tool call with its result, with and without the generation prompt. Where transformers renders,
ours must give the same text; where the template itself refuses (raise_exception: a system
role it does not take, Mistral's 9-character call ids), ours must refuse too. Where transformers
fails for its own reasons (its tojson on a generator), nothing is compared.
The files come from the llama-cpp-python sdist that tools/benchkit/peer.py pins
(test/llama_cpp_files.py)."""

import copy

import jinja2
import pytest
from llama_cpp_files import models_dir

from llaisys.models.chat_template import ChatTemplate, ChatTemplateError

pytestmark = pytest.mark.slow

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "The weather of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
CONVERSATIONS = {
    "plain": ([{"role": "user", "content": "Hello!"}], None),
    "system and turns": ([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
                          {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "Again?"}], None),
    "tool call": ([{"role": "user", "content": "Weather in Paris?"},
                   {"role": "assistant", "content": "", "tool_calls": [{
                       "id": "a1b2c3d4e", "type": "function",  # Mistral's templates want 9 alphanumerics
                       "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
                   {"role": "tool", "tool_call_id": "a1b2c3d4e", "name": "get_weather", "content": "{\"temp\": 21}"}],
                  TOOLS),
}


@pytest.fixture(scope="module")
def templates():
    return sorted((models_dir(["templates/"]) / "templates").glob("*.jinja"))


def compare(source: str, ours: ChatTemplate, messages, tools, gen: bool):
    """None where the two agree (the same text, or both refuse) or transformers fails for its own
    reasons (a TypeError or ValueError of its tojson on a generator), else what differs; and
    whether a text was compared."""
    from transformers.utils.chat_template_utils import render_jinja_template

    kw = dict(bos_token="<s>", eos_token="</s>", add_generation_prompt=gen)
    try:
        want = render_jinja_template(conversations=[copy.deepcopy(messages)], tools=copy.deepcopy(tools),
                                     chat_template=source, **kw)[0][0]
    except jinja2.TemplateError:  # the template refused the conversation
        want = ChatTemplateError
    except (TypeError, ValueError):
        return None, False
    try:
        got = ours.render(messages=copy.deepcopy(messages), tools=copy.deepcopy(tools), documents=None, **kw)
    except ChatTemplateError as e:
        return (None if want is ChatTemplateError else f"ours refused ({str(e)[:200]})"), False
    if want is ChatTemplateError:
        return "transformers refused, ours rendered", False
    return (None if got == want else "the texts differ"), True


def test_every_template_renders_as_transformers(templates):
    names = {p.name for p in templates}
    assert len(names) > 50 and {"Qwen-Qwen2.5-7B-Instruct.jinja", "meta-llama-Llama-3.1-8B-Instruct.jinja",
                                "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja",
                                "mistralai-Mistral-Nemo-Instruct-2407.jinja"} <= names
    wrong, compared = [], 0
    for path in templates:
        source = path.read_text(encoding="utf-8")
        ours = ChatTemplate(source, path.name)
        for case, (messages, tools) in CONVERSATIONS.items():
            for gen in (True, False):
                problem, was_compared = compare(source, ours, messages, tools, gen)
                compared += was_compared
                if problem:
                    wrong.append(f"{path.name}, {case}, add_generation_prompt={gen}: {problem}")
    assert not wrong, f"{len(wrong)} renders differ: {wrong[:5]}"
    assert compared > 300, compared
