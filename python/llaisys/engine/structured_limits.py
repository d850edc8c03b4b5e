"""Bounds on what a request may hand llguidance's grammar compiler, checked before it runs.

llguidance compiles recursively in native code: past some depth it overflows the native stack
and the whole process dies (SIGSEGV), whatever thread it runs in. Measured with llguidance
1.9.1 (x86-64; a chain of $defs ``{"type": "object", "properties": {"a": {"$ref": next}}}``,
a chain of Lark rules ``r_i: "x" r_i+1``):

    thread stack   $ref chain crashes at        JSON levels (following $ref)   Lark rule chain
    8 MiB          ~925 refs                    ~2,800                         ~2,660 (GBNF ~3,550)
    64 MiB         ~7,400 refs                  ~22,000                        > 19,700

Compilation runs on a 64 MiB stack (structured_compile.py); the limits below are ~8x under
the 64 MiB crash points, and under the 8 MiB ones as well (the engine thread computes masks
on 8 MiB; masks and token advances under grammars at these limits were checked there). They
are far above real schemas (pydantic models, OpenAPI specs nest < 20 levels and chain < 50
refs) and grammars (llama.cpp's GBNF files have < 50 rules). A spec over a limit is a
StructuredOutputError naming the limit and its value.

Depth through $ref (and through rule references) is bounded from above: the reference graph is
reduced to its strongly connected components, a component weighs the sum of its members'
depths (a cycle may be walked through once by the compiler before it sees a member again), and
the longest path from the start is summed. Everything here is iterative and linear in the
size of the input.
"""

from __future__ import annotations

import json
import re

from .structured_spec import StructuredOutputError

MAX_JSON_DEPTH = 100  # nesting of a schema document (objects and arrays); llguidance's reader stops at 128
MAX_SCHEMA_DEPTH = 2000  # JSON levels along the deepest path following $ref (crash: ~2,800 at 8 MiB)
MAX_REF_CHAIN = 500  # $refs along the longest chain of references (crash: ~925 at 8 MiB)
MAX_SCHEMA_NODES = 20_000  # objects and arrays in a schema document
MAX_OBJECT_PROPERTIES = 2000  # properties of one object schema (compile time is quadratic: 4,000 take 1.2 s)
MAX_LARK_RULES = 2000  # rules and terminals of a Lark grammar
MAX_GBNF_RULES = 500  # rules of a GBNF grammar (llguidance's converter is quadratic: 1,000 take ~3 s)
MAX_RULE_DEPTH = 1000  # rules along the longest chain of rule references (crash: ~2,660 at 8 MiB)
MAX_GROUP_DEPTH = 24  # nested parentheses in a rule (llguidance refuses ~30 itself)


def _fail(param: str, what: str, value: int, limit: int, name: str):
    raise StructuredOutputError(param, f"{param}: {what} ({value}) exceeds the limit of {limit} ({name})")


def longest_chain(edges: dict, weight: dict, start) -> tuple:
    """(weighted length, node count) of the longest path from `start` in the graph `edges`
    (node -> list of nodes; unknown nodes are leaves of weight 1), a cycle's nodes counted once
    each (an upper bound on any walk that enters each node at most once). Iterative Tarjan."""
    index, low, on, stack, comp = {}, {}, set(), [], {}
    comps = []  # components in reverse topological order (successors first)
    work = [(start, iter(edges.get(start, ())))]
    index[start] = low[start] = 0
    stack.append(start)
    on.add(start)
    while work:
        v, it = work[-1]
        advanced = False
        for w in it:
            if w not in index:
                index[w] = low[w] = len(index)
                stack.append(w)
                on.add(w)
                work.append((w, iter(edges.get(w, ()))))
                advanced = True
                break
            if w in on:
                low[v] = min(low[v], index[w])
        if advanced:
            continue
        work.pop()
        if work:
            low[work[-1][0]] = min(low[work[-1][0]], low[v])
        if low[v] == index[v]:
            members = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp[w] = len(comps)
                members.append(w)
                if w == v:
                    break
            comps.append(members)
    best = []  # per component: (weighted, count) of the longest path starting there
    for c, members in enumerate(comps):
        succ = [(0, 0)] + [best[comp[w]] for v in members for w in edges.get(v, ()) if comp[w] != c]
        bw, bn = max(s[0] for s in succ), max(s[1] for s in succ)
        best.append((sum(weight.get(v, 1) for v in members) + bw, len(members) + bn))
    return best[comp[start]]


def _pointer_key(k) -> str:
    return str(k).replace("~", "~0").replace("/", "~1")


