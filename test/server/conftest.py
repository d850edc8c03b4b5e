"""Real servers for the server tests: `python -m llaisys.cli serve <model> --port P ...` as a
subprocess on a free loopback port, started once per test module (the real 0.5B model, in the
format `make serve` runs on this CPU: qwen05_served; start_dir_server serves the bf16 directory,
for tests that compare with transformers on its weights).

`start_server(*args)` (module scope) returns a server_helpers.Server; every one is stopped
with SIGTERM at the end of the module, and its log is printed if a test failed.
"""

import pytest

from server_helpers import launch


def _servers(model_dir, tmp_path_factory, request, name: str):
    """start(*args) -> a real server over model_dir; every one is stopped when the generator
    ends, with its log printed if a test of the session failed."""
    started = []

    def start(*args: str):
        srv = launch(model_dir, tmp_path_factory.mktemp(name), *args)
        started.append(srv)
        return srv

    yield start
    for srv in started:
        srv.stop()
        if request.session.testsfailed:
            print(f"\n---- server log (port {srv.port}) ----\n{srv.log()[-20000:]}")


@pytest.fixture(scope="module")
def start_server(qwen05_served, tmp_path_factory, request):
    yield from _servers(qwen05_served, tmp_path_factory, request, "server")


@pytest.fixture(scope="module")
def start_dir_server(qwen05_dir, tmp_path_factory, request):
    """start(*args) -> a real server over the bf16 directory (transformers' weights)."""
    yield from _servers(qwen05_dir, tmp_path_factory, request, "dir_server")


@pytest.fixture(scope="session")
def tiny_chat_model(qwen05_dir, tmp_path_factory):
    """A tiny random checkpoint with the real Qwen2.5 tokenizer (test/tiny_checkpoint.py): fast to serve."""
    from tiny_checkpoint import make_tiny_checkpoint

    return make_tiny_checkpoint(tmp_path_factory.mktemp("tiny_chat"), qwen05_dir, tie=True)


@pytest.fixture(scope="module")
def start_tiny_server(tiny_chat_model, tmp_path_factory, request):
    """start(*args) -> a real server over the tiny checkpoint (stopped at the end of the module)."""
    yield from _servers(tiny_chat_model, tmp_path_factory, request, "tiny_server")
