"""hr: departments, employees (with managers), projects and time assignments."""

from __future__ import annotations

import random
from typing import Any

from agentgym.envs.sql.dataset import Column, Domain, Table, Template
from agentgym.envs.sql.domains.common import each, iso_date, person_name

DEPARTMENTS = (("Engineering", "Lisbon"), ("Sales", "Madrid"), ("Marketing", "Paris"), ("Finance", "Berlin"),
               ("Support", "Lisbon"), ("Research", "Munich"))
TITLES = ("Engineer", "Analyst", "Specialist", "Associate", "Lead")
PROJECT_WORDS = ("Apollo", "Beacon", "Cobalt", "Delta", "Ember", "Falcon", "Granite", "Helix", "Ion", "Juniper",
                 "Kestrel", "Lumen")

TABLES = (
    Table("departments", (Column("id", "INTEGER", primary_key=True), Column("name", "TEXT", nullable=False),
                          Column("location", "TEXT"))),
    Table("employees", (Column("id", "INTEGER", primary_key=True), Column("name", "TEXT", nullable=False),
                        Column("department_id", "INTEGER", references="departments.id"),
                        Column("manager_id", "INTEGER", references="employees.id"), Column("hire_date", "TEXT"),
                        Column("salary", "INTEGER"), Column("title", "TEXT"))),
    Table("projects", (Column("id", "INTEGER", primary_key=True), Column("name", "TEXT", nullable=False),
                       Column("department_id", "INTEGER", references="departments.id"), Column("budget", "INTEGER"))),
    Table("assignments", (Column("id", "INTEGER", primary_key=True),
                          Column("employee_id", "INTEGER", references="employees.id"),
                          Column("project_id", "INTEGER", references="projects.id"), Column("hours", "INTEGER"))),
)


def populate(rng: random.Random) -> dict[str, list[tuple[Any, ...]]]:
    departments = [(i, *d) for i, d in enumerate(DEPARTMENTS, start=1)]
    employees = []
    for i in range(1, 6 + 1):  # one head per department, no manager
        employees.append((i, person_name(rng), i, None, iso_date(rng, 2008, 2014), rng.randint(110, 160) * 1000,
                          "Director"))
    for i in range(7, 131):
        dept = rng.randint(1, 6)
        employees.append((i, person_name(rng), dept, dept, iso_date(rng, 2012, 2024), rng.randint(35, 125) * 1000,
                          rng.choice(TITLES)))
    projects = [(i, f"{word} {i}", rng.randint(1, 6), rng.randint(20, 400) * 1000)
                for i, word in enumerate(PROJECT_WORDS, start=1)]
    assignments = []
    for employee in employees[6:]:
        if employee[0] % 9 == 0:
            continue  # some employees work on no project
        for project in rng.sample(projects, rng.randint(1, 3)):
            assignments.append((len(assignments) + 1, employee[0], project[0], rng.randint(5, 60) * 4))
    return {"departments": departments, "employees": employees, "projects": projects, "assignments": assignments}


