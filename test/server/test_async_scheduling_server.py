"""A real server with --async-scheduling (the 0.5B model on a loopback port): the official openai
client's concurrent requests of every kind get the answers the server gives them alone, and
nothing is left behind.

One wave of WAVE requests at once: greedy chats (their answer must be the one the same chat gets
alone), stop strings, streams the client closes after two chunks, n = 2 seeded with logprobs,
penalised rows and JSON-constrained rows (their masks made on the step thread). Afterwards no KV
block is held, nothing runs or waits, and the greedy answer is unchanged. The fixture stops the
server with SIGTERM.
"""

from concurrent.futures import ThreadPoolExecutor

import pytest

from server_helpers import MODEL_NAME, openai_client, wait_idle

pytestmark = pytest.mark.slow  # a real model

WAVE = 24
CHAT = [{"role": "user", "content": "Write a Python function that returns the sum of a list."}]


@pytest.fixture(scope="module")
def server(start_server):
    # --batch-invariant: the same answer alone and in the wave on every CPU kind (where a format of
    # the file has a finite crossover, a request sharing a larger step would take the float path)
    return start_server("--async-scheduling", "--max-num-seqs", "16", "--batch-invariant")


def greedy(client, messages=CHAT, max_tokens=24) -> str:
    r = client.chat.completions.create(model=MODEL_NAME, messages=messages, temperature=0, max_tokens=max_tokens)
    return r.choices[0].message.content


def one(client, i: int):
    kind = i % 6
    if kind == 0:
        return "greedy", greedy(client)
    if kind == 1:
        r = client.chat.completions.create(model=MODEL_NAME, messages=CHAT, temperature=0, max_tokens=48,
                                           stop=["sum"])
        return "stop", (r.choices[0].message.content, r.choices[0].finish_reason)
    if kind == 2:  # a stream the client leaves after two chunks
        stream = client.chat.completions.create(model=MODEL_NAME, messages=CHAT, max_tokens=200, stream=True)
        got = 0
        for _ in stream:
            got += 1
            if got == 2:
                break
        stream.close()
        return "closed", got
    if kind == 3:
        r = client.chat.completions.create(model=MODEL_NAME, messages=CHAT, n=2, temperature=0.8, seed=i,
                                           max_tokens=12, logprobs=True, top_logprobs=2)
        return "n2", [(len(c.logprobs.content), c.finish_reason) for c in r.choices]
    if kind == 4:
        r = client.chat.completions.create(model=MODEL_NAME, messages=CHAT, temperature=0, max_tokens=12,
                                           presence_penalty=0.8)
        return "penalised", r.choices[0].finish_reason
    r = client.chat.completions.create(model=MODEL_NAME, messages=[{"role": "user", "content": "A JSON object, "
                                                                     "please, with a key 'a'."}],
                                       temperature=0, max_tokens=16, response_format={"type": "json_object"})
    return "json", r.choices[0].finish_reason


def test_a_concurrent_wave_gets_the_answers_it_gets_alone(server):
    client = openai_client(server)
    alone = greedy(client)
    stop_alone = client.chat.completions.create(model=MODEL_NAME, messages=CHAT, temperature=0, max_tokens=48,
                                                stop=["sum"]).choices[0]
    with ThreadPoolExecutor(WAVE) as pool:
        results = list(pool.map(lambda i: one(openai_client(server), i), range(WAVE)))
    by_kind: dict = {}
    for kind, value in results:
        by_kind.setdefault(kind, []).append(value)
    assert by_kind["greedy"] == [alone] * (WAVE // 6)  # batched with everything else, token for token
    assert by_kind["stop"] == [(stop_alone.message.content, stop_alone.finish_reason)] * (WAVE // 6)
    assert all(got == 2 for got in by_kind["closed"])
    assert all(c == [(12, "length"), (12, "length")] for c in by_kind["n2"])
    assert all(r in ("stop", "length") for r in by_kind["penalised"] + by_kind["json"])
    left = wait_idle(server)
    assert not any(left.values()), left  # no KV block held, nothing running or waiting
    assert greedy(client) == alone
