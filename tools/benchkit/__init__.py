"""What the benchmarks and tools in tools/ share, each piece once (standard library only at import).

    host         the machine a figure was taken on: CPU model and SIMD flags, THP mode, RSS, GPU
    stats        per-call timing (wall or CPU clock), the header line of a run, percentiles
    net          free_port(): a loopback port for a server a tool or a test starts
    openai_http  a client for OpenAI-compatible servers: one connection a request, SSE read as it comes
    server       launch(): `llaisys serve` on a free port, waited for, stopped; /metrics gauges (needs requests)
    peer         the llama.cpp peer: where tools/build_llama_cpp.py builds it, its description and environment
    prompts      the parity prompts (test/parity and tools/bench_kv_dtype.py)

A tool run as `python tools/x.py` has tools/ on sys.path already and imports `from benchkit.host
import machine`; the tests get tools/ from pytest's `pythonpath` (pyproject.toml). Nothing here
imports llaisys at module level: the llama.cpp peer's interpreter imports benchkit too.
"""
