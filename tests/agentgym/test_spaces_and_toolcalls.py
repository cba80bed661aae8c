import numpy as np
import pytest

from agentgym import MalformedActionError, UnicodeText
from agentgym.toolcalls import error_observation, parse_tool_call, parse_tool_calls, validate_arguments


def test_unicode_text_accepts_any_string_and_samples_varied_text():
    space = UnicodeText(max_length=100, seed=3)
    for text in ["", "héllo 中文 🤖", "\x00\n\t", "a" * 100]:
        assert space.contains(text)
    assert not space.contains("a" * 101)
    assert not space.contains(b"bytes")
    samples = [space.sample() for _ in range(50)]
    assert all(space.contains(s) for s in samples)
    assert any(any(ord(c) > 127 for c in s) for s in samples)
    assert UnicodeText(max_length=100) == UnicodeText(max_length=100)
    with pytest.raises(ValueError, match="min_length"):
        UnicodeText(max_length=1, min_length=2)


def test_unicode_text_is_seeded():
    a, b = UnicodeText(seed=7), UnicodeText(seed=7)
    assert [a.sample() for _ in range(5)] == [b.sample() for _ in range(5)]
    assert isinstance(a.np_random, np.random.Generator)


@pytest.mark.parametrize(
    "text,fmt",
    [
        ('<tool_call>{"name": "move", "arguments": {"direction": "up"}}</tool_call>', "hermes"),
        ('{"tool_calls": [{"id": "c1", "type": "function", "function": {"name": "move", '
         '"arguments": "{\\"direction\\": \\"up\\"}"}}]}', "openai"),
        ('Sure.\n```json\n{"name": "move", "arguments": {"direction": "up"}}\n```', "json"),
    ],
)
def test_parse_tool_call_formats(text, fmt):
    call = parse_tool_call(text)
    assert (call.name, call.arguments, call.format) == ("move", {"direction": "up"}, fmt)


def test_plain_text_has_no_tool_calls_and_two_calls_are_parsed_in_order():
    assert parse_tool_calls("just thinking out loud") == []
    text = '<tool_call>{"name": "a", "arguments": {}}</tool_call> then <tool_call>{"name": "b"}</tool_call>'
    assert [c.name for c in parse_tool_calls(text)] == ["a", "b"]
    with pytest.raises(MalformedActionError, match="2 tool calls"):
        parse_tool_call(text)


@pytest.mark.parametrize(
    "text,message",
    [
        ("<tool_call>{broken json</tool_call>", "not valid JSON"),
        ('<tool_call>{"arguments": {}}</tool_call>', 'no "name"'),
        ('<tool_call>{"name": "f", "arguments": [1, 2]}</tool_call>', "must be a JSON object"),
        ("<tool_call>[1, 2]</tool_call>", "must be a JSON object"),
        ("no call here", "no tool call found"),
    ],
)
def test_malformed_calls_raise_clear_errors(text, message):
    with pytest.raises(MalformedActionError, match=message):
        parse_tool_call(text)


def test_validate_arguments_and_error_observation():
    schema = {"type": "object", "properties": {"n": {"type": "integer"}, "s": {"type": "string"}}, "required": ["n"]}
    call = parse_tool_call('{"name": "f", "arguments": {"n": 1, "s": "x"}}')
    validate_arguments(call, schema)
    for args, message in [("{}", "missing required"), ('{"n": "1"}', "must be integer"),
                          ('{"n": true}', "must be integer"), ('{"n": 1, "zz": 2}', "unknown argument")]:
        bad = parse_tool_call('{"name": "f", "arguments": ' + args + "}")
        with pytest.raises(MalformedActionError, match=message) as info:
            validate_arguments(bad, schema)
        assert info.value.kind == "invalid_arguments"
        obs = error_observation(info.value)
        assert obs.startswith("Error: ") and message.split()[0] in obs
