"""The `llaisys` command explains itself: every flag and command has help, each default prints
once, `info` and `smoke` say which SIMD path and how many threads the library chose, and
`generate` reports time to first token and tokens/s on stderr."""

import argparse
import ctypes
import os
import re
import subprocess
import sys

import pytest

import llaisys
from llaisys import cli, cli_info, runtime
from cpu_features import cpu_flags


def _actions():
    """(parser, action) for every action of every parser in the `llaisys` tree."""
    for p in cli._subparsers(cli.build_parser()):
        for a in p._actions:
            yield p, a


def test_the_tree_has_every_command():
    parsers = {p.prog for p in cli._subparsers(cli.build_parser())}
    for command in ("download", "models", "models ls", "models rm", "convert-gguf", "export-gguf", "generate",
                    "serve", "info", "smoke"):
        assert f"llaisys {command}" in parsers


def test_every_flag_and_command_has_help():
    missing = []
    for p, a in _actions():
        if isinstance(a, argparse._HelpAction):
            continue
        if isinstance(a, argparse._SubParsersAction):
            missing += [f"{p.prog} {c.dest}" for c in a._choices_actions if not c.help]
        elif not a.help or a.help == argparse.SUPPRESS:
            missing.append(f"{p.prog} {'/'.join(a.option_strings) or a.dest}")
    assert missing == []


def test_each_default_prints_once():
    seen = 0
    for p, a in _actions():
        text = p._get_formatter()._expand_help(a) if a.help else ""
        assert text.count("(default") <= 1, f"{p.prog} {a.option_strings}: {text}"
        assert "(default: None)" not in text and "(default: [])" not in text, f"{p.prog} {a.option_strings}"
        seen += "(default" in text
    assert seen > 20  # the formatter does add the defaults that say something
    for p in cli._subparsers(cli.build_parser()):
        assert "(default: None)" not in p.format_help()


def test_help_speaks_to_users():
    """Every command's --help opens with what it does and names no function of ours
    (issue #43: "(default: models.hub.default_quant(): ...)")."""
    for p in cli._subparsers(cli.build_parser()):
        text = p.format_help()  # what `--help` prints
        assert p.description and p.description.strip() in " ".join(text.split()), p.prog
        for internal in ("models.hub.", "hub.", "()"):
            assert internal not in text, f"{p.prog} --help shows {internal!r}"
    for prog in ("llaisys serve", "llaisys generate"):
        assert "else bf16; `llaisys info` says which" in " ".join(_help(prog, "--quant").split())


def _help(prog: str, flag: str) -> str:
    p = next(p for p in cli._subparsers(cli.build_parser()) if p.prog == prog)
    a = next(a for a in p._actions if flag in a.option_strings)
    return p._get_formatter()._expand_help(a)


def test_the_flags_the_issue_names():
    assert _help("llaisys serve", "--dtype") == "weight dtype (default: checkpoint's)"
    assert _help("llaisys generate", "--max-tokens") == "most tokens to generate (default: 256)"
    assert _help("llaisys serve", "--kv-layout").endswith("(default: block)")
    assert _help("llaisys serve", "--log-level").endswith("(default: info)")
    assert _help("llaisys generate", "--top-k").endswith("(default: -1)")
    assert _help("llaisys generate", "--temperature") == "sampling temperature (0: greedy) (default: 0.0)"
    for prog in ("llaisys serve", "llaisys generate"):
        assert _help(prog, "--threads") == "threads for the CPU kernels (default: the physical cores)"


def test_cpu_description_parses_x86_and_arm():
    x86 = "processor\t: 0\nmodel name\t: AMD EPYC 9B14\nflags\t\t: fpu sse avx2 fma f16c avx512f\n\nprocessor: 1\n"
    assert cli_info.cpu_description(x86) == ("AMD EPYC 9B14", {"fpu", "sse", "avx2", "fma", "f16c", "avx512f"})
    arm = "processor\t: 0\nFeatures\t: fp asimd sve\nCPU part\t: 0xd40\n"
    assert cli_info.cpu_description(arm) == ("", {"fp", "asimd", "sve"})
    assert cli_info.cpu_description("") == ("", set())


