"""The transcript verifiers read (forge.transcript): one form from the proxy's records of any
of the three wire protocols."""

from __future__ import annotations

from forge.transcript import build, render
from forge.types import ImagePart


def _turn(request: dict, text: str = "", calls: list | None = None) -> dict:
    return {"request": request, "text": text, "tool_calls": calls or []}


CALL = {"id": "c1", "name": "bash", "arguments": '{"command": "ls"}'}


def test_chat_responses_and_anthropic_records_give_the_same_transcript() -> None:
    chat = [
        _turn({"messages": [{"role": "system", "content": "Be brief."},
                            {"role": "user", "content": "List files."}]}, "", [CALL]),
        _turn({"messages": [{"role": "system", "content": "Be brief."},
                            {"role": "user", "content": "List files."},
                            {"role": "assistant", "tool_calls": []},
                            {"role": "tool", "tool_call_id": "c1", "content": "a.txt"}]},
              "One file: a.txt"),
    ]  # fmt: skip
    responses = [
        _turn({"instructions": "Be brief.", "input": [
            {"role": "user", "content": [{"type": "input_text", "text": "List files."}]}]},
            "", [CALL]),
        _turn({"instructions": "Be brief.", "input": [
            {"type": "function_call_output", "call_id": "c1", "output": "a.txt"}]},
            "One file: a.txt"),
    ]  # fmt: skip
    anthropic = [
        _turn({"system": "Be brief.", "messages": [{"role": "user", "content": "List files."}]},
              "", [CALL]),
        _turn({"system": "Be brief.", "messages": [{"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "c1",
             "content": [{"type": "text", "text": "a.txt"}]}]}]},
              "One file: a.txt"),
    ]  # fmt: skip
    want = {
        "version": 1,
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "List files."},
            {"role": "assistant", "content": "",
             "tool_calls": [{"id": "c1", "name": "bash", "arguments": {"command": "ls"}}]},
            {"role": "tool", "tool_call_id": "c1", "name": "bash", "content": "a.txt"},
            {"role": "assistant", "content": "One file: a.txt"},
        ],
        "tool_calls": [{"id": "c1", "name": "bash", "arguments": {"command": "ls"},
                        "result": "a.txt"}],
        "final_answer": "a.txt",
        "turns": 2,
    }  # fmt: skip
    for turns in (chat, responses, anthropic):
        assert build(turns, "a.txt") == want
    text = render(want)
    assert '[CALL bash] {"command": "ls"}' in text and "[TOOL (bash)] a.txt" in text
    assert render(want, limit=20).startswith("[... ")


def test_a_last_call_without_a_result_and_free_text_arguments() -> None:
    free = {"id": "p1", "name": "apply_patch", "arguments": "*** Begin Patch"}
    got = build([_turn({"messages": [{"role": "user", "content": "Fix it."}]}, "", [free])], None)
    assert got["tool_calls"] == [
        {"id": "p1", "name": "apply_patch", "arguments": {"input": "*** Begin Patch"},
         "result": None}
    ]  # fmt: skip
    assert got["final_answer"] is None and build([], None)["messages"] == []


def test_screenshots_in_the_order_the_prompts_carried_them() -> None:
    shots = {s: ImagePart("image/png", s, s.encode()) for s in ("a" * 64, "b" * 64)}
    a, b = "a" * 64, "b" * 64
    first = {"request": {"messages": [{"role": "user", "content": "go"}]}, "images": [b]}
    turns = [{**first, "text": "", "tool_calls": []},
             {"request": {}, "text": "done", "tool_calls": [], "images": [b, a]}]  # fmt: skip
    transcript = build(turns, "done", shots)
    assert [s.sha256 for s in transcript["screenshots"]] == ["b" * 64, "a" * 64]
    assert "screenshots" not in build(turns, "done")  # no images given: none, as before
