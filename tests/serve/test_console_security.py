"""The console's defences, in real Chromium against a real `polyloop serve` process.

Hostile strings in tool arguments, questions and answers never execute; no
page or decision without the token's session; a form posted by another
site (same-site or cross-site) writes nothing; a forged `Host` is refused;
named operators are recorded by name and a read-only one decides nothing;
the server SIGKILLed mid-decision leaves the decision whole or absent.
"""

from __future__ import annotations

import http.server
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from console_helpers import Server, report, resume, start_run
from support.cli import polyloop

from polyloop.for_cli import add_user

XSS = '<script>window.__pwned=1</script><img src=x onerror="window.__pwned=2">'
LINK = "javascript:window.__pwned=3"
TEMPLATE = "{{ 7*191 }}{% raw %}${7*191}#{7*191}"


def _safe(page: Any) -> None:
    """Nothing of a hostile string ran: no flag set, no dialog, only the console's own script."""
    assert page.evaluate("window.__pwned") is None
    assert page.evaluate("document.scripts.length") == 1
    assert page.evaluate("document.scripts[0].getAttribute('src')") == "/static/console.js"
    assert page.evaluate("document.querySelectorAll('[onerror], [onclick], [onload]').length") == 0
    assert page.evaluate("[...document.querySelectorAll('a')].filter(a => a.href.startsWith('javascript')).length") == 0


def test_hostile_arguments_questions_and_answers_show_as_text_and_never_run(
    page: Any, server: Server, runs: Path
) -> None:
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    start_run(runs, "xss-1", "pay", {"to": XSS, "amount": 5, "memo": f"{LINK} {TEMPLATE}"})
    page.goto(server.base)
    _safe(page)
    page.goto(f"{server.base}runs/xss-1")
    _safe(page)
    shown = page.inner_text("#req-s1-a1 pre.args")
    assert "<script>window.__pwned=1</script>" in shown and LINK in shown and "{{ 7*191 }}" in shown
    assert "1337" not in page.inner_text("main")
    page.fill("#req-s1-a1 form.approve input[name=reason]", XSS + TEMPLATE)
    page.click("#req-s1-a1 form.approve button")
    _safe(page)
    resume(runs, "xss-1")
    start_run(runs, "xss-2", "ask_human", {"question": f"{XSS} {LINK} {TEMPLATE}"})
    page.goto(f"{server.base}runs/xss-2")
    _safe(page)
    page.fill("#req-s1-a1 form.answer textarea", f"{XSS} {TEMPLATE}")
    page.click("#req-s1-a1 form.answer button")
    resume(runs, "xss-2")
    for run_id in ("xss-1", "xss-2"):
        page.goto(f"{server.base}runs/{run_id}")
        page.wait_for_selector("#status.st-finished")
        _safe(page)
    assert "<script>window.__pwned=1</script>" in page.inner_text("#result")
    assert "{{ 7*191 }}" in page.inner_text("#result") and "1337" not in page.inner_text("main")
    page.goto(server.base)
    _safe(page)
    assert dialogs == []


def test_without_the_token_nothing_is_shown_and_nothing_is_decided(browser: Any, server: Server, runs: Path) -> None:
    start_run(runs, "tok-1", "pay", {"to": "acme", "amount": 5})
    context = browser.new_context()
    tab = context.new_page()
    for path in ("", "runs/tok-1", "events", "runs/tok-1/events"):
        response = tab.goto(server.base + path)
        assert response.status == 401 and "Sign in" in tab.inner_text("h1")
        assert "acme" not in tab.content()
    response = tab.goto(f"{server.base}?token=not-the-token")
    assert response.status == 403 and "opens nothing" in tab.inner_text("main")
    assert tab.context.cookies() == []
    posted = tab.request.post(f"{server.base}runs/tok-1/decide", form={"action": "approve", "id": "s1-a1",
                              "seen": "4", "reason": "x", "csrf": "x"}, headers={"Origin": server.base.rstrip("/")})
    assert posted.status == 401
    context.close()
    assert report(runs, "tok-1")["requests"][0]["decision"] is None


