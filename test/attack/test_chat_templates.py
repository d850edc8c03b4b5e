"""Hostile chat templates, rendered as the server and LLM.chat render them:
Tokenizer.from_dir(model).apply_chat_template(messages).

Each template tries to burn memory or time (or to escape the sandbox) and must end in a
ChatTemplateError (a ValueError) naming chat_template.jinja, within the limits of
chat_template.TemplateLimits. Cases run in a forked child with a memory limit, so a
template that still allocates 10 GB fails its test instead of killing the machine.
"""

import shutil

import pytest

from llaisys.models.tokenizer import Tokenizer

from .crafted import expect_refused, run_isolated

MESSAGES = [{"role": "user", "content": "hi"}]

TEMPLATES = [  # (id, template)
    ("str_times_1e10", "{{ 'a' * 10**10 }}"),
    ("list_times_1e10", "{{ [1] * 10**10 }}"),
    ("int_power_1e10", "{{ 10 ** (10 ** 10) }}"),
    ("int_power_2e5", "{{ 2 ** 100000 }}"),
    ("int_squaring_loop", "{% set ns = namespace(x=7) %}{% for i in range(100) %}{% set ns.x = ns.x * ns.x %}"
                          "{% endfor %}{{ ns.x }}"),
    ("range_1e9", "{% for i in range(10**9) %}{% endfor %}"),
    ("nested_ranges_1e10", "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"),
    ("recursive_macro", "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"),
    ("exponential_macro", "{% macro f(n) %}{% if n < 40 %}{{ f(n + 1) }}{{ f(n + 1) }}{% endif %}{% endmacro %}"
                          "{{ f(0) }}"),
    ("recursive_loop", "{% for x in [1] recursive %}{{ loop([1]) }}{% endfor %}"),
    ("printf_width", "{{ '%999999999d' % 1 }}"),
    ("printf_star_width", "{{ '%*d' % (10**9, 1) }}"),
    ("printf_precision", "{{ '%.999999999f' % 1.0 }}"),
    ("format_width", "{{ '{:999999999}'.format(1) }}"),
    ("format_nested_width", "{{ '{:{}}'.format(1, 10**9) }}"),
    ("format_filter_width", "{{ '%999999999s'|format(1) }}"),
    ("join_huge_separator", "{{ range(100000)|join('x' * 1000000) }}"),
    ("join_method_huge", "{{ ('x' * 1000000).join(range(100000)|map('string')) }}"),
    ("center_1e10", "{{ 'a'|center(10**10) }}"),
    ("ljust_1e10", "{{ 'a'.ljust(10**10) }}"),
    ("indent_1e10", "{{ 'a\nb'|indent(10**10) }}"),
    ("replace_empty_quadratic", "{{ ('a' * 1000000).replace('', 'b' * 1000) }}"),
    ("replace_filter_quadratic", "{{ ('a' * 1000000)|replace('a', 'b' * 1000) }}"),
    ("concat_doubling", "{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}"
                        "{% endfor %}{{ ns.s }}"),
    ("plus_doubling", "{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}"
                      "{% endfor %}"),
    ("list_doubling", "{% set ns = namespace(l=[1]) %}{% for i in range(64) %}{% set ns.l = ns.l + ns.l %}"
                      "{% endfor %}"),
    ("set_block_flood", "{% set x %}{% for i in range(100000) %}{{ 'y' * 1000 }}{% endfor %}{% endset %}"),
    ("output_flood", "{% for i in range(100000) %}{% for j in range(9) %}{{ 'y' * 10000 }}{% endfor %}"
                     "{% endfor %}"),
    ("batch_fill_1e10", "{{ [1]|batch(10**10, 0)|list }}"),
    ("slice_1e9", "{{ [1]|slice(10**9)|list }}"),
    ("to_bytes_1e10", "{{ (1).to_bytes(10**10, 'big') }}"),
    ("tojson_indent_1e9", "{{ messages|tojson(indent=10**9) }}"),
    ("str_of_shared_lists", "{{ ([['x' * 1000000] * 1000] * 1000)|string }}"),
    ("translate_blowup", "{{ ('a' * 1000000).translate(''.maketrans({'a': 'b' * 100})) }}"),
    ("expandtabs_blowup", "{{ ('\t' * 1000000).expandtabs(1000) }}"),
    ("lipsum_1e9", "{{ lipsum(n=10**9) }}"),
    ("strftime_huge_format", "{{ strftime_now('%c' * 100000) }}"),
    ("sum_of_lists", "{{ [[1] * 1000] * 10000|sum(start=[]) }}"),
    ("wordwrap_blowup", "{{ ('a ' * 1000000)|wordwrap(1, wrapstring='x' * 1000) }}"),
    ("deep_tojson", "{% set ns = namespace(x=[]) %}{% for i in range(5000) %}{% set ns.x = [ns.x] %}{% endfor %}"
                    "{{ ns.x|tojson }}"),
    ("attribute_escape", "{{ messages.__class__.__mro__[1].__subclasses__() }}"),
    ("include_file", "{% include '/etc/passwd' %}"),
    ("undefined_call", "{{ nothing_here() }}"),
    ("zero_division", "{{ 1 // 0 }}"),
    ("lone_surrogate_output", "{{ '\\ud800' }}"),
    ("raise_exception", "{{ raise_exception('only user turns') }}"),
]
# issue 16 item 3: on the old code the first gets the process OOM-killed (here: MemoryError under the
# child's memory limit), the others raise OverflowError and RecursionError instead of a ValueError
REPRODUCERS = {"str_times_1e10", "range_1e9", "recursive_macro"}


@pytest.mark.parametrize("template", [t for _, t in TEMPLATES], ids=[i for i, _ in TEMPLATES])
def test_hostile_template_is_refused(tiny_dir, tmp_path, template):
    path = tmp_path / "model"
    shutil.copytree(tiny_dir, path)
    (path / "chat_template.jinja").write_text(template, encoding="utf-8", errors="surrogatepass")
    outcome = run_isolated(lambda: Tokenizer.from_dir(path).apply_chat_template(MESSAGES))
    expect_refused(outcome, "chat_template", "chat_template.jinja")


def test_the_base_template_renders(tiny_dir):
    text = Tokenizer.from_dir(tiny_dir).apply_chat_template(MESSAGES)
    assert text == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
