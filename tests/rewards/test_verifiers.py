from __future__ import annotations

import pytest

from rewards.answer import normalize_answer
from rewards.common import AllOf, SpecError
from rewards.json_check import json_equal, lookup
from rewards.registry import VERIFIERS, build_verifier, verify


def test_registry_names_every_family() -> None:
    assert set(VERIFIERS) == {
        "file_exists",
        "file_equals",
        "file_regex",
        "file_absent",
        "json_field",
        "page_state",
        "app_state",
        "command",
        "harbor_tests",
        "answer_equals",
        "answer_regex",
        "transcript",
        "judge",
        "qwenclawbench",
        "claweval",
        "claims",
        "answer_chars",
    }


# --- files -------------------------------------------------------------------------------------


def test_file_exists(sandbox) -> None:
    spec = {"type": "file_exists", "path": "out/a.txt"}
    v = verify(spec, sandbox, None)
    assert v.reward == 0.0 and "does not exist" in v.detail
    sandbox.put_file("out/a.txt", "")
    assert verify(spec, sandbox, None).reward == 1.0


def test_file_exists_directory_is_not_a_file(sandbox) -> None:
    (sandbox.root / "d").mkdir()
    assert verify({"type": "file_exists", "path": "d"}, sandbox, None).reward == 0.0


def test_file_absent(sandbox) -> None:
    spec = {"type": "file_absent", "path": "junk.tmp"}
    assert verify(spec, sandbox, None).reward == 1.0
    sandbox.put_file("junk.tmp", "x")
    v = verify(spec, sandbox, None)
    assert v.reward == 0.0 and "should not" in v.detail


def test_file_equals_strip_default(sandbox) -> None:
    spec = {"type": "file_equals", "path": "a.txt", "content": "hello"}
    assert verify(spec, sandbox, None).reward == 0.0  # missing
    sandbox.put_file("a.txt", "hello\n")
    assert verify(spec, sandbox, None).reward == 1.0
    sandbox.put_file("a.txt", "hello world\n")
    v = verify(spec, sandbox, None)
    assert v.reward == 0.0 and "expected 'hello'" in v.detail


def test_file_equals_exact(sandbox) -> None:
    spec = {"type": "file_equals", "path": "a.txt", "content": "hello", "strip": False}
    sandbox.put_file("a.txt", "hello\n")
    assert verify(spec, sandbox, None).reward == 0.0
    sandbox.put_file("a.txt", "hello")
    assert verify(spec, sandbox, None).reward == 1.0


def test_file_equals_binary_content_does_not_raise(sandbox) -> None:
    sandbox.put_file("b.bin", b"\xff\xfe\x00")
    spec = {"type": "file_equals", "path": "b.bin", "content": "x"}
    assert verify(spec, sandbox, None).reward == 0.0


def test_file_regex(sandbox) -> None:
    spec = {"type": "file_regex", "path": "c.ini", "pattern": r"^debug\s*=\s*false$", "flags": "m"}
    assert verify(spec, sandbox, None).reward == 0.0
    sandbox.put_file("c.ini", "[s]\ndebug = true\n")
    assert verify(spec, sandbox, None).reward == 0.0
    sandbox.put_file("c.ini", "[s]\ndebug = false\n")
    assert verify(spec, sandbox, None).reward == 1.0


def test_file_regex_ignore_case(sandbox) -> None:
    sandbox.put_file("c.txt", "STATUS: OK")
    spec = {"type": "file_regex", "path": "c.txt", "pattern": "status: ok"}
    assert verify(spec, sandbox, None).reward == 0.0
    assert verify({**spec, "flags": "i"}, sandbox, None).reward == 1.0


def test_get_file_error_is_a_wrong_answer(sandbox) -> None:
    class Unreadable(type(sandbox)):
        def get_file(self, path: str) -> bytes | None:
            raise IsADirectoryError(path)

    box = Unreadable(sandbox.root)
    v = verify({"type": "file_exists", "path": "x"}, box, None)
    assert v.reward == 0.0 and "IsADirectoryError" in v.detail


# --- json --------------------------------------------------------------------------------------


def test_json_field(sandbox) -> None:
    spec = {"type": "json_field", "path": "o.json", "field": "a.b.1.c", "equals": [1, "x"]}
    assert verify(spec, sandbox, None).reward == 0.0
    sandbox.put_file("o.json", '{"a": {"b": [{}, {"c": [1, "x"]}]}}')
    assert verify(spec, sandbox, None).reward == 1.0
    sandbox.put_file("o.json", '{"a": {"b": [{}, {"c": [1, "y"]}]}}')
    v = verify(spec, sandbox, None)
    assert v.reward == 0.0 and "expected" in v.detail


