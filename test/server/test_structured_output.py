"""response_format against a real server on the real 0.5B model with the official `openai`
client: `chat.completions.parse(response_format=<pydantic model>)` gives a valid parsed object
for 10 schemas (nested objects, arrays, enums, optional fields), json_object output always
parses, the regex / grammar extension on /v1/completions, and bad formats are a 400 naming
response_format before anything reaches the engine."""

import enum
import json
import re
from concurrent.futures import ThreadPoolExecutor
from typing import List, Literal, Optional

import openai
import pytest
import requests
from pydantic import BaseModel, Field

from server_helpers import MODEL_NAME

pytestmark = pytest.mark.slow


class Color(str, enum.Enum):
    red = "red"
    green = "green"
    blue = "blue"


class Point(BaseModel):
    x: int
    y: int


class Address(BaseModel):
    city: str = Field(max_length=24)
    country: str = Field(max_length=24)


class Person(BaseModel):
    name: str = Field(max_length=24)
    age: int
    address: Address


class Recipe(BaseModel):
    title: str = Field(max_length=30)
    ingredients: List[str] = Field(max_length=4)
    minutes: int


class Shape(BaseModel):
    kind: Literal["circle", "square", "triangle"]
    color: Color
    center: Point


class Book(BaseModel):
    title: str = Field(max_length=30)
    author: str = Field(max_length=24)
    year: Optional[int]
    subtitle: Optional[str] = Field(max_length=20)


class Team(BaseModel):
    name: str = Field(max_length=20)
    members: List[Person] = Field(max_length=2)


class Flags(BaseModel):
    enabled: bool
    level: Literal["low", "medium", "high"]
    note: Optional[str] = Field(max_length=20)


class Polygon(BaseModel):
    name: str = Field(max_length=16)
    points: List[Point] = Field(max_length=4)


class Weather(BaseModel):
    city: str = Field(max_length=20)
    temperature_c: float
    conditions: List[Literal["sunny", "cloudy", "rain", "snow", "wind"]] = Field(max_length=3)


class Answer(BaseModel):
    answer: Literal["yes", "no"]
    confidence: float
    reasons: List[str] = Field(max_length=2)


CASES = [  # (pydantic model, what to ask)
    (Person, "Invent a person with an address."),
    (Recipe, "Give me a short pancake recipe."),
    (Shape, "Describe a blue circle at (3, 4)."),
    (Book, "Name a famous novel."),
    (Team, "Invent a team of two people."),
    (Flags, "Turn the feature on with a high level."),
    (Polygon, "Describe a triangle."),
    (Weather, "What's the weather like in Oslo in winter?"),
    (Answer, "Is Python a programming language?"),
    (Point, "Give a point on the line y = 2x."),
]


@pytest.fixture(scope="module")
def server(start_server):
    # --batch-invariant: the seeded rows' output not moved by what shares their step
    return start_server("--max-num-seqs", "16", "--max-model-len", "1024", "--batch-invariant")


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=600)


def _parse(client, model, question, **kw):
    return client.chat.completions.parse(model=MODEL_NAME, messages=[{"role": "user", "content": question}],
                                         response_format=model, max_tokens=200, **kw)


def test_parse_gives_valid_objects_for_ten_schemas(client):
    """Each schema greedy and sampled, all at once (they batch in the engine)."""
    jobs = [(m, q, dict(temperature=0.0)) for m, q in CASES] + \
           [(m, q, dict(temperature=1.0, seed=i)) for i, (m, q) in enumerate(CASES)]
    with ThreadPoolExecutor(len(jobs)) as pool:
        results = list(pool.map(lambda j: _parse(client, j[0], j[1], **j[2]), jobs))
    for (model, _, _), r in zip(jobs, results):
        msg = r.choices[0].message
        assert r.choices[0].finish_reason == "stop", msg.content
        assert isinstance(msg.parsed, model), msg.content
        assert model.model_validate_json(msg.content) == msg.parsed


def test_json_object_always_parses(client):
    questions = ["List three fruits as JSON.", "Give me a JSON config for a web server.", "Say hello in JSON.",
                 "Describe a cat."]
    with ThreadPoolExecutor(len(questions)) as pool:
        results = list(pool.map(lambda q: client.chat.completions.create(
            model=MODEL_NAME, messages=[{"role": "user", "content": q}], max_tokens=120,
            response_format={"type": "json_object"}, temperature=0.7, seed=1), questions))
    for r in results:
        text = r.choices[0].message.content
        if r.choices[0].finish_reason == "stop":
            assert isinstance(json.loads(text), dict), text
        else:  # cut by max_tokens: still a prefix of an object
            assert r.choices[0].finish_reason == "length" and text.startswith("{")


def test_streamed_json_schema_reassembles(client):
    schema = Shape.model_json_schema()
    kw = dict(model=MODEL_NAME, messages=[{"role": "user", "content": "Describe a red square."}], max_tokens=120,
              temperature=0.0,
              response_format={"type": "json_schema", "json_schema": {"name": "shape", "schema": schema}})
    whole = client.chat.completions.create(**kw).choices[0].message.content
    parts = [c.choices[0].delta.content or "" for c in client.chat.completions.create(stream=True, **kw) if c.choices]
    assert "".join(parts) == whole
    Shape.model_validate_json(whole)


