"""The local workspace through a real browser: `opsgate run` with no Slack tokens and no model
(so the built-in demo model and default policy), and headless Chromium clicking through the
approval flow as three people."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webdriver import WebDriver

from tests.workspace.browser import BROWSER_MISSING, Workspace, WorkspacePage, chromium

pytestmark = [
    pytest.mark.processes,
    pytest.mark.timeout(240),
    pytest.mark.skipif(BROWSER_MISSING is not None, reason=BROWSER_MISSING or ""),
]

RILEY, SAM, ALEX = "U0RILEY", "U0SAM", "U0ALEX"
SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "img" / "workspace.png"


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Workspace]:
    running = Workspace(tmp_path_factory.mktemp("workspace"))
    running.start()
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture(scope="module")
def driver() -> Iterator[WebDriver]:
    browser = chromium()
    try:
        yield browser
    finally:
        browser.quit()


@pytest.fixture
def page(driver: WebDriver, workspace: Workspace) -> WorkspacePage:
    shown = WorkspacePage(driver, workspace.url)
    shown.open()
    shown.as_user(RILEY)
    shown.channel("ops")
    return shown


def test_the_start_up_line_names_the_page_and_the_way_to_slack(tmp_path: Path) -> None:
    started = Workspace(tmp_path)
    try:
        line = started.start()
    finally:
        assert started.stop() == 0
    assert f"http://127.0.0.1:{started.port}/" in line
    assert "SLACK_BOT_TOKEN" in line and "this machine only" in line
    assert (tmp_path / "opsgate.db").is_file() and (tmp_path / "opsgate-workspace.db").is_file()


def test_a_mention_posts_a_card_and_a_second_person_approves_it(page: WorkspacePage) -> None:
    assert "demo model" in page.driver.find_element(By.ID, "model-note").text
    ts = page.say("@OpsGate run: echo hello from the workspace")
    page.open_thread(ts)
    page.button("opsgate_approve", "echo hello from the workspace")
    page.as_user(SAM)
    page.record_streams()
    page.press("opsgate_approve", "echo hello from the workspace")
    answer = page.thread_says("The tool answered", "hello from the workspace", "whole flow")
    assert "demo model" in answer.text
    grown = page.stream_lengths(answer.get_attribute("data-ts") or "")
    assert len(grown) >= 2 and grown == sorted(grown), grown  # shown as it grew
    page.thread_says("Approved by", "Sam")


def test_reject_with_a_reason_from_the_modal(page: WorkspacePage) -> None:
    ts = page.say("@OpsGate run: echo please reject me")
    page.open_thread(ts)
    page.as_user(ALEX)
    page.press("opsgate_reject", "echo please reject me")
    form = page.modal("opsgate_reject_modal")
    form.find_element(By.CSS_SELECTOR, "textarea[name=reason_input]").send_keys("not on a Friday")
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    page.thread_says("Rejected by", "Alex", "not on a Friday")
    page.wait(
        lambda d: not d.find_elements(By.CSS_SELECTOR, "form[data-callback-id]"), "the modal closed"
    )


def test_two_people_approve_an_rm_and_the_requester_cannot(
    page: WorkspacePage, workspace: Workspace
) -> None:
    scratch = workspace.directory / "scratch"
    scratch.mkdir()
    (scratch / "old.log").write_text("old\n")
    ts = page.say("@OpsGate run: rm -rf scratch")
    page.open_thread(ts)
    page.thread_says("old.log")  # the preview: `ls -la` of what would be removed
    page.press("opsgate_approve", "rm -rf scratch")  # Riley asked: not theirs to give
    page.thread_says("Only visible to you")
    page.as_user(SAM)
    page.press("opsgate_approve", "rm -rf scratch")
    page.thread_says("rm -rf scratch", "1 of 2")
    assert scratch.exists()
    page.driver.save_screenshot(str(SCREENSHOT))
    page.as_user(ALEX)
    page.press("opsgate_approve", "rm -rf scratch")
    page.thread_says("The tool answered")
    assert not scratch.exists()


def test_an_alert_in_the_alert_channel_starts_a_run(page: WorkspacePage) -> None:
    page.channel("alerts")
    page.driver.find_element(By.ID, "send-alert").click()
    ts = page.wait(
        lambda d: next(
            (
                m.get_attribute("data-ts")
                for m in d.find_elements(By.CSS_SELECTOR, "#messages [data-ts]")
                if "FIRING" in m.text and "Alertmanager" in m.text
            ),
            None,
        ),
        "the alert",
    )
    page.open_thread(ts)
    page.thread_says("demo model", "run:")


def test_a_waiting_card_is_approved_after_a_restart(tmp_path: Path, driver: WebDriver) -> None:
    running = Workspace(tmp_path)
    running.start()
    try:
        page = WorkspacePage(driver, running.url)
        page.open()
        page.as_user(RILEY)
        page.channel("ops")
        ts = page.say("@OpsGate run: echo still here after a restart")
        page.open_thread(ts)
        page.button("opsgate_approve", "still here after a restart")
        epoch = page.driver.execute_script("return view.state.epoch")
        assert running.stop() == 0
        running.start()  # same port, same files; the page, not reloaded, carries on
        page.wait(
            lambda d: d.execute_script("return view.state.epoch") != epoch or None,
            "the page to find the new process by itself",
        )
        page.as_user(SAM)
        page.channel("ops")
        page.open_thread(ts)
        page.press("opsgate_approve", "still here after a restart")
        page.thread_says("The tool answered", "still here after a restart")
    finally:
        running.stop()


def test_a_slash_command_answers_only_whoever_typed_it(page: WorkspacePage) -> None:
    box = page.driver.find_element(By.CSS_SELECTOR, "#composer textarea[name=message]")
    box.send_keys("/opsgate help")
    page.driver.find_element(By.CSS_SELECTOR, "#composer button[type=submit]").click()
    help_ = page.wait(
        lambda d: next(
            (
                m.get_attribute("data-ts")
                for m in d.find_elements(By.CSS_SELECTOR, "#messages .ephemeral[data-ts]")
                if "Only visible to you" in m.text and "opsgate" in m.text.lower()
            ),
            None,
        ),
        "the answer to /opsgate help",
    )
    page.as_user(SAM)
    page.wait(
        lambda d: not d.find_elements(By.CSS_SELECTOR, f'#messages [data-ts="{help_}"]'),
        "the answer hidden from Sam",
    )


def test_an_allowance_lets_the_same_command_run_without_a_card(page: WorkspacePage) -> None:
    ts = page.say("@OpsGate run: echo allowed for a while")
    page.open_thread(ts)
    page.as_user(SAM)
    page.press("opsgate_allow", "echo allowed for a while")
    form = page.modal("opsgate_allow_modal")
    assert form.find_elements(By.CSS_SELECTOR, "input[type=radio][name=allow_shape_choice]")
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    page.thread_says("The tool answered", "allowed for a while")
    page.as_user(RILEY)
    again = page.say("@OpsGate run: echo allowed for a while")
    assert again != ts
    page.open_thread(again)
    page.thread_says("The tool answered", "allowed for a while")
    assert not page.driver.find_elements(
        By.CSS_SELECTOR, '#thread button[data-action-id="opsgate_approve"]'
    )


def test_an_approver_edits_the_command_before_it_runs(page: WorkspacePage) -> None:
    ts = page.say("@OpsGate run: echo as asked")
    page.open_thread(ts)
    page.as_user(ALEX)
    page.press("opsgate_edit", "echo as asked")
    form = page.modal("opsgate_edit_modal")
    field = form.find_element(By.CSS_SELECTOR, "[name=value]")
    field.clear()
    field.send_keys("echo as edited")
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    page.thread_says("The tool answered", "as edited")


def test_the_dm_and_the_home_tab(page: WorkspacePage) -> None:
    page.channel("dm")
    asked = page.say("run: uptime")  # a free read: no card
    page.open_thread(asked)
    page.thread_says("The tool answered", "load average")
    page.channel("ops")
    ts = page.say("@OpsGate run: echo waiting on the home tab")
    page.open_thread(ts)
    page.button("opsgate_approve", "waiting on the home tab")
    page.as_user(SAM)
    page.driver.find_element(By.CSS_SELECTOR, "[data-home]").click()
    page.wait(
        lambda d: "waiting on the home tab" in d.find_element(By.ID, "home").text or None,
        "the waiting call on Sam's Home tab",
    )


def test_the_policy_page_explains_a_typed_command(driver: WebDriver, workspace: Workspace) -> None:
    driver.get(workspace.url + "policy")
    box = WorkspacePage(driver, workspace.url).wait(
        lambda d: next(iter(d.find_elements(By.CSS_SELECTOR, "textarea[name=command]")), None),
        "the policy page",
    )
    assert "free reads" in driver.find_element(By.ID, "policy").text
    box.send_keys("rm -rf /" + Keys.ENTER)
    WorkspacePage(driver, workspace.url).wait(
        lambda d: (
            "verdict: forbidden" in d.find_element(By.CSS_SELECTOR, "[data-explain]").text or None
        ),
        "the verdict",
    )


def test_a_button_with_a_confirm_dialog_asks_first(page: WorkspacePage) -> None:
    ts = page.say("@OpsGate run: echo never mind")
    page.open_thread(ts)
    page.press("opsgate_cancel", "echo never mind")
    dialog = page.wait(
        lambda d: next(iter(d.find_elements(By.CSS_SELECTOR, "form[data-confirm-dialog]")), None),
        "the confirm dialog",
    )
    assert "Cancel the whole run?" in dialog.text
    dialog.find_element(By.CSS_SELECTOR, "[data-confirm-answer=no]").click()
    page.wait(
        lambda d: not d.find_elements(By.CSS_SELECTOR, "form[data-confirm-dialog]"), "it closed"
    )
    page.button("opsgate_approve", "echo never mind")  # nothing was sent: still waiting
    page.press("opsgate_cancel", "echo never mind")
    page.wait(
        lambda d: next(iter(d.find_elements(By.CSS_SELECTOR, "[data-confirm-answer=yes]")), None),
        "the confirm dialog again",
    ).click()
    page.thread_says("echo never mind", "Cancelled")
    page.wait(
        lambda d: (
            not d.find_elements(By.CSS_SELECTOR, '#thread [data-action-id="opsgate_approve"]')
        ),
        "the card decided",
    )


def test_block_kit_and_mrkdwn_are_drawn_as_slack_draws_them(page: WorkspacePage) -> None:
    """The page's renderer in the browser: what each block becomes, as DOM nodes."""
    blocks = [
        {"type": "header", "text": {"type": "plain_text", "text": "Deploy"}},
        {
            "type": "section",
            "text": {
                "type": "mrkdwn",
                "text": "*bold* <@U0SAM> in <#C0OPS> <https://example.com|docs> &lt;b&gt;"
                "\n```ls -la```",
            },
        },
        {"type": "divider"},
        {"type": "context", "elements": [{"type": "mrkdwn", "text": "_small_"}]},
        {"type": "sparkle_block", "answer": 42},
    ]
    drawn = page.driver.execute_script(
        """
        const node = Blocks.render(arguments[0], { names: { U0SAM: "Sam", C0OPS: "ops" } });
        const one = (css) => node.querySelector(css);
        return {
          header: one("h3").textContent,
          bold: one(".block-section strong").textContent,
          mentions: [...node.querySelectorAll(".mention")].map((m) => m.textContent),
          link: [one("a").getAttribute("href"), one("a").textContent],
          code: one("pre").textContent,
          text: one(".block-section").textContent,
          divider: !!one("hr"),
          context: one(".block-context em").textContent,
          unknown: JSON.parse(one("[data-block-type=sparkle_block]").textContent),
          scripts: node.querySelectorAll("script, b").length,
        };
        """,
        blocks,
    )
    assert drawn["header"] == "Deploy" and drawn["bold"] == "bold"
    assert drawn["mentions"] == ["@Sam", "#ops"] and drawn["link"] == [
        "https://example.com",
        "docs",
    ]
    assert drawn["code"] == "ls -la" and "<b>" in drawn["text"] and drawn["scripts"] == 0
    assert drawn["divider"] and drawn["context"] == "small"
    assert drawn["unknown"] == {"type": "sparkle_block", "answer": 42}


def test_another_site_cannot_act_through_the_page(workspace: Workspace) -> None:
    """A cross-site form or a rebound DNS name reaches the loopback port, but does nothing."""
    message = {"user": RILEY, "channel": "ops", "text": "@OpsGate run: echo from elsewhere"}
    with httpx.Client(base_url=workspace.url) as client:
        as_form = client.post(
            "/workspace/message",
            content=json.dumps(message),
            headers={"Content-Type": "text/plain"},
        )
        assert as_form.status_code == 415
        rebound = client.post(
            "/workspace/message", json=message, headers={"Host": f"evil.example:{workspace.port}"}
        )
        assert rebound.status_code == 421
        state = client.get("/workspace/state", params={"user": RILEY, "after": 0}).json()
    assert not any("from elsewhere" in m["text"] for m in state["messages"]["ops"])