@pytest.mark.parametrize(
    ("doc", "detail"),
    [
        ("not json", "not valid JSON"),
        ('{"a": {}}', "no key 'b'"),
        ('{"a": {"b": [1]}}', "out of range"),
        ('{"a": {"b": {"1": {"c": 2}}}}', "is 2"),
        ('{"a": 3}', "cannot take"),
        ('{"a": {"b": [0, 1]}}', "cannot take"),
    ],
)
def test_json_field_wrong_shapes(sandbox, doc: str, detail: str) -> None:
    sandbox.put_file("o.json", doc)
    spec = {"type": "json_field", "path": "o.json", "field": "a.b.1.c", "equals": 1}
    v = verify(spec, sandbox, None)
    assert v.reward == 0.0 and detail in v.detail


def test_json_field_null_and_bool(sandbox) -> None:
    sandbox.put_file("o.json", '{"x": null, "t": true, "one": 1}')
    assert verify({"type": "json_field", "path": "o.json", "field": "x", "equals": None},
                  sandbox, None).reward == 1.0  # fmt: skip
    one = {"type": "json_field", "path": "o.json", "field": "one"}
    assert verify({**one, "equals": True}, sandbox, None).reward == 0.0
    assert verify({**one, "equals": 1.0}, sandbox, None).reward == 1.0


def test_json_helpers() -> None:
    assert lookup({"a": [{"b": 2}]}, "a.0.b") == (2, "")
    assert lookup([10, 20], "-1")[0] == 20
    assert json_equal({"a": [1, 2.0]}, {"a": [1.0, 2]})
    assert not json_equal(False, 0)
    assert not json_equal("1", 1)


# --- command -----------------------------------------------------------------------------------


def test_command(sandbox) -> None:
    assert verify({"type": "command", "cmd": "test -f ok"}, sandbox, None).reward == 0.0
    sandbox.put_file("ok", "")
    assert verify({"type": "command", "cmd": "test -f ok"}, sandbox, None).reward == 1.0


def test_command_expect_exit_and_output_in_detail(sandbox) -> None:
    spec = {"type": "command", "cmd": "echo boom >&2; exit 3"}
    v = verify(spec, sandbox, None)
    assert v.reward == 0.0 and "exited 3" in v.detail and "boom" in v.detail
    assert verify({**spec, "expect_exit": 3}, sandbox, None).reward == 1.0


def test_command_timeout(sandbox) -> None:
    v = verify({"type": "command", "cmd": "sleep 5", "timeout_s": 0.2}, sandbox, None)
    assert v.reward == 0.0 and "timed out" in v.detail


def test_command_runs_in_workspace(sandbox) -> None:
    sandbox.put_file("marker", "m")
    assert verify({"type": "command", "cmd": "cat marker"}, sandbox, None).reward == 1.0


# --- answers -----------------------------------------------------------------------------------


def test_answer_equals(sandbox) -> None:
    spec = {"type": "answer_equals", "value": "Dana Whitfield"}
    assert verify(spec, sandbox, None).reward == 0.0
    assert verify(spec, sandbox, "  **dana   whitfield.** ").reward == 1.0
    assert verify(spec, sandbox, "Sam Ortiz").reward == 0.0
    exact = {**spec, "normalize": False}
    assert verify(exact, sandbox, "dana whitfield").reward == 0.0
    assert verify(exact, sandbox, "Dana Whitfield").reward == 1.0


def test_answer_equals_partial_credit(sandbox) -> None:
    spec = {"type": "answer_equals", "value": "raven", "partial_credit": 0.5}
    assert verify(spec, sandbox, "Raven").reward == 1.0
    near, far = verify(spec, sandbox, "raple").reward, verify(spec, sandbox, "bulk").reward
    assert near == pytest.approx(0.5 * 0.6) and far == 0.0  # r, a, e: 2 * 3 of 10 characters
    assert 0 < verify(spec, sandbox, "rave").reward < 0.5  # never a pass
    assert verify(spec, sandbox, None).reward == 0.0
    for bad in (1.0, -0.1):
        with pytest.raises(ValueError, match="partial_credit"):
            verify({**spec, "partial_credit": bad}, sandbox, "raven")


def test_answer_equals_number_value(sandbox) -> None:
    spec = {"type": "answer_equals", "value": 42}
    assert verify(spec, sandbox, "42").reward == 1.0
    assert verify(spec, sandbox, "`42`").reward == 1.0
    assert verify(spec, sandbox, "420").reward == 0.0


