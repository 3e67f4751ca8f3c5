"""The local workspace as a person uses it: `opsgate run` with no Slack tokens as a real child
process, and Debian's headless Chromium driven by Selenium through the page's pinned attributes
(`select[name=user]`, `a[data-channel]`, `textarea[name=message]`, `[data-ts]`,
`[data-open-thread]`, `button[data-action-id]`, `form[data-callback-id]`).

Every wait is a `WebDriverWait` on the DOM (or on the child's output), never a sleep.
"""

from __future__ import annotations

import os
import queue
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.ui import Select, WebDriverWait

__all__ = ["BROWSER_MISSING", "Workspace", "WorkspacePage", "chromium"]

ROOT = Path(__file__).resolve().parents[2]
OPSGATE = Path(sys.executable).with_name("opsgate")
CHROMIUM = shutil.which("chromium")
CHROMEDRIVER = shutil.which("chromedriver")
BROWSER_MISSING = (
    None
    if CHROMIUM and CHROMEDRIVER
    else "NO BROWSER: the local workspace's browser tests need Debian's chromium and "
    "chromium-driver (apt-get install -y chromium chromium-driver; .ci/run installs them)"
)
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)
WAIT = 30.0

T = TypeVar("T")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class Workspace:
    """`opsgate run` in `directory` with an empty Slack and model environment."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}/"
        self.process: subprocess.Popen[str] | None = None
        self.lines: queue.Queue[str] = queue.Queue()
        self.started_in: float | None = None
        """Seconds from the start of the process to its line with the page's address."""

    def start(self) -> str:
        """Start it; returns the line it printed with the page's address."""
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("SLACK_", "OPENAI_", "OPSGATE_"))
        }
        env.update(PYTHONPATH=str(ROOT), OPSGATE_PORT=str(self.port))
        began = time.monotonic()
        self.process = subprocess.Popen(
            [str(OPSGATE), "run"],
            cwd=self.directory,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        threading.Thread(target=self._read, args=(self.process,), daemon=True).start()
        line = self.wait_for_line(f"OpsGate local workspace: {self.url}")
        self.started_in = time.monotonic() - began
        return line

    def _read(self, process: subprocess.Popen[str]) -> None:
        assert process.stdout is not None
        for line in process.stdout:
            self.lines.put(line.rstrip())

    def wait_for_line(self, fragment: str, timeout: float = 60) -> str:
        deadline = time.monotonic() + timeout
        seen: list[str] = []
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = self.lines.get(timeout=left)
            except queue.Empty:
                break
            seen.append(line)
            if fragment in line:
                return line
        raise AssertionError(f"no line with {fragment!r} in {timeout}s:\n" + "\n".join(seen[-30:]))

    def stop(self) -> int:
        """SIGTERM, as Ctrl-C in `make run`; its exit status."""
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait()


def chromium() -> WebDriver:
    """Headless Chromium with a fresh profile, driven by Debian's chromedriver."""
    assert CHROMIUM and CHROMEDRIVER, BROWSER_MISSING
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tempfile.mkdtemp(prefix='opsgate-chromium-')}")
    options.add_argument("--window-size=1400,960")
    return webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))


