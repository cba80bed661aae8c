"""flights: airports, airlines, scheduled flights and passenger bookings."""

from __future__ import annotations

import random
from typing import Any

from agentgym.envs.sql.dataset import Column, Domain, Table, Template
from agentgym.envs.sql.domains.common import each, iso_date, person_name

AIRPORTS = (("LIS", "Humberto Delgado", "Lisbon", "Portugal"), ("OPO", "Francisco Sa Carneiro", "Porto", "Portugal"),
            ("MAD", "Barajas", "Madrid", "Spain"), ("BCN", "El Prat", "Barcelona", "Spain"),
            ("BER", "Brandenburg", "Berlin", "Germany"), ("MUC", "Franz Josef Strauss", "Munich", "Germany"),
            ("CDG", "Charles de Gaulle", "Paris", "France"), ("FCO", "Fiumicino", "Rome", "Italy"))
AIRLINES = (("Atlantic Air", "Portugal"), ("Iberwings", "Spain"), ("Lufthop", "Germany"), ("Skyfrance", "France"),
            ("Aquila", "Italy"))
CLASSES = ("economy", "business", "first")

TABLES = (
    Table("airports", (Column("code", "TEXT", primary_key=True), Column("name", "TEXT"), Column("city", "TEXT"),
                       Column("country", "TEXT"))),
    Table("airlines", (Column("id", "INTEGER", primary_key=True), Column("name", "TEXT", nullable=False),
                       Column("country", "TEXT"))),
    Table("flights", (Column("id", "INTEGER", primary_key=True), Column("airline_id", "INTEGER",
                      references="airlines.id"), Column("origin", "TEXT", references="airports.code"),
                      Column("destination", "TEXT", references="airports.code"), Column("departure_date", "TEXT"),
                      Column("distance_km", "INTEGER"), Column("duration_min", "INTEGER"))),
    Table("bookings", (Column("id", "INTEGER", primary_key=True), Column("flight_id", "INTEGER",
                       references="flights.id"), Column("passenger", "TEXT"), Column("seat_class", "TEXT"),
                       Column("price", "REAL"))),
)


