"""Units of code infill without a server: the FIM layouts and their fitting (models/fim.py),
the /infill body (server/infill/routes.py) and the editor limits applied to the text (infill/run.py).
The tokenizer is the real Qwen2.5-Coder one (no model weights are loaded)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from llaisys.models.fim import (FILE_SEP, FIM_MIDDLE, FIM_PREFIX, FIM_SUFFIX, ExtraChunk, build_fim_prompt,
                                fim_codec)
from llaisys.models.tokenizer import Tokenizer
from llaisys.server.protocol.errors import APIError
from llaisys.server.infill.routes import answer_tokens, fim_prompt, parse_infill
from llaisys.server.infill.run import held_back, indent_cut, pick_fields
from llaisys.server.protocol.parse import Limits


@pytest.fixture(scope="module")
def tok(qwen05_dir):
    return Tokenizer.from_dir(qwen05_dir)


@pytest.fixture(scope="module")
def codec(tok):
    return fim_codec(tok)


def test_fim_tokens_come_from_the_tokenizer(tok, codec):
    t = codec.tokens
    assert (t.prefix, t.suffix, t.middle) == tuple(tok.token_to_id(x) for x in (FIM_PREFIX, FIM_SUFFIX, FIM_MIDDLE))
    assert t.file_sep == tok.token_to_id(FILE_SEP) and t.repo == tok.token_to_id("<|repo_name|>")
    for name in ("<|fim_pad|>", "<|file_sep|>", "<|repo_name|>", "<|endoftext|>", "<|im_end|>"):
        assert tok.token_to_id(name) in t.stop_ids
    assert fim_codec(tok) is codec  # memoised


def test_file_level_layout(tok, codec):
    p = build_fim_prompt(codec, "def f(x):\n", "\n    return y\n", "    ")
    assert tok.decode(p.token_ids) == "<|fim_prefix|>def f(x):\n    <|fim_suffix|>\n    return y\n<|fim_middle|>"
    assert not p.truncated and p.n_chunks == 0


def test_repo_level_layout_is_qwens(tok, codec):
    extra = [ExtraChunk("a.py", "import os"), ExtraChunk("pkg/b.py", "X = 1\n")]
    p = build_fim_prompt(codec, "pre", "suf", "", extra)
    assert tok.decode(p.token_ids) == ("<|repo_name|>myproject\n<|file_sep|>a.py\nimport os\n<|file_sep|>pkg/b.py\n"
                                       "X = 1\n<|file_sep|>filename\n<|fim_prefix|>pre<|fim_suffix|>suf<|fim_middle|>")
    assert p.n_chunks == 2


def test_special_token_text_in_code_is_plain_text(tok, codec):
    p = build_fim_prompt(codec, "s = '<|file_sep|>'\n", "<|endoftext|>", "", [ExtraChunk("<|fim_pad|>", "<|im_end|>")])
    specials = [i for i in p.token_ids if i in codec.tokens.stop_ids or i in (codec.tokens.prefix,
                                                                              codec.tokens.suffix,
                                                                              codec.tokens.middle)]
    # only the layout's own control tokens: repo, two file separators and the three FIM markers
    assert len(specials) == 6
    assert tok.decode(p.token_ids).count("<|file_sep|>") == 3  # two of the layout's and the one in the code


def test_prefix_and_suffix_trimmed_three_to_one(codec):
    prefix, suffix = "a = 1\n" * 400, "b = 2\n" * 400
    p = build_fim_prompt(codec, prefix, suffix, budget=403)  # room of 400 tokens for text
    assert (p.n_prefix, p.n_suffix) == (300, 100) and p.truncated
    # the prefix loses its start, the suffix its end
    ids = p.token_ids
    assert ids[1:301] == codec.encode(prefix)[-300:]
    assert ids[302:402] == codec.encode(suffix)[:100]
    # a short side leaves its share to the other
    p = build_fim_prompt(codec, "x = 0\n", suffix, budget=403)
    assert p.n_prefix == len(codec.encode("x = 0\n")) and p.n_suffix == 400 - p.n_prefix
    # the local part is capped at local_max however large the budget
    p = build_fim_prompt(codec, prefix, suffix, budget=100_000, local_max=203)
    assert (p.n_prefix, p.n_suffix) == (150, 50)


def test_extra_chunks_dropped_oldest_first_and_whole(codec):
    chunks = [ExtraChunk(f"f{i}.py", f"value_{i} = {i}\n" * 20) for i in range(6)]
    full = build_fim_prompt(codec, "x", "y", "", chunks)
    p = build_fim_prompt(codec, "x", "y", "", chunks, budget=len(full.token_ids) - 1)
    assert p.n_chunks == 5 and p.truncated and p.n_prefix == p.n_prefix_in  # the local part is untouched
    assert "f5.py" in codec.tokenizer.decode(p.token_ids) and "f0.py" not in codec.tokenizer.decode(p.token_ids)
    local = len(build_fim_prompt(codec, "x", "y").token_ids)
    p = build_fim_prompt(codec, "x", "y", "", chunks, budget=local + 3)  # not even room for the repo frame
    assert p.n_chunks == 0 and codec.tokens.repo not in p.token_ids  # no chunk kept: the file-level layout


def test_typed_text_that_cannot_fit_is_a_400(codec):
    with pytest.raises(APIError) as e:
        fim_prompt(codec, 64, 8, "pre", "suf", "word " * 100)
    assert e.value.status == 400 and e.value.param == "prompt"
    p = fim_prompt(codec, 256, 10_000, "pre " * 500, "suf")  # n_predict beyond the context keeps half for the prompt
    assert len(p.token_ids) <= 128
    assert answer_tokens(len(p.token_ids), 256, 10_000, None) == 256 - len(p.token_ids)
    assert answer_tokens(100, 256, 0, None) == 1 and answer_tokens(100, 256, None, 16) == 16


def test_infill_body_fields(tok):
    limits = Limits()
    req = parse_infill({"input_prefix": "a", "input_suffix": "b", "prompt": "c", "n_predict": -1, "seed": -1,
                        "top_k": 0, "temperature": -1, "samplers": "kpt", "id_slot": 3, "cache_prompt": False,
                        "lora": [{"id": 0, "scale": 0.5}], "input_extra": [{"text": "t", "time": [1, 2]}],
                        "stop": ["", "\n\n"], "n_cmpl": 2, "model": ""}, limits)
    assert req.n_predict is None and req.model is None and req.extra == [ExtraChunk("tmp", "t")]
    assert req.sampling["seed"] is None and req.sampling["top_k"] == -1 and req.sampling["temperature"] == 0.0
    assert req.sampling["stop"] == ["\n\n"] and req.sampling["n"] == 2
    assert req.ignored == ["cache_prompt", "id_slot", "lora", "samplers"]
    for bad, param in (({"input_extra": [{"text": 1}]}, "input_extra"), ({"n_predict": -2}, "n_predict"),
                       ({"n_cmpl": 99}, "n_cmpl"), ({"response_fields": "content"}, "response_fields"),
                       ({"grammar": "root ::= [a-z]"}, "grammar"), ({"json_schema": {}}, "json_schema")):
        with pytest.raises(APIError) as e:
            parse_infill(bad, limits)
        assert e.value.status == 400 and e.value.param == param


def test_n_indent_cut_and_hold_back():
    assert indent_cut("x = 1\n    y = 2\n    z\n", 4) == ("x = 1\n    y = 2\n    z\n", False)
    assert indent_cut("x = 1\n    y = 2\nprint(x)\n", 4) == ("x = 1\n    y = 2\n", True)
    assert indent_cut("a\n  b", 4) == ("a\n  ", True)  # cut after the short line's indentation
    assert indent_cut("a\n\n    b", 4) == ("a\n", True)  # a blank line is indented 0 (llama-server's rule)
    assert indent_cut("no newline at all", 4) == ("no newline at all", False)
    assert held_back("a\n    ") == "a\n" and held_back("a\n    b") == "a\n    b" and held_back("a") == "a"


def test_response_fields_pick_nested_paths():
    obj = {"content": "x", "timings": {"prompt_n": 3}, "stop": True}
    assert pick_fields(obj, ["content", "timings/prompt_n", "timings/nope", ""]) == {"content": "x",
                                                                                     "timings/prompt_n": 3}
    assert pick_fields(obj, [""]) == {}


def test_tokenizer_without_fim_tokens_has_no_codec(qwen05_dir, tmp_path):
    for name in ("tokenizer.json", "tokenizer_config.json", "config.json"):
        shutil.copy(Path(qwen05_dir) / name, tmp_path / name)
    tj = json.loads((tmp_path / "tokenizer.json").read_text())
    tj["added_tokens"] = [t for t in tj["added_tokens"] if "fim" not in t["content"]]
    (tmp_path / "tokenizer.json").write_text(json.dumps(tj))
    assert fim_codec(Tokenizer.from_dir(tmp_path)) is None
