"""Forms: a hotel's contact form and a three-page booking flow with validation and a date picker.

Easy tasks send the contact form (name, e-mail, topic, message; each field
validated). Medium and hard tasks book a room: guest details, then dates
(a calendar that pages month by month, or the date typed into its field),
nights, room type and extras, then a review page whose terms box must be
ticked. The server keeps the booking draft between pages, shows each
validation error next to its field, and records sent messages and confirmed
bookings. Reward: the share of the task's fields the recorded message or
booking matches; success when all match. The episode ends when one is
recorded.
"""

from __future__ import annotations

import calendar
import datetime as dt
import random
import re
from dataclasses import dataclass, field
from typing import ClassVar

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

TODAY = dt.date(2027, 3, 1)  #: the site's fixed "today": dates before it cannot be booked
TOPICS = ["General", "Billing", "Reservations", "Feedback"]
ROOMS = ["Single", "Double", "Suite"]
NIGHTS = [str(n) for n in range(1, 8)]
FIRST = ["Ana", "Ben", "Chen", "Dana", "Eli", "Farah", "Gus", "Hana", "Ivo", "Jun"]
LAST = ["Silva", "Okafor", "Wei", "Levi", "Moreau", "Khan", "Berg", "Sato", "Novak", "Park"]
MESSAGES = ["Is parking available for guests?", "Please send me the invoice for my last stay.",
            "Can I bring a small dog?", "The breakfast was excellent, thank you!", "Do you have a late checkout?"]
PER_LEVEL = 25
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[a-z]{2,}$", re.IGNORECASE)
_PHONE = re.compile(r"^\+?[0-9 ]{7,15}$")


@dataclass
class FormsState:
    messages: list[dict[str, str]] = field(default_factory=list)
    draft: dict[str, str] = field(default_factory=dict)
    bookings: list[dict[str, str]] = field(default_factory=list)


def month_name(month: str) -> str:
    year, mon = (int(x) for x in month.split("-"))
    return f"{calendar.month_name[mon]} {year}"


def long_date(day: dt.date) -> str:
    return f"{calendar.month_name[day.month]} {day.day}, {day.year}"


def shift_month(month: str, delta: int) -> str:
    year, mon = (int(x) for x in month.split("-"))
    index = year * 12 + mon - 1 + delta
    return f"{index // 12:04d}-{index % 12 + 1:02d}"


