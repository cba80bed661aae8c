"""school: students, teachers, courses and enrollments with scores."""

from __future__ import annotations

import random
from typing import Any

from agentgym.envs.sql.dataset import Column, Domain, Table, Template
from agentgym.envs.sql.domains.common import CITIES, each, person_name

TEACHERS = (("Alice Moreau", "math", 2008), ("Bruno Keller", "math", 2015), ("Carla Nunes", "science", 2011),
            ("David Lindqvist", "science", 2019), ("Emma Rossi", "history", 2005), ("Felix Braun", "history", 2021),
            ("Gina Alvarez", "languages", 2013), ("Hugo Martin", "languages", 2017), ("Irene Costa", "arts", 2010),
            ("Jakob Weiss", "arts", 2022))
COURSES = (("Algebra I", "math", 1, 4), ("Geometry", "math", 1, 3), ("Calculus", "math", 2, 5),
           ("Statistics", "math", 2, 3), ("Biology", "science", 3, 4), ("Chemistry", "science", 3, 4),
           ("Physics", "science", 4, 5), ("World History", "history", 5, 3), ("Ancient Rome", "history", 6, 2),
           ("Spanish", "languages", 7, 3), ("German", "languages", 8, 3), ("French", "languages", 7, 2),
           ("Painting", "arts", 9, 2), ("Music Theory", "arts", 10, 2), ("Sculpture", "arts", 9, 2))
TERMS = ("2022-S1", "2022-S2", "2023-S1", "2023-S2")

TABLES = (
    Table("students", (Column("id", "INTEGER", primary_key=True), Column("name", "TEXT", nullable=False),
                       Column("grade_level", "INTEGER"), Column("city", "TEXT"), Column("birth_year", "INTEGER"))),
    Table("teachers", (Column("id", "INTEGER", primary_key=True), Column("name", "TEXT", nullable=False),
                       Column("department", "TEXT"), Column("hire_year", "INTEGER"))),
    Table("courses", (Column("id", "INTEGER", primary_key=True), Column("title", "TEXT", nullable=False),
                      Column("department", "TEXT"), Column("teacher_id", "INTEGER", references="teachers.id"),
                      Column("credits", "INTEGER"))),
    Table("enrollments", (Column("id", "INTEGER", primary_key=True),
                          Column("student_id", "INTEGER", references="students.id"),
                          Column("course_id", "INTEGER", references="courses.id"),
                          Column("term", "TEXT"), Column("score", "INTEGER"))),
)


def populate(rng: random.Random) -> dict[str, list[tuple[Any, ...]]]:
    students = []
    for i in range(1, 151):
        grade = rng.randint(9, 12)
        students.append((i, person_name(rng), grade, rng.choice(CITIES)[0], 2010 - grade + rng.randint(0, 1)))
    teachers = [(i, *t) for i, t in enumerate(TEACHERS, start=1)]
    courses = [(i, *c) for i, c in enumerate(COURSES, start=1)]
    enrollments = []
    for student in students[:140]:  # ten students have not enrolled yet
        for term in TERMS:
            for course in rng.sample(courses, rng.randint(0, 3)):
                talent = (student[0] * 7) % 25
                score = max(0, min(100, int(rng.gauss(60 + talent, 12))))
                enrollments.append((len(enrollments) + 1, student[0], course[0], term, score))
    return {"students": students, "teachers": teachers, "courses": courses, "enrollments": enrollments}


