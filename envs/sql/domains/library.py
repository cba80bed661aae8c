"""library: authors, books, members and loans (open loans have no return date)."""

from __future__ import annotations

import random
from typing import Any

from agentgym.envs.sql.dataset import Column, Domain, Table, Template
from agentgym.envs.sql.domains.common import CITIES, add_days, each, iso_date, person_name

AUTHORS = (("Mara Quell", "Portugal", 1948), ("Tomas Verde", "Spain", 1961), ("Lena Hart", "Germany", 1975),
           ("Odile Fabre", "France", 1955), ("Paolo Senna", "Italy", 1982), ("Nuno Baptista", "Portugal", 1990),
           ("Greta Voss", "Germany", 1939), ("Ines Duarte", "Spain", 1968), ("Luc Ardent", "France", 1987),
           ("Sofia Lenti", "Italy", 1972))
GENRES = ("mystery", "fantasy", "history", "poetry", "science")
TITLE_WORDS = ("Silent", "River", "Glass", "Winter", "Hidden", "Garden", "Iron", "Paper", "Night", "Harbor")

TABLES = (
    Table("authors", (Column("id", "INTEGER", primary_key=True), Column("name", "TEXT", nullable=False),
                      Column("country", "TEXT"), Column("birth_year", "INTEGER"))),
    Table("books", (Column("id", "INTEGER", primary_key=True), Column("title", "TEXT", nullable=False),
                    Column("author_id", "INTEGER", references="authors.id"), Column("genre", "TEXT"),
                    Column("published_year", "INTEGER"), Column("pages", "INTEGER"))),
    Table("members", (Column("id", "INTEGER", primary_key=True), Column("name", "TEXT", nullable=False),
                      Column("join_date", "TEXT"), Column("city", "TEXT"))),
    Table("loans", (Column("id", "INTEGER", primary_key=True), Column("book_id", "INTEGER", references="books.id"),
                    Column("member_id", "INTEGER", references="members.id"), Column("loan_date", "TEXT"),
                    Column("return_date", "TEXT"))),
)


def populate(rng: random.Random) -> dict[str, list[tuple[Any, ...]]]:
    authors = [(i, *a) for i, a in enumerate(AUTHORS, start=1)]
    books = []
    for i in range(1, 81):
        title = f"The {rng.choice(TITLE_WORDS)} {rng.choice(TITLE_WORDS)}" if i % 3 == 0 else \
            f"{rng.choice(TITLE_WORDS)} {rng.choice(TITLE_WORDS)} {i}"
        books.append((i, title, rng.randint(1, 10), rng.choice(GENRES), rng.randint(1960, 2023),
                      rng.randint(90, 700)))
    members = [(i, person_name(rng), iso_date(rng, 2015, 2023), rng.choice(CITIES)[0]) for i in range(1, 101)]
    loans = []
    for i in range(1, 501):
        loan_date = iso_date(rng, 2020, 2024)
        returned = None if rng.random() < 0.12 else add_days(loan_date, rng.randint(3, 60))
        loans.append((i, rng.randint(1, 72), rng.randint(1, 90), loan_date, returned))  # some never borrowed
    return {"authors": authors, "books": books, "members": members, "loans": loans}