def test_the_session_cookie_is_httponly_and_samesite_strict(browser: Any, server: Server) -> None:
    context = browser.new_context()
    try:
        tab = context.new_page()
        tab.goto(server.token_url)  # signs in, then lands on the same page without the token
        [cookie] = context.cookies()
        assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
        assert tab.evaluate("document.cookie") == ""
        assert "token=" not in tab.url
    finally:
        context.close()


@pytest.fixture
def evil(tmp_path: Path, server: Server) -> Iterator[int]:
    """Another site's server: a page whose button posts an approval to the console."""
    (tmp_path / "index.html").write_text(
        f'<form method="post" action="{server.base}runs/csrf-1/decide">'
        '<input type="hidden" name="action" value="approve"><input type="hidden" name="id" value="s1-a1">'
        '<input type="hidden" name="seen" value="4"><input type="hidden" name="reason" value="evil">'
        '<input type="hidden" name="csrf" value="guessed"><button id="go">win a prize</button></form>')

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, directory=str(tmp_path), **kwargs)

        def log_message(self, *args: Any) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield httpd.server_address[1]
    httpd.shutdown()
    httpd.server_close()


def test_a_form_posted_by_another_site_writes_nothing(page: Any, server: Server, runs: Path, evil: int) -> None:
    start_run(runs, "csrf-1", "pay", {"to": "acme", "amount": 5})
    # Same site (127.0.0.1, another port): the SameSite cookie goes along; the Origin check refuses.
    page.goto(f"http://127.0.0.1:{evil}/")
    page.click("#go")
    assert "Refused" in page.inner_text("h1")
    assert f"comes from http://127.0.0.1:{evil}" in page.inner_text("#why")
    # Another site (localhost): the SameSite=Strict cookie stays home; no session, nothing decided.
    page.goto(f"http://localhost:{evil}/")
    page.click("#go")
    assert "Sign in" in page.inner_text("h1")
    assert report(runs, "csrf-1")["requests"][0]["decision"] is None


def test_the_right_origin_without_the_session_csrf_token_writes_nothing(page: Any, server: Server, runs: Path) -> None:
    start_run(runs, "csrf-2", "pay", {"to": "acme", "amount": 5})
    page.goto(f"{server.base}runs/csrf-2")
    page.evaluate("document.querySelector('#req-s1-a1 form.approve input[name=csrf]').value = 'forged'")
    page.fill("#req-s1-a1 form.approve input[name=reason]", "ok")
    page.click("#req-s1-a1 form.approve button")
    assert "CSRF token" in page.inner_text("#why")
    assert report(runs, "csrf-2")["requests"][0]["decision"] is None


def test_a_form_whose_log_position_is_not_a_count_is_refused_as_malformed(
    page: Any, server: Server, runs: Path
) -> None:
    start_run(runs, "seen-1", "pay", {"to": "acme", "amount": 5})
    page.goto(f"{server.base}runs/seen-1")
    form = {name: page.get_attribute(f"#req-s1-a1 form.approve input[name={name}]", "value")
            for name in ("csrf", "id", "sha256")}
    for seen in ("-1", "4.0", "", "\u0664"):  # the last: ARABIC-INDIC DIGIT FOUR, which int() reads as 4
        posted = page.request.post(f"{server.base}runs/seen-1/decide", headers={"Origin": server.base.rstrip("/")},
                                   form={**form, "action": "approve", "seen": seen, "reason": "ok"})
        assert posted.status == 400 and "nothing was written" in posted.text(), (seen, posted.text())
    assert report(runs, "seen-1")["requests"][0]["decision"] is None


