"""What a chat template may cost, and the estimates that keep it there.

`TemplateLimits` are the limits; `Budget` counts one render (iterations, calls, call depth,
everything built); the `*_cost` functions estimate the size of what an operation would
build (a string, a list, an integer) from its inputs, before it runs, so that nothing
over the limits is ever allocated. Used by chat_template.py.
"""

import re
import time
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Optional

from jinja2.utils import Namespace


@dataclass(frozen=True)
class TemplateLimits:
    """What one render of a chat template may cost. Real templates stay far below every one of
    these (Qwen2.5's, with tools, renders 100 messages in ~8 ms)."""

    max_source_chars: int = 1 << 20  # the template text
    max_output_chars: int = 16 << 20  # the rendered prompt
    max_value_len: int = 16 << 20  # one string, list or dict the template builds (chars or items)
    max_work: int = 128 << 20  # everything the template builds and writes in one render, summed
    max_iterations: int = 1_000_000  # loop iterations, all loops of one render together
    max_calls: int = 100_000  # macro, method and filter calls in one render
    max_call_depth: int = 48  # nested calls (recursive macros); each costs ~8 Python frames
    max_int_bits: int = 4096  # integers the template computes
    max_format_width: int = 10_000  # width or precision in '%' and str.format specs
    max_seconds: float = 5.0  # wall clock for one render


DEFAULT_LIMITS = TemplateLimits()


class LimitExceeded(Exception):
    """Raised inside a render; turned into a ChatTemplateError by ChatTemplate.render."""


class Budget:
    """Counters of one render."""

    def __init__(self, limits: TemplateLimits):
        self.limits = limits
        self.deadline = time.monotonic() + limits.max_seconds
        self.iterations = 0
        self.calls = 0
        self.depth = 0
        self.work = 0

    def check_time(self) -> None:
        if time.monotonic() > self.deadline:
            raise LimitExceeded(f"rendering took longer than {self.limits.max_seconds:g} s")

    def iteration(self) -> None:
        self.iterations += 1
        if self.iterations > self.limits.max_iterations:
            raise LimitExceeded(f"more than {self.limits.max_iterations} loop iterations")
        self.check_time()

    def enter_call(self) -> None:
        self.calls += 1
        self.depth += 1
        if self.calls > self.limits.max_calls:
            raise LimitExceeded(f"more than {self.limits.max_calls} calls")
        if self.depth > self.limits.max_call_depth:
            raise LimitExceeded(f"calls nested deeper than {self.limits.max_call_depth} (runaway recursion?)")
        self.check_time()

    def allow(self, size: int, what: str) -> None:
        """Refuse a value of `size` chars/items past the limit (before it is built); else count it as work."""
        if size > self.limits.max_value_len:
            raise LimitExceeded(f"{what} would hold about {size} characters or items "
                                 f"(limit {self.limits.max_value_len})")
        self.work += size
        if self.work > self.limits.max_work:
            raise LimitExceeded(f"the template built more than {self.limits.max_work} characters in all")


BUDGET: ContextVar[Optional[Budget]] = ContextVar("llaisys_chat_template_budget", default=None)


def current() -> Budget:
    """The render in progress, or fresh counters (constant folding while compiling)."""
    return BUDGET.get() or Budget(DEFAULT_LIMITS)


_JSON_ESCAPED = re.compile(r'[\x00-\x1f"\\\x7f]')


def size_of(value, cap: int, indent: int = 0) -> int:
    """About len(str(value)) (or of its JSON with `indent`), without building it; stops past `cap`."""
    if isinstance(value, str):
        return len(value)
    total, steps, stack = 0, 0, [iter((value,))]  # one iterator per open container
    while stack and total <= cap:
        v = next(stack[-1], _END)
        if v is _END:
            stack.pop()
            continue
        steps += 1
        if not steps & 0xFFFF:
            current().check_time()
        total += 1 + indent * len(stack)  # separator, newline and indentation
        if isinstance(v, str):
            plain = v.isprintable() and '"' not in v and "\\" not in v
            total += len(v) + 2 + (0 if plain else 5 * _JSON_ESCAPED.subn("", v)[1])
        elif isinstance(v, bool) or v is None:
            total += 5
        elif isinstance(v, int):
            total += v.bit_length() * 3 // 10 + 2
        elif isinstance(v, float):
            total += 24
        elif isinstance(v, dict):
            total += 2 + 4 * len(v)  # at least "k: v, " per item: a huge dict stops here, unwalked
            stack.append(x for item in v.items() for x in item)
        elif isinstance(v, (list, tuple, set, frozenset)):
            total += 2 + 2 * len(v)  # at least "x, " per item
            stack.append(iter(v))
        elif isinstance(v, Namespace):
            total += 13
            stack.append(iter((object.__getattribute__(v, "_Namespace__attrs"),)))
        elif isinstance(v, (bytes, bytearray)):
            total += 4 * len(v) + 3
        else:  # an undefined, a macro, a loop, a cycler: their str() is short
            total += 80
    return total


