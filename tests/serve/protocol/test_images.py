"""Images through the three wire protocols: the forms each accepts, strict refusals naming the
field, the prompt placeholder, and a text-only model's 400."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import io
from typing import Any

import pytest
from PIL import Image

from forge.types import ChatRequest, ImagePart, Message, TextPart
from serve.chat_template import IMAGE_PLACEHOLDER, render
from serve.http_app import build_app, protocol_routes
from serve.policy import LocalHandle, Policy
from serve.protocol import anthropic, chat, responses
from serve.protocol.common import ProtocolError
from serve.protocol.images import ImageOptions, image_options, sniff_mime
from serve.server import PolicyFrontend


def png(width: int = 8, height: int = 6, color: tuple[int, int, int] = (200, 30, 30)) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (width, height), color).save(out, format="PNG")
    return out.getvalue()


PNG = png()
B64 = base64.b64encode(PNG).decode()
DATA_URL = f"data:image/png;base64,{B64}"
SHA = hashlib.sha256(PNG).hexdigest()


def chat_body(*content: Any, role: str = "user") -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": role, "content": list(content)}]}


def chat_image(url: str = DATA_URL) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": url, "detail": "low"}}


def anthropic_image(data: str = B64, mime: str = "image/png") -> dict[str, Any]:
    return {"type": "image", "source": {"type": "base64", "media_type": mime, "data": data}}


def test_chat_image_parts_keep_their_order_and_exact_bytes() -> None:
    before, after = {"type": "text", "text": "before"}, {"type": "text", "text": "after"}
    req, _ = chat.parse_request(chat_body(before, chat_image(), after))
    (msg,) = req.messages
    assert msg.content == "before\nafter"  # text-only code still reads the joined text
    assert [type(p) for p in msg.parts or []] == [TextPart, ImagePart, TextPart]
    (image,) = req.images
    assert (image.mime, image.sha256, image.data) == ("image/png", SHA, PNG)
    assert image.field == "messages[0].content[1].image_url.url"
    prompt = render(req.messages, [])
    assert f"before{IMAGE_PLACEHOLDER}after" in prompt.replace("\n", "")


def test_text_only_content_has_no_parts() -> None:
    req, _ = chat.parse_request(chat_body({"type": "text", "text": "a"}))
    assert req.messages[0].parts is None and req.images == []


def test_chat_tool_message_with_an_image() -> None:
    body = {
        "model": "m",
        "messages": [
            {"role": "user", "content": "look"},
            {"role": "assistant", "tool_calls": [_call("c1")]},
            {"role": "tool", "tool_call_id": "c1", "content": [chat_image()]},
        ],
    }
    req, _ = chat.parse_request(body)
    assert req.messages[2].role == "tool" and req.messages[2].images[0].sha256 == SHA
    assert f"<tool_response>\n{IMAGE_PLACEHOLDER}\n</tool_response>" in render(req.messages, [])


def _call(call_id: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": "shot", "arguments": "{}"}}


def test_responses_input_image_in_messages_and_function_call_output() -> None:
    image = {"type": "input_image", "image_url": DATA_URL, "detail": "auto"}
    body = {
        "model": "m",
        "input": [
            {"role": "user", "content": [{"type": "input_text", "text": "hi"}, image]},
            {"type": "function_call", "call_id": "c", "name": "shot", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c", "output": [image]},
        ],
    }
    req, _ = responses.parse_request(body)
    assert [m.role for m in req.messages] == ["user", "assistant", "tool"]
    fields = [i.field for i in req.images]
    assert fields == ["input[0].content[1].image_url", "input[2].output[0].image_url"]
    assert {i.sha256 for i in req.images} == {SHA}


def test_anthropic_image_blocks_in_user_messages_and_tool_results() -> None:
    body = {
        "model": "m",
        "max_tokens": 5,
        "messages": [
            {"role": "user", "content": [anthropic_image(), {"type": "text", "text": "what?"}]},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "t1", "name": "shot", "input": {}}],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": [anthropic_image()]},
                    {"type": "text", "text": "and now?"},
                ],
            },
        ],
    }
    req, _ = anthropic.parse_request(body)
    assert [m.role for m in req.messages] == ["user", "assistant", "tool", "user"]
    assert req.messages[0].content == "what?" and req.messages[0].images[0].data == PNG
    assert req.messages[2].images[0].field == "messages[2].content[0].content[0].source.data"
    assert req.messages[3].parts is None  # text only after the tool result


JPEG_AS_PNG = base64.b64encode(b"\xff\xd8\xff\xe0" + b"\0" * 20).decode()


@pytest.mark.parametrize(
    ("parse", "body", "field", "words"),
    [
        (chat.parse_request, chat_body(chat_image("data:image/png;base64,@@@")), "messages[0].content[0].image_url.url", "base64"),  # noqa: E501
        (chat.parse_request, chat_body(chat_image("data:image/tiff;base64,AAAA")), "messages[0].content[0].image_url.url", "unsupported image type"),  # noqa: E501
        (chat.parse_request, chat_body(chat_image(f"data:image/png;base64,{JPEG_AS_PNG}")), "messages[0].content[0].image_url.url", "does not match"),  # noqa: E501
        (chat.parse_request, chat_body(chat_image("https://example.com/a.png")), "messages[0].content[0].image_url.url", "not fetched"),  # noqa: E501
        (chat.parse_request, chat_body(chat_image("file:///etc/passwd")), "messages[0].content[0].image_url.url", "not allowed"),  # noqa: E501
        (chat.parse_request, chat_body({"type": "image_url", "image_url": {}}), "messages[0].content[0].image_url.url", "required"),  # noqa: E501
        (chat.parse_request, chat_body(chat_image(), role="system"), "messages[0].content[0].type", "not supported"),  # noqa: E501
        (chat.parse_request, chat_body({"type": "input_audio"}), "messages[0].content[0].type", "not supported"),  # noqa: E501
        (responses.parse_request, {"model": "m", "input": [{"role": "user", "content": [{"type": "input_image"}]}]}, "input[0].content[0].image_url", "required"),  # noqa: E501
        (responses.parse_request, {"model": "m", "input": [{"role": "user", "content": [{"type": "input_image", "file_id": "f"}]}]}, "input[0].content[0].file_id", "not supported"),  # noqa: E501
        (anthropic.parse_request, {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [anthropic_image(mime="image/bmp")]}]}, "messages[0].content[0].source.media_type", "unsupported"),  # noqa: E501
        (anthropic.parse_request, {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [anthropic_image(data="!!")]}]}, "messages[0].content[0].source.data", "base64"),  # noqa: E501
        (anthropic.parse_request, {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "image", "source": {"type": "url", "url": "http://x"}}]}]}, "messages[0].content[0].source.type", "base64"),  # noqa: E501
        (anthropic.parse_request, {"model": "m", "max_tokens": 5, "system": [anthropic_image()], "messages": [{"role": "user", "content": "x"}]}, "system[0].type", "not supported"),  # noqa: E501
    ],
)  # fmt: skip
def test_bad_images_are_400_naming_the_field(parse, body, field, words) -> None:
    with pytest.raises(ProtocolError) as info:
        parse(body)
    assert info.value.status == 400 and info.value.field == field, info.value.message
    assert info.value.message.startswith(f"{field}: ") and words in info.value.message


def test_image_size_cap_is_configurable() -> None:
    big = png(200, 200, (1, 2, 3))
    body = chat_body(chat_image("data:image/png;base64," + base64.b64encode(big).decode()))
    chat.parse_request(body)  # under the default 10 MB
    with image_options(ImageOptions(max_bytes=len(big) - 1)), pytest.raises(ProtocolError) as info:
        chat.parse_request(body)
    assert info.value.field == "messages[0].content[0].image_url.url"
    assert "over the limit" in info.value.message
    chat.parse_request(body)  # the option ends with its block


def test_local_files_only_under_the_configured_dir(tmp_path) -> None:
    (tmp_path / "shot.png").write_bytes(PNG)
    outside = tmp_path.parent / f"{tmp_path.name}-outside.png"
    outside.write_bytes(PNG)
    with image_options(ImageOptions(local_dir=str(tmp_path))):
        req, _ = chat.parse_request(chat_body(chat_image(f"file://{tmp_path}/shot.png")))
        assert req.images[0].sha256 == SHA
        req, _ = chat.parse_request(chat_body(chat_image(str(tmp_path / "shot.png"))))
        assert req.images[0].data == PNG
        with pytest.raises(ProtocolError, match="must lie under"):
            chat.parse_request(chat_body(chat_image(f"file://{tmp_path}/../{outside.name}")))


def test_sniff_mime() -> None:
    assert sniff_mime(PNG) == "image/png"
    assert sniff_mime(b"RIFF\0\0\0\0WEBPVP8 ") == "image/webp"
    assert sniff_mime(b"hello") is None


def _torch_app() -> Any:
    policy = Policy({"engine": {"name": "torch", "model": "tiny"}})
    return build_app(protocol_routes("", PolicyFrontend(LocalHandle(policy), "tiny", None, None)))


def test_text_only_torch_model_answers_400_naming_the_image_field() -> None:
    import httpx

    async def run() -> httpx.Response:
        transport = httpx.ASGITransport(app=_torch_app())
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            body = chat_body({"type": "text", "text": "see"}, chat_image())
            body["model"] = "tiny"
            return await client.post("/v1/chat/completions", json=body)

    response = asyncio.run(run())
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == "messages[0].content[1].image_url.url"
    assert "model 'tiny' takes no images" in error["message"]


def test_scripted_engine_ignores_images() -> None:
    policy = Policy({"engine": {"name": "scripted", "model": "tiny"}})
    image = ImagePart("image/png", SHA, PNG, "messages[0].content[0]")
    request = ChatRequest(
        messages=[Message("user", "hi", parts=[image, TextPart("hi")])],
        script={"steps": [], "answer": "done"},
    )
    completion = asyncio.run(policy.generate(request))
    assert completion.text and completion.finish_reason == "stop"


def test_recorded_bodies_hold_references_in_every_form() -> None:
    """The record of a request keeps each image as {sha256, mime} where its data stood."""
    from serve.protocol.images import redact_images

    image = {"type": "input_image", "image_url": DATA_URL}
    bodies = {
        chat.parse_request: chat_body(chat_image()),
        responses.parse_request: {
            "model": "m",
            "input": [{"role": "user", "content": [image]}],
        },
        anthropic.parse_request: {
            "model": "m",
            "max_tokens": 5,
            "messages": [{"role": "user", "content": [anthropic_image()]}],
        },
    }
    for parse, body in bodies.items():
        req, _ = parse(body)
        recorded = redact_images(body, req.images)
        assert B64[:64] not in repr(recorded) and B64[:64] in repr(body)  # a copy is redacted
        assert repr({"sha256": SHA, "mime": "image/png"}) in repr(recorded)
    assert redact_images({"a": 1}, []) == {"a": 1}


def test_image_errors_cross_ray_with_their_field() -> None:
    import pickle

    from serve.engines.base import ImageInputError

    err = pickle.loads(pickle.dumps(ImageInputError("model 'tiny' takes no images", "input[0]")))
    assert (err.field, err.problem) == ("input[0]", "model 'tiny' takes no images")
    assert str(err) == "input[0]: model 'tiny' takes no images"
