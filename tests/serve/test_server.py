"""``forge serve``'s app over a real Serve Policy, driven by the official OpenAI and Anthropic
SDKs."""

from __future__ import annotations

import json

import anthropic
import httpx
import openai
import pytest

from forge.config import PolicyConfig
from serve.chat_template import parse_tool_calls
from serve.models import build_byte_tokenizer
from serve.policy import deploy_policy
from serve.server import BackgroundServer, make_app

pytestmark = pytest.mark.ray

SCRIPT = {"task_id": "t", "steps": ["echo hello > out.txt"], "answer": "done"}
SHELL_TOOL = {
    "type": "function",
    "function": {
        "name": "shell",
        "description": "Run a shell command.",
        "parameters": {
            "type": "object",
            "properties": {"command": {"type": "string"}},
            "required": ["command"],
        },
    },
}


@pytest.fixture(scope="module")
def server(ray_cluster):
    config = PolicyConfig(engine={"name": "scripted"}, num_cpus=0.25)
    handle = deploy_policy(config, app_name="serve-test")
    with BackgroundServer(make_app(handle, "tiny", api_key="sk-test", script=SCRIPT)) as url:
        yield url


def test_chat_tool_call_and_token_ids(server):
    client = openai.OpenAI(base_url=server + "/v1", api_key="sk-test")
    r = client.chat.completions.create(
        model="tiny",
        messages=[{"role": "user", "content": "write hello to out.txt"}],
        tools=[SHELL_TOOL],
        extra_body={"return_token_ids": True},
    )
    call = r.choices[0].message.tool_calls[0]
    assert call.function.name == "shell"
    assert json.loads(call.function.arguments) == {"command": "echo hello > out.txt"}
    assert r.choices[0].finish_reason == "tool_calls"
    extra = r.model_dump()
    ids = extra["choices"][0]["token_ids"]
    text = build_byte_tokenizer().decode(ids, skip_special_tokens=True)
    _, calls = parse_tool_calls(text)
    assert [c.name for c in calls] == ["shell"]
    assert r.usage.completion_tokens == len(ids)
    assert len(extra["prompt_token_ids"]) == r.usage.prompt_tokens


def test_chat_stream_accumulates_tool_call(server):
    client = openai.OpenAI(base_url=server + "/v1", api_key="sk-test")
    stream = client.chat.completions.create(
        model="tiny",
        messages=[{"role": "user", "content": "go"}],
        tools=[SHELL_TOOL],
        stream=True,
        stream_options={"include_usage": True},
    )
    name, args, usage, finish = "", "", None, None
    for chunk in stream:
        if chunk.usage:
            usage = chunk.usage
        for choice in chunk.choices:
            finish = choice.finish_reason or finish
            for tc in choice.delta.tool_calls or []:
                name += tc.function.name or ""
                args += tc.function.arguments or ""
    assert name == "shell"
    assert json.loads(args)["command"] == "echo hello > out.txt"
    assert finish == "tool_calls"
    assert usage is not None and usage.completion_tokens > 0


def test_chat_answer_after_tool_result(server):
    client = openai.OpenAI(base_url=server + "/v1", api_key="sk-test")
    messages = [
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "shell", "arguments": '{"command": "echo hello"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "hello"},
    ]
    r = client.chat.completions.create(model="tiny", messages=messages, tools=[SHELL_TOOL])
    assert r.choices[0].message.content == "done"
    assert not r.choices[0].message.tool_calls


def test_responses_stream_function_call(server):
    client = openai.OpenAI(base_url=server + "/v1", api_key="sk-test")
    tool = {"type": "function", **SHELL_TOOL["function"]}
    events = list(
        client.responses.create(model="tiny", input="write it", tools=[tool], stream=True)
    )
    done = [e for e in events if e.type == "response.completed"]
    assert len(done) == 1
    calls = [o for o in done[0].response.output if o.type == "function_call"]
    assert calls[0].name == "shell"
    assert json.loads(calls[0].arguments)["command"] == "echo hello > out.txt"


def test_anthropic_messages_tool_use(server):
    client = anthropic.Anthropic(base_url=server, api_key="sk-test")
    tool = {
        "name": "bash",
        "description": "Run a command.",
        "input_schema": SHELL_TOOL["function"]["parameters"],
    }
    msg = client.messages.create(
        model="tiny", max_tokens=256, messages=[{"role": "user", "content": "go"}], tools=[tool]
    )
    use = [b for b in msg.content if b.type == "tool_use"]
    assert use[0].name == "bash" and use[0].input == {"command": "echo hello > out.txt"}
    assert msg.stop_reason == "tool_use"
    with client.messages.stream(
        model="tiny", max_tokens=256, messages=[{"role": "user", "content": "go"}], tools=[tool]
    ) as stream:
        final = stream.get_final_message()
    use = [b for b in final.content if b.type == "tool_use"]
    assert use[0].input == {"command": "echo hello > out.txt"}


def test_bad_key_and_unknown_model(server):
    bad = openai.OpenAI(base_url=server + "/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "x"}])
    good = openai.OpenAI(base_url=server + "/v1", api_key="sk-test", max_retries=0)
    with pytest.raises(openai.NotFoundError, match="unknown model"):
        good.chat.completions.create(model="gpt-9", messages=[{"role": "user", "content": "x"}])
    r = httpx.get(server + "/v1/models", headers={"Authorization": "Bearer sk-test"})
    assert [m["id"] for m in r.json()["data"]] == ["tiny"]
    # the Policy's context, as the pods give it (the scripted engine sets none: null)
    assert [m["max_model_len"] for m in r.json()["data"]] == [None]
