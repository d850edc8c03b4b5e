"""Argument groups that more than one command shares: the engine's --quant/--quantize (generate and serve)
and serve's --ray group. A leaf: it imports no command, so serve, generate and the Ray command can all use it."""

from __future__ import annotations

from .cli_models import QUANT_DEFAULT

THREADS_HELP = "threads for the CPU kernels (default: the physical cores)"
QUANT_HELP = "which download of a known model to run: q4_k_m (its GGUF, as it is), q8_0 (a Q8_0 GGUF) or bf16 " \
             f"(the converted directory) (default: {QUANT_DEFAULT})"
QUANTIZE_HELP = "quantize an HF directory's linear weights and embedding at load: q8_0, or q4_k (the Q4_K_M recipe)"


BATCH_INVARIANT_HELP = "keep every quantized linear on one path at every batch size (CPU), so that a request's " \
                       "greedy answer does not depend on what shares its steps or on the prefix cache; prefill " \
                       "is slower where `llaisys info` shows a float path (doc/engine.md)"


def add_quant_arguments(p) -> None:
    """--quant, --quantize and --batch-invariant, shared by generate and serve."""
    p.add_argument("--quant", default=None, choices=["q4_k_m", "q8_0", "bf16"], help=QUANT_HELP)
    p.add_argument("--quantize", default=None, choices=["q8_0", "q4_k"], help=QUANTIZE_HELP)
    p.add_argument("--batch-invariant", action="store_true", default=None, help=BATCH_INVARIANT_HELP)


def add_ray_arguments(p) -> None:
    """The --ray option group of `llaisys serve` (llaisys.ray.cli runs it; nothing here imports ray)."""
    r = p.add_argument_group("Ray Serve (pip install 'llaisys[ray]'; doc/distributed.md)")
    r.add_argument("--ray", action="store_true", help="serve on Ray Serve: engine replicas behind one endpoint "
                                                      "with prefix- and session-aware routing")
    r.add_argument("--address", default=None, help="join this Ray cluster (HOST:PORT of `ray start --head`, or "
                                                   "'auto'); default: start a local one")
    r.add_argument("--replicas", type=int, default=1, help="engine replicas per model")
    r.add_argument("--autoscaling-config", default=None, metavar="JSON",
                   help="Serve autoscaling_config passed to Ray as it is, e.g. "
                        "'{\"min_replicas\": 1, \"max_replicas\": 4, \"target_ongoing_requests\": 16}' "
                        "(replaces --replicas)")
    r.add_argument("--replica-cpus", type=float, default=1.0,
                   help="Ray CPUs each replica reserves; also its kernel threads unless --threads is given")
    r.add_argument("--pin-cores", action="store_true", help="pin each replica to its own cores of its node")
    r.add_argument("--router", default="prefix", choices=["prefix", "pow2"],
                   help="prefix: session/prefix affinity, else least outstanding tokens; pow2: Ray's default")
    r.add_argument("--route-imbalance", type=int, default=8,
                   help="requests in flight beyond the least-loaded replica's that void a session or prefix "
                        "affinity")
    r.add_argument("--routing-stats-period", type=float, default=1.0,
                   help="seconds between the replicas' reports of their prefix caches to the router")
    r.add_argument("--replica-max-ongoing-requests", type=int, default=64,
                   help="requests one replica takes at once (more wait in the router)")
