"""Deciding from the browser: real Chromium against a real `polyloop serve` process.

Approve a waiting call and see the run finish; a denial reaches the model;
two tabs deciding the same call (one wins, one is told); a form drawn before
the arguments changed is refused; an answer; a cancel; a read-only console; a changed
input accepted from the browser, then a plain resume to the end.
The screenshots of docs/how-to/decide-from-the-browser.md are taken here
(with POLYLOOP_SCREENSHOTS=DIR).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from console_helpers import TARGET, Server, crash_run, off_thread, report, resume, start_run
from support import forking
from support.cli import clean_env, console_script

from polyloop import JsonlStore, cancel, run_target
from polyloop._operate.accept import accept_changes

SHOTS = os.environ.get("POLYLOOP_SCREENSHOTS")


def _shot(page: Any, name: str) -> None:
    if SHOTS:
        page.screenshot(path=str(Path(SHOTS) / name), full_page=True)


def _ledger(runs: Path) -> list[str]:
    path = runs.parent / "ledger.txt"
    return path.read_text().splitlines() if path.exists() else []


def test_approving_a_waiting_call_in_the_browser_lets_the_run_finish_and_the_page_follows(
    page: Any, server: Server, runs: Path
) -> None:
    start_run(runs, "pay-1", "pay", {"to": "acme", "amount": 250, "memo": "invoice 7"})
    page.goto(server.base)
    page.click("text=pay-1")
    sha = report(runs, "pay-1")["requests"][0]["args_sha256"]
    assert page.inner_text("#req-s1-a1 .sha256") == sha
    assert '"amount": 250' in page.inner_text("#req-s1-a1 pre.args")
    page.set_viewport_size({"width": 1100, "height": 900})
    _shot(page, "console-decide.png")
    page.fill("#req-s1-a1 form.approve input[name=reason]", "invoice 7 checked")
    page.click("#req-s1-a1 form.approve button")
    assert "approve s1-a1 of run pay-1" in page.inner_text("#what")
    assert "run pay (step 1) with the approved arguments" in page.inner_text("#next")
    _shot(page, "console-recorded.png")
    decision = report(runs, "pay-1")["requests"][0]["decision"]
    assert decision["decision"] == "approved" and decision["reason"] == "invoice 7 checked"
    page.click("text=Back to run pay-1")
    assert page.inner_text("#status") == "stopped: resume continues it"
    resume(runs, "pay-1")  # a worker, a shell or the agent's process resumes; the page follows by itself
    page.wait_for_selector("#status.st-finished", timeout=15_000)
    assert page.inner_text("#result") == "the tool said: paid 250 to acme (invoice 7)"
    assert _ledger(runs) == ["paid 250 to acme"]
    _shot(page, "console-finished.png")


def test_a_denial_in_the_browser_reaches_the_model_and_nothing_runs(page: Any, server: Server, runs: Path) -> None:
    start_run(runs, "pay-2", "pay", {"to": "mallory", "amount": 9000})
    page.goto(f"{server.base}runs/pay-2")
    page.fill("#req-s1-a1 form.deny input[name=reason]", "not a supplier of ours")
    page.click("#req-s1-a1 form.deny button")
    assert "deny s1-a1" in page.inner_text("#what")
    result = resume(runs, "pay-2")
    assert "denied by" in result.final and "not a supplier of ours" in result.final
    assert "mallory" not in "".join(_ledger(runs))


@pytest.mark.slow  # the default suite keeps the cases; CI runs these by `pytest -m slow`
def test_edited_arguments_are_what_runs(page: Any, server: Server, runs: Path) -> None:
    start_run(runs, "pay-3", "pay", {"to": "acme", "amount": 900})
    page.goto(f"{server.base}runs/pay-3")
    page.click("#req-s1-a1 details summary")
    page.fill("#req-s1-a1 form.edit textarea[name=args]", '{"to": "acme", "amount": 90}')
    page.fill("#req-s1-a1 form.edit input[name=reason]", "capped")
    page.click("#req-s1-a1 form.edit button")
    assert "approve edited s1-a1" in page.inner_text("#what")
    assert resume(runs, "pay-3").final == "the tool said: paid 90 to acme ()"


def test_two_tabs_deciding_the_same_call_one_wins_the_other_is_told(
    browser: Any, page: Any, server: Server, runs: Path
) -> None:
    start_run(runs, "pay-4", "pay", {"to": "acme", "amount": 300})
    other = browser.new_context()
    second = other.new_page()
    second.goto(server.token_url)
    for tab in (page, second):
        tab.goto(f"{server.base}runs/pay-4")
        tab.fill("#req-s1-a1 form.approve input[name=reason]", "ok")
        tab.fill("#req-s1-a1 form.deny input[name=reason]", "no")
    page.click("#req-s1-a1 form.approve button")
    assert "approve s1-a1" in page.inner_text("#what")
    second.click("#req-s1-a1 form.deny button")
    why = second.inner_text("#why")
    assert "cannot decide" in why or "s1-a1" in why
    assert "it was approved by" in why and "Nothing was written" in why
    other.close()
    requests = report(runs, "pay-4")["requests"]
    assert [r["decision"]["decision"] for r in requests] == ["approved"]


def test_a_form_drawn_before_the_arguments_changed_is_refused(page: Any, server: Server, runs: Path) -> None:
    start_run(runs, "pay-5", "pay", {"to": "acme", "amount": 100})
    page.goto(f"{server.base}runs/pay-5")
    page.fill("#req-s1-a1 form.approve input[name=reason]", "100 is fine")
    # Meanwhile the run is replaced by one of the same id that asks for more: the same request id, other arguments.
    (runs / "pay-5.jsonl").rename(runs.parent / "pay-5.old.jsonl")
    start_run(runs, "pay-5", "pay", {"to": "acme", "amount": 100_000})
    page.click("#req-s1-a1 form.approve button")
    why = page.inner_text("#why")
    assert "its arguments hash to" in why and "review them again" in why and "Nothing was written" in why
    assert report(runs, "pay-5")["requests"][0]["decision"] is None


def test_a_decision_on_the_command_line_makes_the_open_form_stale(page: Any, server: Server, runs: Path) -> None:
    start_run(runs, "ask-1", "ask_human", {"question": "which account?"})
    page.goto(f"{server.base}runs/ask-1")
    page.fill("#req-s1-a1 form.answer textarea", "the second one")
    from console_helpers import off_thread
    import asyncio

    from polyloop import JsonlStore, answer

    off_thread(lambda: asyncio.run(answer(JsonlStore(runs), "ask-1", "s1-a1", "the first one", by="bob")))
    page.wait_for_selector("#moved:not([hidden])", timeout=10_000)  # the page says it moved, keeps the typing
    page.click("#req-s1-a1 form.answer button")
    why = page.inner_text("#why")
    assert "since the page was drawn" in why and "it was answered by bob" in why
    assert resume(runs, "ask-1").final == "the tool said: the first one"


@pytest.mark.slow  # the default suite keeps the cases; CI runs these by `pytest -m slow`
def test_an_answer_and_a_cancel_from_the_browser(page: Any, server: Server, runs: Path) -> None:
    start_run(runs, "ask-2", "ask_human", {"question": "which account?"})
    page.goto(f"{server.base}runs/ask-2")
    page.fill("#req-s1-a1 form.answer textarea", "the savings account")
    page.click("#req-s1-a1 form.answer button")
    assert "answer s1-a1" in page.inner_text("#what")
    assert resume(runs, "ask-2").final == "the tool said: the savings account"
    start_run(runs, "pay-6", "pay", {"to": "acme", "amount": 1})
    page.goto(f"{server.base}runs/pay-6")
    page.fill("#cancel input[name=reason]", "superseded by pay-7")
    page.click("#cancel button")
    assert "cancel: cancelled" in page.inner_text("#what")
    assert report(runs, "pay-6")["cancelled"]["why"] == "superseded by pay-7"


def test_a_cancel_from_a_page_drawn_before_the_run_finished_writes_nothing(
    page: Any, server: Server, runs: Path
) -> None:
    start_run(runs, "pay-13", "pay", {"to": "acme", "amount": 7})
    page.goto(f"{server.base}runs/pay-13")
    page.fill("#cancel input[name=reason]", "not needed")
    off_thread(lambda: asyncio.run(cancel(JsonlStore(runs), "pay-13", reason="done with it", by="bob")))
    log = (runs / "pay-13.jsonl").read_bytes()
    page.click("#cancel button")
    assert page.inner_text("h1") == "Refused"
    why = page.inner_text("#why")
    assert "nothing to cancel: run pay-13 had already finished (cancelled" in why and "Nothing was written" in why
    assert (runs / "pay-13.jsonl").read_bytes() == log
    assert report(runs, "pay-13")["cancelled"]["by"] == "bob"


@pytest.mark.slow  # the default suite keeps the cases; CI runs these by `pytest -m slow`
def test_an_unknown_action_is_settled_from_the_browser(page: Any, server: Server, runs: Path) -> None:
    crash_run(runs, "send-1", "ops")
    page.goto(f"{server.base}runs/send-1")
    assert "unknown" in page.inner_text("#req-s1-a1 h3") and "unknown" in page.inner_text("#timeline")
    page.fill("#req-s1-a1 form.executed textarea[name=observation]", "the message is in ops' inbox")
    page.fill("#req-s1-a1 form.executed input[name=reason]", "checked the mail server")
    page.click("#req-s1-a1 form.executed button")
    assert "executed s1-a1" in page.inner_text("#what")
    assert resume(runs, "send-1").final == "the tool said: the message is in ops' inbox"
    assert _ledger(runs).count("sent to ops") == 1  # settled, never sent again


def test_the_runs_page_lists_the_runs_with_what_waits_and_filters_them(page: Any, server: Server, runs: Path) -> None:
    start_run(runs, "pay-9", "pay", {"to": "initech", "amount": 1200})
    page.goto(server.base)
    page.set_viewport_size({"width": 1100, "height": 560})
    _shot(page, "console-runs.png")
    rows = page.locator("table.runs tbody tr")
    assert rows.count() >= 6
    assert "approval pay (s1-a1)" in page.inner_text("table.runs tbody tr:first-child")  # most recent first
    page.select_option("select[name=status]", "finished")
    page.click("form.filters button")
    assert "status=finished" in page.url
    statuses = page.locator("table.runs tbody .badge").all_inner_texts()
    assert statuses and set(statuses) == {"finished"}


def test_the_runs_page_has_all_of_ls_filters_batch_limit_and_several_statuses(
    page: Any, server: Server, runs: Path
) -> None:
    goals = runs.parent / "nightly.jsonl"
    goals.write_text("".join(json.dumps({"run_id": f"bat-{n}", "goal": json.dumps(
        {"tool": "pay", "args": {"to": "acme", "amount": n}})}) + "\n" for n in (1, 2)))
    done = forking.run([*console_script(), "batch", TARGET, str(goals), "--name", "nightly", "--dir", str(runs)],
                       env=clean_env(), timeout=120, stdin=subprocess.DEVNULL)
    assert done.returncode == 3, done  # both runs wait for an approval
    page.goto(server.base)
    page.fill("form.filters input[name=batch]", "nightly")
    page.click("form.filters button")
    assert "batch=nightly" in page.url
    assert sorted(page.locator("table.runs tbody td:first-child a").all_inner_texts()) == ["bat-1", "bat-2"]
    page.fill("form.filters input[name=limit]", "1")
    page.click("form.filters button")
    assert page.locator("table.runs tbody td:first-child a").all_inner_texts() in (["bat-1"], ["bat-2"])
    # Cancel from a page that follows nothing: the runs page would redraw itself on the news, and that
    # reload may land after the navigation below has begun (before its `beforeunload`), replacing it.
    page.goto(f"{server.base}runs/no-such-run")
    off_thread(lambda: asyncio.run(cancel(JsonlStore(runs), "bat-2", reason="not tonight", by="ops")))
    page.goto(f"{server.base}?batch=nightly&status=finished")
    assert page.locator("table.runs tbody td:first-child a").all_inner_texts() == ["bat-2"]
    page.goto(f"{server.base}?batch=nightly&status=finished&status=needs_operator")
    assert sorted(page.locator("table.runs tbody td:first-child a").all_inner_texts()) == ["bat-1", "bat-2"]
    for query, why in (("batch=none", "no batch 'none'"), ("limit=-1", "is not a count"),
                       ("status=finished&status=bogus", "no status 'bogus'"),
                       ("since=99999999999999999999d", "too long a duration")):
        response = page.goto(f"{server.base}?{query}")
        assert response.status == 400 and why in page.inner_text("#why"), query


@pytest.mark.slow  # waits for the runs page's next look (every 2 s)
def test_the_runs_page_follows_new_runs_by_itself(page: Any, server: Server, runs: Path) -> None:
    page.goto(server.base)
    start_run(runs, "pay-10", "pay", {"to": "globex", "amount": 3})
    page.wait_for_selector("table.runs a:text-is('pay-10')", timeout=15_000)


def test_a_run_started_before_the_runs_page_listens_still_moves_it(page: Any, server: Server, runs: Path) -> None:
    page.goto(server.base)
    events = page.get_attribute("body", "data-events")  # drawn before the run exists; it says what was drawn
    assert "seen=" in events
    # Listen from a page of the console that follows nothing (the runs page itself would redraw on the
    # news, taking this script's promise with it).
    page.goto(f"{server.base}runs/no-such-run")
    assert page.get_attribute("body", "data-events") is None
    start_run(runs, "pay-12", "pay", {"to": "umbrella", "amount": 4})  # before anything listens
    moved = page.evaluate("""url => new Promise(done => {
        const source = new EventSource(url);
        source.addEventListener("moved", () => { source.close(); done(true); });
        setTimeout(() => { source.close(); done(false); }, 10000);
    })""", events)
    assert moved is True


@pytest.mark.slow  # five rounds of a race (6 s): CI runs it by `pytest -m slow`
def test_a_runs_page_being_left_never_reloads_over_the_navigation(page: Any, server: Server, runs: Path) -> None:
    for n in range(5):  # each time the runs page is out of date as the reader clicks away from it
        page.goto(server.base)
        start_run(runs, f"away-{n}", "pay", {"to": "acme", "amount": 1})
        page.goto(f"{server.base}runs/away-{n}")
        page.wait_for_timeout(300)
        assert page.url == f"{server.base}runs/away-{n}"
        assert page.locator("#req-s1-a1 form.approve").count() == 1


def _note(runs: Path, run_id: str) -> None:
    """A finished run of the console agent that kept a note as a product."""
    goal = json.dumps({"tool": "note", "args": {"text": "<b>kept</b>"}})
    off_thread(lambda: asyncio.run(run_target(TARGET, goal=goal, store=JsonlStore(runs), run_id=run_id)))


def test_a_run_page_shows_its_products_and_a_corrupt_logs_problems(page: Any, server: Server, runs: Path) -> None:
    _note(runs, "note-1")
    page.goto(f"{server.base}runs/note-1")
    assert page.inner_text("#status") == "finished"
    products = page.inner_text("#products")
    assert "note.txt" in products and "note-1" in products  # name, path under the run's products
    assert page.locator("#timeline li.exec.state-done code.tool").all_inner_texts() == ["note"]
    page.goto(f"{server.base}runs/no-such-run")  # the run's page would redraw itself on what comes next
    with (runs / "note-1.jsonl").open("a") as log:  # lines no correct writer writes
        log.write('{"record": "no_such_record", "id": "x"}\nnot json\n')
    drawn: list[str] = []
    page.on("framenavigated", lambda frame: drawn.append(frame.url))
    page.goto(f"{server.base}runs/note-1")
    page.wait_for_timeout(1500)  # its events say nothing: a corrupt log never moves (no reload loop)
    assert drawn == [f"{server.base}runs/note-1"]
    assert page.inner_text("#status") == "corrupt log"
    problems = page.locator("section.problems li").all_inner_texts()
    assert len(problems) == 2 and "no_such_record" in problems[0] and "not valid JSON" in problems[1]
    assert page.inner_text("li.four-impossible b") == "2"
    assert page.locator("#cancel").count() == 0  # a corrupt log is never decided on


def test_a_run_page_redraws_once_when_its_log_turns_corrupt(page: Any, server: Server, runs: Path) -> None:
    _note(runs, "note-2")
    page.goto(f"{server.base}runs/note-2")
    assert page.inner_text("#status") == "finished"
    with (runs / "note-2.jsonl").open("a") as log:  # a line no correct writer writes lands under the page
        log.write("not json\n")
    page.wait_for_selector("#status.st-corrupt", timeout=10_000)
    assert "not valid JSON" in page.inner_text("section.problems")


def test_a_log_that_turns_corrupt_before_the_page_listens_still_moves_it(
    page: Any, server: Server, runs: Path
) -> None:
    _note(runs, "note-3")
    page.goto(f"{server.base}runs/note-3")
    events = page.get_attribute("body", "data-events")  # drawn from a sound log
    page.goto(f"{server.base}runs/no-such-run")  # a page that follows nothing
    with (runs / "note-3.jsonl").open("a") as log:  # corrupt before the page's events are first read
        log.write("not json\n")
    said = page.request.get(f"{server.base}{events.lstrip('/')}", timeout=10_000).text()
    assert "event: moved\ndata: corrupt" in said
    page.goto(f"{server.base}runs/note-3")
    assert page.inner_text("#status") == "corrupt log"
    assert page.get_attribute("body", "data-events").endswith("&drawn=corrupt")  # and this page never reloads


def _approved_then_input_changed(page: Any, server: Server, runs: Path, run_id: str, orders: Path, amount: int) -> None:
    """Run `run_id` paying `amount` with the input file `orders`, approve the payment in the page, then
    change the file: the run's page, drawn again, shows a checkpoint resume refuses."""
    orders.write_text(f"1042,{amount}\n")
    start_run(runs, run_id, "pay", {"to": "acme", "amount": amount}, inputs={"orders": str(orders)})
    page.goto(f"{server.base}runs/{run_id}")
    page.fill("#req-s1-a1 form.approve input[name=reason]", "ok")
    page.click("#req-s1-a1 form.approve button")
    orders.write_text(f"1042,{amount * 10}\n")
    page.goto(f"{server.base}runs/{run_id}")


