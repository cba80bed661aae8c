"""`with_policy_flags`: the shared sampling/context flags reach a command as one `PolicyFlags`."""

from __future__ import annotations

import pytest
import typer
from typer.testing import CliRunner

from agentgym.cli.policy_options import PolicyFlags, with_policy_flags


def _app(context: bool) -> tuple[typer.Typer, list[PolicyFlags]]:
    seen: list[PolicyFlags] = []
    app = typer.Typer()

    @app.command()
    @with_policy_flags(context=context)
    def go(name: str = typer.Option("x", "--name"), *, flags: PolicyFlags) -> None:
        seen.append(flags)

    return app, seen


def test_flags_arrive_as_one_record_with_options_and_collector_settings():
    app, seen = _app(context=True)
    result = CliRunner().invoke(app, ["--temperature", "0.5", "--keep-turns", "2", "--episode-token-budget", "99"])
    assert result.exit_code == 0, result.output
    flags = seen[0]
    assert flags.options(seed=3).temperature == 0.5 and flags.options(seed=3).seed == 3
    settings = flags.collector_settings()
    assert settings["context_window"].keep_turns == 2 and settings["episode_token_budget"] == 99
    assert PolicyFlags().collector_settings() == {}


def test_without_context_the_context_flags_are_not_offered():
    app, _ = _app(context=False)
    result = CliRunner().invoke(app, ["--keep-turns", "2"])
    assert result.exit_code != 0 and "No such option" in result.output


def test_a_command_without_a_flags_keyword_is_refused():
    with pytest.raises(TypeError, match="flags: PolicyFlags"):
        with_policy_flags()(lambda name="x": None)
