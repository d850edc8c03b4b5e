"""The llama.cpp peer every comparison runs against: where tools/build_llama_cpp.py builds it (one
build per CPU kind under $LLAISYS_HOME/peers, without AMX where the CPU has it: see NO_AMX), how
to build what is missing (ensure), what it is (describe: the pinned llama-cpp-python, the vendored
llama.cpp commit, the paths), the environment its Python bindings run in (bindings_env), its system_info
line, and a llaisys model directory written as a GGUF for it (gguf_for). Standard library only
(gguf_for imports llaisys when called).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

from benchkit.host import cpu_flag_set, cpu_kind

PIN = "0.3.36"  # llama-cpp-python; the llama.cpp commit it vendors is recorded in peer.json
TARGETS = ("llama", "llama-server", "llama-bench", "llama-batched-bench")


def home() -> Path:
    return Path(os.environ.get("LLAISYS_HOME", Path.home() / ".cache" / "llaisys")) / "peers"


# ggml's AMX backend (ggml-cpu/amx, compiled in by -march=native where the CPU lists amx_int8)
# faults in this llama.cpp: an invalid opcode at `tileloadd` on its first matrix product (seen
# 2026-11-26 on a Xeon VM with amx_tile/int8/bf16, in llama-bench and the Python bindings,
# 2 threads), a tile instruction run in a thread that has not loaded a tile configuration: a
# plain AMX test program (ldtilecfg, tileloadd, tdpbssd) runs on the same VM. The peer is
# therefore built without AMX (every other -march=native feature kept), in its own folder.
NO_AMX = ["-mno-amx-tile", "-mno-amx-int8", "-mno-amx-bf16"]


def has_amx(flags: set | None = None) -> bool:
    return "amx_int8" in (cpu_flag_set() if flags is None else flags)


def paths(kind: str | None = None) -> dict:
    root = home()
    src = root / f"llama_cpp_python-{PIN}"
    build = root / f"build-{kind or cpu_kind()}{'-noamx' if has_amx() else ''}"
    return {"root": root, "src": src, "vendor": src / "vendor" / "llama.cpp", "build": build,
            "bin": build / "bin", "server": build / "bin" / "llama-server", "venv": root / "venv",
            "python": root / "venv" / "bin" / "python"}


def run(cmd: list, **kw) -> None:
    print("+", " ".join(str(c) for c in cmd), flush=True)
    subprocess.run([str(c) for c in cmd], check=True, **kw)


def fetch_sdist() -> Path:
    """The pinned llama-cpp-python sdist under $LLAISYS_HOME/peers/sdist, fetched with pip once
    (test/llama_cpp_files.py reads llama.cpp's test data from it too)."""
    sdist = home() / "sdist" / f"llama_cpp_python-{PIN}.tar.gz"
    if not sdist.is_file():
        sdist.parent.mkdir(parents=True, exist_ok=True)
        # --no-binary for this package only: its build dependencies (scikit-build-core, cmake) come
        # as wheels for the metadata step, where ":all:" made pip compile each of them from source
        run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", "llama-cpp-python",
             f"llama-cpp-python=={PIN}", "-d", sdist.parent], timeout=600)
    return sdist


def fetch_source(p: dict) -> None:
    if (p["vendor"] / "CMakeLists.txt").exists():
        return
    with tarfile.open(fetch_sdist()) as tar:
        tar.extractall(p["root"], filter="data")