@pytest.mark.slow
def test_a_changed_input_shows_what_changed_and_how_to_accept_it(page: Any, server: Server, runs: Path) -> None:
    _approved_then_input_changed(page, server, runs, "pay-11", runs.parent / "orders.csv", 250)
    shown = page.inner_text("#validity")
    assert "orders" in shown and "polyloop resume pay-11 --accept-changes --reason TEXT" in shown
    assert page.inner_text("#next").startswith("refuse (exit code 4)")


def test_a_changed_input_accepted_in_the_browser_lets_a_plain_resume_finish(
    page: Any, server: Server, runs: Path
) -> None:
    _approved_then_input_changed(page, server, runs, "accept-1", runs.parent / "orders-a1.csv", 300)
    assert page.inner_text("#next").startswith("refuse (exit code 4)")
    form = "#validity form.accept-changes"
    assert "input 'orders'" in page.inner_text(f"{form} ul.changes") and "changed" in page.inner_text(f"{form} ul.changes")
    page.set_viewport_size({"width": 1100, "height": 900})
    _shot(page, "console-accept-changes.png")
    page.fill(f"{form} input[name=reason]", "the corrected orders file")
    page.click(f"{form} button")
    assert "accept changes of run accept-1" in page.inner_text("#what")
    assert "checkpoint_accepted of 1 change(s)" in page.inner_text("#what")
    assert page.inner_text("#resume") == "polyloop resume accept-1"
    assert page.inner_text("#next").startswith("run pay (step 1)")
    accepted = report(runs, "accept-1")["overrides"]
    assert [(o["record"], o["reason"]) for o in accepted] == [("checkpoint_accepted", "the corrected orders file")]
    page.click("text=Back to run accept-1")
    assert page.locator(form).count() == 0  # nothing left to accept
    resume(runs, "accept-1")  # a plain resume: no --accept-changes
    page.wait_for_selector("#status.st-finished", timeout=15_000)
    assert page.inner_text("#result") == "the tool said: paid 300 to acme ()"