def test_the_events_of_an_invalid_run_id_are_refused_without_a_traceback(page: Any, server: Server) -> None:
    answered = page.request.get(f"{server.base}runs/%00/events")
    assert answered.status == 404 and "invalid run id" in answered.text()
    page.goto(server.base)  # one request more, so the server's output is read past the refusal
    assert not any("Traceback" in line for line in server.lines), "".join(server.lines)


def test_a_forged_host_is_refused(server: Server) -> None:
    request = urllib.request.Request(server.token_url, headers={"Host": f"rebound.example:{server.port}"})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    assert refused.value.code == 421
    refused.value.close()


@pytest.mark.slow  # a second server and a command-line run: CI runs it by `pytest -m slow`
def test_named_operators_are_recorded_by_name_and_a_read_only_one_decides_nothing(
    browser: Any, tmp_path: Path
) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    users = tmp_path / "operators.txt"
    tokens = {}
    done = polyloop("serve", "--users", str(users), "--add-user", "rob", "--read-only")
    assert done.code == 0, done
    tokens["rob"] = done.stdout.rsplit(" ", 1)[1].strip()
    tokens["ann"] = add_user(users, "ann", "decide")  # what `--add-user ann` runs
    assert not any(t in users.read_text() for t in tokens.values())  # stored hashed
    start_run(runs, "op-1", "pay", {"to": "acme", "amount": 5})
    server = Server(runs, extra=("--users", str(users))).start()
    try:
        rob = browser.new_context().new_page()
        rob.goto(f"{server.base}runs/op-1?token={tokens['rob']}")
        assert "read-only" in rob.inner_text("header")
        assert rob.locator("form.approve").count() == 0 and "Read-only" in rob.inner_text("#waiting")
        forged = rob.request.post(f"{server.base}runs/op-1/decide", headers={"Origin": server.base.rstrip("/")},
                                  form={"action": "approve", "id": "s1-a1", "seen": "4", "reason": "x",
                                        "csrf": "a read-only page carries no form"})
        assert forged.status == 403 and "read-only" in forged.text()
        ann = browser.new_context().new_page()
        ann.goto(f"{server.base}runs/op-1?token={tokens['ann']}")
        assert ann.inner_text("#req-s1-a1 .decider") == "ann"  # who decides, as it will be recorded
        ann.fill("#req-s1-a1 form.approve input[name=reason]", "checked")
        ann.click("#req-s1-a1 form.approve button")
        assert "(by ann)" in ann.inner_text("#what")
        assert report(runs, "op-1")["requests"][0]["decision"]["by"] == "ann"
        ann.context.close()
        rob.context.close()
    finally:
        server.stop()


