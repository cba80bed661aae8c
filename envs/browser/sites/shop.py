"""Shop: a web shop with search, filters, product pages, a cart and checkout (WebShop-style tasks).

The catalogue is fixed (a product per category, colour and material; every
size in stock). A task asks for an item by name (easy), by attributes and a
price limit (medium), or by attributes plus quantity, shipping and the
recipient (hard). The episode ends when an order is placed; its reward is
the share of the task's requirements the ordered item meets (category,
colour, material, size, price limit, and for hard tasks quantity, shipping
and name), so a near miss earns partial credit, and success needs them all.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from typing import Any, ClassVar

from agentgym.envs.browser.sites.base import (
    Outcome,
    Request,
    Response,
    Site,
    SiteTask,
    Step,
    esc,
    field_row,
    not_found,
    page,
    select_row,
)

CATEGORIES = {"t-shirt": ["cotton", "linen", "polyester"], "sneakers": ["leather", "canvas", "mesh"],
              "backpack": ["nylon", "canvas", "leather"], "mug": ["ceramic", "steel", "glass"],
              "jacket": ["denim", "wool", "nylon"], "hat": ["wool", "cotton", "straw"]}
SIZES = {"t-shirt": ["S", "M", "L", "XL"], "sneakers": ["39", "40", "41", "42", "43", "44"],
         "backpack": ["20 L", "30 L"], "mug": ["300 ml", "450 ml"], "jacket": ["S", "M", "L", "XL"],
         "hat": ["S/M", "L/XL"]}
COLORS = ["black", "white", "red", "blue", "green", "grey"]
BRANDS = ["Acme", "Northwind", "Fjord", "Lumen", "Kestrel", "Orbit"]
NAMES = ["Ana Silva", "Ben Okafor", "Chen Wei", "Dana Levi", "Eli Moreau", "Farah Khan", "Gus Berg"]
CITIES = ["Lisbon", "Lagos", "Shanghai", "Haifa", "Lyon", "Karachi", "Oslo"]
SHIPPING = ["Standard", "Express"]
PAGE_SIZE = 8
PER_LEVEL = 25


@dataclass(frozen=True)
class Product:
    id: int
    title: str
    category: str
    color: str
    material: str
    price: float


def _catalogue() -> list[Product]:
    rng = random.Random(13)
    products = []
    for category, materials in CATEGORIES.items():
        for color in COLORS:
            for material in materials:
                brand = rng.choice(BRANDS)
                title = f"{brand} {color.title()} {material.title()} {category.title()}"
                products.append(Product(len(products) + 1, title, category, color, material,
                                        round(rng.uniform(8, 160), 2)))
    return products


CATALOGUE = _catalogue()
BY_ID = {p.id: p for p in CATALOGUE}


@dataclass
class Line:
    product: Product
    size: str
    quantity: int


@dataclass
class Order:
    lines: list[Line]
    name: str
    city: str
    shipping: str


@dataclass
class ShopState:
    cart: list[Line] = field(default_factory=list)
    orders: list[Order] = field(default_factory=list)


def _words(text: str) -> list[str]:
    return [w.rstrip("s") for w in re.findall(r"[a-z0-9]+", text.lower())]


def search(query: str, category: str = "", color: str = "", max_price: float | None = None) -> list[Product]:
    want = _words(query)
    found = []
    for p in CATALOGUE:
        have = set(_words(p.title))
        if all(w in have for w in want) and category in ("", p.category) and color in ("", p.color) \
                and (max_price is None or p.price <= max_price):
            found.append(p)
    return found


class ShopSite(Site):
    """The shop's pages and one episode's cart and orders."""

    name: ClassVar[str] = "shop"
    origin: ClassVar[str] = "http://shop.test"

    def __init__(self, task: SiteTask):
        super().__init__(task)
        self.state = ShopState()

    def nav(self) -> str:
        count = sum(line.quantity for line in self.state.cart)
        return f"<nav><a href='/'>Home</a><a href='/cart'>Cart ({count})</a></nav>"

    def render(self, title: str, body: str) -> Response:
        return Response(page(title, body, nav=self.nav()))

    def handle(self, request: Request) -> Response:
        path = request.path
        if path == "/":
            return self.home()
        if path == "/search":
            return self.results(request.query)
        if match := re.fullmatch(r"/product/(\d+)", path):
            return self.product(int(match.group(1)))
        if path == "/cart/add" and request.method == "POST":
            return self.add(request.form)
        if path == "/cart/remove" and request.method == "POST":
            return self.remove(request.form)
        if path == "/cart":
            return self.cart()
        if path == "/checkout":
            return self.checkout(request.form if request.method == "POST" else None)
        if match := re.fullmatch(r"/order/(\d+)", path):
            return self.confirmation(int(match.group(1)))
        return not_found(path)

    def home(self) -> Response:
        links = "".join(f"<li><a href='/search?category={c}'>Shop {c}{'' if c.endswith('s') else 's'}</a></li>"
                        for c in CATEGORIES)
        form = ("<form action='/search' role='search'><input type='search' name='q' aria-label='Search products'>"
                "<button>Search</button></form>")
        return self.render("Acme Outlet", f"{form}<h2>Categories</h2><ul>{links}</ul>")

    def results(self, query: dict[str, str]) -> Response:
        q, category, color = query.get("q", ""), query.get("category", ""), query.get("color", "")
        try:
            max_price = float(query["max_price"]) if query.get("max_price") else None
        except ValueError:
            max_price = None
        found = search(q, category if category != "Any" else "", color if color != "Any" else "", max_price)
        page_no = max(1, int(query.get("page", "1") or 1) if query.get("page", "1").isdigit() else 1)
        shown = found[(page_no - 1) * PAGE_SIZE: page_no * PAGE_SIZE]
        filters = (f"<form action='/search'><input type='hidden' name='q' value='{esc(q)}'>"
                   + select_row("Category", "category", ["Any", *CATEGORIES], category or "Any")
                   + select_row("Color", "color", ["Any", *COLORS], color or "Any")
                   + field_row("Max price", "max_price", query.get("max_price", ""), kind="number")
                   + "<button>Apply filters</button></form>")
        items = "".join(f"<li><a href='/product/{p.id}'>{esc(p.title)}</a> ${p.price:.2f}</li>" for p in shown)
        more = ""
        if page_no * PAGE_SIZE < len(found):
            args = "&".join(f"{k}={esc(v)}" for k, v in query.items() if k != "page")
            more = f"<a href='/search?{args}&page={page_no + 1}'>Next page</a>"
        summary = f"<p>{len(found)} results for '{esc(q)}'</p>" if found else "<p>No products match.</p>"
        return self.render("Search results", f"{filters}{summary}<ul>{items}</ul>{more}")

    def product(self, pid: int) -> Response:
        p = BY_ID.get(pid)
        if p is None:
            return not_found(f"/product/{pid}")
        form = (f"<form method='post' action='/cart/add'><input type='hidden' name='product' value='{p.id}'>"
                + select_row("Size", "size", SIZES[p.category])
                + field_row("Quantity", "quantity", "1", kind="number")
                + "<button>Add to cart</button></form>")
        facts = (f"<p>Price: ${p.price:.2f}</p><ul><li>Color: {p.color}</li><li>Material: {p.material}</li>"
                 f"<li>Category: {p.category}</li></ul>")
        return self.render(p.title, facts + form)

    def add(self, form: dict[str, str]) -> Response:
        p = BY_ID.get(int(form.get("product", "0") or 0)) if form.get("product", "").isdigit() else None
        qty = form.get("quantity", "1")
        if p is None or form.get("size") not in SIZES[p.category]:
            return self.render("Cart", "<p class='error' role='alert'>Choose a product and a size.</p>")
        if not qty.isdigit() or not 1 <= int(qty) <= 20:
            return self.render(p.title, "<p class='error' role='alert'>Quantity must be a whole number from 1 "
                               f"to 20.</p><a href='/product/{p.id}'>Back to the product</a>")
        self.state.cart.append(Line(p, form["size"], int(qty)))
        return Response(redirect="/cart")

    def remove(self, form: dict[str, str]) -> Response:
        idx = int(form["line"]) if form.get("line", "").isdigit() else -1
        if 0 <= idx < len(self.state.cart):
            del self.state.cart[idx]
        return Response(redirect="/cart")

    def cart(self) -> Response:
        if not self.state.cart:
            return self.render("Cart", "<p>Your cart is empty.</p>")
        rows = "".join(
            f"<tr><td>{esc(line.product.title)}</td><td>{esc(line.size)}</td><td>{line.quantity}</td>"
            f"<td>${line.product.price * line.quantity:.2f}</td><td><form method='post' action='/cart/remove'>"
            f"<input type='hidden' name='line' value='{i}'><button aria-label='Remove line {i + 1}'>Remove</button>"
            "</form></td></tr>" for i, line in enumerate(self.state.cart))
        table = f"<table><tr><th>Item</th><th>Size</th><th>Qty</th><th>Total</th><th></th></tr>{rows}</table>"
        return self.render("Cart", f"{table}<p><a href='/checkout'>Checkout</a></p>")

    def checkout(self, form: dict[str, str] | None) -> Response:
        values = form or {"name": "Sam Lee", "city": "Springfield", "shipping": "Standard"}
        errors = {}
        if form is not None:
            errors = {k: "This field is required." for k in ("name", "city") if not form.get(k, "").strip()}
            if not self.state.cart:
                errors["cart"] = "Your cart is empty."
            if form.get("shipping") not in SHIPPING:
                errors["shipping"] = "Choose a shipping method."
            if not errors:
                self.state.orders.append(Order(list(self.state.cart), form["name"].strip(), form["city"].strip(),
                                               form["shipping"]))
                self.state.cart.clear()
                return Response(redirect=f"/order/{len(self.state.orders)}")
        body = ("<form method='post' action='/checkout'>"
                + field_row("Full name", "name", values.get("name", ""), error=errors.get("name"), required=True)
                + field_row("City", "city", values.get("city", ""), error=errors.get("city"), required=True)
                + select_row("Shipping", "shipping", SHIPPING, values.get("shipping", "Standard"))
                + (f"<p class='error' role='alert'>{errors['cart']}</p>" if "cart" in errors else "")
                + "<button>Place order</button></form>")
        return self.render("Checkout", body)

    def confirmation(self, number: int) -> Response:
        if not 1 <= number <= len(self.state.orders):
            return not_found(f"/order/{number}")
        return self.render("Thank you", f"<p>Order #{number} is placed.</p><a href='/'>Continue shopping</a>")

    # ---- tasks -----------------------------------------------------------
    def outcome(self, answer: str | None) -> Outcome:
        if not self.state.orders:
            return Outcome(done=answer is not None, detail="no order placed")
        order = self.state.orders[0]
        scores = [score_line(self.task.goal, line, order) for line in order.lines]
        best = max(scores, default=0.0)
        return Outcome(done=True, reward=best, success=best == 1.0, detail=f"order of {len(order.lines)} line(s)")

    @classmethod
    def tasks(cls) -> list[SiteTask]:
        rng = random.Random(1313)
        tasks = []
        for level, make in (("easy", _easy), ("medium", _medium), ("hard", _hard)):
            for i in range(PER_LEVEL):
                tasks.append(make(f"shop/{level}/{i:03d}", rng))
        return tasks


def score_line(goal: dict[str, Any], line: Line, order: Order) -> float:
    """Share of the goal's requirements that this ordered line meets (WebShop-style attribute match)."""
    p = line.product
    checks = [p.category == goal["category"], p.color == goal["color"], p.material == goal["material"],
              line.size == goal["size"]]
    if "max_price" in goal:
        checks.append(p.price <= goal["max_price"])
    if "quantity" in goal:
        checks += [line.quantity == goal["quantity"], order.shipping == goal["shipping"],
                   order.name == goal["name"], order.city == goal["city"]]
    return round(sum(checks) / len(checks), 4)


