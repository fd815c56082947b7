"""The transcript a verifier may read: the episode as the model proxy recorded it, in one
stable JSON form whatever the wire protocol (chat, Responses, Anthropic).

Built from the proxy's own records of the attempt (:class:`forge.types.Turn`), never from
anything the agent wrote, after the harness has exited::

    {
      "version": 1,
      "messages": [                      # in order
        {"role": "system", "content": "..."},
        {"role": "user", "content": "..."},
        {"role": "assistant", "content": "...",
         "tool_calls": [{"id": "c1", "name": "bash", "arguments": {"command": "ls"}}]},
        {"role": "tool", "tool_call_id": "c1", "name": "bash", "content": "a.txt"},
        ...
      ],
      "tool_calls": [                    # every call, flat, with its result (None: none came)
        {"id": "c1", "name": "bash", "arguments": {"command": "ls"}, "result": "a.txt"}
      ],
      "final_answer": "...",             # the harness's final answer (None: it gave none)
      "turns": 3                         # model calls recorded
    }

``arguments`` are the parsed JSON object (a free-text tool's input as ``{"input": TEXT}``);
contents are text (a list of content parts joined, a non-text part as its JSON). The opening
messages are the first request's system and user messages; each later assistant message is a
recorded completion, followed by the results of its tool calls as the next request carried
them.
"""

from __future__ import annotations

import json
from typing import Any

VERSION = 1


def tool_results(request: dict[str, Any]) -> dict[str, Any]:
    """Tool results in a request's history, by call id, whatever the protocol: a chat ``tool``
    message's content, a Responses output, or an Anthropic ``tool_result`` block (whole)."""
    out: dict[str, Any] = {}
    for item in request.get("messages") or request.get("input") or []:
        if not isinstance(item, dict):
            continue
        if item.get("role") == "tool":  # chat completions
            out[str(item.get("tool_call_id", ""))] = item.get("content")
        elif item.get("type") in ("function_call_output", "custom_tool_call_output"):
            out[str(item.get("call_id", ""))] = item.get("output")
        elif isinstance(item.get("content"), list):  # anthropic tool_result blocks
            for block in item["content"]:
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    out[str(block.get("tool_use_id", ""))] = block
    return out


def text_of(content: Any) -> str:
    """A message's or tool result's content as text."""
    if isinstance(content, str):
        return content
    if isinstance(content, dict) and content.get("type") == "tool_result":
        return text_of(content.get("content"))  # an Anthropic block: its content
    if isinstance(content, list):
        parts = [p.get("text") for p in content if isinstance(p, dict) and "text" in p]
        if parts:
            return "\n".join(map(str, parts))
    return "" if content is None else json.dumps(content)


def arguments_of(raw: Any) -> dict[str, Any]:
    """A tool call's arguments as an object (free text as ``{"input": TEXT}``)."""
    try:
        value = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        return {"input": raw}
    return value if isinstance(value, dict) else {"input": value}


def opening(request: dict[str, Any]) -> list[dict[str, str]]:
    """The system and user messages of a request before the model's first answer."""
    out = []
    for key in ("system", "instructions"):
        if request.get(key):
            out.append({"role": "system", "content": text_of(request[key])})
    for m in request.get("messages") or request.get("input") or []:
        if not isinstance(m, dict) or m.get("role") not in ("system", "developer", "user"):
            break
        role = "user" if m["role"] == "user" else "system"
        out.append({"role": role, "content": text_of(m.get("content"))})
    return out


def build(
    turns: list[Any], final_answer: str | None, images: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The transcript of an attempt from its recorded turns (``Turn`` objects or their dicts);
    ``images``, the attempt's images by sha256 (:class:`forge.types.ImagePart`), gives it
    ``screenshots``: those the prompts carried, in the order they first came (in memory only,
    for a judge that looks at them; never written)."""
    records = [t if isinstance(t, dict) else t.to_dict() for t in turns]
    messages: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    if records:
        messages.extend(opening(records[0].get("request") or {}))
    for i, turn in enumerate(records):
        later = tool_results(records[i + 1].get("request") or {}) if i + 1 < len(records) else {}
        made = [
            {
                "id": str(c.get("id", "")),
                "name": str(c.get("name", "")),
                "arguments": arguments_of(c.get("arguments")),
            }
            for c in turn.get("tool_calls") or []
        ]
        message: dict[str, Any] = {"role": "assistant", "content": turn.get("text") or ""}
        if made:
            message["tool_calls"] = made
        messages.append(message)
        for call in made:
            result = text_of(later[call["id"]]) if call["id"] in later else None
            calls.append({**call, "result": result})
            if result is not None:
                messages.append(
                    {"role": "tool", "tool_call_id": call["id"], "name": call["name"],
                     "content": result}
                )  # fmt: skip
    out = {
        "version": VERSION,
        "messages": messages,
        "tool_calls": calls,
        "final_answer": final_answer,
        "turns": len(records),
    }
    if images:
        order = dict.fromkeys(sha for t in records for sha in t.get("images") or [])
        out["screenshots"] = [images[sha] for sha in order if sha in images]
    return out


def render(transcript: dict[str, Any], limit: int = 60_000) -> str:
    """The transcript as plain text for a judge's prompt, cut to its last ``limit``
    characters (a note says so) when longer."""
    lines = []
    for m in transcript.get("messages") or []:
        head = m["role"].upper() + (f" ({m['name']})" if m.get("name") else "")
        lines.append(f"[{head}] {m.get('content', '')}")
        for c in m.get("tool_calls") or []:
            lines.append(f"[CALL {c['name']}] {json.dumps(c['arguments'], sort_keys=True)}")
    text = "\n".join(lines)
    if len(text) > limit:
        text = f"[... {len(text) - limit} earlier characters left out]\n" + text[-limit:]
    return text
