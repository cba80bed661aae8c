"""Mail: a small webmail with folders, search, reading, replies, moving and settings.

Each task gets its own mailbox (about 16 messages generated from the task's
seed) spread over Inbox, Work, Archive and Spam. Easy tasks move a message or
change one setting; medium tasks reply to a message or set the signature;
hard tasks find a fact in a message outside the inbox (search) and report
it with ``answer(...)``, or combine a setting with a move. Success is read
from the mailbox: a message's folder, the replies sent, the settings, and
for information tasks the answer against the value in the message. Reward:
the share of the task's requirements met; the episode ends when all are met
or the agent answers.
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

FOLDERS = ["Inbox", "Work", "Archive", "Spam"]
SENDERS = ["Maria Lopez", "Tom Becker", "Aiko Tanaka", "Sam Osei", "Lena Novak", "Raj Patel", "Olga Ivanova",
           "Kofi Mensah"]
SUBJECTS = ["Quarterly report", "Lunch on Friday", "Server maintenance", "Invoice {n}", "Your order {n} shipped",
            "Team offsite", "Password reset", "Conference tickets", "Budget review", "Holiday schedule",
            "Design feedback", "Contract renewal"]
PER_PAGE = ["10", "25", "50"]
REPLIES = ["Thanks, sounds good.", "I will be there.", "Please send the details.", "Noted, thank you!"]
SIGNATURES = ["Best regards, Alex", "Cheers, Alex", "Thanks, Alex (Ops team)", "Sent from my desk"]
PER_LEVEL = 25


@dataclass
class Message:
    id: int
    sender: str
    subject: str
    body: str
    folder: str
    code: str
    read: bool = False


@dataclass
class MailState:
    messages: list[Message]
    sent: list[dict[str, Any]] = field(default_factory=list)
    settings: dict[str, str] = field(default_factory=lambda: {"signature": "", "vacation": "off",
                                                              "vacation_message": "", "per_page": "10"})


def mailbox(seed: int) -> list[Message]:
    """The task's mailbox: distinct subjects, a tracking code in every body."""
    rng = random.Random(seed)
    subjects = rng.sample(SUBJECTS, 12) + rng.sample(SUBJECTS, 4)
    messages = []
    for i, template in enumerate(subjects):
        n = rng.randint(1000, 9999)
        subject = template.format(n=n) if "{n}" in template else f"{template} ({chr(65 + i)})"
        code = f"{rng.choice('KLMNPQRS')}{rng.randint(100000, 999999)}"
        body = (f"Hello Alex, this is about {subject.lower()}. The reference code is {code}. "
                f"Let me know if anything is unclear.")
        messages.append(Message(i + 1, rng.choice(SENDERS), subject, body, rng.choice(FOLDERS[:3]), code))
    return messages


