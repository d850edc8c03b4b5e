"""A local Ray cluster on 127.0.0.1 serving a tiny real checkpoint with 2 LLMReplica replicas
behind the llaisys ingress (module scope; shut down in the finalizer).

The tests that need it skip only when Ray Serve (or the openai client) is not installed.
Ray reserves almost nothing (the machine's cores are shared): each replica asks for a
quarter CPU and runs one kernel thread.
"""

import time

import pytest
from benchkit.net import free_port

from ray_cluster import API_KEY, MODEL, READY_TIMEOUT_S, Cluster, wait_healthy


@pytest.fixture(scope="session")
def tiny_model(qwen05_dir, tmp_path_factory):
    from tiny_checkpoint import make_tiny_checkpoint

    return make_tiny_checkpoint(tmp_path_factory.mktemp("ray_tiny"), qwen05_dir, tie=True)


@pytest.fixture(scope="module")
def cluster(tiny_model, request):
    ray = pytest.importorskip("ray")
    serve = pytest.importorskip("ray.serve")
    pytest.importorskip("openai")
    from llaisys.ray.app import RayOptions, build_app
    from llaisys.ray.ingress import IngressSettings
    from llaisys.server.state.limits import ServerLimits
    from llaisys.server.state.registry import ModelSpec

    port = free_port()
    # the workers inherit this environment: they import the tree under test and its library
    ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level="WARNING", log_to_driver=False,
             configure_logging=False)
    request.addfinalizer(ray.shutdown)
    request.addfinalizer(serve.shutdown)
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": port})
    except (TimeoutError, ray.exceptions.RayActorError):  # Serve gives its proxy 60 s: a busy machine may miss it
        serve.shutdown()
        serve.start(http_options={"host": "127.0.0.1", "port": port})
    settings = IngressSettings(specs=[ModelSpec(str(tiny_model), MODEL)], api_keys=(API_KEY,),
                               limits=ServerLimits(request_timeout_s=120.0))
    engine = dict(kv_cache_memory="32MiB", max_num_seqs=16, max_num_batched_tokens=512, max_model_len=512,
                  kv_dtype="f32")
    opts = RayOptions(replicas=2, replica_cpus=0.25, threads=1, stats_period_s=0.5, drain_timeout=90.0)
    serve.run(build_app(settings, engine, opts), name="llaisys", route_prefix="/", blocking=False)
    c = Cluster(port)
    c.app_args = (settings, engine, opts)  # what build_app was given (the drain test redeploys)
    deadline = time.monotonic() + READY_TIMEOUT_S
    wait_healthy(c, deadline)
    # both replicas have reported to the router (routing and metrics read the reports)
    while len([k for k in c.metrics() if k.startswith("llaisys:replica_num_requests_running")]) < 2:
        assert time.monotonic() < deadline, "the replicas' routing reports never arrived"
        time.sleep(0.5)
    return c