def test_completions_regex_and_grammar(server):
    url = server.url + "/v1/completions"
    r = requests.post(url, json={"model": MODEL_NAME, "prompt": "The date today is ", "max_tokens": 20,
                                 "response_format": {"type": "regex", "regex": r"20[0-9]{2}-[01][0-9]-[0-3][0-9]"}},
                      timeout=600).json()
    assert re.fullmatch(r"20[0-9]{2}-[01][0-9]-[0-3][0-9]", r["choices"][0]["text"]), r
    g = 'root ::= "The answer is " ("yes" | "no") "."'
    r = requests.post(url, json={"model": MODEL_NAME, "prompt": "Is the sky blue?", "max_tokens": 20,
                                 "response_format": {"type": "grammar", "grammar": g, "syntax": "gbnf"}},
                      timeout=600).json()
    assert r["choices"][0]["text"] in ("The answer is yes.", "The answer is no."), r


def prompt_tokens_admitted(server) -> float:
    text = requests.get(server.url + "/metrics", timeout=30).text
    return sum(float(v) for v in re.findall(r"^llaisys:prompt_tokens_total\{[^}]*\} (\S+)$", text, re.M))


@pytest.mark.parametrize("rf", [
    {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "strin"}}},
    {"type": "json_schema", "json_schema": {"name": "x", "strict": True,
                                            "schema": {"type": "string", "format": "no-such-format"}}},
    {"type": "json_schema"},
    {"type": "regex", "regex": "(?<=a)b"},
    {"type": "grammar", "grammar": "start: undefined_rule"},
    {"type": "yaml"},
])
def test_bad_response_format_is_a_400_before_the_engine(server, rf):
    ok = requests.post(server.url + "/v1/completions", json={"model": MODEL_NAME, "prompt": "hi", "max_tokens": 1},
                       timeout=120)
    assert ok.status_code == 200
    before = prompt_tokens_admitted(server)
    assert before > 0  # the counter is read (a request was admitted)
    for route, body in (("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}),
                        ("/v1/completions", {"prompt": "hi"})):
        r = requests.post(server.url + route, json=dict(body, model=MODEL_NAME, max_tokens=5, response_format=rf),
                          timeout=60)
        assert r.status_code == 400, r.text
        assert r.json()["error"]["param"].startswith("response_format"), r.text
    assert prompt_tokens_admitted(server) == before  # nothing was admitted


def _ref_chain(n):
    defs = {f"d{i}": {"type": "object", "properties": {"a": {"$ref": f"#/$defs/d{i + 1}"}}} for i in range(n)}
    defs[f"d{n}"] = {"type": "string"}
    return {"$ref": "#/$defs/d0", "$defs": defs}


def test_grammar_bombs_are_400s_while_greedy_streams_go_on_unchanged(server):
    """Issue #39's acceptance: a 1,000-deep $ref chain and 5,000-rule Lark / GBNF chains (each
    segfaulted the process) answer 400 while 4 greedy streams run; their text is the same as
    when they run alone."""
    from server_helpers import sse_events

    bombs = [{"type": "json_schema", "json_schema": {"name": "x", "schema": _ref_chain(1000)}},
             {"type": "grammar", "grammar": "start: r0\n" + "".join(f'r{i}: "x" r{i + 1}\n' for i in range(5000))
              + 'r5000: "y"\n'},
             {"type": "grammar", "syntax": "gbnf", "grammar": "root ::= r0\n" + "".join(
                 f'r{i} ::= "x" r{i + 1}\n' for i in range(5000)) + 'r5000 ::= "y"\n'}]
    url = server.url + "/v1/chat/completions"
    prompts = [f"Count from {i} to {i + 9} in words." for i in range(4)]

    def stream(p):
        body = {"model": MODEL_NAME, "messages": [{"role": "user", "content": p}], "max_tokens": 24,
                "temperature": 0, "stream": True}
        with requests.post(url, json=body, stream=True, timeout=600) as r:
            assert r.status_code == 200, r.text
            return "".join(e["choices"][0]["delta"].get("content") or "" for _, e in sse_events(r)
                           if e != "[DONE]" and e.get("choices"))

    def bomb(rf):
        return requests.post(url, json={"model": MODEL_NAME, "messages": [{"role": "user", "content": "hi"}],
                                        "max_tokens": 4, "response_format": rf}, timeout=120)

    alone = [stream(p) for p in prompts]
    with ThreadPoolExecutor(8) as pool:
        streams = [pool.submit(stream, p) for p in prompts]
        answers = [pool.submit(bomb, rf) for rf in bombs * 2]
        together = [f.result() for f in streams]
        for f in answers:
            r = f.result()
            assert r.status_code == 400 and r.json()["error"]["param"] == "response_format", r.text
            assert "exceeds the limit" in r.json()["error"]["message"]
    assert together == alone
    assert server.proc.poll() is None
