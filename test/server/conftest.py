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