class MailSite(Site):
    """The webmail's pages and one episode's mailbox."""

    name: ClassVar[str] = "mail"
    origin: ClassVar[str] = "http://mail.test"

    def __init__(self, task: SiteTask):
        super().__init__(task)
        self.state = MailState(mailbox(task.seed))
        self.by_id = {m.id: m for m in self.state.messages}

    def render(self, title: str, body: str) -> Response:
        links = "".join(f"<a href='/folder/{f}'>{f} ({self.count(f)})</a>" for f in FOLDERS)
        search = ("<form action='/search' role='search'><input type='search' name='q' aria-label='Search mail'>"
                  "<button>Search</button></form>")
        return Response(page(title, body, nav=f"<nav>{links}<a href='/settings'>Settings</a>{search}</nav>"))

    def count(self, folder: str) -> int:
        return sum(m.folder == folder for m in self.state.messages)

    def handle(self, request: Request) -> Response:
        path, post = request.path, (request.form if request.method == "POST" else None)
        if path == "/":
            return Response(redirect="/folder/Inbox")
        if (match := re.fullmatch(r"/folder/(\w+)", path)) and match.group(1) in FOLDERS:
            return self.listing(match.group(1), [m for m in self.state.messages if m.folder == match.group(1)])
        if path == "/search":
            q = request.query.get("q", "").strip().casefold()
            found = [m for m in self.state.messages if q and q in f"{m.sender} {m.subject} {m.body}".casefold()]
            return self.listing(f"Search: {request.query.get('q', '')}", found)
        if match := re.fullmatch(r"/message/(\d+)(/reply|/move)?", path):
            message = self.by_id.get(int(match.group(1)))
            if message is not None:
                return self.message(message, match.group(2), post)
        if path == "/settings":
            return self.settings(post)
        return not_found(path)

    def listing(self, title: str, messages: list[Message]) -> Response:
        limit = int(self.state.settings["per_page"])
        rows = "".join(f"<tr><td>{esc(m.sender)}</td><td><a href='/message/{m.id}'>{esc(m.subject)}</a></td>"
                       f"<td>{'' if m.read else 'unread'}</td></tr>" for m in messages[:limit])
        body = f"<table><tr><th>From</th><th>Subject</th><th></th></tr>{rows}</table>" if rows else "<p>No messages.</p>"
        return self.render(title, body)

    def message(self, m: Message, action: str | None, form: dict[str, str] | None) -> Response:
        notice = ""
        if action == "/reply" and form is not None:
            text = form.get("body", "").strip()
            if text:
                self.state.sent.append({"to": m.sender, "in_reply_to": m.id, "body": text})
                notice = "<p role='status'>Reply sent.</p>"
            else:
                notice = "<p class='error' role='alert'>Write a reply first.</p>"
        elif action == "/move" and form is not None and form.get("folder") in FOLDERS:
            m.folder = form["folder"]
            notice = f"<p role='status'>Moved to {esc(m.folder)}.</p>"
        m.read = True
        body = (f"{notice}<p>From: {esc(m.sender)}</p><p>Folder: {esc(m.folder)}</p><p>{esc(m.body)}</p>"
                f"<form method='post' action='/message/{m.id}/reply'><label for='f-body'>Reply</label>"
                "<textarea id='f-body' name='body'></textarea><button>Send reply</button></form>"
                f"<form method='post' action='/message/{m.id}/move'>"
                + select_row("Move to", "folder", FOLDERS, m.folder) + "<button>Move</button></form>")
        return self.render(m.subject, body)

    def settings(self, form: dict[str, str] | None) -> Response:
        s, notice = self.state.settings, ""
        if form is not None:
            per_page = form.get("per_page", s["per_page"])
            s.update(signature=form.get("signature", "").strip(), vacation="on" if form.get("vacation") else "off",
                     vacation_message=form.get("vacation_message", "").strip(),
                     per_page=per_page if per_page in PER_PAGE else s["per_page"])
            notice = "<p role='status'>Settings saved.</p>"
        body = (f"{notice}<form method='post' action='/settings'>"
                + field_row("Signature", "signature", s["signature"])
                + "<input type='checkbox' id='f-vacation' name='vacation'"
                + (" checked" if s["vacation"] == "on" else "") + "><label for='f-vacation'>Vacation responder</label>"
                + field_row("Vacation message", "vacation_message", s["vacation_message"])
                + select_row("Messages per page", "per_page", PER_PAGE, s["per_page"])
                + "<button>Save settings</button></form>")
        return self.render("Settings", body)

    # ---- tasks -----------------------------------------------------------
    def outcome(self, answer: str | None) -> Outcome:
        checks = [self.check(req, answer) for req in self.task.goal["requirements"]]
        met = sum(checks)
        done = met == len(checks) or answer is not None
        return Outcome(done=done, reward=round(met / len(checks), 4) if done else 0.0, success=met == len(checks),
                       detail=f"{met}/{len(checks)} requirements met")

    def check(self, req: dict[str, Any], answer: str | None) -> bool:
        kind = req["kind"]
        if kind == "folder":
            return self.by_id[req["message"]].folder == req["folder"]
        if kind == "reply":
            return any(s["in_reply_to"] == req["message"] and req["text"].casefold() in s["body"].casefold()
                       for s in self.state.sent)
        if kind == "setting":
            return self.state.settings[req["key"]] == req["value"]
        if kind == "answer":
            return answer is not None and answer.strip().casefold() == req["value"].casefold()
        raise ValueError(f"unknown requirement kind {kind!r}")

    @classmethod
    def tasks(cls) -> list[SiteTask]:
        rng = random.Random(4242)
        tasks = []
        for level, makers in (("easy", (_move_task, _per_page_task)), ("medium", (_reply_task, _signature_task)),
                              ("hard", (_find_code_task, _vacation_move_task))):
            for i in range(PER_LEVEL):
                seed = rng.randrange(2**31)
                tasks.append(makers[i % 2](f"mail/{level}/{i:03d}", seed, random.Random(seed)))
        return tasks


