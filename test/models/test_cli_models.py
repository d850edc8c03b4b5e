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


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A temporary cache: a converted model with its kept GGUF and an export, a lone GGUF, a partial download."""
    root = tmp_path / "home"
    monkeypatch.setenv("LLAISYS_HOME", str(root))
    model = root / "models" / "alpha-1b"
    model.mkdir(parents=True)
    (model / "config.json").write_text("{}")
    (model / "model.safetensors").write_bytes(b"w" * 3000)
    (root / "models" / "alpha-1b-f16.gguf").write_bytes(b"e" * 700)  # tools/bench_compare.py's export
    (root / "gguf").mkdir()
    (root / "gguf" / "alpha-1b.gguf").write_bytes(b"g" * 1500)
    (root / "gguf" / "beta.gguf").write_bytes(b"b" * 400)
    (root / "wheels" / "gamma").mkdir(parents=True)
    (root / "wheels" / "gamma" / "gamma_part1-1.0-py3-none-any.whl").write_bytes(b"p" * 10)
    return root


def _models_parser():
    from llaisys import cli

    return cli.build_parser()


def test_models_ls(cache, capsys):
    args = _models_parser().parse_args(["models", "ls"])
    assert args.func(args) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = [line.split() for line in lines if not line.startswith(" ")]
    assert [r[:2] for r in rows[:5]] == [["alpha-1b", "model"], ["alpha-1b", "gguf"], ["alpha-1b", "export"],
                                         ["beta", "gguf"], ["gamma", "partial"]]
    assert rows[0][2:] == ["bf16", "3.0", "kB", str(cache / "models" / "alpha-1b")]
    assert rows[1][2:] == ["-", "1.5", "kB", str(cache / "gguf" / "alpha-1b.gguf")]  # format unknown: not registered
    assert rows[2][2] == "f16"  # from the export's file name
    text = "\n".join(lines)
    assert "files: config.json, model.safetensors" in text
    assert "a GGUF, run as it is (llaisys serve --model PATH)" in text
    assert f"total 5.6 kB in {cache}" in text
    assert "more than one format of: alpha-1b (llaisys models rm NAME --gguf frees the GGUF files)" in text


def test_models_ls_shows_the_formats_of_a_registered_model(tmp_path, monkeypatch, capsys):
    from llaisys.models import hub

    root = tmp_path / "home"
    monkeypatch.setenv("LLAISYS_HOME", str(root))
    name = hub.DEFAULT_MODEL
    (root / "gguf").mkdir(parents=True)
    (root / "gguf" / f"{name}.gguf").write_bytes(b"g" * 100)
    (root / "gguf" / f"{name}-q8_0.gguf").write_bytes(b"q" * 200)
    (root / "gguf" / f".{name}-q8_0.gguf.tmp-123").write_bytes(b"t" * 10)  # an export under way
    args = _models_parser().parse_args(["models", "ls"])
    assert args.func(args) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines() if line.startswith(name)]
    assert sorted(r[1:3] for r in rows) == [["gguf", "q4_k_m"], ["gguf", "q8_0"], ["partial", "-"]]


def test_models_ls_empty(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("LLAISYS_HOME", str(tmp_path / "none"))
    args = _models_parser().parse_args(["models", "ls"])
    assert args.func(args) == 0
    assert "no models in" in capsys.readouterr().out


def test_models_rm_gguf_only_then_all(cache, capsys):
    args = _models_parser().parse_args(["models", "rm", "alpha-1b", "--gguf", "--yes"])
    assert args.func(args) == 0
    assert "removed 2 item(s), 2.2 kB" in capsys.readouterr().out
    assert not (cache / "gguf" / "alpha-1b.gguf").exists() and not (cache / "models" / "alpha-1b-f16.gguf").exists()
    assert (cache / "models" / "alpha-1b" / "model.safetensors").is_file() and (cache / "gguf" / "beta.gguf").exists()
    args = _models_parser().parse_args(["models", "rm", "alpha-1b", "-y"])
    assert args.func(args) == 0
    assert not (cache / "models" / "alpha-1b").exists() and (cache / "gguf" / "beta.gguf").exists()


def test_models_rm_asks(cache, capsys, monkeypatch):
    args = _models_parser().parse_args(["models", "rm", "beta"])
    monkeypatch.setattr("builtins.input", lambda prompt: "n")
    assert args.func(args) == 1
    assert (cache / "gguf" / "beta.gguf").exists() and "nothing removed" in capsys.readouterr().err
    monkeypatch.setattr("builtins.input", lambda prompt: "y")
    assert args.func(args) == 0
    assert not (cache / "gguf" / "beta.gguf").exists()


def test_models_rm_without_an_answer_removes_nothing(cache, capsys, monkeypatch):
    def eof(prompt):
        raise EOFError

    monkeypatch.setattr("builtins.input", eof)
    args = _models_parser().parse_args(["models", "rm", "gamma"])
    assert args.func(args) == 1
    assert (cache / "wheels" / "gamma").is_dir()


@pytest.mark.parametrize("argv", [["models", "rm", "delta", "--yes"], ["models", "rm", "../home", "--yes"],
                                  ["models", "rm", "alpha", "--yes"]])
def test_models_rm_refuses_unknown_names(cache, capsys, argv):
    before = sorted(p for p in cache.rglob("*"))
    args = _models_parser().parse_args(argv)
    assert args.func(args) == 2
    err = capsys.readouterr().err
    assert f"no cached model named {argv[2]!r}" in err and "cached: alpha-1b, beta, gamma" in err
    assert sorted(p for p in cache.rglob("*") if "locks" not in p.parts) == before


def test_models_rm_gguf_of_a_model_without_one(cache, capsys):
    (cache / "gguf" / "alpha-1b.gguf").unlink()
    (cache / "models" / "alpha-1b-f16.gguf").unlink()
    args = _models_parser().parse_args(["models", "rm", "alpha-1b", "--gguf", "--yes"])
    assert args.func(args) == 2
    assert "no cached gguf or export named 'alpha-1b'" in capsys.readouterr().err
    assert (cache / "models" / "alpha-1b").is_dir()


def test_download_keep_gguf_flag(parser):
    assert parser.parse_args(["download", "--keep-gguf"]).keep_gguf
    assert not parser.parse_args(["download"]).keep_gguf
