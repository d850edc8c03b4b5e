"""Chat templates: rendered as transformers renders them, in a sandbox that bounds their cost.

A chat template is code shipped with the model. transformers runs it in jinja2's
`ImmutableSandboxedEnvironment` (no attribute escapes, no mutation of lists and dicts),
with `trim_blocks`, `lstrip_blocks`, `raise_exception`, `strftime_now`, a `tojson` that does
not escape HTML, the `{% generation %}` tag and loop controls; so does this module, so
prompts stay byte-identical. The sandbox alone bounds none of memory and time
(`{{ 'a' * 10**10 }}` allocates 10 GB, `{{ 10**10**10 }}` computes for hours), so here
every operation that can make something large or slow is checked before it runs,
against `TemplateLimits`:

- the template is rewritten after parsing so that every loop iteration, every piece of
  output (including output captured by `{% set %}` blocks and macros) and every `~`
  concatenation passes through a counter;
- calls, filters and the operators `* ** + %` go through the environment, which checks
  sizes first: string/list repetition, integer size, format widths, `join`, `replace`,
  `center`, `indent`, `tojson`, ...; recursive macros are bounded by the call depth;
- one render has a wall-clock budget, checked at every counted step.

Any failure is a `ChatTemplateError` (a ValueError) naming the file the template came from.
"""

import json
from datetime import datetime
from functools import wraps
from inspect import signature

import jinja2
import jinja2.ext
from jinja2 import nodes
from jinja2.runtime import LoopContext
from jinja2.sandbox import ImmutableSandboxedEnvironment

from .files import ModelFileError, unicode_problem
from .template_limits import (BUDGET, DEFAULT_LIMITS, GROWTH, SIZED_BY_ARGS, Budget, LimitExceeded, TemplateLimits,
                              binop_cost, current, filter_cost, method_cost, shallow_len, size_of)

_FIELD = "chat_template"


class ChatTemplateError(ModelFileError):
    """A chat template that does not compile, or that failed or went over a limit while rendering."""

    def __init__(self, origin: str, message: str):
        super().__init__(origin, _FIELD, message)


def _raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def _tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(fmt):
    if not isinstance(fmt, str) or len(fmt) > 4096:
        raise LimitExceeded("strftime_now takes a format string of at most 4096 characters")
    return datetime.now().strftime(fmt)


class _GenerationTag(jinja2.ext.Extension):
    """`{% generation %}...{% endgeneration %}` as in transformers, rendering its body unchanged."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


class _LimitedSandbox(ImmutableSandboxedEnvironment):
    """transformers' sandbox, with every cost checked against the limits of the render in progress."""

    intercepted_binops = frozenset(["*", "**", "+", "%"])

    def __init__(self):
        super().__init__(trim_blocks=True, lstrip_blocks=True, extensions=[_GenerationTag, jinja2.ext.loopcontrols])
        self.filters["tojson"] = _tojson
        self.filters = {name: self._bounded_filter(name, f) for name, f in self.filters.items()}
        self.filters.update({_ITER: _iterate, _OUT: _write, _CONCAT: _concat})
        self.globals["raise_exception"] = _raise_exception
        self.globals["strftime_now"] = _strftime_now
        self.globals.pop("lipsum", None)  # lipsum(n=10**9) writes n paragraphs; no real template uses it

    def _parse(self, source, name, filename):
        tree = super()._parse(source, name, filename)
        _instrument(tree)
        tree.set_environment(self)
        return tree

    def _bounded_filter(self, name: str, func):
        skip = 1 if getattr(func, "jinja_pass_arg", None) is not None else 0
        sig = signature(func) if name in SIZED_BY_ARGS else None
        # jinja's async-capable filters show the signature of their sync body, with or without
        # the context/environment parameter: bind past it either way
        if sig is not None and skip and next(iter(sig.parameters), None) in ("eval_ctx", "environment", "env", "context"):
            sig = sig.replace(parameters=list(sig.parameters.values())[1:])

        @wraps(func)
        def bounded(*args, **kwargs):
            budget = current()
            budget.enter_call()
            try:
                if len(args) > skip and hasattr(type(args[skip]), "__next__"):  # map/select output: size it first
                    items = []
                    for item in args[skip]:
                        items.append(item)
                        if len(items) & 0xFFFF == 0:
                            budget.allow(0x10000, f"the input of filter '{name}'")
                    args = (*args[:skip], items, *args[skip + 1:])
                if sig is not None:
                    bound = sig.bind(*args[skip:], **kwargs)
                    bound.apply_defaults()
                    cost = filter_cost(name, bound.arguments, budget)
                else:
                    value = args[skip] if len(args) > skip else None
                    cost = GROWTH.get(name, 1) * size_of(value, budget.limits.max_value_len)
                budget.allow(cost, f"filter '{name}'")
                result = func(*args, **kwargs)
                budget.allow(shallow_len(result), f"the result of filter '{name}'")
                return result
            finally:
                budget.depth -= 1

        return bounded

    def call_binop(self, context, operator, left, right):
        budget = current()
        budget.check_time()
        cost = binop_cost(operator, left, right, budget.limits)
        budget.allow(cost, f"'{operator}'")
        return super().call_binop(context, operator, left, right)

    def call(__self, __context, __obj, *args, **kwargs):  # noqa: N805 (jinja's own spelling)
        budget = current()
        budget.enter_call()
        try:
            if isinstance(__obj, LoopContext) and args:  # `loop(children)` in a recursive for
                args = (_iterate(__context, args[0]), *args[1:])
            method = getattr(__obj, "__wrapped__", __obj)  # the sandbox wraps str.format
            owner = getattr(method, "__self__", None)
            cost, args = method_cost(owner, getattr(method, "__name__", ""), args, kwargs, budget)
            if cost is not None:
                budget.allow(cost, f"{type(owner).__name__}.{method.__name__}")
            result = super().call(__context, __obj, *args, **kwargs)
            budget.allow(shallow_len(result), "a call's result")
            return result
        finally:
            budget.depth -= 1