def check_schema_limits(schema, param: str) -> None:
    """StructuredOutputError naming `param` and the limit if `schema` (a parsed JSON schema)
    nests, chains $ref or counts nodes past this module's limits."""
    targets = set()  # local $ref targets ("#", "#/$defs/a", ...)
    nodes = 0
    stack = [(schema, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#"):
                targets.add(ref)
            props = node.get("properties")
            if isinstance(props, dict) and len(props) > MAX_OBJECT_PROPERTIES:
                _fail(param, "an object schema's number of properties", len(props), MAX_OBJECT_PROPERTIES,
                      "MAX_OBJECT_PROPERTIES")
            children = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        nodes += 1
        if nodes > MAX_SCHEMA_NODES:
            _fail(param, "the schema's number of objects and arrays", nodes, MAX_SCHEMA_NODES, "MAX_SCHEMA_NODES")
        if depth > MAX_JSON_DEPTH:
            _fail(param, "the schema's nesting depth", depth, MAX_JSON_DEPTH, "MAX_JSON_DEPTH")
        stack.extend((c, depth + 1) for c in children)
    if not targets:
        return
    # the reference graph: an owner is the root or a $ref target; each node's depth and $refs
    # count towards its nearest owner; an owner nested in another is an edge from it
    edges, weight = {"#": []}, {}
    stack = [(schema, "#", "#", 1)]  # (node, its pointer, its owner, depth within the owner)
    while stack:
        node, ptr, owner, depth = stack.pop()
        if ptr in targets and ptr != owner:
            edges.setdefault(owner, []).append(ptr)
            edges.setdefault(ptr, [])
            owner, depth = ptr, 1
        weight[owner] = max(weight.get(owner, 1), depth)
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref in targets:
                edges[owner].append(ref)
            stack.extend((v, f"{ptr}/{_pointer_key(k)}", owner, depth + 1) for k, v in node.items())
        elif isinstance(node, list):
            stack.extend((v, f"{ptr}/{i}", owner, depth + 1) for i, v in enumerate(node))
    total, refs = longest_chain(edges, weight, "#")
    if refs - 1 > MAX_REF_CHAIN:
        _fail(param, "the schema's longest chain of $ref", refs - 1, MAX_REF_CHAIN, "MAX_REF_CHAIN")
    if total > MAX_SCHEMA_DEPTH:
        _fail(param, "the schema's nesting depth following $ref", total, MAX_SCHEMA_DEPTH, "MAX_SCHEMA_DEPTH")


# ---- Lark and GBNF ---------------------------------------------------------------------------
# a string, a regex (Lark /.../flags), a character class (GBNF [...]), a special token <...>
_STRING = r'"(?:[^"\\\n]|\\.)*"i?'
_LARK_SKIP = re.compile(_STRING + r"|/(?:[^/\\\n]|\\.)+/[imslux]*|<[^<>\s]*>|//[^\n]*")
_GBNF_SKIP = re.compile(_STRING + r"|\[(?:[^\]\\\n]|\\.)*\]|#[^\n]*")
_LARK_DEF = re.compile(r"^\s*[?!]?([A-Za-z_][A-Za-z_0-9]*)(?:\{[^}]*\})?(?:\.-?\d+)?\s*:", re.M)
_GBNF_DEF = re.compile(r"^\s*([A-Za-z0-9_-]+)\s*::=", re.M)
_LARK_NAME = re.compile(r"[A-Za-z_][A-Za-z_0-9]*")
_GBNF_NAME = re.compile(r"[A-Za-z0-9_-]+")
_JSON_DIRECTIVE = re.compile(r"%json\s*")


def _embedded_schemas(text: str, param: str) -> str:
    """`text` with each Lark ``%json {schema}`` taken out, every schema checked as one."""
    out, pos = [], 0
    dec = json.JSONDecoder()
    for m in _JSON_DIRECTIVE.finditer(text):
        if m.start() < pos:
            continue
        try:
            schema, end = dec.raw_decode(text, m.end())
        except (ValueError, RecursionError):
            continue  # llguidance reports the malformed directive
        try:
            check_schema_limits(schema, param)
        except StructuredOutputError as e:  # say it was the embedded schema
            raise StructuredOutputError(param, str(e).replace(f"{param}: ", f"{param}: %json: ", 1)) from None
        out.append(text[pos:m.start()])
        pos = end
    out.append(text[pos:])
    return "".join(out)


def check_grammar_limits(text: str, syntax: str, param: str) -> None:
    """StructuredOutputError naming `param` and the limit if a Lark or GBNF grammar has too many
    rules, chains rule references or nests parentheses too deep, or embeds (%json) a schema
    past the schema limits. Approximate where it must be (an upper bound on depth)."""
    gbnf = syntax == "gbnf"
    if not gbnf:
        text = _embedded_schemas(text, param)
    skip, define, name_re = (_GBNF_SKIP, _GBNF_DEF, _GBNF_NAME) if gbnf else (_LARK_SKIP, _LARK_DEF, _LARK_NAME)
    plain = skip.sub(" ", text)
    defs = list(define.finditer(plain))
    limit, limit_name = (MAX_GBNF_RULES, "MAX_GBNF_RULES") if gbnf else (MAX_LARK_RULES, "MAX_LARK_RULES")
    if len(defs) > limit:
        _fail(param, f"the {syntax} grammar's number of rules", len(defs), limit, limit_name)
    depth = deepest = 0
    for ch in plain:
        if ch in "([{" if not gbnf else ch in "(":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in ")]}" if not gbnf else ch == ")":
            depth = max(depth - 1, 0)
    if deepest > MAX_GROUP_DEPTH:
        _fail(param, f"the {syntax} grammar's parenthesis nesting", deepest, MAX_GROUP_DEPTH, "MAX_GROUP_DEPTH")
    names = {m.group(1) for m in defs}
    edges = {}
    for i, m in enumerate(defs):
        body = plain[m.end():defs[i + 1].start() if i + 1 < len(defs) else len(plain)]
        refs = edges.setdefault(m.group(1), [])
        refs.extend(n for n in name_re.findall(body) if n in names)
    start = "root" if gbnf else "start"
    if start not in edges:
        return  # llguidance reports the missing start rule
    _, chain = longest_chain(edges, {}, start)
    if chain > MAX_RULE_DEPTH:
        _fail(param, f"the {syntax} grammar's longest chain of rule references", chain, MAX_RULE_DEPTH,
              "MAX_RULE_DEPTH")
