"""The ctypes declarations (python/llaisys/libllaisys/*.py) match the C headers, function for
function: every LLAISYS_API function is declared in Python with as many arguments, each of
the same kind (pointer, integer of the same size and signedness, float, struct), and the same
return kind, a `void` return included; and the handle convention of doc/c_api.md holds in the
headers (every Destroy returns llaisysStatus_t, every constructor returns a status and writes
the handle through its last, `*out`, parameter unless it is marked DEPRECATED)."""

from __future__ import annotations

import ctypes
import re
from pathlib import Path

import pytest

from llaisys.libllaisys import LIB

INCLUDE = Path(__file__).parents[2] / "include"
HEADERS = sorted(INCLUDE.rglob("*.h"))

# Constructors in headers owned by the qwen2 ABI, which model.h supersedes: they return the
# handle and are not (yet) marked DEPRECATED. No other constructor may join them.
LEGACY_CONSTRUCTORS = {"llaisysQwen2ModelCreate", "llaisysQwen2ModelCreateKVCache"}

DECL = re.compile(r"LLAISYS_API\s+([^;(){}]+?)\s*\b(llaisys\w+)\s*\(([^)]*)\)\s*;")
COMMENT = re.compile(r"/\*.*?\*/", re.DOTALL)

# C scalar type -> (kind, size in bytes, signed)
SCALARS = {
    "int": ("int", 4, True), "int32_t": ("int", 4, True), "uint32_t": ("int", 4, False),
    "int64_t": ("int", 8, True), "uint64_t": ("int", 8, False), "size_t": ("int", 8, False),
    "ptrdiff_t": ("int", 8, True), "uint16_t": ("int", 2, False), "uint8_t": ("int", 1, False),
    "int8_t": ("int", 1, True), "float": ("float", 4, True), "double": ("float", 8, True),
}


def _headers_text() -> str:
    return "\n".join(h.read_text() for h in HEADERS)


def _typedefs() -> dict[str, tuple]:
    """Every type name the headers define -> its kind."""
    text = COMMENT.sub("", _headers_text())
    kinds: dict[str, tuple] = {}
    for name in re.findall(r"typedef\s+enum\s*\w*\s*\{[^}]*\}\s*(\w+)\s*;", text):
        kinds[name] = ("int", 4, True)  # a C enum is an int (ctypes.c_int)
    for name in re.findall(r"typedef\s+struct\s+\w+\s*\*\s*(\w+)\s*;", text):
        kinds[name] = ("ptr",)  # opaque handle
    for name in re.findall(r"typedef\s+struct\s*\w*\s*\{.*?\}\s*(\w+)\s*;", text, re.DOTALL):
        kinds[name] = ("struct",)
    for base, name in re.findall(r"typedef\s+(\w+)\s+(\w+)\s*;", text):
        if base in SCALARS:
            kinds[name] = SCALARS[base]
    return kinds


def c_kind(ctype: str, typedefs: dict[str, tuple]) -> tuple | None:
    t = re.sub(r"\bconst\b", "", ctype).strip()
    if t.endswith("*"):
        return ("ptr",)
    if t == "void":
        return None
    if t in SCALARS:
        return SCALARS[t]
    assert t in typedefs, f"unknown C type {ctype!r}: teach this test its kind"
    return typedefs[t]


def py_kind(ctype) -> tuple | None:
    if ctype is None:
        return None
    if isinstance(ctype, type) and issubclass(ctype, ctypes.Structure):
        return ("struct",)
    if ctype in (ctypes.c_void_p, ctypes.c_char_p, ctypes.c_wchar_p) or \
            (isinstance(ctype, type) and issubclass(ctype, (ctypes._Pointer, ctypes._CFuncPtr))):
        return ("ptr",)
    if ctype in (ctypes.c_float, ctypes.c_double):
        return ("float", ctypes.sizeof(ctype), True)
    return ("int", ctypes.sizeof(ctype), ctype(-1).value < 0)


def declarations() -> dict[str, tuple[str, list[str], str]]:
    """name -> (return type, [parameter types], the comment just before it)."""
    found = {}
    for header in HEADERS:
        text = header.read_text()
        for m in DECL.finditer(text):
            ret, name, params = m.group(1), m.group(2), m.group(3)
            params = COMMENT.sub("", params).strip()
            types = [] if params in ("", "void") else [
                re.sub(r"\s*\b\w+\s*(\[[^\]]*\])?$", "", p.strip()) or p.strip() for p in params.split(",")]
            before = text[:m.start()].rstrip()
            comment = before[before.rfind("/*"):] if before.endswith("*/") else ""
            assert name not in found, f"{name} declared twice"
            found[name] = (ret.strip(), types, comment)
    return found


DECLS = declarations()
TYPEDEFS = _typedefs()


def test_headers_parse():
    assert len(DECLS) > 80 and "llaisysTensorCreate2" in DECLS and "llaisysGetLastError" in DECLS
    assert DECLS["llaisysTensorRead"][1] == ["llaisysTensor_t", "void *", "size_t"]


@pytest.mark.parametrize("name", sorted(DECLS))
def test_python_declaration_matches_header(name):
    ret, params, _ = DECLS[name]
    fn = getattr(LIB, name)
    assert fn.argtypes is not None, f"{name} has no ctypes declaration (argtypes unset)"
    want = [c_kind(p, TYPEDEFS) for p in params]
    got = [py_kind(a) for a in fn.argtypes]
    assert got == want, f"{name}: ctypes argtypes {got}, header {params} -> {want}"
    assert py_kind(fn.restype) == c_kind(ret, TYPEDEFS), f"{name}: ctypes restype {fn.restype}, header {ret!r}"


def test_no_python_declaration_without_a_header():
    declared = {n for n, v in vars(LIB).items() if n.startswith("llaisys") and getattr(v, "argtypes", None) is not None}
    assert declared - set(DECLS) == set()


def test_every_destroy_returns_a_status():
    destroys = {n: d for n, d in DECLS.items() if n.endswith("Destroy")}
    assert {"llaisysTensorDestroy", "llaisysKVCacheDestroy", "llaisysPackedLinearDestroy", "llaisysStreamDestroy",
            "llaisysEventDestroy"} <= set(destroys)
    for name, (ret, params, comment) in destroys.items():
        assert ret == "llaisysStatus_t" and len(params) == 1, f"{name} returns {ret!r}"
        assert "NULL is a no-op" in comment.replace("\n *", ""), f"{name}: the comment must say NULL is a no-op"


def test_every_constructor_returns_a_status_and_fills_out():
    handle_types = {t for t, k in TYPEDEFS.items() if k == ("ptr",)}
    deprecated, legacy = set(), set()
    for name, (ret, params, comment) in DECLS.items():
        if not re.match(r"llaisys\w+Create\w*$", name):
            continue
        if ret in handle_types:  # the old shape: the handle as the return value
            if "DEPRECATED" in comment:
                deprecated.add(name)
                assert f"{name}2" in DECLS, f"{name} is deprecated but has no {name}2"
            else:
                legacy.add(name)
            continue
        assert ret == "llaisysStatus_t", f"{name} returns {ret!r}"
        assert params and params[-1].rstrip(" *") in handle_types and params[-1].endswith("*"), \
            f"{name}: the last parameter must be the handle's out pointer, not {params[-1:]}"
    assert deprecated == {"llaisysTensorCreate", "llaisysKVCacheCreate"}
    assert legacy <= LEGACY_CONSTRUCTORS, f"new constructors in the old shape: {legacy - LEGACY_CONSTRUCTORS}"
