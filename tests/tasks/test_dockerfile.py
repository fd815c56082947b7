"""Reading a Dockerfile's FROM images and final WORKDIR (tasks.dockerfile)."""

from __future__ import annotations

import pytest

from tasks.dockerfile import DockerfileError, final_workdir, logical_lines, rewrite_from


def test_from_lines_are_resolved_except_stage_names_and_args_substituted():
    text = (
        "# syntax=docker/dockerfile:1\n"
        "ARG PY=3.12\n"
        "FROM --platform=linux/amd64 python:${PY}-slim AS build\n"
        "RUN echo hi \\\n"
        "  && echo there\n"
        "FROM build AS test\n"
        "from debian:bookworm\n"
        "COPY --from=build /x /x\n"
    )
    seen: list[str] = []

    def resolve(image: str) -> str:
        seen.append(image)
        return "local/" + image.replace(":", "-")

    out, images = rewrite_from(text, resolve)
    assert images == seen == ["python:3.12-slim", "debian:bookworm"]
    assert "FROM --platform=linux/amd64 local/python-3.12-slim AS build" in out
    assert "FROM build AS test" in out  # a stage, not an image
    assert "from local/debian-bookworm" in out
    assert "RUN echo hi    && echo there" in out  # continuations joined


def test_a_refused_base_and_unreadable_from_lines_raise():
    def refuse(image: str) -> str:
        raise ValueError(f"no {image}")

    with pytest.raises(ValueError, match="no nvidia/cuda:12"):
        rewrite_from("FROM nvidia/cuda:12\n", refuse)
    with pytest.raises(DockerfileError, match=r"\$TAG has no default"):
        rewrite_from("FROM debian:$TAG\n", lambda i: i)
    with pytest.raises(DockerfileError, match="no FROM"):
        rewrite_from("RUN true\n", lambda i: i)


def test_final_workdir_follows_the_last_stage_and_relative_paths():
    assert final_workdir("FROM a\nWORKDIR /srv\nWORKDIR app\n") == "/srv/app"
    assert final_workdir("FROM a\nWORKDIR /x\nFROM b\n") == "/app"  # the last stage sets none
    assert final_workdir("FROM a\nWORKDIR /x\nFROM b\n", default="/w") == "/w"
    assert final_workdir('FROM a\nWORKDIR "/data/../app/"\n') == "/app"
    with pytest.raises(DockerfileError, match="variables"):
        final_workdir("FROM a\nWORKDIR $HOME\n")


def test_comments_and_blank_lines_are_not_instructions():
    assert logical_lines("# c\n\nFROM a\n  # indented\nRUN b \\\n c\n") == ["FROM a", "RUN b   c"]