_END = object()


def shallow_len(value) -> int:
    return len(value) if isinstance(value, (str, bytes, list, tuple, dict, set, frozenset)) else 0


# '%' conversion specs and the width/precision inside str.format specs
_PRINTF_SPEC = re.compile(r"%(?:\([^)]*\))?[#0\- +]*(\*|\d+)?(?:\.(\*|\d+))?[hlL]?([a-zA-Z%])?")
_FORMAT_NUMBERS = re.compile(r"\d+")


def format_cost(fmt: str, args, budget: Budget, printf: bool) -> int:
    """Refuse star or huge widths; returns an upper bound of the formatted length."""
    limits = budget.limits
    if printf:
        specs = _PRINTF_SPEC.findall(fmt)
        numbers = [n for spec in specs for n in spec[:2] if n]
        fields = len(specs)
    else:
        numbers, fields = [], 0
        for spec in re.findall(r"\{[^{}]*\}", fmt):
            fields += 1
            _, _, format_spec = spec[1:-1].partition(":")
            numbers += _FORMAT_NUMBERS.findall(format_spec)
        if re.search(r"\{[^{}]*\{", fmt.replace("{{", "").replace("}}", "")):
            raise LimitExceeded("nested replacement fields in a format spec are not supported")
    if "*" in numbers:
        raise LimitExceeded("'*' widths in string formatting are not supported")
    widest = 0
    for n in numbers:
        if len(n) > 9 or int(n) > limits.max_format_width:
            raise LimitExceeded(f"a format width or precision above {limits.max_format_width}")
        widest = max(widest, int(n))
    per_field = size_of(args, limits.max_value_len) + widest + 2
    return len(fmt) + fields * per_field


# The filters and methods below can build something much larger than their inputs; each
# gets a cost estimate before it runs. The cost of the rest is at most `GROWTH` (default
# 1) times their input, checked the same way.
GROWTH = {"escape": 6, "e": 6, "forceescape": 6, "xmlattr": 6, "urlencode": 12, "urlize": 10, "upper": 3,
           "lower": 3, "title": 3, "capitalize": 3, "pprint": 3, "string": 1}


# filters whose cost depends on their arguments, not only on their input (see _filter_cost)
SIZED_BY_ARGS = ("center", "indent", "wordwrap", "replace", "join", "format", "batch", "slice", "tojson", "sum",
                  "truncate")


