"""`llaisys download` / `llaisys convert-gguf` argument parsing and handlers."""

import argparse

import pytest

from llaisys.cli_models import add_convert_gguf_parser, add_download_parser


@pytest.fixture
def parser():
    p = argparse.ArgumentParser(prog="llaisys")
    sub = p.add_subparsers(dest="command", required=True)
    add_download_parser(sub)
    add_convert_gguf_parser(sub)
    return p


def test_download_defaults_to_the_small_model(parser):
    args = parser.parse_args(["download"])
    assert args.name == "qwen2.5-coder-0.5b-instruct" and not args.list and not args.quiet


def test_download_list(parser, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("LLAISYS_HOME", str(tmp_path))
    args = parser.parse_args(["download", "--list"])
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert "qwen2.5-coder-0.5b-instruct" in out and "qwen2.5-coder-1.5b-instruct" in out and "not downloaded" in out


def test_download_unknown_name_is_exit_2(parser, capsys):
    args = parser.parse_args(["download", "gpt-5"])
    assert args.func(args) == 2
    assert "unknown model 'gpt-5'" in capsys.readouterr().err


def test_convert_gguf(parser, capsys, tiny_gguf, tmp_path):
    out = tmp_path / "hf"
    args = parser.parse_args(["convert-gguf", str(tiny_gguf), str(out)])
    assert args.func(args) == 0
    captured = capsys.readouterr()
    assert captured.out.strip() == str(out) and "converting" in captured.err
    assert (out / "model.safetensors").is_file() and (out / "tokenizer.json").is_file()
    assert args.func(args) == 2  # now exists and is not empty
    assert "not empty" in capsys.readouterr().err
