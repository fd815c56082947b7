"""A judge the run serves itself (``judge:`` in the run config; DESIGN.md decision 16): a
checkpoint as its own Serve deployment beside the Policy, never trained, with the same engines
(``torch``, ``vllm``, ...). The driver answers for it on loopback, over the OpenAI and Anthropic
wires of ``forge serve``, with a key made for the run; every HarnessPod gets
``FORGE_JUDGE_MODEL``, ``FORGE_JUDGE_BASE_URL`` and ``FORGE_JUDGE_API_KEY``
(``placement.harness_pod.env``), so each ``judge`` verifier that names no endpoint of its own
asks it (cached and recorded like any judge, :mod:`rewards.judge_client`).

Its endpoint is the driver's loopback: HarnessPods on the driver's node reach it; on a cluster
whose pods run on other nodes, serve the judge yourself and give its address instead.
"""

from __future__ import annotations

import secrets
import time
from typing import Any

from forge.config import RunConfig
from rewards.judge import BASE_URL_ENV, KEY_ENV, MODEL_ENV

APP = "forge-judge"


class ServedJudge:
    """The run's own judge while it runs: :meth:`start` deploys it, :meth:`stop` removes it."""

    def __init__(self, config: RunConfig, server: Any = None) -> None:
        self.config = config  # the run's config, its pods told where the judge is
        self._server = server

    @classmethod
    def start(cls, config: RunConfig) -> ServedJudge:
        if config.judge is None:
            return cls(config)
        from serve.policy import deploy_policy
        from serve.server import BackgroundServer, make_app

        t0 = time.perf_counter()
        handle = deploy_policy(config.judge, app_name=APP)
        model, key = config.judge.engine.model, "forge-judge-" + secrets.token_urlsafe(24)
        server = BackgroundServer(make_app(handle, model, api_key=key))
        url = server.__enter__()
        env = {MODEL_ENV: model, BASE_URL_ENV: f"{url}/v1", KEY_ENV: key}
        pod = config.placement.harness_pod
        pod = pod.model_copy(update={"env": {**pod.env, **env}})
        placement = config.placement.model_copy(update={"harness_pod": pod})
        print(f"[forge] judge ready: {config.judge.engine.name}:{model} at {url} "
              f"({time.perf_counter() - t0:.1f}s)", flush=True)  # fmt: skip
        return cls(config.model_copy(update={"placement": placement}), server)

    def stop(self) -> None:
        if self._server is None:
            return
        from ray import serve

        self._server.__exit__(None, None, None)
        self._server = None
        serve.delete(APP)