def test_a_read_only_console_shows_everything_and_decides_nothing(browser: Any, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    orders = tmp_path / "orders.csv"
    orders.write_text("1,5\n")
    start_run(runs, "ro-1", "pay", {"to": "acme", "amount": 5}, inputs={"orders": str(orders)})
    orders.write_text("1,50\n")  # a change resume refuses: a person with the decide role may accept it
    server = Server(runs, extra=("--read-only",)).start()
    try:
        assert "(read-only)" in server.lines[0]
        tab = browser.new_context().new_page()
        tab.goto(server.token_url)
        tab.goto(f"{server.base}runs/ro-1")
        assert "token holder · read-only" in tab.inner_text("header")
        assert '"amount": 5' in tab.inner_text("#req-s1-a1 pre.args")  # it sees the request
        assert tab.locator("form[method=post]").count() == 0 and "Read-only" in tab.inner_text("#waiting")
        assert "orders" in tab.inner_text("#validity")  # it sees the change, and no form to accept it
        for form in ({"action": "approve", "id": "s1-a1", "seen": "4", "reason": "x"},
                     {"action": "cancel", "reason": "x"}, {"action": "accept_changes", "seen": "4", "reason": "x"}):
            forged = tab.request.post(f"{server.base}runs/ro-1/decide", headers={"Origin": server.base.rstrip("/")},
                                      form={**form, "csrf": "a read-only page carries no form"})
            assert forged.status == 403 and "read-only" in forged.text()
        tab.context.close()
    finally:
        server.stop()
    doc = report(runs, "ro-1")
    assert doc["requests"][0]["decision"] is None and doc["cancelled"] is None and doc["overrides"] == []


def test_behind_a_tls_proxy_on_this_machine_as_the_how_to_says_decisions_go_through(tmp_path: Path) -> None:
    """What a proxy forwards (docs/how-to/decide-from-the-browser.md, "Behind TLS"): its own Host, https."""
    runs = tmp_path / "runs"
    runs.mkdir()
    start_run(runs, "tls-1", "pay", {"to": "acme", "amount": 5})
    server = Server(runs, extra=("--allow-remote",)).start()
    proxied = {"Host": "console.example", "X-Forwarded-Proto": "https", "X-Forwarded-For": "203.0.113.7"}

    def ask(path: str, **headers: str) -> Any:
        opener = urllib.request.build_opener(NoRedirect)
        data = headers.pop("data", None)
        return opener.open(urllib.request.Request(server.base + path, headers={**proxied, **headers},
                                                  data=data.encode() if data else None), timeout=10)

    try:
        token = server.token_url.split("?token=")[1]
        with pytest.raises(urllib.error.HTTPError) as signed:
            ask(f"?token={token}")
        cookie = signed.value.headers["set-cookie"]
        signed.value.close()
        assert "Secure" in cookie and "HttpOnly" in cookie  # the browser sent it over https
        session = cookie.split(";")[0]
        with ask("runs/tls-1", Cookie=session) as page:
            drawn = page.read().decode()
        csrf = drawn.split('name="csrf" value="')[1].split('"')[0]
        sha = drawn.split('name="sha256" value="')[1].split('"')[0]
        form = f"csrf={csrf}&action=approve&id=s1-a1&seen=4&sha256={sha}&reason=through+the+proxy"
        with pytest.raises(urllib.error.HTTPError) as wrong:  # the proxy's Host is what the Origin is checked against
            ask("runs/tls-1/decide", Cookie=session, Origin="https://elsewhere.example", data=form)
        assert wrong.value.code == 403
        wrong.value.close()
        with ask("runs/tls-1/decide", Cookie=session, Origin="https://console.example", data=form) as done:
            assert done.status == 200
    finally:
        server.stop()
    assert report(runs, "tls-1")["requests"][0]["decision"]["reason"] == "through the proxy"


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


@pytest.mark.parametrize("delay", [0.02, *(pytest.param(d, marks=pytest.mark.slow) for d in (0.0, 0.005, 0.01, 0.03,
                                                                                            0.05, 0.1, 0.2))])
def test_the_server_sigkilled_mid_decision_leaves_it_whole_or_absent(
    browser: Any, tmp_path: Path, delay: float
) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    start_run(runs, "kill-1", "pay", {"to": "acme", "amount": 5})
    server = Server(runs).start()
    context = browser.new_context()
    tab = context.new_page()
    tab.goto(server.token_url)
    tab.goto(f"{server.base}runs/kill-1")
    tab.fill("#req-s1-a1 form.approve input[name=reason]", "ok")
    tab.click("#req-s1-a1 form.approve button", no_wait_after=True)
    time.sleep(delay)
    server.kill()
    context.close()
    doc = report(runs, "kill-1")
    assert doc["status"] != "corrupt" and doc["problems"] == []
    decisions = [r["decision"] for r in doc["requests"] if r["decision"]]
    assert len(decisions) <= 1
    if decisions:  # durable: whole, as decided
        assert decisions[0]["decision"] == "approved" and decisions[0]["reason"] == "ok"
        assert resume(runs, "kill-1").final == "the tool said: paid 5 to acme ()"
    else:  # absent: the request still waits, for this console restarted or any other way of deciding
        assert [w["id"] for w in doc["waiting"]] == ["s1-a1"]