def _open_steps(box: list[Message], m: Message) -> list[Step]:
    count = sum(x.folder == m.folder for x in box)
    return [Step("click", "link", f"{m.folder} ({count})"), Step("click", "link", m.subject)]


def _task(task_id: str, seed: int, text: str, requirements: list[dict[str, Any]], plan: list[Step]) -> SiteTask:
    return SiteTask(task_id, "mail", task_id.split("/")[1], text, {"requirements": requirements}, tuple(plan),
                    start="/folder/Inbox", seed=seed)


def _move_task(task_id: str, seed: int, rng: random.Random) -> SiteTask:
    box = mailbox(seed)
    m = rng.choice(box[:10])
    target = rng.choice([f for f in FOLDERS if f != m.folder])
    plan = [*_open_steps(box, m), Step("select", "combobox", "Move to", target), Step("click", "button", "Move")]
    return _task(task_id, seed, f"Move the email from {m.sender} titled '{m.subject}' to the {target} folder.",
                 [{"kind": "folder", "message": m.id, "folder": target}], plan)


def _per_page_task(task_id: str, seed: int, rng: random.Random) -> SiteTask:
    value = rng.choice(PER_PAGE[1:])
    plan = [Step("click", "link", "Settings"), Step("select", "combobox", "Messages per page", value),
            Step("click", "button", "Save settings")]
    return _task(task_id, seed, f"Show {value} messages per page.",
                 [{"kind": "setting", "key": "per_page", "value": value}], plan)


def _reply_task(task_id: str, seed: int, rng: random.Random) -> SiteTask:
    box = mailbox(seed)
    m, text = rng.choice(box[:10]), rng.choice(REPLIES)
    plan = [*_open_steps(box, m), Step("fill", "textbox", "Reply", text), Step("click", "button", "Send reply")]
    return _task(task_id, seed, f"Reply to {m.sender}'s email '{m.subject}' with: {text}",
                 [{"kind": "reply", "message": m.id, "text": text}], plan)


def _signature_task(task_id: str, seed: int, rng: random.Random) -> SiteTask:
    value = rng.choice(SIGNATURES)
    plan = [Step("click", "link", "Settings"), Step("fill", "textbox", "Signature", value),
            Step("click", "button", "Save settings")]
    return _task(task_id, seed, f"Set your email signature to '{value}'.",
                 [{"kind": "setting", "key": "signature", "value": value}], plan)


def _find_code_task(task_id: str, seed: int, rng: random.Random) -> SiteTask:
    box = mailbox(seed)
    m = rng.choice([x for x in box if x.folder != "Inbox"] or box)
    words = m.subject.split(" (")[0]
    plan = [Step("fill", "searchbox", "Search mail", words), Step("click", "button", "Search"),
            Step("click", "link", m.subject), Step("answer", arg=m.code)]
    return _task(task_id, seed, f"What is the reference code in the email '{m.subject}' from {m.sender}? "
                 "Reply with answer(\"<code>\").", [{"kind": "answer", "value": m.code}], plan)


def _vacation_move_task(task_id: str, seed: int, rng: random.Random) -> SiteTask:
    box = mailbox(seed)
    m = rng.choice(box[:10])
    target = rng.choice([f for f in FOLDERS if f != m.folder])
    note = rng.choice(["Back on Monday.", "Out of office until the 12th.", "On leave this week."])
    plan = [Step("click", "link", "Settings"), Step("click", "checkbox", "Vacation responder"),
            Step("fill", "textbox", "Vacation message", note), Step("click", "button", "Save settings"),
            *_open_steps(box, m), Step("select", "combobox", "Move to", target), Step("click", "button", "Move")]
    return _task(task_id, seed, f"Turn on the vacation responder with the message '{note}', then move "
                 f"'{m.subject}' from {m.sender} to {target}.",
                 [{"kind": "setting", "key": "vacation", "value": "on"},
                  {"kind": "setting", "key": "vacation_message", "value": note},
                  {"kind": "folder", "message": m.id, "folder": target}], plan)
