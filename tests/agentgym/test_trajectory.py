import json

from agentgym import Episode, EpisodeStatus, Failure, Turn


def test_records_construct_from_keywords_with_defaults():
    turn = Turn(index=0, observation="o", action_text="a", reward=1.0, terminated=True)
    assert turn.action_ids == [] and turn.info == {} and turn.valid
    ep = Episode(env_id="Maze-v0", task_id="easy-1", turns=[turn])
    assert ep.id and ep.status is EpisodeStatus.COMPLETE and ep.failure is None
    assert ep.finish().total_reward == 1.0
    assert ep.finish(terminal_score=0.25).total_reward == 0.25


def test_status_and_failure_accept_strings_and_round_trip():
    ep = Episode(status="error", failure="infra", error="sandbox died",
                 turns=[{"index": 0, "observation": "x", "info": {"error_kind": "malformed_action"}}])
    assert ep.status == EpisodeStatus.ERROR and ep.failure == Failure.INFRA
    assert not ep.turns[0].valid
    again = Episode.from_dict(json.loads(ep.to_json()))
    assert again == ep


def test_to_messages_builds_the_chat():
    ep = Episode(turns=[Turn(observation="o1", action_text="a1"), Turn(index=1, observation="o2", action_text="a2")])
    assert ep.to_messages("sys") == [
        {"role": "system", "content": "sys"}, {"role": "user", "content": "o1"},
        {"role": "assistant", "content": "a1"}, {"role": "user", "content": "o2"},
        {"role": "assistant", "content": "a2"},
    ]