def filter_cost(name: str, a: dict, budget: Budget) -> int:
    """Estimated size of what filter `name` returns, from its bound arguments `a` (value first)."""
    cap = budget.limits.max_value_len
    value = next(iter(a.values()))
    if name == "center":
        return max(size_of(value, cap), _int_arg(a["width"]))
    if name == "indent":
        width = a["width"]
        step = len(width) if isinstance(width, str) else _int_arg(width)
        text = value if isinstance(value, str) else ""
        return size_of(value, cap) + (text.count("\n") + 2) * step
    if name == "wordwrap":
        text, width = str(value)[:cap + 1], max(_int_arg(a["width"]), 1)
        wrap = a["wrapstring"] or "\n"
        return len(text) + (2 * len(text) // width + text.count("\n") + 2) * size_of(wrap, cap)
    if name == "replace":
        text = value if isinstance(value, str) else str(value)[:cap + 1]
        return _replace_cost(text, a["old"], a["new"], a["count"])
    if name == "join":
        sep = a["d"] if isinstance(a["d"], str) else ""
        n = len(value) if hasattr(value, "__len__") else 0
        return size_of(value, cap) + max(n - 1, 0) * len(sep)
    if name == "format":
        return format_cost(str(value), (a["args"], a["kwargs"]), budget, printf=True)
    if name in ("batch", "slice"):
        return size_of(value, cap) + _int_arg(a["linecount" if name == "batch" else "slices"])
    if name == "tojson":
        indent, separators = a["indent"], a["separators"]
        step = (len(indent) if isinstance(indent, str) else _int_arg(indent or 0)) + size_of(separators or "", 64)
        if step > 64:
            raise LimitExceeded("tojson indent and separators of more than 64 characters")
        return size_of(value, cap, indent=step)
    if name == "sum" and not isinstance(a["start"], (int, float)):
        raise LimitExceeded("sum with a non-numeric start is not supported")
    if name == "truncate":
        return min(size_of(value, cap), _int_arg(a["length"])) + size_of(a["end"], cap) + 1
    return size_of(value, cap)


def _int_arg(x) -> int:
    """An int argument that sizes something (bools and non-ints size nothing)."""
    return x if isinstance(x, int) and not isinstance(x, bool) else 0


def _replace_cost(text: str, old, new, count) -> int:
    if not (isinstance(old, str) and isinstance(new, str)):
        return len(text)
    hits = text.count(old) if old else len(text) + 1
    if isinstance(count, int) and count >= 0:
        hits = min(hits, count)
    return len(text) + hits * max(len(new) - len(old), 0)


def method_cost(obj, name: str, args: tuple, kwargs: dict, budget: Budget):
    """Cost of calling str/bytes/int method `name` on `obj` (None if it cannot grow); may rewrite args."""
    cap = budget.limits.max_value_len
    if isinstance(obj, (str, bytes)):
        if name in ("center", "ljust", "rjust", "zfill") and args:
            return max(len(obj), _int_arg(args[0])), args
        if name == "expandtabs":
            tab = _int_arg(args[0] if args else kwargs.get("tabsize", 8))
            return len(obj) + obj.count("\t" if isinstance(obj, str) else b"\t") * tab, args
        if name == "replace" and len(args) >= 2:
            return _replace_cost(obj, args[0], args[1], args[2] if len(args) > 2 else kwargs.get("count")), args
        if name == "join" and args:
            items = list(args[0])  # at most max_value_len items: it was built under the same limits
            budget.allow(len(items), "join's argument")
            return sum(size_of(x, cap) for x in items) + max(len(items) - 1, 0) * len(obj), (items, *args[1:])
        if name in ("format", "format_map") and isinstance(obj, str):
            return format_cost(obj, (args, kwargs), budget, printf=False), args
        if name == "translate" and args and isinstance(args[0], dict):
            longest = max((size_of(v, cap) for v in args[0].values()), default=1)
            return len(obj) * max(longest, 1), args
    if isinstance(obj, int) and name == "to_bytes":
        return _int_arg(args[0] if args else kwargs.get("length", 1)), args
    return None, args


def binop_cost(op: str, left, right, limits: TemplateLimits) -> int:
    """Size of `left op right` before computing it (chars, items, or integer bits / 4)."""
    def is_int(x):
        return isinstance(x, int)  # bool included: True * 'a' is 'a'

    sized = (str, bytes, list, tuple)
    if op == "*":
        if is_int(left) and is_int(right):
            bits = left.bit_length() + right.bit_length()
            if bits > limits.max_int_bits:
                raise LimitExceeded(f"an integer of about {bits} bits (limit {limits.max_int_bits})")
            return 0
        for seq, n in ((left, right), (right, left)):
            if isinstance(seq, sized) and is_int(n):
                return len(seq) * max(n, 0)
        return 0
    if op == "**":
        # |left| >= 2**(bits - 1), so the result has at least right * (bits - 1) bits
        if is_int(left) and is_int(right) and right > 0 and right * (left.bit_length() - 1) > limits.max_int_bits:
            raise LimitExceeded(f"{left.bit_length()}-bit integer to the power {right} "
                                 f"(limit {limits.max_int_bits} bits)")
        return 0
    if op == "+":
        if isinstance(left, sized) and isinstance(right, sized):
            return len(left) + len(right)
        return 0
    if op == "%" and isinstance(left, str):
        return format_cost(left, right, current(), printf=True)
    return 0
