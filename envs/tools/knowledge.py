"""A small fictional knowledge base for multi-hop look-up tasks (so answers cannot come from memory).

Entities are people, companies, cities and countries with made-up names; each
has attributes that point at other entities (a person's employer is a company,
a company's headquarters is a city, a city's country is a country), so a
question can need two or three look-ups in a row. Everything is fixed data:
the same facts on every machine.
"""

from __future__ import annotations

from dataclasses import dataclass

COUNTRIES = {
    "Valdoria": {"capital": "Merivale", "currency": "valdorian crown", "continent": "Europe"},
    "Ostrania": {"capital": "Kelport", "currency": "ostran mark", "continent": "Asia"},
    "Tessaly Isles": {"capital": "Brightwater", "currency": "tessal shell", "continent": "Oceania"},
    "Quorvia": {"capital": "Dunmarsh", "currency": "quorvian peso", "continent": "South America"},
}
CITIES = {
    "Merivale": {"country": "Valdoria", "population": "812000", "river": "Aster"},
    "Lindholt": {"country": "Valdoria", "population": "164000", "river": "Ember"},
    "Kelport": {"country": "Ostrania", "population": "2310000", "river": "Sable"},
    "Varn": {"country": "Ostrania", "population": "97000", "river": "Sable"},
    "Brightwater": {"country": "Tessaly Isles", "population": "355000", "river": "none"},
    "Coralhaven": {"country": "Tessaly Isles", "population": "48000", "river": "none"},
    "Dunmarsh": {"country": "Quorvia", "population": "1270000", "river": "Ocre"},
    "Pellamar": {"country": "Quorvia", "population": "231000", "river": "Ocre"},
}
COMPANIES = {
    "Norwind Labs": {"headquarters": "Lindholt", "founded": "1998", "industry": "robotics", "ceo": "Ilsa Marrow"},
    "Bluefen Foods": {"headquarters": "Kelport", "founded": "1974", "industry": "food", "ceo": "Tobin Achterberg"},
    "Sundial Freight": {"headquarters": "Brightwater", "founded": "2005", "industry": "logistics",
                        "ceo": "Marisol Quint"},
    "Orrery Systems": {"headquarters": "Dunmarsh", "founded": "1989", "industry": "software", "ceo": "Cato Velden"},
    "Greyhollow Mining": {"headquarters": "Varn", "founded": "1931", "industry": "mining", "ceo": "Hale Brannock"},
    "Lumen & Loom": {"headquarters": "Merivale", "founded": "2012", "industry": "textiles", "ceo": "Ada Fenwright"},
}
PEOPLE = {
    "Ilsa Marrow": {"employer": "Norwind Labs", "born_in": "Kelport", "birth_year": "1971", "role": "chief executive"},
    "Tobin Achterberg": {"employer": "Bluefen Foods", "born_in": "Merivale", "birth_year": "1965",
                         "role": "chief executive"},
    "Marisol Quint": {"employer": "Sundial Freight", "born_in": "Pellamar", "birth_year": "1980",
                      "role": "chief executive"},
    "Cato Velden": {"employer": "Orrery Systems", "born_in": "Coralhaven", "birth_year": "1958",
                    "role": "chief executive"},
    "Hale Brannock": {"employer": "Greyhollow Mining", "born_in": "Varn", "birth_year": "1969",
                      "role": "chief executive"},
    "Ada Fenwright": {"employer": "Lumen & Loom", "born_in": "Dunmarsh", "birth_year": "1984",
                      "role": "chief executive"},
    "Rufus Penhallow": {"employer": "Orrery Systems", "born_in": "Lindholt", "birth_year": "1990", "role": "engineer"},
    "Yelena Strand": {"employer": "Norwind Labs", "born_in": "Brightwater", "birth_year": "1987", "role": "designer"},
    "Osric Tamm": {"employer": "Sundial Freight", "born_in": "Merivale", "birth_year": "1976", "role": "pilot"},
    "Perpetua Lowe": {"employer": "Bluefen Foods", "born_in": "Dunmarsh", "birth_year": "1993", "role": "chemist"},
    "Dario Menz": {"employer": "Greyhollow Mining", "born_in": "Pellamar", "birth_year": "1982",
                   "role": "geologist"},
    "Wren Castellan": {"employer": "Lumen & Loom", "born_in": "Kelport", "birth_year": "1995", "role": "weaver"},
}


@dataclass(frozen=True)
class Fact:
    entity: str
    kind: str
    attributes: dict[str, str]


def _index() -> dict[str, Fact]:
    table: dict[str, Fact] = {}
    for kind, group in (("country", COUNTRIES), ("city", CITIES), ("company", COMPANIES), ("person", PEOPLE)):
        for name, attrs in group.items():
            table[name.lower()] = Fact(name, kind, attrs)
    return table


FACTS = _index()


def lookup(entity: str, attribute: str) -> str:
    """The value of `attribute` for `entity`, or `KeyError`/`ValueError` naming what exists."""
    fact = FACTS.get(" ".join(entity.split()).lower())
    if fact is None:
        raise KeyError(f"no entity named {entity!r}; use kb_search to find names")
    key = attribute.strip().lower().replace(" ", "_")
    if key not in fact.attributes:
        raise ValueError(f"{fact.entity} ({fact.kind}) has no attribute {attribute!r}; "
                         f"it has: {', '.join(sorted(fact.attributes))}")
    return fact.attributes[key]


def search(query: str) -> list[str]:
    """Entity names containing `query` (case-insensitive), with their kind."""
    needle = query.strip().lower()
    return [f"{f.entity} ({f.kind})" for key, f in sorted(FACTS.items()) if needle and needle in key]