def populate(rng: random.Random) -> dict[str, list[tuple[Any, ...]]]:
    airports = list(AIRPORTS)
    airlines = [(i, *a) for i, a in enumerate(AIRLINES, start=1)]
    flights, bookings = [], []
    for i in range(1, 201):
        origin, destination = rng.sample([a[0] for a in airports], 2)
        distance = rng.randint(300, 2300)
        flights.append((i, rng.randint(1, 5), origin, destination, iso_date(rng, 2023, 2024), distance,
                        distance // 8 + rng.randint(25, 45)))
        for _ in range(rng.randint(0, 6)):
            seat = rng.choices(CLASSES, weights=(8, 3, 1))[0]
            base = {"economy": 0.08, "business": 0.25, "first": 0.5}[seat]
            bookings.append((len(bookings) + 1, i, person_name(rng), seat, round(distance * base * rng.uniform(0.8, 1.3), 2)))
    return {"airports": airports, "airlines": airlines, "flights": flights, "bookings": bookings}


TEMPLATES = (
    Template("easy", "How many flights depart from the airport with code {code}?",
             "SELECT COUNT(*) FROM flights WHERE origin = '{code}'", each("code", ("LIS", "MAD", "CDG", "FCO"))),
    Template("easy", "Which airports are in {country}? Give their codes.",
             "SELECT code FROM airports WHERE country = '{country}'", each("country", ("Portugal", "Spain", "Germany"))),
    Template("easy", "How many flights are longer than {km} km?",
             "SELECT COUNT(*) FROM flights WHERE distance_km > {km}", each("km", (1000, 1500, 2000))),
    Template("easy", "How many bookings are in {seat} class?",
             "SELECT COUNT(*) FROM bookings WHERE seat_class = '{seat}'", each("seat", CLASSES)),
    Template("easy", "What is the longest flight duration in minutes?", "SELECT MAX(duration_min) FROM flights"),
    Template("easy", "What is the cheapest booking price?", "SELECT MIN(price) FROM bookings"),
    Template("medium", "How many flights does {airline} operate?",
             "SELECT COUNT(*) FROM flights f JOIN airlines a ON a.id = f.airline_id WHERE a.name = '{airline}'",
             each("airline", ("Atlantic Air", "Lufthop", "Aquila"))),
    Template("medium", "How many flights go from {origin} to {destination} (city names)?",
             "SELECT COUNT(*) FROM flights f JOIN airports o ON o.code = f.origin JOIN airports d "
             "ON d.code = f.destination WHERE o.city = '{origin}' AND d.city = '{destination}'",
             ({"origin": "Lisbon", "destination": "Paris"}, {"origin": "Madrid", "destination": "Berlin"},
              {"origin": "Rome", "destination": "Munich"})),
    Template("medium", "For each seat class, what is the average booking price? Give the class and the average.",
             "SELECT seat_class, AVG(price) FROM bookings GROUP BY seat_class"),
    Template("medium", "What is the total booking revenue of {airline}?",
             "SELECT SUM(b.price) FROM bookings b JOIN flights f ON f.id = b.flight_id JOIN airlines a "
             "ON a.id = f.airline_id WHERE a.name = '{airline}'", each("airline", ("Iberwings", "Skyfrance"))),
    Template("medium", "How many flights departed in {month} {year}?",
             "SELECT COUNT(*) FROM flights WHERE substr(departure_date, 1, 7) = '{year}-{mm}'",
             ({"month": "March", "mm": "03", "year": 2023}, {"month": "July", "mm": "07", "year": 2024},
              {"month": "November", "mm": "11", "year": 2023})),
    Template("medium", "For each destination airport code, how many flights arrive there? Give the code and the count.",
             "SELECT destination, COUNT(*) FROM flights GROUP BY destination"),
    Template("hard", "Which airline earned the most booking revenue? Give the airline name and the revenue.",
             "SELECT a.name, SUM(b.price) AS revenue FROM airlines a JOIN flights f ON f.airline_id = a.id "
             "JOIN bookings b ON b.flight_id = f.id GROUP BY a.id, a.name ORDER BY revenue DESC LIMIT 1"),
    Template("hard", "Which flights have no bookings at all? Give their ids.",
             "SELECT id FROM flights WHERE id NOT IN (SELECT flight_id FROM bookings)"),
    Template("hard", "List the {k} routes (origin code, destination code) with the most flights, with their "
             "number of flights, from most to least.",
             "SELECT origin, destination, COUNT(*) AS n FROM flights GROUP BY origin, destination "
             "ORDER BY n DESC, origin, destination LIMIT {k}", each("k", (4, 7))),
    Template("hard", "Which passengers booked a {seat} seat on a flight leaving from {city}? Give each name once.",
             "SELECT DISTINCT b.passenger FROM bookings b JOIN flights f ON f.id = b.flight_id "
             "JOIN airports a ON a.code = f.origin WHERE b.seat_class = '{seat}' AND a.city = '{city}'",
             ({"seat": "first", "city": "Paris"}, {"seat": "business", "city": "Lisbon"},
              {"seat": "business", "city": "Berlin"})),
    Template("hard", "For each airline, how many distinct destination countries does it fly to? "
             "Give the airline name and the count.",
             "SELECT al.name, COUNT(DISTINCT ap.country) FROM airlines al JOIN flights f ON f.airline_id = al.id "
             "JOIN airports ap ON ap.code = f.destination GROUP BY al.id, al.name"),
    Template("hard", "Which flights from {code} are longer than the average distance of all flights? "
             "Give their ids and distances.",
             "SELECT id, distance_km FROM flights WHERE origin = '{code}' AND distance_km > "
             "(SELECT AVG(distance_km) FROM flights)", each("code", ("OPO", "BCN", "MUC"))),
    Template("hard", "What is the average number of bookings per flight for flights that have at least one "
             "booking, by airline? Give the airline name and the average.",
             "SELECT a.name, AVG(c.n) FROM airlines a JOIN (SELECT f.airline_id, f.id, COUNT(*) AS n "
             "FROM flights f JOIN bookings b ON b.flight_id = f.id GROUP BY f.airline_id, f.id) c "
             "ON c.airline_id = a.id GROUP BY a.id, a.name"),
    Template("hard", "Which country's airports are the origin of the most flights in {year}? "
             "Give the country and the number of flights.",
             "SELECT a.country, COUNT(*) AS n FROM flights f JOIN airports a ON a.code = f.origin "
             "WHERE substr(f.departure_date, 1, 4) = '{year}' GROUP BY a.country ORDER BY n DESC, a.country LIMIT 1",
             each("year", ("2023", "2024"))),
)

DOMAIN = Domain("flights", "an air travel network: airports, airlines, flights and bookings",
                TABLES, populate, TEMPLATES)