TEMPLATES = (
    Template("easy", "How many students are in grade {grade}?",
             "SELECT COUNT(*) FROM students WHERE grade_level = {grade}", each("grade", (9, 10, 11, 12))),
    Template("easy", "List the names of the teachers in the {department} department.",
             "SELECT name FROM teachers WHERE department = '{department}'",
             each("department", ("math", "science", "history", "arts"))),
    Template("easy", "How many courses are worth {credits} credits?",
             "SELECT COUNT(*) FROM courses WHERE credits = {credits}", each("credits", (2, 3, 4))),
    Template("easy", "What is the highest score recorded in any enrollment?", "SELECT MAX(score) FROM enrollments"),
    Template("easy", "Which teachers were hired before {year}? Give their names.",
             "SELECT name FROM teachers WHERE hire_year < {year}", each("year", (2010, 2016))),
    Template("easy", "How many students live in {city}?", "SELECT COUNT(*) FROM students WHERE city = '{city}'",
             each("city", ("Porto", "Madrid", "Milan"))),
    Template("medium", "How many enrollments does the course '{title}' have?",
             "SELECT COUNT(*) FROM enrollments e JOIN courses c ON e.course_id = c.id WHERE c.title = '{title}'",
             each("title", ("Calculus", "Biology", "Spanish", "Painting"))),
    Template("medium", "What is the average enrollment score of each department's courses? "
             "Give the department and the average.",
             "SELECT c.department, AVG(e.score) FROM courses c JOIN enrollments e ON e.course_id = c.id "
             "GROUP BY c.department"),
    Template("medium", "Which courses does {teacher} teach? Give their titles.",
             "SELECT c.title FROM courses c JOIN teachers t ON c.teacher_id = t.id WHERE t.name = '{teacher}'",
             each("teacher", ("Alice Moreau", "Gina Alvarez", "Irene Costa"))),
    Template("medium", "How many distinct students from {city} took at least one {department} course?",
             "SELECT COUNT(DISTINCT s.id) FROM students s JOIN enrollments e ON e.student_id = s.id "
             "JOIN courses c ON c.id = e.course_id WHERE s.city = '{city}' AND c.department = '{department}'",
             ({"city": "Lisbon", "department": "math"}, {"city": "Berlin", "department": "science"},
              {"city": "Rome", "department": "languages"})),
    Template("medium", "For each term, how many enrollments were there? Give the term and the count.",
             "SELECT term, COUNT(*) FROM enrollments GROUP BY term"),
    Template("medium", "What is the average score in '{title}' during term {term}?",
             "SELECT AVG(e.score) FROM enrollments e JOIN courses c ON c.id = e.course_id "
             "WHERE c.title = '{title}' AND e.term = '{term}'",
             ({"title": "Geometry", "term": "2022-S1"}, {"title": "Chemistry", "term": "2023-S2"},
              {"title": "German", "term": "2022-S2"})),
    Template("hard", "Which student has the highest average score among students with at least {n} enrollments? "
             "Give the name and the average.",
             "SELECT s.name, AVG(e.score) AS avg_score FROM students s JOIN enrollments e ON e.student_id = s.id "
             "GROUP BY s.id, s.name HAVING COUNT(*) >= {n} ORDER BY avg_score DESC, s.id LIMIT 1",
             each("n", (3, 6))),
    Template("hard", "Which students scored above {score} in every enrollment they have? Give their names.",
             "SELECT s.name FROM students s WHERE EXISTS (SELECT 1 FROM enrollments e WHERE e.student_id = s.id) "
             "AND NOT EXISTS (SELECT 1 FROM enrollments e WHERE e.student_id = s.id AND e.score <= {score})",
             each("score", (55, 60))),
    Template("hard", "Which teacher's courses have the most enrollments in total? Give the name and the count.",
             "SELECT t.name, COUNT(*) AS n FROM teachers t JOIN courses c ON c.teacher_id = t.id "
             "JOIN enrollments e ON e.course_id = c.id GROUP BY t.id, t.name ORDER BY n DESC, t.id LIMIT 1"),
    Template("hard", "For each department, which course has the highest average score? "
             "Give the department, the course title and its average.",
             "SELECT department, title, avg_score FROM (SELECT c.department, c.title, AVG(e.score) AS avg_score, "
             "RANK() OVER (PARTITION BY c.department ORDER BY AVG(e.score) DESC) AS r FROM courses c "
             "JOIN enrollments e ON e.course_id = c.id GROUP BY c.id, c.department, c.title) ranked WHERE r = 1"),
    Template("hard", "How many students took no course at all in term {term}?",
             "SELECT COUNT(*) FROM students s WHERE NOT EXISTS (SELECT 1 FROM enrollments e "
             "WHERE e.student_id = s.id AND e.term = '{term}')", each("term", TERMS)),
    Template("hard", "Rank the departments by the number of distinct students enrolled in their courses, "
             "from most to least. Give the department and the count.",
             "SELECT c.department, COUNT(DISTINCT e.student_id) AS n FROM courses c "
             "JOIN enrollments e ON e.course_id = c.id GROUP BY c.department ORDER BY n DESC, c.department"),
    Template("hard", "Which students in grade {grade} scored higher than the average score of all enrollments? "
             "Give each student's name once.",
             "SELECT s.name FROM students s WHERE s.grade_level = {grade} AND s.id IN (SELECT e.student_id "
             "FROM enrollments e WHERE e.score > (SELECT AVG(score) FROM enrollments))", each("grade", (9, 12))),
)

DOMAIN = Domain("school", "a school: students, teachers, courses and enrollments with scores",
                TABLES, populate, TEMPLATES)