def test_an_acceptance_from_a_page_drawn_before_someone_else_accepted_writes_nothing(
    page: Any, server: Server, runs: Path
) -> None:
    orders = runs.parent / "orders-a2.csv"
    orders.write_text("1044,1\n")
    start_run(runs, "accept-2", "pay", {"to": "acme", "amount": 1}, inputs={"orders": str(orders)})
    orders.write_text("1044,2\n")
    page.goto(f"{server.base}runs/accept-2")
    seen = page.get_attribute("#validity form.accept-changes input[name=seen]", "value")
    forged = page.request.post(f"{server.base}runs/accept-2/decide", headers={"Origin": "http://evil.example"},
                               form={"action": "accept_changes", "seen": seen, "reason": "x", "csrf": "guessed"})
    assert forged.status == 403 and report(runs, "accept-2")["overrides"] == []
    # Ann starts typing (the page then no longer redraws itself), and meanwhile Bob accepts elsewhere.
    page.fill("#validity form.accept-changes input[name=reason]", "ann checked")
    off_thread(lambda: asyncio.run(accept_changes(JsonlStore(runs), "accept-2", reason="bob checked", by="bob")))
    before = report(runs, "accept-2")["overrides"]
    page.click("#validity form.accept-changes button")
    assert "changes were accepted by bob" in page.inner_text("#why")
    assert report(runs, "accept-2")["overrides"] == before