TEMPLATES = (
    Template("easy", "How many employees have the title '{title}'?",
             "SELECT COUNT(*) FROM employees WHERE title = '{title}'", each("title", TITLES)),
    Template("easy", "List the names of the employees earning more than {salary}.",
             "SELECT name FROM employees WHERE salary > {salary}", each("salary", (100000, 120000))),
    Template("easy", "Which departments are located in {city}? Give their names.",
             "SELECT name FROM departments WHERE location = '{city}'", each("city", ("Lisbon", "Paris"))),
    Template("easy", "What is the largest project budget?", "SELECT MAX(budget) FROM projects"),
    Template("easy", "How many employees were hired in {year}?",
             "SELECT COUNT(*) FROM employees WHERE substr(hire_date, 1, 4) = '{year}'",
             each("year", ("2016", "2019", "2022"))),
    Template("medium", "How many employees work in the {department} department?",
             "SELECT COUNT(*) FROM employees e JOIN departments d ON d.id = e.department_id "
             "WHERE d.name = '{department}'", each("department", ("Engineering", "Sales", "Research"))),
    Template("medium", "What is the average salary in each department? Give the department name and the average.",
             "SELECT d.name, AVG(e.salary) FROM departments d JOIN employees e ON e.department_id = d.id "
             "GROUP BY d.id, d.name"),
    Template("medium", "How many hours in total are assigned to the project '{project}'?",
             "SELECT SUM(a.hours) FROM assignments a JOIN projects p ON p.id = a.project_id "
             "WHERE p.name = '{project}'", each("project", ("Apollo 1", "Ember 5", "Ion 9", "Lumen 12"))),
    Template("medium", "Which employees work on more than {n} projects? Give their names.",
             "SELECT e.name FROM employees e JOIN assignments a ON a.employee_id = e.id GROUP BY e.id, e.name "
             "HAVING COUNT(*) > {n}", each("n", (2,))),
    Template("medium", "For each job title, how many employees hold it? Give the title and the count.",
             "SELECT title, COUNT(*) FROM employees GROUP BY title"),
    Template("medium", "What is the total budget of the projects owned by the {department} department?",
             "SELECT SUM(p.budget) FROM projects p JOIN departments d ON d.id = p.department_id "
             "WHERE d.name = '{department}'", each("department", ("Engineering", "Marketing", "Finance"))),
    Template("hard", "Which employees earn more than their manager? Give their names.",
             "SELECT e.name FROM employees e JOIN employees m ON m.id = e.manager_id WHERE e.salary > m.salary"),
    Template("hard", "Which employee in the {department} department has the highest salary? "
             "Give the name and the salary.",
             "SELECT e.name, e.salary FROM employees e JOIN departments d ON d.id = e.department_id "
             "WHERE d.name = '{department}' ORDER BY e.salary DESC, e.id LIMIT 1",
             each("department", ("Sales", "Support", "Research"))),
    Template("hard", "Which employees work on no project at all? Give their names.",
             "SELECT name FROM employees WHERE id NOT IN (SELECT employee_id FROM assignments)"),
    Template("hard", "List the {k} projects with the most assigned hours, with their hours, from most to least.",
             "SELECT p.name, SUM(a.hours) AS total FROM projects p JOIN assignments a ON a.project_id = p.id "
             "GROUP BY p.id, p.name ORDER BY total DESC, p.id LIMIT {k}", each("k", (3, 5))),
    Template("hard", "For each department, how many employees earn more than the company-wide average salary? "
             "Give the department name and the count.",
             "SELECT d.name, COUNT(*) FROM departments d JOIN employees e ON e.department_id = d.id "
             "WHERE e.salary > (SELECT AVG(salary) FROM employees) GROUP BY d.id, d.name"),
    Template("hard", "Which employees work on a project owned by a department other than their own? "
             "Give each name once.",
             "SELECT DISTINCT e.name FROM employees e JOIN assignments a ON a.employee_id = e.id "
             "JOIN projects p ON p.id = a.project_id WHERE p.department_id <> e.department_id"),
    Template("hard", "Which department's employees logged the most project hours in total? "
             "Give the department name and the hours.",
             "SELECT d.name, SUM(a.hours) AS total FROM departments d JOIN employees e ON e.department_id = d.id "
             "JOIN assignments a ON a.employee_id = e.id GROUP BY d.id, d.name ORDER BY total DESC, d.id LIMIT 1"),
    Template("hard", "Which employees with the title '{title}' earn more than the average salary of their own "
             "department? Give their names.",
             "SELECT e.name FROM employees e WHERE e.title = '{title}' AND e.salary > (SELECT AVG(x.salary) "
             "FROM employees x WHERE x.department_id = e.department_id)", each("title", ("Engineer", "Analyst", "Lead"))),
    Template("hard", "How many employees does each director manage? Give the director's name and the count.",
             "SELECT m.name, COUNT(*) FROM employees m JOIN employees e ON e.manager_id = m.id GROUP BY m.id, m.name"),
)

DOMAIN = Domain("hr", "a company's people data: departments, employees, projects and assignments",
                TABLES, populate, TEMPLATES)
