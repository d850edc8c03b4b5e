"""llaisys on Ray Serve: many engine replicas behind one OpenAI-compatible endpoint
(``pip install llaisys[ray]``; ``llaisys serve --ray --replicas N``).

- ``replica.LLMReplica``: one full AsyncEngine per replica (its own process, cores or GPU);
  it streams RequestOutputs and reports what its prefix cache holds (``record_routing_stats``).
- ``router.PrefixAwareRouter``: a ``ray.serve.request_router.RequestRouter`` that sends a
  session's turns, and prompts sharing cached blocks, to the replica holding them unless its
  queue is much longer than the least-loaded one's; otherwise least outstanding tokens.
- ``client.ReplicaEngine``: an AsyncEngine look-alike in the ingress that talks to the
  replicas through a Serve handle (retries a request that has not streamed yet when its
  replica dies). The ingress runs the same Flask app as ``llaisys serve`` over it.
- ``ingress.Ingress``: the Serve ingress (a Starlette request handed to the Flask app).
- ``app.build_app``: the Serve application; ``cli.run_serve_ray``: the command.

Nothing here is imported by ``import llaisys``; ``ray`` itself is imported only by the
modules that need it.
"""
