"""A pip-installed llaisys is usable from C: compile test/cpp/test_c_api.c against the headers
and the library that ship inside the installed package, and run it."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

import llaisys

SOURCE = Path(__file__).parents[1] / "cpp" / "test_c_api.c"
PACKAGE = Path(llaisys.__file__).parent


def test_installed_package_is_usable_from_c(tmp_path):
    cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        pytest.skip("no C compiler (cc, gcc or clang) on PATH")
    include, libdir = PACKAGE / "include", PACKAGE / "libllaisys"
    assert (include / "llaisys.h").is_file(), f"the installed package has no headers under {include}"
    assert (libdir / "libllaisys.so").is_file(), f"the installed package has no library under {libdir}"
    exe = tmp_path / "test_c_api"
    build = subprocess.run(
        [cc, "-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", f"-I{include}", str(SOURCE), "-o", str(exe),
         f"-L{libdir}", "-lllaisys", f"-Wl,-rpath,{libdir}", "-lm"],
        capture_output=True, text=True, timeout=120)
    assert build.returncode == 0, f"compile failed:\n{build.stderr}"
    # Run the program as a user would: the installed library, no sanitizer runtime preloaded.
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "LLAISYS_LIBRARY")}
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120, env=env)
    assert run.returncode == 0, f"stdout:\n{run.stdout}\nstderr:\n{run.stderr}"
    assert f"libllaisys {llaisys.__version__}" in run.stdout
    assert " 0 failures" in run.stdout
