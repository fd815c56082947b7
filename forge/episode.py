"""One attempt of one task in one harness, start to finish: the body of ``HarnessPod.run_episode``.

create sandbox -> seed workspace -> open the attempt on the proxy -> run the harness command
(under :mod:`forge.sandboxes.services_launch` when the task has services or an X display) ->
close the attempt -> classify how it ended -> copy the workspace out, destroy the agent's
sandbox and verify its copy (``rewards.runner``) -> assemble segments. Infrastructure
failures (sandbox or proxy error, a slow Policy, a harness that crashed or hung before the
model's first answer reached it) mark the episode failed with a reason, to be retried, never a
reward of 0; what the policy caused (context full, turn or token limit, unparseable tool calls,
a timeout while the model worked, a harness its commands killed or that crashed right after an
answer) ends a real episode with reward 0 and its ``truncated`` reason (DESIGN.md decision 5;
every reason: :mod:`forge.outcome`). A wrong answer is reward 0.

The task's ``timeout_s`` bounds the harness's own time: wall time less the time its calls
spent inside the Policy (queued, generating, held by a weight update), which the proxy
records per attempt (:class:`actors.attempt_state.AttemptState`). A :class:`HarnessClock`
ends the harness (destroying its sandbox: the same on every backend) when that runs out; the
Policy may keep it waiting up to what ``rollout.attempt_timeout_s`` leaves over
(:func:`forge.outcome.harness_cap_s`), past which the attempt is ``policy_stalled``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from forge.config.network import PhaseNetwork, phase_network
from forge.harnesses.app_tools import app_env, app_extra, app_mounts, cli_hint, services_via
from forge.harnesses.base import AttemptContext
from forge.harnesses.registry import get_harness
from forge.harnesses.task_tools import skills_hint, takes_skills, task_extra
from forge.outcome import SANDBOX_SLACK_S, classify_end, harness_cap_s
from forge.provenance import provenance
from forge.sandboxes import services
from forge.sandboxes.base import ExecResult, SandboxSpec
from forge.sandboxes.egress import EgressProxy, proxy_env
from forge.sandboxes.registry import sandbox_for
from forge.stages import stage_marks
from forge.trajectory import assemble
from forge.transcript import build as build_transcript
from forge.types import Episode
from rewards.runner import (
    VerifierNetwork,
    run_verifier,
    verifier_seconds,
    verifies_in_place,
)
from tasks.schema import Task
from tasks.webapps.hosted import PAGE_KEY_ENV, Hosted

if TYPE_CHECKING:
    from actors.attempt_state import AttemptState
    from forge.config import SandboxConfig

__all__ = ["SANDBOX_SLACK_S", "AttemptHost", "HarnessClock", "classify_end", "run_attempt"]

log = logging.getLogger(__name__)
LOG_TAIL = 4000  # characters of harness output kept on the episode
CLOCK_TICK_S = 0.1  # the shortest sleep of a HarnessClock (it is that late at most)
END_GRACE_S = 10.0  # how long a harness's exec may take to return once its sandbox is destroyed


class AttemptHost(Protocol):
    """What an attempt needs of the pod that runs it, an :class:`actors.harness_pod.HarnessPod`
    (named by its shape: actors sit above this module): where its proxy listens, its
    sandboxes' settings and set of live ones, and its attempts' records on the proxy."""

    run: str
    pod_id: str
    model: str
    host: str
    port: int | None
    socket_path: str | None
    sandbox_config: SandboxConfig
    sandboxes: set[Any]
    egress: EgressProxy
    egress_socket: str | None

    def egress_address(self) -> str: ...

    def open_attempt(
        self,
        episode_id: str,
        attempt: int,
        script: dict[str, Any] | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
        apps: dict[str, Any] | None = None,
        max_turns: int | None = None,
        pages: dict[int, Any] | None = None,
    ) -> dict[str, str]: ...

    def attempt_state(self, episode_id: str, attempt: int) -> AttemptState: ...

    def close_attempt(self, episode_id: str, attempt: int) -> AttemptState: ...


class HarnessClock:
    """Counts a harness's own time, wall time since :meth:`run` began less the time its calls
    spent inside the Policy, and calls ``end`` (in a thread) once it passes ``timeout_s``."""

    def __init__(self, state: AttemptState, timeout_s: float, end: Callable[[], None]) -> None:
        self.state = state
        self.timeout_s = timeout_s
        self.end = end
        self.fired = False

    def used(self, start: float) -> float:
        now = time.monotonic()
        return now - start - self.state.policy_wait(now)

    async def run(self) -> None:
        start = time.monotonic()
        while (left := self.timeout_s - self.used(start)) > 0:
            await asyncio.sleep(max(left, CLOCK_TICK_S))  # the Policy's time: slept again
        self.fired = True
        await asyncio.to_thread(self.end)


async def run_harness(
    sandbox: Any, command: list[str], env: dict[str, str], clock: HarnessClock, cap_s: float
) -> ExecResult | None:
    """Run the harness under ``clock``, at most ``cap_s`` of wall time; a harness the clock
    ended (its sandbox destroyed) is a timed-out result, with its output where the backend
    still returns it within :data:`END_GRACE_S` (an exec a backend leaves hanging is left)."""
    run = asyncio.ensure_future(asyncio.to_thread(sandbox.exec, command, cap_s, env))
    watch = asyncio.create_task(clock.run())
    try:
        await asyncio.wait({run, watch}, return_when=asyncio.FIRST_COMPLETED)
        if not clock.fired:
            return await run  # the harness ended, or the sandbox broke on its own
        await watch  # the sandbox is destroyed
        result: ExecResult | None = None
        with contextlib.suppress(Exception):
            result = await asyncio.wait_for(asyncio.shield(run), END_GRACE_S)
        out, err = (result.stdout, result.stderr) if result else ("", "")
        return ExecResult(-1, out, err, timed_out=True, duration_s=clock.timeout_s)
    finally:
        if not watch.done():
            watch.cancel()
        if not run.done():  # left to its thread: its outcome is not wanted
            run.add_done_callback(lambda f: f.cancelled() or f.exception())


async def run_attempt(
    pod: AttemptHost,
    task: Task | dict[str, Any],
    harness_name: str,
    attempt: int,
    episode_id: str,
    harness_options: dict[str, Any],
    temperature: float | None = None,
    attempt_timeout_s: float | None = None,
    stages: dict[str, float] | None = None,
) -> Episode:
    """Play the attempt; ``attempt_timeout_s``: the scheduler's bound on the whole attempt,
    which sets how long the Policy may keep the harness waiting (:func:`harness_cap_s`).
    ``stages``, when given, gets the seconds each stage took (:data:`forge.stages.STAGES`),
    for the episode-overhead benchmark and anyone asking where an attempt's time went."""
    mark = stage_marks(stages)
    task = Task.model_validate(task) if isinstance(task, dict) else task
    harness = get_harness(harness_name, **harness_options)
    adapt = getattr(harness, "adapt_task", None)  # optional: a desktop harness on a page task
    task = adapt(task) if adapt is not None else task
    # the task's page application, kept here: the sandbox reaches it through a relay
    pages = Hosted(task, armed=bool(getattr(harness, "opens_start_url", False)))
    start = time.perf_counter()
    cap_s = harness_cap_s(task, attempt_timeout_s)
    in_place = verifies_in_place(task)
    network = pod.sandbox_config.network
    nets = {p: phase_network(network, p, task.allow_internet) for p in ("agent", "verify")}
    egress = {"agent": _grant(pod, nets["agent"])}  # phase -> its key to the egress proxy
    relay_egress = egress["agent"] or (in_place and nets["verify"].through_egress())
    labels = {"run": pod.run, "pod": pod.pod_id, "episode": episode_id, "attempt": str(attempt)}
    spec = SandboxSpec(
        labels={**labels, "network": nets["agent"].mode},  # kubernetes: the phase's policy
        # verified in place (Harbor's mode): the sandbox outlives the tests too
        deadline_s=cap_s + SANDBOX_SLACK_S + (verifier_seconds(task) if in_place else 0.0),
        ro_mounts={**harness.ro_mounts(), **services.mounts(task), **app_mounts(task)},
        proxy_socket=pod.socket_path,
        proxy_tcp=f"{pod.host}:{pod.port}",
        environment=task.environment.model_dump() if task.environment else None,
        egress_socket=pod.egress_socket if relay_egress else None,
    )
    sandbox = sandbox_for(pod.sandbox_config, harness_name)
    pod.sandboxes.add(sandbox)
    script = task.reference_script()
    info = pod.open_attempt(
        episode_id,
        attempt,
        script=script,
        max_tokens=task.limits.max_tokens_per_turn,
        temperature=temperature,
        apps=task.apps,
        max_turns=task.limits.max_turns,
        pages=pages.pages,
    )
    clock = HarnessClock(
        pod.attempt_state(episode_id, attempt), task.limits.timeout_s, sandbox.destroy
    )
    result: ExecResult | None = None
    answer: str | None = None
    reward, detail, error = 0.0, "", ""
    outputs: dict[str, str] = {}
    try:
        mark("setup")
        await asyncio.to_thread(sandbox.create, spec)
        mark("create")
        world = pod.attempt_state(episode_id, attempt).world
        if world is not None:  # a task's own services are up before the harness starts
            await asyncio.to_thread(world.wait_ready)
        if script is not None:  # the oracle writes absolute paths where a tool demands them
            script["workspace"] = sandbox.workspace
        for path, content in task.seeds().items():
            sandbox.put_file(path, content)
        base = f"http://{sandbox.proxy_host_port()}{info['path']}"
        ctx = AttemptContext(
            base_url=f"{base}/v1",
            anthropic_base_url=base,
            api_key=info["api_key"],
            model=pod.model,
            instruction=task.instruction
            + (cli_hint(task) if task.apps and services_via(harness) == "cli" else "")
            + ("" if takes_skills(harness) else skills_hint(task)),
            workspace=sandbox.workspace,
            max_turns=task.limits.max_turns,
            timeout_s=task.limits.timeout_s,
            path_var=sandbox.default_path(),
            paths=sandbox.path_map(),
            extra={**services.gui_extra(task), **app_extra(task), **task_extra(task)},
        )
        for path, content in harness.files(ctx).items():
            sandbox.put_file(path, content)
        env = app_env(task, ctx, harness.env(ctx))
        if egress["agent"]:  # its clients go out through the egress proxy, keyed to this phase
            env = {**env, **proxy_env(egress["agent"], pod.egress_address())}
        names = list(env)  # the harness's own: its services (the page relay) do not get them
        env = {**env, PAGE_KEY_ENV: info["api_key"]} if pages.ports else env
        command = services.wrap(pages.relayed(task, base), ctx, harness.command(ctx), names)
        mark("files")
        result = await run_harness(sandbox, command, env, clock, cap_s)
        mark("harness")
        answer_file = getattr(harness, "answer_file", None)  # optional: the agent writes it
        answer_path = answer_file(ctx) if answer_file is not None else None
        if clock.fired:  # its sandbox is gone, and a timed-out attempt is not verified
            answer = None
        elif answer_path is None:
            answer = harness.final_answer(result)
        else:  # read before the sandbox goes; a file the agent made unreadable is no answer
            try:
                data = sandbox.get_file(answer_path)
            except ValueError:
                data = None
            answer = harness.final_answer(result, data)
    except Exception as e:  # the sandbox itself failed: a failed attempt, not a wrong answer
        log.exception("attempt %s/%s of %s: sandbox error", episode_id, attempt, task.id)
        error = f"{type(e).__name__}: {e}"
    except asyncio.CancelledError:  # the run is stopping: leave nothing behind
        closed = pod.close_attempt(episode_id, attempt)
        if closed.world is not None:
            closed.world.close()
        _end_phase(pod, "agent", egress)
        await asyncio.shield(asyncio.to_thread(sandbox.destroy))
        pod.sandboxes.discard(sandbox)
        raise
    state = pod.close_attempt(episode_id, attempt)
    if state.world is not None:  # a task's own services: what they did, then stopped
        await asyncio.to_thread(state.world.close)
    egress_log = _end_phase(pod, "agent", egress)
    stalled = result is not None and result.timed_out and not clock.fired
    failure, truncated = classify_end(result, state, task.limits.max_turns, stalled=stalled)
    verifier_boxes: list[Any] = []
    mark("close")

    def new_sandbox() -> Any:  # a command verifier's own sandboxes: same backend, fresh
        box = sandbox_for(pod.sandbox_config, None)
        verifier_boxes.append(box)
        pod.sandboxes.add(box)
        return box

    try:
        if failure is None and truncated is None:
            # copies the workspace out, destroys the agent's sandbox, verifies the copy
            apps = {**(state.world.snapshot() if state.world else {}), **pages.state()} or None
            egress["verify"] = _grant(pod, nets["verify"])
            out = VerifierNetwork(
                proxy_env(egress["verify"], pod.egress_address()) if egress["verify"] else {},
                pod.egress_socket if egress["verify"] else None,
                nets["verify"].mode,
            )
            verdict = await asyncio.to_thread(
                run_verifier,
                task,
                sandbox,
                answer,
                new_sandbox,
                labels,
                apps=apps,
                network=out,
                # as the proxy recorded it, its screenshots for a judge that looks at them (built
                # only for a verifier that reads it)
                transcript=lambda: build_transcript(state.turns, answer, state.images),
            )
            reward, detail, outputs = verdict.reward, verdict.detail, verdict.outputs
    except Exception as e:
        failure, error = "verifier_error", f"{type(e).__name__}: {e}"
    finally:
        mark("verify")
        egress_log += _end_phase(pod, "verify", egress)
        await asyncio.to_thread(sandbox.destroy)  # a no-op when run_verifier destroyed it
        for box in (sandbox, *verifier_boxes):
            pod.sandboxes.discard(box)
        mark("destroy")
    segments, resets = assemble(state.turns)
    log_text = error or (result.stderr[-LOG_TAIL:] if result else "")
    if state.errors:
        log_text = "\n".join(state.errors[-5:]) + "\n" + log_text
    if state.refusals:
        shown = "\n".join(f"proxy rejected: {r}" for r in state.refusals[:5])
        log_text = f"{shown}\n{log_text}"
    episode = Episode(
        episode_id=episode_id,
        task_id=task.id,
        attempt=attempt,
        harness=harness.name,
        reward=reward if failure is None else 0.0,
        status="ok" if failure is None else "failed",
        failure=failure,
        truncated=truncated,
        final_answer=answer,
        turns=state.turns,
        segments=segments,
        reset_reasons=resets,
        verifier_detail=detail or (f"truncated: {truncated}" if truncated else ""),
        verifier_outputs=outputs,
        egress=egress_log,
        duration_s=time.perf_counter() - start,
        harness_exit_code=result.exit_code if result else None,
        harness_log=log_text,
        service_calls=state.world.calls if state.world else [],
        services=list(task.apps),
        provenance=provenance(
            harness_name,
            harness,
            task,
            pod.sandbox_config.backend,
            getattr(sandbox, "image", ""),
            state.turns,
            pod.model,
            temperature,
        ),
    )
    mark("assemble")
    return episode


def _grant(pod: AttemptHost, policy: PhaseNetwork) -> str | None:
    """A key to the egress proxy for a phase whose network is allowlist or open, else None."""
    return pod.egress.grant(policy) if policy.through_egress() else None


def _end_phase(pod: AttemptHost, phase: str, keys: dict[str, str | None]) -> list[dict[str, Any]]:
    """Revoke ``phase``'s key to the egress proxy; what it reached or was refused, in order."""
    key = keys.pop(phase, None)
    grant = pod.egress.revoke(key) if key else None
    if grant is None:
        return []
    log = [
        {"phase": phase, "host": h, "port": p, "allowed": ok, "why": why}
        for h, p, ok, why in grant.log
    ]
    if grant.unlogged:
        log.append({"phase": phase, "host": "", "port": 0, "allowed": False,
                    "why": f"{grant.unlogged} more connections, not listed"})  # fmt: skip
    return log
