"""One attempt of one task in one harness, start to finish: the body of ``HarnessPod.run_episode``.

create sandbox -> seed workspace -> open the attempt on the proxy -> run the harness command
(under :mod:`forge.sandboxes.services_launch` when the task has services or an X display) ->
close the attempt -> classify how it ended -> copy the workspace out, destroy the agent's
sandbox and verify in fresh ones (``rewards.runner``) -> assemble segments. Infrastructure
failures (sandbox or proxy error, a harness that crashed or hung on its own) mark the episode
failed with a reason, to be retried, never a reward of 0; what the policy caused (context full,
turn or token limit, unparseable tool calls, a timeout while the model worked) ends a real
episode with reward 0 and its ``truncated`` reason (DESIGN.md decision 5). A wrong answer is
reward 0.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

from forge.harnesses import AttemptContext, get_harness
from forge.harnesses.app_tools import app_env, app_extra, app_mounts, cli_hint, services_via
from forge.sandboxes import sandbox_for, services
from forge.sandboxes.base import ExecResult, SandboxSpec
from forge.trajectory import assemble
from forge.types import Episode
from rewards.runner import run_verifier
from tasks.schema import Task

if TYPE_CHECKING:
    from actors.harness_pod import AttemptState, HarnessPod

log = logging.getLogger(__name__)
LOG_TAIL = 4000  # characters of harness output kept on the episode
SANDBOX_SLACK_S = 60.0  # the sandbox outlives the harness timeout by this much (verification)


def classify_end(
    result: ExecResult | None, state: AttemptState, max_turns: int
) -> tuple[str | None, str | None]:
    """``(failure, truncated)`` of an attempt whose harness has returned (DESIGN.md decision 5).

    ``failure`` names an infrastructure failure (retried in a fresh sandbox): the sandbox broke,
    one of the task's services or its X display did not come up (``service_failed``),
    the Policy or proxy erred, the harness hung before it ever called the model, was killed by a
    signal, gave up after the proxy refused a request (``proxy_rejected``: a 4xx it answered,
    listed in the episode's log), or crashed with nothing the model did to explain it.
    ``truncated`` names what the policy caused (reward 0, trained on): the context was full,
    the proxy's call limit or the task's turn limit was reached, the last answer was cut at the
    token limit or held tool calls that could not be parsed, or the harness ran out of time
    while it waited on the model or ran the model's commands. Both None: the harness finished;
    its verifier decides.
    """
    if result is None:
        return "sandbox_error", None
    if services.service_failed(result):  # a service or the display never came up
        return "service_failed", None
    if state.errors:
        return "proxy_error", None
    if state.rejected.get("context_full"):
        return None, "context_full"
    if state.rejected.get("turn_limit"):
        return None, "turn_limit"
    delivered = [t for t in state.turns if t.delivered]
    if result.timed_out:
        if state.turns:
            return None, "timeout"
        return ("proxy_rejected" if state.refusals else "harness_hung"), None
    if result.exit_code == 0:
        return None, None
    if result.exit_code < 0 or result.exit_code > 128:  # killed by a signal: not the model
        return "harness_killed", None
    if len(delivered) >= max_turns:
        return None, "turn_limit"
    last = delivered[-1] if delivered else None
    if last is not None and last.finish_reason == "length":
        return None, "token_limit"
    if last is not None and last.invalid_tool_calls:
        return None, "unparseable_tool_call"
    if state.refusals:  # the proxy refused what the harness sent: not the harness's own crash
        return "proxy_rejected", None
    return "harness_crash", None


async def run_attempt(
    pod: HarnessPod,
    task: Task | dict[str, Any],
    harness_name: str,
    attempt: int,
    episode_id: str,
    harness_options: dict[str, Any],
    temperature: float | None = None,
) -> Episode:
    task = Task.model_validate(task) if isinstance(task, dict) else task
    harness = get_harness(harness_name, **harness_options)
    adapt = getattr(harness, "adapt_task", None)  # optional: a desktop harness on a page task
    task = adapt(task) if adapt is not None else task
    start = time.perf_counter()
    labels = {"run": pod.run, "pod": pod.pod_id, "episode": episode_id, "attempt": str(attempt)}
    spec = SandboxSpec(
        labels=labels,
        deadline_s=task.limits.timeout_s + SANDBOX_SLACK_S,
        ro_mounts={**harness.ro_mounts(), **services.mounts(task), **app_mounts(task)},
        proxy_socket=pod.socket_path,
        proxy_tcp=f"{pod.host}:{pod.port}",
        environment=task.environment.model_dump() if task.environment else None,
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
    )
    result: ExecResult | None = None
    answer: str | None = None
    reward, detail, error = 0.0, "", ""
    try:
        await asyncio.to_thread(sandbox.create, spec)
        if script is not None:  # the oracle writes absolute paths where a tool demands them
            script["workspace"] = sandbox.workspace
        for path, content in task.files.items():
            sandbox.put_file(path, content)
        base = f"http://{sandbox.proxy_host_port()}{info['path']}"
        ctx = AttemptContext(
            base_url=f"{base}/v1",
            anthropic_base_url=base,
            api_key=info["api_key"],
            model=pod.model,
            instruction=task.instruction
            + (cli_hint(task) if task.apps and services_via(harness) == "cli" else ""),
            workspace=sandbox.workspace,
            max_turns=task.limits.max_turns,
            timeout_s=task.limits.timeout_s,
            path_var=sandbox.default_path(),
            paths=sandbox.path_map(),
            extra={**services.gui_extra(task), **app_extra(task)},
        )
        for path, content in harness.files(ctx).items():
            sandbox.put_file(path, content)
        env = app_env(task, ctx, harness.env(ctx))
        result = await asyncio.to_thread(
            sandbox.exec,
            services.wrap(task, ctx, harness.command(ctx), env),
            task.limits.timeout_s,
            env,
        )
        answer_file = getattr(harness, "answer_file", None)  # optional: the agent writes it
        answer_path = answer_file(ctx) if answer_file is not None else None
        if answer_path is None:
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
        pod.close_attempt(episode_id, attempt)
        await asyncio.shield(asyncio.to_thread(sandbox.destroy))
        pod.sandboxes.discard(sandbox)
        raise
    state = pod.close_attempt(episode_id, attempt)
    failure, truncated = classify_end(result, state, task.limits.max_turns)
    verifier_boxes: list[Any] = []

    def new_sandbox() -> Any:  # the verifier's own sandboxes: same backend, fresh, no harness
        box = sandbox_for(pod.sandbox_config, None)
        verifier_boxes.append(box)
        pod.sandboxes.add(box)
        return box

    try:
        if failure is None and truncated is None:
            # copies the workspace out, destroys the agent's sandbox, verifies in fresh ones
            apps = state.world.snapshot() if state.world else None
            verdict = await asyncio.to_thread(
                run_verifier, task, sandbox, answer, new_sandbox, labels, apps=apps
            )
            reward, detail = verdict.reward, verdict.detail
    except Exception as e:
        failure, error = "verifier_error", f"{type(e).__name__}: {e}"
    finally:
        await asyncio.to_thread(sandbox.destroy)  # a no-op when run_verifier destroyed it
        for box in (sandbox, *verifier_boxes):
            pod.sandboxes.discard(box)
    segments, resets = assemble(state.turns)
    log_text = error or (result.stderr[-LOG_TAIL:] if result else "")
    if state.errors:
        log_text = "\n".join(state.errors[-5:]) + "\n" + log_text
    if state.refusals:
        shown = "\n".join(f"proxy rejected: {r}" for r in state.refusals[:5])
        log_text = f"{shown}\n{log_text}"
    return Episode(
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
        duration_s=time.perf_counter() - start,
        harness_exit_code=result.exit_code if result else None,
        harness_log=log_text,
        service_calls=state.world.calls if state.world else [],
        services=list(task.apps),
    )