def build_native(p: dict) -> None:
    if (p["bin"] / "libllama.so").exists() and all((p["bin"] / t).exists() for t in TARGETS if t != "llama"):
        return
    t = time.time()
    print(f"building llama.cpp for this CPU ({cpu_kind()}) in {p['build']}: about 20 minutes on 2 cores",
          flush=True)
    gen = ["-G", "Ninja"] if subprocess.run(["ninja", "--version"], capture_output=True).returncode == 0 else []
    run(["cmake", "-S", p["vendor"], "-B", p["build"], *gen, "-DCMAKE_BUILD_TYPE=Release",
         "-DBUILD_SHARED_LIBS=ON", "-DGGML_NATIVE=ON", "-DLLAMA_CURL=OFF", "-DLLAMA_OPENSSL=OFF",
         "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_TOOLS=ON",
         "-DLLAMA_BUILD_SERVER=ON", "-DLLAMA_BUILD_UI=OFF", "-DLLAMA_BUILD_APP=OFF",
         # GCC lets an explicit -mno-* win over -march=native whatever their order
         *([f"-DCMAKE_C_FLAGS={' '.join(NO_AMX)}", f"-DCMAKE_CXX_FLAGS={' '.join(NO_AMX)}"] if has_amx() else [])])
    run(["cmake", "--build", p["build"], "--target", *TARGETS, "-j", str(os.cpu_count() or 2)])
    print(f"built in {(time.time() - t) / 60:.1f} min", flush=True)


def install_python(p: dict) -> None:
    probe = [str(p["python"]), "-c", "import llama_cpp.server.app"]
    env = dict(os.environ, LLAMA_CPP_LIB_PATH=str(p["bin"]))
    if p["python"].exists() and subprocess.run(probe, capture_output=True, env=env).returncode == 0:
        return
    run([sys.executable, "-m", "venv", p["venv"]])
    env["CMAKE_ARGS"] = "-DLLAMA_BUILD=OFF"  # the bindings only; the libraries come from build_native
    run([p["python"], "-m", "pip", "install", "-q", f"{p['src']}[server]", "numpy"], env=env)


def describe(p: dict) -> dict:
    # the sdist carries no usable git metadata; llama.cpp stamps its commit into the build info
    info = p["build"] / "common" / "build-info.cpp"
    text = info.read_text() if info.exists() else ""
    commit = text.split('LLAMA_COMMIT = "', 1)[1].split('"', 1)[0] if 'LLAMA_COMMIT = "' in text else ""
    return {"llama_cpp_python": PIN, "llama_cpp_commit": commit, "cpu_kind": cpu_kind(), "amx": False,
            "server": str(p["server"]), "bench": str(p["bin"] / "llama-bench"),
            "python": str(p["python"]), "lib_path": str(p["bin"])}


def gguf_for(model_dir, dtype: str = "bf16") -> Path:
    """The llaisys model directory as a GGUF for llama.cpp, written beside it once: bf16 holds
    exactly the values llaisys computes with; f16 rounds them (ggml's fast path on AVX2)."""
    from llaisys.models.gguf_export import export_gguf  # the driver's interpreter has llaisys

    model_dir = Path(model_dir)
    out = model_dir.parent / f"{model_dir.name}-{dtype}.gguf"
    if not out.exists() or out.stat().st_mtime < (model_dir / "config.json").stat().st_mtime:
        print(f"writing {out}", flush=True)
        export_gguf(model_dir, out, dtype=None if dtype == "bf16" else dtype)
    return out


def ensure() -> dict:
    """Build what is missing and return the peer's paths (see describe)."""
    p = paths()
    p["root"].mkdir(parents=True, exist_ok=True)
    fetch_source(p)
    build_native(p)
    install_python(p)
    info = describe(p)
    (p["build"] / "peer.json").write_text(json.dumps(info, indent=2))
    return info


def bindings_env(peer: dict, base: dict | None = None) -> dict:
    """The environment the peer's Python (its bindings, llama_cpp.server) runs in: base (default
    os.environ) with LLAMA_CPP_LIB_PATH at the peer's libraries."""
    return dict(os.environ if base is None else base, LLAMA_CPP_LIB_PATH=peer["lib_path"])


def system_info(peer: dict) -> str:
    """llama.cpp's system_info line, from its bindings over the same compiled libraries."""
    code = "import llama_cpp; print(llama_cpp.llama_print_system_info().decode())"
    proc = subprocess.run([peer["python"], "-c", code], capture_output=True, text=True, timeout=120,
                          env=bindings_env(peer))
    return proc.stdout.strip() if proc.returncode == 0 else f"unavailable: {proc.stderr[-300:]}"