@pytest.mark.slow  # five processes, four of them SIGKILLed: CI runs it by `pytest -m slow`
def test_a_crash_loop_shows_the_command_that_lifts_it_naming_the_directory(browser: Any, tmp_path: Path) -> None:
    ops = tmp_path / "ops"  # not the default ./runs: every command shown must name it
    ops.mkdir()
    agent = f"{Path(__file__).resolve().parent.parent / 'crash' / 'validity_agent.py'}:agent"

    def cli(*args: str) -> int:  # the step tool SIGKILLs its process in step 2, each time
        return forking.run([*console_script(), *args, "--dir", str(ops)], env=clean_env(DIE_AT="2"), timeout=120,
                           stdin=subprocess.DEVNULL).returncode

    assert cli("run", agent, "--run-id", "cl", "--goal", "g") == -9
    assert [cli("resume", "cl") for _ in range(3)] == [-9, -9, -9]
    assert cli("resume", "cl") == 3  # the budget of 3 resumes without progress: a crash loop waits for a person
    server = Server(ops).start()
    try:
        tab = browser.new_context().new_page()
        tab.goto(server.token_url)
        tab.goto(f"{server.base}runs/cl")
        assert "crash_loop" in tab.inner_text("#req-cl h3")
        lift = tab.inner_text("#req-cl p:has-text('Lift it from a shell') code")
        assert lift == f"polyloop resume cl --accept-crash-loop --reason TEXT --dir {ops}"  # where the console reads
        tab.context.close()
    finally:
        server.stop()
