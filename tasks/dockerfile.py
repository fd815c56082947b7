"""The little of a Dockerfile that tasks need read: its ``FROM`` images (to resolve them to local
images, :mod:`forge.images.task`) and the final stage's ``WORKDIR`` (where the agent works).

Lines are joined across ``\\`` continuations; comments and parser directives are kept as they
are. ``ARG``s declared before the first ``FROM`` are substituted into ``FROM`` lines with their
defaults, as the builder does.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable

_FROM = re.compile(
    r"^(?P<lead>\s*FROM\s+(?:--platform=\S+\s+)?)(?P<image>\S+)(?P<rest>(?:\s+AS\s+(?P<name>\S+))?\s*)$",
    re.IGNORECASE,
)
_ARG = re.compile(r"^\s*ARG\s+(?P<name>\w+)(?:=(?P<value>\S*))?\s*$", re.IGNORECASE)
_WORKDIR = re.compile(r"^\s*WORKDIR\s+(?P<path>.+?)\s*$", re.IGNORECASE)
_COPY_FROM = re.compile(r"^(?P<lead>\s*(?:COPY|ADD)\s+(?:--\S+\s+)*?--from=)(?P<src>\S+)", re.I)


class DockerfileError(ValueError):
    """A Dockerfile this reader cannot use; the message names the line."""


def logical_lines(text: str) -> list[str]:
    """The Dockerfile's instructions, continuation lines joined (comments dropped)."""
    out: list[str] = []
    current = ""
    for raw in text.splitlines():
        if not current and raw.lstrip().startswith("#"):
            continue
        if raw.rstrip().endswith("\\"):
            current += raw.rstrip()[:-1] + " "
            continue
        current += raw
        if current.strip():
            out.append(current)
        current = ""
    if current.strip():
        out.append(current)
    return out


def _substitute(image: str, args: dict[str, str]) -> str:
    def value(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2)
        if name not in args:
            raise DockerfileError(f"FROM {image}: ${name} has no default before the first FROM")
        return args[name]

    return re.sub(r"\$\{(\w+)\}|\$(\w+)", value, image)


def rewrite_from(text: str, resolve: Callable[[str], str]) -> tuple[str, list[str]]:
    """``text`` with each ``FROM`` image and ``COPY --from=`` image (not a previous stage's
    name or index) replaced by ``resolve(image)``; and the images it named, in order.
    ``resolve`` raises to refuse one."""
    args: dict[str, str] = {}
    stages: set[str] = set()
    seen_from = False
    images: list[str] = []
    out: list[str] = []
    for line in logical_lines(text):
        arg = _ARG.match(line)
        if arg and not seen_from:
            args[arg["name"]] = arg["value"] or ""
        m = _FROM.match(line)
        if m is None:
            if line.lstrip().upper().startswith("FROM"):
                raise DockerfileError(f"cannot read {line.strip()!r}")
            out.append(_rewrite_copy_from(line, stages, resolve, images))
            continue
        seen_from = True
        image = _substitute(m["image"], args)
        if image.lower() not in stages:
            images.append(image)
            image = resolve(image)
        if m["name"]:
            stages.add(m["name"].lower())
        out.append(f"{m['lead']}{image}{m['rest']}")
    if not images and not stages:
        raise DockerfileError("no FROM line")
    return "\n".join(out) + "\n", images


def _rewrite_copy_from(
    line: str, stages: set[str], resolve: Callable[[str], str], images: list[str]
) -> str:
    """A ``COPY``/``ADD --from=IMAGE`` line with its image resolved (a stage stays as it is)."""
    m = _COPY_FROM.match(line)
    if m is None or m["src"].lower() in stages or m["src"].isdigit():
        return line
    images.append(m["src"])
    return f"{m['lead']}{resolve(m['src'])}{line[m.end() :]}"


def final_workdir(text: str, default: str = "/app") -> str:
    """The working directory of the final stage (relative WORKDIRs resolved against the one
    before, as the builder does); ``default`` when that stage sets none."""
    workdir: str | None = None
    for line in logical_lines(text):
        if _FROM.match(line):
            workdir = None
            continue
        m = _WORKDIR.match(line)
        if m:
            path = m["path"].strip("\"'")
            if "$" in path:
                raise DockerfileError(f"WORKDIR {path}: variables are not supported here")
            workdir = posixpath.normpath(posixpath.join(workdir or "/", path))
    return workdir or default
