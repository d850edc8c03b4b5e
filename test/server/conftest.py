"""Real servers for the server tests: `python -m llaisys.cli serve <model> --port P ...` as a
subprocess on a free loopback port, started once per test module (the real 0.5B model).

`start_server(*args)` (module scope) returns a server_helpers.Server; every one is stopped
with SIGTERM at the end of the module, and its log is printed if a test failed.
"""

import pytest

from server_helpers import launch


@pytest.fixture(scope="module")
def start_server(qwen05_dir, tmp_path_factory, request):
    started = []

    def start(*args: str):
        srv = launch(qwen05_dir, tmp_path_factory.mktemp("server"), *args)
        started.append(srv)
        return srv

    yield start
    for srv in started:
        srv.stop()
        if request.session.testsfailed:
            print(f"\n---- server log (port {srv.port}) ----\n{srv.log()[-20000:]}")


@pytest.fixture(scope="session")
def tiny_chat_model(qwen05_dir, tmp_path_factory):
    """A tiny random checkpoint with the real Qwen2.5 tokenizer (tiny_model.py): fast to serve."""
    from tiny_model import make_tiny_chat_model

    return make_tiny_chat_model(tmp_path_factory.mktemp("tiny_chat"), qwen05_dir)


@pytest.fixture(scope="module")
def start_tiny_server(tiny_chat_model, tmp_path_factory, request):
    """start(*args) -> a real server over the tiny checkpoint (stopped at the end of the module)."""
    started = []

    def start(*args: str):
        srv = launch(tiny_chat_model, tmp_path_factory.mktemp("tiny_server"), *args)
        started.append(srv)
        return srv

    yield start
    for srv in started:
        srv.stop()
        if request.session.testsfailed:
            print(f"\n---- server log (port {srv.port}) ----\n{srv.log()[-20000:]}")