class WorkspacePage:
    """The page, through its pinned attributes."""

    def __init__(self, driver: WebDriver, url: str) -> None:
        self.driver = driver
        self.url = url

    def wait(self, condition: Callable[[WebDriver], T | bool | None], what: str) -> T:
        waiting = WebDriverWait(
            self.driver,
            WAIT,
            poll_frequency=0.05,
            ignored_exceptions=(StaleElementReferenceException,),
        )
        result: T = waiting.until(condition, message=f"waiting for {what}")
        return result

    def open(self) -> None:
        self.driver.get(self.url)
        self.wait(lambda d: d.find_elements(By.CSS_SELECTOR, "a[data-channel=ops]"), "the page")

    def as_user(self, user_id: str) -> None:
        Select(self.driver.find_element(By.CSS_SELECTOR, "select[name=user]")).select_by_value(
            user_id
        )
        self.wait(
            lambda d: d.execute_script("return view.state && view.state.user") == user_id,
            f"the page drawn for {user_id}",
        )

    def channel(self, name: str) -> None:
        link = f"a[data-channel={name}].nav"
        self.driver.find_element(By.CSS_SELECTOR, link).click()
        self.wait(lambda d: d.find_elements(By.CSS_SELECTOR, f"{link}.active"), f"#{name} open")

    def say(self, text: str) -> str:
        """Write `text` in the channel's composer and send it with Enter; its ts."""
        before = set(self._ts_of(text))
        box = self.driver.find_element(By.CSS_SELECTOR, "#composer textarea[name=message]")
        box.send_keys(text + Keys.ENTER)
        return self.wait(
            lambda d: next((ts for ts in self._ts_of(text) if ts not in before), None),
            f"the message {text!r}",
        )

    def _ts_of(self, text: str) -> list[str]:
        """The ts of the channel's messages that show `text`."""
        return [
            message.get_attribute("data-ts") or ""
            for message in self.driver.find_elements(By.CSS_SELECTOR, "#messages [data-ts]")
            if text.replace("@OpsGate ", "") in message.text
        ]

    def _clicked(self, find: Callable[[], WebElement | None]) -> bool | None:
        """Click what `find` finds; None (wait on) while there is none. A node redrawn between
        finding and clicking is stale: the wait ignores that and finds it again."""
        element = find()
        if element is None:
            return None
        element.click()
        return True

    def open_thread(self, ts: str) -> None:
        link = f'#messages [data-open-thread="{ts}"]'
        self.wait(
            lambda d: self._clicked(
                lambda: next(iter(d.find_elements(By.CSS_SELECTOR, link)), None)
            ),
            f"the link to the thread of {ts}",
        )
        self.wait(
            lambda d: d.find_elements(By.CSS_SELECTOR, f'#thread [data-thread-ts="{ts}"]'),
            f"the thread of {ts}",
        )

    def thread_messages(self) -> list[WebElement]:
        return self.driver.find_elements(By.CSS_SELECTOR, "#thread [data-ts]")

    def button(self, action_id: str, containing: str = "") -> WebElement:
        """The thread's newest button with `action_id`, on a message containing `containing`."""

        return self.wait(lambda d: self._button(action_id, containing), f"a {action_id} button")

    def _button(self, action_id: str, containing: str) -> WebElement | None:
        for message in reversed(self.thread_messages()):
            found = f'button[data-action-id="{action_id}"]'
            buttons = message.find_elements(By.CSS_SELECTOR, found)
            if buttons and containing in message.text:
                return buttons[0]
        return None

    def press(self, action_id: str, containing: str = "") -> None:
        """Click the thread's newest `action_id` button on a message containing `containing`."""
        self.wait(
            lambda d: self._clicked(lambda: self._button(action_id, containing)),
            f"a {action_id} button to click",
        )

    def thread_says(self, *fragments: str) -> WebElement:
        """Until one message of the open thread contains every fragment; that message."""

        def found(d: WebDriver) -> WebElement | None:
            for message in self.thread_messages():
                if all(f in message.text for f in fragments):
                    return message
            return None

        return self.wait(found, f"a thread message with {fragments!r}")

    def modal(self, callback_id: str) -> WebElement:
        form = f'form[data-callback-id="{callback_id}"]'
        return self.wait(
            lambda d: next(iter(d.find_elements(By.CSS_SELECTOR, form)), None),
            f"the {callback_id} modal",
        )

    def record_streams(self) -> None:
        """From now on, note each length a streaming message's text is shown at."""
        self.driver.execute_script(
            """
            window.streamLengths = {};
            new MutationObserver(() => {
              for (const m of document.querySelectorAll('#thread [data-streaming="true"]')) {
                const seen = (window.streamLengths[m.dataset.ts] ||= []);
                const length = m.innerText.length;
                if (seen[seen.length - 1] !== length) seen.push(length);
              }
            }).observe(document.body, { childList: true, subtree: true });
            """
        )

    def stream_lengths(self, ts: str) -> list[int]:
        script = "return window.streamLengths[arguments[0]] || []"
        found: Any = self.driver.execute_script(script, ts)
        return [int(n) for n in found]
