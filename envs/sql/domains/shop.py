"""shop: customers, products, orders and order lines of a small web shop."""

from __future__ import annotations

import random
from typing import Any

from agentgym.envs.sql.dataset import Column, Domain, Table, Template
from agentgym.envs.sql.domains.common import CITIES, each, iso_date, person_name

CATEGORIES = {"books": (8, 40), "games": (15, 70), "garden": (5, 120), "kitchen": (4, 90), "toys": (3, 50)}
PRODUCT_WORDS = ("Classic", "Deluxe", "Mini", "Pro", "Eco", "Smart", "Vintage", "Ultra")
STATUSES = ("pending", "shipped", "delivered", "cancelled")

TABLES = (
    Table("customers", (Column("id", "INTEGER", primary_key=True), Column("name", "TEXT", nullable=False),
                        Column("city", "TEXT"), Column("country", "TEXT"), Column("signup_date", "TEXT"),
                        Column("is_member", "INTEGER"))),
    Table("products", (Column("id", "INTEGER", primary_key=True), Column("name", "TEXT", nullable=False),
                       Column("category", "TEXT"), Column("price", "REAL"), Column("stock", "INTEGER"))),
    Table("orders", (Column("id", "INTEGER", primary_key=True),
                     Column("customer_id", "INTEGER", references="customers.id"),
                     Column("order_date", "TEXT"), Column("status", "TEXT"))),
    Table("order_items", (Column("id", "INTEGER", primary_key=True),
                          Column("order_id", "INTEGER", references="orders.id"),
                          Column("product_id", "INTEGER", references="products.id"),
                          Column("quantity", "INTEGER"), Column("unit_price", "REAL"))),
)


def populate(rng: random.Random) -> dict[str, list[tuple[Any, ...]]]:
    customers = []
    for i in range(1, 121):
        city, country = rng.choice(CITIES)
        customers.append((i, person_name(rng), city, country, iso_date(rng, 2019, 2023), int(rng.random() < 0.4)))
    products = []
    for i in range(1, 61):
        category = list(CATEGORIES)[i % len(CATEGORIES)]
        low, high = CATEGORIES[category]
        name = f"{rng.choice(PRODUCT_WORDS)} {category.rstrip('s').title()} {i}"
        products.append((i, name, category, round(rng.uniform(low, high), 2), rng.randint(0, 200)))
    orders, items = [], []
    sold = [p for p in products if p[0] % 13 != 0]  # a few products are never ordered
    for i in range(1, 401):
        customer = rng.randint(1, 100)  # customers 101-120 never order
        orders.append((i, customer, iso_date(rng, 2021, 2024), rng.choice(STATUSES)))
        for product in rng.sample(sold, rng.randint(1, 4)):
            items.append((len(items) + 1, i, product[0], rng.randint(1, 5), product[3]))
    return {"customers": customers, "products": products, "orders": orders, "order_items": items}