class FormsSite(Site):
    """The hotel site's pages and one episode's messages, draft and bookings."""

    name: ClassVar[str] = "forms"
    origin: ClassVar[str] = "http://hotel.test"

    def __init__(self, task: SiteTask):
        super().__init__(task)
        self.state = FormsState()

    def render(self, title: str, body: str) -> Response:
        nav = "<nav><a href='/'>Home</a><a href='/contact'>Contact us</a><a href='/book/guest'>Book a room</a></nav>"
        return Response(page(title, body, nav=nav))

    def handle(self, request: Request) -> Response:
        post = request.form if request.method == "POST" else None
        routes = {"/": lambda: self.render("Harbor Hotel", "<p>Rooms by the sea since 1921.</p>"),
                  "/contact": lambda: self.contact(post),
                  "/contact/sent": lambda: self.render("Message sent", "<p>We will answer within a day.</p>"),
                  "/book/guest": lambda: self.guest(post),
                  "/book/dates": lambda: self.dates(post, request.query.get("month")),
                  "/book/review": lambda: self.review(post),
                  "/book/done": self.done}
        route = routes.get(request.path)
        return route() if route else not_found(request.path)

    # ---- contact -----------------------------------------------------------
    def contact(self, form: dict[str, str] | None) -> Response:
        values, errors = form or {}, {}
        if form is not None:
            errors = contact_errors(form)
            if not errors:
                self.state.messages.append({k: form.get(k, "").strip() for k in ("name", "email", "topic", "message")})
                return Response(redirect="/contact/sent")
        body = ("<form method='post' action='/contact'>"
                + field_row("Your name", "name", values.get("name", ""), error=errors.get("name"), required=True)
                + field_row("Email", "email", values.get("email", ""), kind="email", error=errors.get("email"),
                            required=True)
                + select_row("Topic", "topic", TOPICS, values.get("topic", "General"))
                + "<label for='f-message'>Message</label>"
                + f"<textarea id='f-message' name='message'>{esc(values.get('message', ''))}</textarea>"
                + (f"<span class='error' role='alert'>{errors['message']}</span>" if "message" in errors else "")
                + "<button>Send message</button></form>")
        return self.render("Contact us", body)

    # ---- booking -------------------------------------------------------------
    def guest(self, form: dict[str, str] | None) -> Response:
        values, errors = {**self.state.draft, **(form or {})}, {}
        if form is not None:
            errors = guest_errors(form)
            if not errors:
                self.state.draft.update({k: form[k].strip() for k in ("first", "last", "email", "phone")})
                return Response(redirect="/book/dates")
        body = ("<p>Step 1 of 3: guest details</p><form method='post' action='/book/guest'>"
                + field_row("First name", "first", values.get("first", ""), error=errors.get("first"), required=True)
                + field_row("Last name", "last", values.get("last", ""), error=errors.get("last"), required=True)
                + field_row("Email", "email", values.get("email", ""), kind="email", error=errors.get("email"),
                            required=True)
                + field_row("Phone", "phone", values.get("phone", ""), kind="tel", error=errors.get("phone"))
                + "<button>Continue</button></form>")
        return self.render("Book a room", body)

    def dates(self, form: dict[str, str] | None, month: str | None) -> Response:
        if "email" not in self.state.draft:
            return Response(redirect="/book/guest")
        draft, errors = self.state.draft, {}
        if form is not None:
            draft.update({k: form[k] for k in ("checkin", "nights", "room") if k in form})
            draft["breakfast"] = "yes" if form.get("breakfast") else "no"
            if form.get("pick"):
                draft["checkin"] = form["pick"]
            month = form.get("month") or month
            if form.get("go"):
                errors = date_errors(draft)
                if not errors:
                    return Response(redirect="/book/review")
        shown = month if month and re.fullmatch(r"\d{4}-\d{2}", month) else (draft.get("checkin") or
                                                                               TODAY.isoformat())[:7]
        body = ("<p>Step 2 of 3: dates and room</p><form method='post' action='/book/dates'>"
                + field_row("Check-in date", "checkin", draft.get("checkin", ""), kind="date",
                            error=errors.get("checkin"))
                + calendar_widget(shown, draft.get("checkin", ""))
                + select_row("Nights", "nights", NIGHTS, draft.get("nights", "1"))
                + select_row("Room type", "room", ROOMS, draft.get("room", "Single"))
                + "<input type='checkbox' id='f-breakfast' name='breakfast'"
                + (" checked" if draft.get("breakfast") == "yes" else "")
                + "><label for='f-breakfast'>Breakfast included</label>"
                + "<button name='go' value='1'>Continue</button></form>")
        return self.render("Book a room", body)

    def review(self, form: dict[str, str] | None) -> Response:
        draft = self.state.draft
        if date_errors(draft) or "email" not in draft:
            return Response(redirect="/book/dates")
        error = None
        if form is not None:
            if form.get("terms"):
                self.state.bookings.append(dict(draft))
                self.state.draft = {}
                return Response(redirect="/book/done")
            error = "Please accept the terms to book."
        rows = "".join(f"<tr><th>{esc(k)}</th><td>{esc(draft.get(k, ''))}</td></tr>"
                       for k in ("first", "last", "email", "phone", "checkin", "nights", "room", "breakfast"))
        body = (f"<p>Step 3 of 3: review</p><table>{rows}</table><form method='post' action='/book/review'>"
                "<input type='checkbox' id='f-terms' name='terms'><label for='f-terms'>I accept the terms</label>"
                + (f"<span class='error' role='alert'>{error}</span>" if error else "")
                + "<button>Confirm booking</button></form><a href='/book/dates'>Change dates</a>")
        return self.render("Review your booking", body)

    def done(self) -> Response:
        if not self.state.bookings:
            return Response(redirect="/book/guest")
        return self.render("Booking confirmed", f"<p>Confirmation number HH-{len(self.state.bookings):04d}.</p>")

    # ---- tasks -----------------------------------------------------------------
    def outcome(self, answer: str | None) -> Outcome:
        goal = self.task.goal
        records = self.state.messages if goal["kind"] == "contact" else self.state.bookings
        if not records:
            return Outcome(done=answer is not None, detail=f"no {goal['kind']} recorded")
        record = records[0]
        wanted = goal["fields"]
        hits = sum(record.get(k, "").strip().casefold() == str(v).casefold() for k, v in wanted.items())
        return Outcome(done=True, reward=round(hits / len(wanted), 4), success=hits == len(wanted),
                       detail=f"{goal['kind']} recorded, {hits}/{len(wanted)} fields match")

    @classmethod
    def tasks(cls) -> list[SiteTask]:
        rng = random.Random(2727)
        return [make(f"forms/{level}/{i:03d}", rng) for level, make in
                (("easy", _contact_task), ("medium", _booking_task), ("hard", _booking_task)) for i in range(PER_LEVEL)]


def contact_errors(form: dict[str, str]) -> dict[str, str]:
    errors = {}
    if not form.get("name", "").strip():
        errors["name"] = "Please enter your name."
    if not _EMAIL.match(form.get("email", "").strip()):
        errors["email"] = "Enter an e-mail address like name@example.com."
    if len(form.get("message", "").strip()) < 10:
        errors["message"] = "The message needs at least 10 characters."
    return errors