def test_normalize_answer() -> None:
    assert normalize_answer(' "Hello  World!" ') == "hello world"
    assert normalize_answer("`x`.") == "x"
    assert normalize_answer("") == ""


def test_answer_regex(sandbox) -> None:
    spec = {"type": "answer_regex", "pattern": r"^\D*\b3\b\D*$"}
    assert verify(spec, sandbox, None).reward == 0.0
    assert verify(spec, sandbox, "3").reward == 1.0
    assert verify(spec, sandbox, "There are 3 ERROR lines.").reward == 1.0
    assert verify(spec, sandbox, "30").reward == 0.0
    assert verify({"type": "answer_regex", "pattern": "yes", "flags": "i"}, sandbox,
                  "YES").reward == 1.0  # fmt: skip


def test_answer_regex_matches_the_whole_answer_unless_told_to_search(sandbox) -> None:
    """An unanchored pattern searched anywhere passes an answer that lists every candidate;
    by default the whole answer (surrounding whitespace removed) must match."""
    listing = "Lena Fischer +49 30 5550 4411\nSam Okafor +44 20 5550 9900\nPriya +1 415 555 0101"
    whole = {"type": "answer_regex", "pattern": r"\+49 30 5550 4411"}
    assert verify(whole, sandbox, listing).reward == 0.0
    assert verify(whole, sandbox, "  +49 30 5550 4411\n").reward == 1.0
    assert "as a whole" in verify(whole, sandbox, listing).detail
    prose = {"type": "answer_regex", "pattern": r"\D*\+49 30 5550 4411\D*"}
    assert verify(prose, sandbox, "Lena's number is +49 30 5550 4411.").reward == 1.0
    assert verify(prose, sandbox, listing).reward == 0.0
    search = {**whole, "mode": "search"}  # the old behaviour, now asked for by name
    assert verify(search, sandbox, listing).reward == 1.0
    with pytest.raises(ValueError, match="mode"):
        build_verifier({**whole, "mode": "match"})


def test_answer_chars_partial_credit(sandbox) -> None:
    spec = {"type": "answer_chars", "chars": "7", "min_length": 2}
    assert verify(spec, sandbox, None).reward == 0.0
    assert verify(spec, sandbox, "7").reward == 0.0  # shorter than min_length
    assert verify(spec, sandbox, "7 7 7 7").reward == 1.0  # spaces do not count
    assert verify(spec, sandbox, "77ab").reward == 0.5
    assert verify(spec, sandbox, "abcd").reward == 0.0


# --- lists and errors --------------------------------------------------------------------------


def test_list_is_all_of(sandbox) -> None:
    spec = [
        {"type": "file_exists", "path": "a"},
        {"type": "answer_equals", "value": "ok"},
    ]
    assert isinstance(build_verifier(spec), AllOf)
    sandbox.put_file("a", "")
    assert verify(spec, sandbox, "ok").reward == 1.0
    v = verify(spec, sandbox, "no")
    assert v.reward == 0.0 and v.detail.startswith("[0] ") and "[1] answer" in v.detail


@pytest.mark.parametrize(
    ("spec", "field", "message"),
    [
        ({"type": "fil_exists", "path": "a"}, "type", "unknown verifier 'fil_exists'"),
        ({"path": "a"}, "type", "missing"),
        ({"type": "file_exists"}, "path", "required"),
        ({"type": "file_exists", "path": "a", "pth": "b"}, "pth", "unknown field"),
        ({"type": "file_regex", "path": "a", "pattern": "("}, "pattern", "invalid regex"),
        ({"type": "file_regex", "path": "a", "pattern": "a", "flags": "q"}, "flags", "flag"),
        ({"type": "command", "cmd": "true", "timeout_s": -1}, "timeout_s", "greater than 0"),
        ({"type": "json_field", "path": "a", "field": "x"}, "equals", "required"),
        ([{"type": "file_exists", "path": "a"}, {"type": "nope"}], "[1].type", "unknown"),
        ([], "", "empty verifier list"),
        ("file_exists", "", "mapping"),
    ],
)
def test_bad_specs_name_the_field(spec, field: str, message: str) -> None:
    with pytest.raises(ValueError) as info:
        build_verifier(spec)
    err = info.value
    assert isinstance(err, SpecError)
    fields = [f for f, _ in err.errors]
    assert field in fields, err.errors
    assert message in str(err)
    if field:
        assert f"{field}: " in str(err)


def test_unknown_type_lists_known_types() -> None:
    with pytest.raises(ValueError, match=r"known: answer_chars, answer_equals, .*file_exists"):
        build_verifier({"type": "fil_exists"})