def test_info(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("LLAISYS_HOME", str(tmp_path))
    (tmp_path / "models" / "tiny-model").mkdir(parents=True)
    (tmp_path / "models" / "tiny-model" / "model.safetensors").write_bytes(b"x" * 2500)
    (tmp_path / "gguf").mkdir()
    (tmp_path / "gguf" / "tiny-model.gguf").write_bytes(b"g" * 1200)
    assert cli.main(["info"]) == 0
    out = capsys.readouterr().out
    fields = {line.split()[0]: line for line in out.splitlines() if not line.startswith(" ")}
    assert fields["llaisys"].split()[1] == llaisys.__version__
    assert fields["isa"].split()[1] == runtime.cpu_isa()
    assert fields["threads"].split()[1] == str(runtime.num_threads())
    assert fields["amx"].split()[1] == ("yes:" if runtime.cpu_amx() else "no")
    assert fields["vnni"].split()[1] == ("yes:" if runtime.cpu_vnni() else "no")
    quick = runtime.cpu_amx() or runtime.cpu_vnni() or runtime.cpu_isa() != "scalar" and not runtime.cpu_splits_256()
    assert fields["vnni"].endswith(f"a bare model name runs {'q4_k_m' if quick else 'bf16'}")
    assert fields["models"].split()[1] == str(tmp_path)
    repacked = runtime.quant_repacked()  # the x16 layout: q4_k, q8_0, q5_0, q4_1, q5_1 from avx2 on, the rest with vnni
    vnni512 = runtime.cpu_isa().startswith("avx512") and "avx512_vnni" in cpu_flags()
    vnni = vnni512 or runtime.cpu_isa() != "scalar" and "avx_vnni" in cpu_flags() and os.environ.get("LLAISYS_AVX_VNNI") != "0"
    assert repacked == ([] if runtime.cpu_isa() == "scalar" else
                        [f for f in runtime.QUANT_FORMATS if f in ("q5_0", "q8_0", "q4_k", "q4_1", "q5_1") or vnni512 and f == "q6_k"
                         or vnni and f in ("q2_k", "q3_k", "iq4_xs")])
    plan = out.split("\nlinear    ", 1)[1].splitlines()[:len(runtime.QUANT_FORMATS)]  # a line per format
    for fmt, line in zip(runtime.QUANT_FORMATS, plan):
        assert line.strip() == runtime.quant_plan(fmt)
        assert line.strip().startswith(f"{fmt}: {'x16 groups' if fmt in repacked else 'file rows'}, int8 on ")
    with pytest.raises(ValueError, match="fmt"):
        runtime.quant_plan("f16")
    from llaisys.libllaisys import LIB, DataType, Status
    text = ctypes.c_char_p()
    assert LIB.llaisysCpuQuantPlan(int(DataType.F32), ctypes.byref(text)) == Status.INVALID_ARGUMENT  # the C side
    assert "is not block-quantized" in LIB.llaisysGetLastError().decode()
    for key in ("python", "cpu", "simd", "devices", "openmp"):
        assert key in fields
    assert re.search(r"^  tiny-model +model +2\.5 kB$", out, re.M)
    assert re.search(r"^  tiny-model +gguf +1\.2 kB$", out, re.M)
    assert re.search(r"^  total +3\.7 kB$", out, re.M)
    flags = cli_info.cpu_description(open("/proc/cpuinfo").read())[1] if os.path.exists("/proc/cpuinfo") else set()
    if "avx2" in flags:
        assert "avx2" in fields["simd"].split("(not:")[0]


def test_info_names_a_forced_isa_and_an_empty_cache(tmp_path):
    from llaisys.libllaisys import cpu_tuning

    # the wait policy llaisys chooses itself: none of the variables a user (or `make test`) may set
    env = {k: v for k, v in os.environ.items() if k not in cpu_tuning.WAIT_VARS}
    env.update(LLAISYS_ISA="scalar", LLAISYS_HOME=str(tmp_path))
    # the first run on a CPU kind without a wait row calibrates (cpu_tuning): 8 s on a Skylake-SP
    # VM, past a minute there under ASan; the second reads the cache
    out = subprocess.run([sys.executable, "-m", "llaisys.cli", "info"], env=env, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr
    assert re.search(r"^isa +scalar +\(forced by LLAISYS_ISA=scalar\)$", out.stdout, re.M)
    assert re.search(r"^linear +q4_0: file rows, int8 on scalar loops below 8 rows, float path \(f32 GEMM, "
                     r"scalar\) from there$", out.stdout, re.M), out.stdout
    choice = cpu_tuning.choose(cpu_tuning.cpu_id(), env)
    set_ = " ".join(f"{k}={v}" for k, v in choice.env.items() if k in cpu_tuning.WAIT_VARS)
    assert re.search(rf"^openmp +idle threads (spin briefly, then sleep|sleep at once) \({set_}, set by llaisys "
                     rf"as it loaded\): {re.escape(choice.wait)}$", out.stdout, re.M), out.stdout
    env.update(OMP_WAIT_POLICY="active", OMP_NUM_THREADS="1")
    out = subprocess.run([sys.executable, "-m", "llaisys.cli", "info"], env=env, capture_output=True, text=True,
                         timeout=60)
    assert re.search(r"^openmp +from the environment: OMP_WAIT_POLICY=active$", out.stdout, re.M), out.stdout
    assert re.search(r"^threads +1 +\(OMP_NUM_THREADS=1; ", out.stdout, re.M), out.stdout
    assert "(empty: llaisys download NAME)" in out.stdout


def test_smoke_names_the_simd_path_and_threads(capsys):
    assert cli.main(["smoke"]) == 0
    line = capsys.readouterr().out.strip()
    assert line == (f"libllaisys {llaisys.__version__}: ok (SIMD path {runtime.cpu_isa()}, "
                    f"{runtime.num_threads()} threads)")


def test_timing_line():
    assert cli._timing(10.0, 10.5, 12.5, 41) == "TTFT 0.50 s, 20.0 tok/s"
    assert cli._timing(10.0, 10.25, 10.25, 1) == "TTFT 0.25 s, 4.0 tok/s"  # one token: the whole run's rate


@pytest.fixture
def restore_threads():
    before = runtime.num_threads()
    yield
    runtime.set_num_threads(before)


def test_generate_reports_ttft_and_rate(capsys, qwen05_dir, tmp_path, restore_threads):
    from tiny_checkpoint import make_tiny_checkpoint

    model = make_tiny_checkpoint(tmp_path / "tiny", qwen05_dir)
    argv = ["generate", "Hello", "--model", str(model), "--max-tokens", "6", "--threads", "1", "--chat"]
    assert cli.main(argv) == 0
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert re.fullmatch(r"\[\d+ prompt \+ [1-6] completion tokens, finish: (length|stop); "
                        r"TTFT \d+\.\d\d s, \d+\.\d tok/s\]", err), err
    assert runtime.num_threads() == 1
    assert cli.main(argv[:-3] + ["--threads", "0"]) == 2
    assert "threads" in capsys.readouterr().err


def test_serve_refuses_a_bad_thread_count_before_binding(tmp_path):
    env = dict(os.environ, LLAISYS_HOME=str(tmp_path))
    out = subprocess.run([sys.executable, "-m", "llaisys.cli", "serve", str(tmp_path), "--threads", "0", "--port", "0"],
                         env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "llaisys serve: error:" in out.stderr and "threads" in out.stderr, out.stderr
