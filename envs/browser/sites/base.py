"""What every task site is made of: requests, responses, pages, tasks and solver plans.

A site is a small web application written in Python whose state lives in
the env process, one instance per episode. The browser never reaches a
server: the episode's context routes every request for the site's origin
to `Site.handle` and blocks everything else. Tasks are checked from the
site's state (orders placed, bookings made, messages moved), never from the
page text. Each task carries a solver plan: steps that name elements by
role and accessible name, resolved to bids on the live page.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar
from urllib.parse import parse_qsl, urlsplit

esc = html.escape


@dataclass(frozen=True)
class Request:
    """An HTTP request as the site sees it."""

    method: str
    path: str
    query: dict[str, str] = field(default_factory=dict)
    form: dict[str, str] = field(default_factory=dict)

    @classmethod
    def parse(cls, method: str, url: str, body: str | None) -> Request:
        parts = urlsplit(url)
        form = dict(parse_qsl(body or "", keep_blank_values=True)) if method == "POST" else {}
        return cls(method, parts.path or "/", dict(parse_qsl(parts.query, keep_blank_values=True)), form)


@dataclass(frozen=True)
class Response:
    """What the site answers: a page, or a redirect (rendered in place, the URL rewritten by the page)."""

    body: str | bytes = ""
    status: int = 200
    redirect: str | None = None
    content_type: str = "text/html; charset=utf-8"


@dataclass(frozen=True)
class Step:
    """One solver step: act on the element with this role and name (or go to a URL, or answer)."""

    op: str  #: click | fill | select | press | goto | answer
    role: str = ""
    name: str = ""
    arg: str | None = None


@dataclass(frozen=True)
class SiteTask:
    """One task of a site: what to ask, where to start, what counts as done, and how to do it."""

    id: str
    site: str
    difficulty: str
    instruction: str
    goal: dict[str, Any]
    plan: tuple[Step, ...]
    start: str = "/"
    seed: int = 0


@dataclass(frozen=True)
class Outcome:
    """The site's verdict on its state: is the episode over, and what did it earn."""

    done: bool
    reward: float = 0.0
    success: bool = False
    detail: str = ""


def page(title: str, body: str, *, nav: str = "") -> str:
    """A complete HTML page with the shared minimal style."""
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{esc(title)}</title>"
            "<style>body{font:14px sans-serif;margin:12px}label{display:block;margin:4px 0}"
            ".error{color:#b00}nav a{margin-right:8px}</style></head>"
            f"<body>{nav}<main><h1>{esc(title)}</h1>{body}</main></body></html>")


def field_row(label: str, name: str, value: str = "", *, kind: str = "text", error: str | None = None,
              required: bool = False) -> str:
    """A labelled input, with its validation error when there is one."""
    fid = f"f-{name}"
    attrs = " required" if required else ""
    invalid = " aria-invalid='true'" if error else ""
    err = f"<span class='error' role='alert'>{esc(error)}</span>" if error else ""
    return (f"<label for='{fid}'>{esc(label)}</label><input id='{fid}' name='{esc(name)}' type='{kind}' "
            f"value='{esc(value)}'{attrs}{invalid}>{err}")


def select_row(label: str, name: str, options: list[str], selected: str = "") -> str:
    fid = f"f-{name}"
    opts = "".join(f"<option{' selected' if o == selected else ''}>{esc(o)}</option>" for o in options)
    return f"<label for='{fid}'>{esc(label)}</label><select id='{fid}' name='{esc(name)}'>{opts}</select>"


Route = Callable[..., Response]


class Site:
    """Base class of a task site: one instance per episode holds that episode's server-side state."""

    name: ClassVar[str] = ""
    origin: ClassVar[str] = ""  #: e.g. http://shop.test

    def __init__(self, task: SiteTask):
        self.task = task
        self.requests = 0

    def handle(self, request: Request) -> Response:
        """Answer one request (subclasses route on `request.path`)."""
        raise NotImplementedError

    def outcome(self, answer: str | None) -> Outcome:
        """Whether the task is over and its reward, from the site state (and the agent's answer, if any)."""
        raise NotImplementedError

    @classmethod
    def tasks(cls) -> list[SiteTask]:
        """Every generated task of the site (deterministic)."""
        raise NotImplementedError


def not_found(path: str) -> Response:
    return Response(page("Not found", f"<p>No page at {esc(path)}.</p><p><a href='/'>Home</a></p>"), status=404)
