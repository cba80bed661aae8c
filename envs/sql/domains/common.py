"""Shared vocabularies and helpers of the generated SQL domains (all draws go through a seeded Random)."""

from __future__ import annotations

import random

FIRST_NAMES = ("Ada", "Ben", "Chloe", "Dmitri", "Elena", "Farid", "Grace", "Hiro", "Ines", "Jonas", "Kira",
               "Liam", "Maya", "Noah", "Olga", "Pedro", "Quinn", "Rosa", "Sami", "Tara", "Umar", "Vera",
               "Wen", "Xavier", "Yara", "Zoe")
LAST_NAMES = ("Adams", "Brown", "Costa", "Diaz", "Evans", "Fischer", "Garcia", "Hansen", "Ito", "Jensen",
              "Kumar", "Lopez", "Meyer", "Novak", "Okafor", "Park", "Rossi", "Silva", "Tanaka", "Weber")
CITIES = (("Lisbon", "Portugal"), ("Porto", "Portugal"), ("Madrid", "Spain"), ("Seville", "Spain"),
          ("Berlin", "Germany"), ("Munich", "Germany"), ("Paris", "France"), ("Lyon", "France"),
          ("Rome", "Italy"), ("Milan", "Italy"))


def person_name(rng: random.Random) -> str:
    return f"{rng.choice(FIRST_NAMES)} {rng.choice(LAST_NAMES)}"


def iso_date(rng: random.Random, first_year: int, last_year: int) -> str:
    """A date 'YYYY-MM-DD' between Jan 1 of `first_year` and Dec 28 of `last_year`."""
    return f"{rng.randint(first_year, last_year)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"


def add_days(date: str, days: int) -> str:
    """`date` plus `days`, on the simplified 28-day months the generators use."""
    year, month, day = (int(x) for x in date.split("-"))
    total = (year * 12 + month - 1) * 28 + day - 1 + days
    year, rest = divmod(total, 12 * 28)
    month, day = divmod(rest, 28)
    return f"{year}-{month + 1:02d}-{day + 1:02d}"


def each(key: str, values: tuple[object, ...] | list[object]) -> tuple[dict[str, object], ...]:
    """Template parameters: one dict per value, under `key`."""
    return tuple({key: v} for v in values)