# Names of the filters the rewritten template calls (not valid jinja identifiers, so a
# template cannot name them itself).
_ITER, _OUT, _CONCAT = "llaisys:iter", "llaisys:out", "llaisys:concat"


@jinja2.pass_context
def _iterate(context, iterable):
    """Every item a loop takes counts one iteration."""
    def items():
        budget = current()
        for item in iterable:
            budget.iteration()
            yield item

    return items()


@jinja2.pass_context
def _write(context, value):
    """Everything written (to the output, a {% set %} block or a macro's result) counts."""
    budget = current()
    budget.check_time()
    budget.allow(size_of(value, budget.limits.max_value_len), "one output expression")
    return value


@jinja2.pass_context
def _concat(context, parts):
    """`a ~ b ~ ...` with its size checked first (the same result as jinja's str_join)."""
    budget = current()
    budget.allow(sum(size_of(p, budget.limits.max_value_len) for p in parts), "'~' concatenation")
    return "".join(map(str, parts))


def _filter_node(name: str, node: nodes.Node) -> nodes.Filter:
    return nodes.Filter(node, name, [], [], None, None, lineno=node.lineno)


def _counted_concat(node):
    """`a ~ b` -> llaisys:concat([a, b]); any other node unchanged."""
    if not isinstance(node, nodes.Concat):
        return node
    return _filter_node(_CONCAT, nodes.List(node.nodes, lineno=node.lineno))


def _instrument(tree: nodes.Template) -> None:
    """Route loops, output and `~` through the counting filters (iteratively: trees can be deep)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, nodes.For):
            node.iter = _filter_node(_ITER, node.iter)
        elif isinstance(node, nodes.Output):
            node.nodes = [_filter_node(_OUT, child) for child in node.nodes]
        for field in node.fields:
            value = getattr(node, field, None)
            if isinstance(value, list):
                setattr(node, field, [_counted_concat(v) for v in value])
            elif isinstance(value, nodes.Node):
                setattr(node, field, _counted_concat(value))
        stack.extend(node.iter_child_nodes())


class ChatTemplate:
    """A compiled chat template, rendered under `limits`.

    origin: where the template came from (a file path, for error messages).
    """

    def __init__(self, source: str, origin: str = _FIELD, limits: TemplateLimits = DEFAULT_LIMITS):
        self.source = source  # jinja text
        self.origin = origin  # "<dir>/chat_template.jinja", "<dir>/tokenizer_config.json", ...
        self.limits = limits
        if not isinstance(source, str):
            raise ChatTemplateError(origin, f"chat_template must be a string, got {type(source).__name__}")
        if len(source) > limits.max_source_chars:
            raise ChatTemplateError(origin, f"chat_template is {len(source)} characters "
                                            f"(limit {limits.max_source_chars})")
        problem = unicode_problem(source)
        if problem:
            raise ChatTemplateError(origin, f"chat_template {problem}")
        env = _LimitedSandbox()
        token = BUDGET.set(Budget(limits))  # constant folding runs template code too
        try:
            self._template = env.from_string(source)
        except jinja2.exceptions.TemplateSyntaxError as e:
            raise ChatTemplateError(origin, f"chat template has a syntax error: {e}") from None
        except RecursionError:
            raise ChatTemplateError(origin, "chat template is nested too deeply to compile") from None
        except Exception as e:  # noqa: BLE001 - jinja and Python's compile() raise many types
            raise ChatTemplateError(origin, f"chat template does not compile: {type(e).__name__}: {e}") from None
        finally:
            BUDGET.reset(token)

    def __reduce__(self):  # pickled as its source and compiled again where it lands (Ray ships tokenizers)
        return (ChatTemplate, (self.source, self.origin, self.limits))

    def render(self, **variables) -> str:
        """The rendered text, or ChatTemplateError (the template failed or went over a limit)."""
        budget = Budget(self.limits)
        token = BUDGET.set(budget)
        try:
            chunks, length = [], 0
            for chunk in self._template.generate(**variables):
                length += len(chunk)
                if length > self.limits.max_output_chars:
                    raise LimitExceeded(f"the output is longer than {self.limits.max_output_chars} characters")
                chunks.append(chunk)
            text = "".join(chunks)
        except LimitExceeded as e:
            raise ChatTemplateError(self.origin, f"chat template went over a limit: {e}") from None
        except jinja2.exceptions.TemplateError as e:
            raise ChatTemplateError(self.origin, f"chat template rejected the messages: {e}") from None
        except RecursionError:
            raise ChatTemplateError(self.origin, "chat template recursed too deeply") from None
        except MemoryError:
            raise ChatTemplateError(self.origin, "chat template ran out of memory") from None
        except Exception as e:  # noqa: BLE001 - template code can raise anything Python raises
            raise ChatTemplateError(self.origin, f"chat template failed: {type(e).__name__}: {e}") from None
        finally:
            BUDGET.reset(token)
        problem = unicode_problem(text)
        if problem:
            raise ChatTemplateError(self.origin, f"chat template output {problem}")
        return text
