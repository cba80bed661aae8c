"""Schemas from Python functions, the shipped tools, the task sets and answer matching."""

from typing import Literal

import pytest
from agentgym.envs.tools import knowledge
from agentgym.envs.tools.builtin import calculate, date_add, days_between, weekday
from agentgym.envs.tools.functions import function_tool
from agentgym.envs.tools.tasks import TASK_SETS, answer_matches, normalise_answer


def book_flight(origin: str, seats: int, cabin: Literal["economy", "business"] = "economy",
                tags: list[str] | None = None, refundable: bool = False) -> str:
    """Book a flight for some passengers.

    Args:
        origin: IATA code of the departure airport.
        seats: how many seats,
            at least one.
        cabin: the cabin class.
    """
    return origin


def test_schema_comes_from_type_hints_and_docstring():
    schema = function_tool(book_flight).schema
    fn = schema["function"]
    assert schema["type"] == "function" and fn["name"] == "book_flight"
    assert fn["description"] == "Book a flight for some passengers."
    props = fn["parameters"]["properties"]
    assert props["origin"] == {"type": "string", "description": "IATA code of the departure airport."}
    assert props["seats"] == {"type": "integer", "description": "how many seats, at least one."}
    assert props["cabin"]["enum"] == ["economy", "business"]
    assert props["tags"] == {"type": "array", "items": {"type": "string"}}
    assert props["refundable"] == {"type": "boolean"}
    assert fn["parameters"]["required"] == ["origin", "seats"]


def test_builtin_tools():
    assert calculate("(17 * 24) + 9") == "417" and calculate("7 / 2") == "3.5"
    for bad in ("__import__('os')", "2 ** 10000", "1 / 0", "x + 1"):
        with pytest.raises(ValueError):
            calculate(bad)
    assert date_add("2024-02-27", 3) == "2024-03-01" and days_between("2024-01-01", "2024-12-31") == 365
    assert weekday("2024-03-01") == "Friday"
    with pytest.raises(ValueError, match="YYYY-MM-DD"):
        weekday("yesterday")
    assert knowledge.lookup("norwind labs", "Headquarters") == "Lindholt"
    with pytest.raises(KeyError, match="kb_search"):
        knowledge.lookup("Nobody", "employer")


def test_task_sets_have_over_100_tasks_with_unique_ids_and_plans():
    tasks = [t for name in ("lookup", "arithmetic", "dates") for t in TASK_SETS[name]()]
    assert len(tasks) >= 100 and len({t.id for t in tasks}) == len(tasks)
    assert all(t.plan and t.answer for t in tasks)
    assert any(len(t.plan) == 3 for t in tasks)  # multi-hop
    assert len(TASK_SETS["timezones"]()) == 12


def test_answer_normalisation():
    task = TASK_SETS["lookup"]()[0]
    assert answer_matches(f"  {task.answer}. ", task)
    assert normalise_answer("1,234") == normalise_answer("1234.0") == "1234"
    assert normalise_answer("9:05") == "09:05"
    assert normalise_answer('"The Valdorian Crown"') == "valdorian crown"
    assert not answer_matches("something else", task)