def _goal(p: Product, size: str) -> dict[str, Any]:
    return {"category": p.category, "color": p.color, "material": p.material, "size": size}


def _buy_steps(p: Product, size: str, *, query: str, quantity: int = 1) -> list[Step]:
    steps = [Step("fill", "searchbox", "Search products", query), Step("click", "button", "Search"),
             Step("click", "link", p.title), Step("select", "combobox", "Size", size)]
    if quantity != 1:
        steps.append(Step("fill", "spinbutton", "Quantity", str(quantity)))
    return steps + [Step("click", "button", "Add to cart"), Step("click", "link", "Checkout")]


def _easy(task_id: str, rng: random.Random) -> SiteTask:
    p = rng.choice(CATALOGUE)
    size = rng.choice(SIZES[p.category])
    plan = _buy_steps(p, size, query=p.title) + [Step("click", "button", "Place order")]
    return SiteTask(task_id, "shop", "easy", f"Buy the '{p.title}' in size {size}.", _goal(p, size), tuple(plan))


def _medium(task_id: str, rng: random.Random) -> SiteTask:
    p = rng.choice(CATALOGUE)
    size = rng.choice(SIZES[p.category])
    limit = float(int(p.price) + rng.randint(1, 20))
    goal = {**_goal(p, size), "max_price": limit}
    plan = _buy_steps(p, size, query=f"{p.color} {p.material} {p.category}") + [Step("click", "button", "Place order")]
    text = f"Buy a {p.color} {p.material} {p.category} in size {size} for at most ${limit:.0f}."
    return SiteTask(task_id, "shop", "medium", text, goal, tuple(plan))


def _hard(task_id: str, rng: random.Random) -> SiteTask:
    p = rng.choice(CATALOGUE)
    size, qty = rng.choice(SIZES[p.category]), rng.randint(2, 4)
    name, city, shipping = rng.choice(NAMES), rng.choice(CITIES), rng.choice(SHIPPING)
    limit = float(int(p.price) + rng.randint(1, 20))
    goal = {**_goal(p, size), "max_price": limit, "quantity": qty, "shipping": shipping, "name": name, "city": city}
    plan = _buy_steps(p, size, query=f"{p.color} {p.category}", quantity=qty) + [
        Step("fill", "textbox", "Full name", name), Step("fill", "textbox", "City", city),
        Step("select", "combobox", "Shipping", shipping), Step("click", "button", "Place order")]
    text = (f"Order {qty} {p.color} {p.category} items made of {p.material}, size {size}, at most ${limit:.0f} each, "
            f"shipped {shipping} to {name} in {city}.")
    return SiteTask(task_id, "shop", "hard", text, goal, tuple(plan))
