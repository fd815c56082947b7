"""What produced an episode: the provenance record (forge/provenance.py)."""

from __future__ import annotations

from forge.harnesses.registry import get_harness
from forge.provenance import prompt_hash, provenance, verifier_kind
from forge.types import Turn
from tasks.schema import Task


def _turn(request: dict, version: int) -> Turn:
    return Turn("e", 0, 0, "chat", request, [1], [2], [0.0], "", [], "stop", version, 0.0, 0.0)


TASK = Task.model_validate(
    {
        "id": "t",
        "instruction": "Write 1 to out.txt",
        "verifier": [
            {"type": "file_equals", "path": "out.txt", "content": "1"},
            {"type": "command", "cmd": "true"},
        ],
    }
)


def test_the_record_names_what_produced_the_episode() -> None:
    tools = [{"type": "function", "function": {"name": "shell"}}]
    first = {"messages": [{"role": "system", "content": "be brief"}], "tools": tools}
    turns = [_turn(first, 3), _turn({"messages": []}, 5)]
    record = provenance("react", get_harness("react"), TASK, "local", "", turns, "tiny", 1.0)
    assert record["harness"] == "react" and record["harness_name"] == "react"
    assert record["harness_version"] == "builtin" and len(record["harness_digest"]) == 12
    assert record["verifier"] == "file_equals+command"
    assert record["policy_versions"] == [3, 5] and record["model"] == "tiny"
    assert record["prompt_hash"] == prompt_hash(turns)
    # the prompt hash follows the system prompt and tools, not the rest of the conversation
    other = {"messages": [{"role": "system", "content": "be long"}], "tools": tools}
    assert prompt_hash([_turn(other, 0)]) != record["prompt_hash"]
    chatty = {**first, "messages": [*first["messages"], {"role": "user", "content": "hi"}]}
    assert prompt_hash([_turn(chatty, 0)]) == record["prompt_hash"]
    changed = TASK.model_copy(update={"instruction": "Write 2 to out.txt"})
    again = provenance("react", get_harness("react"), changed, "local", "", turns, "tiny", 1.0)
    assert again["task_version"] != record["task_version"]


def test_a_record_that_cannot_be_made_never_costs_the_episode() -> None:
    record = provenance("react", object(), TASK, "local", "", [], "tiny", None)
    assert record["harness"] == "react" and "error" in record
    assert verifier_kind([]) == ""
