"""File checks: a file exists, is absent, equals given content, or matches a regex.

Paths are sandbox paths; relative ones are taken from the workspace. A missing or unreadable
file is a wrong answer (reward 0 with a detail), never an exception.
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field, field_validator

from forge.sandboxes.base import Sandbox
from rewards.base import Verdict
from rewards.common import (
    VerifierModel,
    check_flags,
    check_pattern,
    compile_pattern,
    read_text,
    short,
)

_PATH = "File path in the sandbox; relative paths are taken from the workspace."


class FileExists(VerifierModel):
    """Reward 1 when a regular file exists at ``path``."""

    kind: ClassVar[str] = "file_exists"
    path: str = Field(min_length=1, description=_PATH)

    def verify(self, sandbox: Sandbox, final_answer: str | None) -> Verdict:
        text, why = read_text(sandbox, self.path)
        if text is None:
            return Verdict(0.0, why)
        return Verdict(1.0, f"{self.path} exists")


class FileAbsent(VerifierModel):
    """Reward 1 when there is no readable file at ``path`` (it was deleted or never written)."""

    kind: ClassVar[str] = "file_absent"
    path: str = Field(min_length=1, description=_PATH)

    def verify(self, sandbox: Sandbox, final_answer: str | None) -> Verdict:
        text, _ = read_text(sandbox, self.path)
        if text is None:
            return Verdict(1.0, f"{self.path} is absent")
        return Verdict(0.0, f"{self.path} exists but should not")


class FileEquals(VerifierModel):
    """Reward 1 when the file's text equals ``content``."""

    kind: ClassVar[str] = "file_equals"
    path: str = Field(min_length=1, description=_PATH)
    content: str = Field(description="The expected text of the file.")
    strip: bool = Field(
        default=True,
        description="Ignore leading and trailing whitespace (a final newline) on both sides.",
    )

    def verify(self, sandbox: Sandbox, final_answer: str | None) -> Verdict:
        text, why = read_text(sandbox, self.path)
        if text is None:
            return Verdict(0.0, why)
        got, want = (text.strip(), self.content.strip()) if self.strip else (text, self.content)
        if got == want:
            return Verdict(1.0, f"{self.path} has the expected content")
        return Verdict(0.0, f"{self.path}: expected {short(want)}, got {short(got)}")


class FileRegex(VerifierModel):
    """Reward 1 when ``pattern`` is found (``re.search``) in the file's text."""

    kind: ClassVar[str] = "file_regex"
    path: str = Field(min_length=1, description=_PATH)
    pattern: str = Field(description="Python regular expression searched for in the file.")
    flags: str = Field(
        default="",
        description="Regex flag letters: i (ignore case), m (multiline), s (dot-all), x.",
    )

    _check_pattern = field_validator("pattern")(check_pattern)
    _check_flags = field_validator("flags")(check_flags)

    def verify(self, sandbox: Sandbox, final_answer: str | None) -> Verdict:
        text, why = read_text(sandbox, self.path)
        if text is None:
            return Verdict(0.0, why)
        if compile_pattern(self.pattern, self.flags).search(text):
            return Verdict(1.0, f"{self.path} matches {self.pattern!r}")
        return Verdict(0.0, f"{self.path} does not match {self.pattern!r}: {short(text)}")