TEMPLATES = (
    Template("easy", "How many books of the '{genre}' genre does the library have?",
             "SELECT COUNT(*) FROM books WHERE genre = '{genre}'", each("genre", GENRES)),
    Template("easy", "List the titles of the books published after {year}.",
             "SELECT title FROM books WHERE published_year > {year}", each("year", (2015, 2020))),
    Template("easy", "Which authors were born in {country}? Give their names.",
             "SELECT name FROM authors WHERE country = '{country}'", each("country", ("Portugal", "Germany", "France"))),
    Template("easy", "How many loans have not been returned yet?", "SELECT COUNT(*) FROM loans WHERE return_date IS NULL"),
    Template("easy", "What is the page count of the longest book?", "SELECT MAX(pages) FROM books"),
    Template("easy", "How many members live in {city}?", "SELECT COUNT(*) FROM members WHERE city = '{city}'",
             each("city", ("Lisbon", "Paris", "Munich"))),
    Template("medium", "How many books has {author} written?",
             "SELECT COUNT(*) FROM books b JOIN authors a ON a.id = b.author_id WHERE a.name = '{author}'",
             each("author", ("Mara Quell", "Lena Hart", "Paolo Senna"))),
    Template("medium", "How many times were books of the '{genre}' genre borrowed?",
             "SELECT COUNT(*) FROM loans l JOIN books b ON b.id = l.book_id WHERE b.genre = '{genre}'",
             each("genre", ("mystery", "poetry", "science"))),
    Template("medium", "For each genre, what is the average number of pages? Give the genre and the average.",
             "SELECT genre, AVG(pages) FROM books GROUP BY genre"),
    Template("medium", "Which members borrowed more than {n} books? Give their names.",
             "SELECT m.name FROM members m JOIN loans l ON l.member_id = m.id GROUP BY m.id, m.name "
             "HAVING COUNT(*) > {n}", each("n", (8, 9))),
    Template("medium", "How many loans were made in {year}?",
             "SELECT COUNT(*) FROM loans WHERE substr(loan_date, 1, 4) = '{year}'", each("year", ("2021", "2023"))),
    Template("medium", "List the titles of the books by authors from {country} in the '{genre}' genre.",
             "SELECT b.title FROM books b JOIN authors a ON a.id = b.author_id "
             "WHERE a.country = '{country}' AND b.genre = '{genre}'",
             ({"country": "Spain", "genre": "fantasy"}, {"country": "Italy", "genre": "history"})),
    Template("hard", "Which books have never been borrowed? Give their titles.",
             "SELECT title FROM books WHERE id NOT IN (SELECT book_id FROM loans)"),
    Template("hard", "Which author's books were borrowed the most in total? Give the name and the number of loans.",
             "SELECT a.name, COUNT(*) AS n FROM authors a JOIN books b ON b.author_id = a.id "
             "JOIN loans l ON l.book_id = b.id GROUP BY a.id, a.name ORDER BY n DESC, a.id LIMIT 1"),
    Template("hard", "List the {k} most borrowed books with their number of loans, from most to least.",
             "SELECT b.title, COUNT(*) AS n FROM books b JOIN loans l ON l.book_id = b.id "
             "GROUP BY b.id, b.title ORDER BY n DESC, b.id LIMIT {k}", each("k", (2, 10))),
    Template("hard", "Which members from {city} still have a book that has not been returned? Give their names, "
             "each member once.",
             "SELECT m.name FROM members m WHERE m.city = '{city}' AND EXISTS (SELECT 1 FROM loans l "
             "WHERE l.member_id = m.id AND l.return_date IS NULL)", each("city", ("Porto", "Rome", "Berlin"))),
    Template("hard", "For each author country, how many distinct members borrowed a book by an author from it? "
             "Give the country and the count.",
             "SELECT a.country, COUNT(DISTINCT l.member_id) FROM authors a JOIN books b ON b.author_id = a.id "
             "JOIN loans l ON l.book_id = b.id GROUP BY a.country"),
    Template("hard", "Which genre was borrowed most often in {year}? Give the genre and the number of loans.",
             "SELECT b.genre, COUNT(*) AS n FROM loans l JOIN books b ON b.id = l.book_id "
             "WHERE substr(l.loan_date, 1, 4) = '{year}' GROUP BY b.genre ORDER BY n DESC, b.genre LIMIT 1",
             each("year", ("2020", "2022", "2024"))),
    Template("hard", "Which members have borrowed books of at least {n} different genres? Give their names.",
             "SELECT m.name FROM members m JOIN loans l ON l.member_id = m.id JOIN books b ON b.id = l.book_id "
             "GROUP BY m.id, m.name HAVING COUNT(DISTINCT b.genre) >= {n}", each("n", (5,))),
    Template("hard", "How many members have never borrowed a book?",
             "SELECT COUNT(*) FROM members m WHERE NOT EXISTS (SELECT 1 FROM loans l WHERE l.member_id = m.id)"),
)

DOMAIN = Domain("library", "a lending library: authors, books, members and loans", TABLES, populate, TEMPLATES)
