"""Build the shop database (deterministic): customers, orders, order_items, with their indexes."""

import random
import sqlite3
import sys

rng = random.Random(20240601)
conn = sqlite3.connect(sys.argv[1])
conn.executescript("""
CREATE TABLE customers (id INTEGER PRIMARY KEY, email TEXT NOT NULL, name TEXT NOT NULL, created_day INTEGER);
CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER NOT NULL, total_cents INTEGER NOT NULL,
                     status TEXT NOT NULL, created_day INTEGER);
CREATE TABLE order_items (id INTEGER PRIMARY KEY, order_id INTEGER NOT NULL, sku TEXT NOT NULL,
                          quantity INTEGER NOT NULL, price_cents INTEGER NOT NULL);
CREATE TABLE health_probe (id INTEGER PRIMARY KEY, payload BLOB);
""")
conn.executemany("INSERT INTO customers VALUES (?, ?, ?, ?)",
                 [(i, f"customer{i}@example.com", f"Customer {i}", rng.randrange(1, 900))
                  for i in range(1, 5001)])
conn.executemany("INSERT INTO orders VALUES (?, ?, ?, ?, ?)",
                 [(i, rng.randrange(1, 5001), rng.randrange(500, 50000),
                   rng.choice(["paid", "shipped", "refunded"]), rng.randrange(1, 900)) for i in range(1, 30001)])
conn.executemany("INSERT INTO order_items VALUES (?, ?, ?, ?, ?)",
                 [(i, rng.randrange(1, 30001), f"SKU-{rng.randrange(1, 2000):04d}", rng.randrange(1, 5),
                   rng.randrange(100, 9000)) for i in range(1, 60001)])
conn.executescript("""
CREATE INDEX idx_orders_customer ON orders (customer_id);
CREATE INDEX idx_items_order ON order_items (order_id);
CREATE UNIQUE INDEX idx_customers_email ON customers (email);
""")
conn.commit()
conn.execute("VACUUM")
conn.close()