TEMPLATES = (
    Template("easy", "How many customers live in {city}?",
             "SELECT COUNT(*) FROM customers WHERE city = '{city}'",
             each("city", ("Lisbon", "Berlin", "Paris", "Rome", "Seville"))),
    Template("easy", "List the names of the products in the '{category}' category that cost more than {price}.",
             "SELECT name FROM products WHERE category = '{category}' AND price > {price}",
             ({"category": "books", "price": 20}, {"category": "games", "price": 40},
              {"category": "garden", "price": 60}, {"category": "kitchen", "price": 45})),
    Template("easy", "How many orders have the status '{status}'?",
             "SELECT COUNT(*) FROM orders WHERE status = '{status}'", each("status", STATUSES)),
    Template("easy", "What is the price of the most expensive product?", "SELECT MAX(price) FROM products"),
    Template("easy", "Which products have fewer than {n} items in stock? Give their names.",
             "SELECT name FROM products WHERE stock < {n}", each("n", (10, 25, 40))),
    Template("medium", "How many orders were placed by customers from {country}?",
             "SELECT COUNT(*) FROM orders o JOIN customers c ON o.customer_id = c.id WHERE c.country = '{country}'",
             each("country", ("Portugal", "Spain", "Germany", "Italy"))),
    Template("medium", "What is the total revenue (quantity times unit price, over all order lines) of the "
             "products in the '{category}' category?",
             "SELECT SUM(oi.quantity * oi.unit_price) FROM order_items oi JOIN products p ON oi.product_id = p.id "
             "WHERE p.category = '{category}'", each("category", ("books", "games", "garden", "toys"))),
    Template("medium", "For each product category, how many products does it have? Give the category and the count.",
             "SELECT category, COUNT(*) FROM products GROUP BY category"),
    Template("medium", "What is the average product price in each category? Give the category and the average.",
             "SELECT category, AVG(price) FROM products GROUP BY category"),
    Template("medium", "Which customers placed more than {n} orders? Give their names.",
             "SELECT c.name FROM customers c JOIN orders o ON o.customer_id = c.id GROUP BY c.id, c.name "
             "HAVING COUNT(*) > {n}", each("n", (5, 6, 7))),
    Template("medium", "How many distinct customers ordered at least one product in the '{category}' category?",
             "SELECT COUNT(DISTINCT o.customer_id) FROM orders o JOIN order_items oi ON oi.order_id = o.id "
             "JOIN products p ON oi.product_id = p.id WHERE p.category = '{category}'",
             each("category", ("kitchen", "toys", "books"))),
    Template("hard", "Which customer spent the most in total over all their orders? Give the name and the amount.",
             "SELECT c.name, SUM(oi.quantity * oi.unit_price) AS total FROM customers c "
             "JOIN orders o ON o.customer_id = c.id JOIN order_items oi ON oi.order_id = o.id "
             "GROUP BY c.id, c.name ORDER BY total DESC, c.id LIMIT 1"),
    Template("hard", "List the top {k} products by units sold, with the units sold, from most to least.",
             "SELECT p.name, SUM(oi.quantity) AS units FROM products p JOIN order_items oi ON oi.product_id = p.id "
             "GROUP BY p.id, p.name ORDER BY units DESC, p.id LIMIT {k}", each("k", (3, 5))),
    Template("hard", "Which products have never been ordered? Give their names.",
             "SELECT name FROM products WHERE id NOT IN (SELECT product_id FROM order_items)"),
    Template("hard", "What was the total revenue of the delivered orders placed in {year}?",
             "SELECT SUM(oi.quantity * oi.unit_price) FROM orders o JOIN order_items oi ON oi.order_id = o.id "
             "WHERE o.status = 'delivered' AND substr(o.order_date, 1, 4) = '{year}'",
             each("year", ("2021", "2022", "2023"))),
    Template("hard", "Which customers from {city} have ordered a product priced above {price}? Give their names, "
             "each customer once.",
             "SELECT c.name FROM customers c WHERE c.city = '{city}' AND EXISTS (SELECT 1 FROM orders o "
             "JOIN order_items oi ON oi.order_id = o.id JOIN products p ON p.id = oi.product_id "
             "WHERE o.customer_id = c.id AND p.price > {price})",
             ({"city": "Madrid", "price": 80}, {"city": "Munich", "price": 60}, {"city": "Lyon", "price": 50})),
    Template("hard", "For each country, how many customers live there and how many orders did they place? "
             "Give the country, the number of customers and the number of orders.",
             "SELECT c.country, COUNT(DISTINCT c.id), COUNT(o.id) FROM customers c "
             "LEFT JOIN orders o ON o.customer_id = c.id GROUP BY c.country"),
    Template("hard", "Which product category earned the most revenue from orders placed in {year}? "
             "Give the category and the revenue.",
             "SELECT p.category, SUM(oi.quantity * oi.unit_price) AS revenue FROM orders o "
             "JOIN order_items oi ON oi.order_id = o.id JOIN products p ON p.id = oi.product_id "
             "WHERE substr(o.order_date, 1, 4) = '{year}' GROUP BY p.category ORDER BY revenue DESC LIMIT 1",
             each("year", ("2022", "2023", "2024"))),
)

DOMAIN = Domain("shop", "a web shop: customers, products, orders and order lines", TABLES, populate, TEMPLATES)