def guest_errors(form: dict[str, str]) -> dict[str, str]:
    errors = {k: "This field is required." for k in ("first", "last") if not form.get(k, "").strip()}
    if not _EMAIL.match(form.get("email", "").strip()):
        errors["email"] = "Enter an e-mail address like name@example.com."
    if form.get("phone", "").strip() and not _PHONE.match(form["phone"].strip()):
        errors["phone"] = "A phone number has 7 to 15 digits."
    return errors


def date_errors(draft: dict[str, str]) -> dict[str, str]:
    try:
        day = dt.date.fromisoformat(draft.get("checkin", ""))
    except ValueError:
        return {"checkin": "Choose a check-in date."}
    if day < TODAY:
        return {"checkin": f"Check-in cannot be before {TODAY.isoformat()}."}
    return {}


def calendar_widget(month: str, chosen: str) -> str:
    """A month grid of day buttons (days before today disabled) with previous/next month buttons."""
    year, mon = (int(x) for x in month.split("-"))
    cells = []
    for week in calendar.Calendar().monthdatescalendar(year, mon):
        row = []
        for day in week:
            if day.month != mon:
                row.append("<td></td>")
                continue
            pressed = " aria-pressed='true'" if day.isoformat() == chosen else ""
            disabled = " disabled" if day < TODAY else ""
            row.append(f"<td><button name='pick' value='{day.isoformat()}' aria-label='{long_date(day)}'"
                       f"{pressed}{disabled}>{day.day}</button></td>")
        cells.append(f"<tr>{''.join(row)}</tr>")
    return (f"<div role='group' aria-label='Calendar'><h2>{month_name(month)}</h2>"
            f"<button name='month' value='{shift_month(month, -1)}'>Previous month</button>"
            f"<button name='month' value='{shift_month(month, 1)}'>Next month</button>"
            f"<table>{''.join(cells)}</table></div>")


def _person(rng: random.Random) -> tuple[str, str, str]:
    first, last = rng.choice(FIRST), rng.choice(LAST)
    return first, last, f"{first}.{last}@example.com".lower()


def _contact_task(task_id: str, rng: random.Random) -> SiteTask:
    first, last, email = _person(rng)
    topic, message = rng.choice(TOPICS), rng.choice(MESSAGES)
    name = f"{first} {last}"
    goal = {"kind": "contact", "fields": {"name": name, "email": email, "topic": topic, "message": message}}
    plan = (Step("click", "link", "Contact us"), Step("fill", "textbox", "Your name", name),
            Step("fill", "textbox", "Email", email), Step("select", "combobox", "Topic", topic),
            Step("fill", "textbox", "Message", message), Step("click", "button", "Send message"))
    text = f"Send the hotel a message as {name} ({email}) on the topic {topic}: \"{message}\""
    return SiteTask(task_id, "forms", "easy", text, goal, plan)


def _booking_task(task_id: str, rng: random.Random) -> SiteTask:
    level = task_id.split("/")[1]
    first, last, email = _person(rng)
    phone = f"+1 555 {rng.randint(1000000, 9999999)}"
    ahead = rng.randint(0, 2) if level == "medium" else rng.randint(1, 5)
    day = dt.date.fromisoformat(shift_month(TODAY.isoformat()[:7], ahead) + "-01") + dt.timedelta(rng.randint(0, 27))
    nights, room = str(rng.randint(1, 7)), rng.choice(ROOMS)
    breakfast = rng.choice(["yes", "no"]) if level == "hard" else "no"
    fields = {"first": first, "last": last, "email": email, "phone": phone, "checkin": day.isoformat(),
              "nights": nights, "room": room, "breakfast": breakfast}
    plan = [Step("click", "link", "Book a room"), Step("fill", "textbox", "First name", first),
            Step("fill", "textbox", "Last name", last), Step("fill", "textbox", "Email", email),
            Step("fill", "textbox", "Phone", phone), Step("click", "button", "Continue")]
    if level == "medium":
        plan.append(Step("fill", "textbox", "Check-in date", day.isoformat()))
        when = day.isoformat()
    else:  # page the calendar to the month, then pick the day
        plan += [Step("click", "button", "Next month")] * ahead + [Step("click", "button", long_date(day))]
        when = long_date(day)
    plan += [Step("select", "combobox", "Nights", nights), Step("select", "combobox", "Room type", room)]
    if breakfast == "yes":
        plan.append(Step("click", "checkbox", "Breakfast included"))
    plan += [Step("click", "button", "Continue"), Step("click", "checkbox", "I accept the terms"),
             Step("click", "button", "Confirm booking")]
    extra = " with breakfast" if breakfast == "yes" else (" without breakfast" if level == "hard" else "")
    text = (f"Book a {room} room{extra} for {first} {last} ({email}, phone {phone}), checking in on {when} "
            f"for {nights} night{'s' if nights != '1' else ''}.")
    return SiteTask(task_id, "forms", level, text, {"kind": "booking", "fields": fields}, tuple(plan))


