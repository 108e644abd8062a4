"""The chat UI in a real browser: headless Debian Chromium driven by Selenium.

The demo server (`lg_visibility.demo.app.serve`, what `lg-visibility serve` runs) is started
in a subprocess on 127.0.0.1 and a free port, and stopped by the test. When Chromium,
chromedriver or selenium is missing the tests fail with one line saying how to get them
(`apt-get install -y chromium chromium-driver`, which `.ci/run` does); set
LGV_SKIP_BROWSER=1 to opt out explicitly. Nothing is skipped silently.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lg_visibility.demo.graphs import INCIDENT_INTERNAL_MARKERS, ORDER_INTERNAL_MARKERS

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
INTERNAL = ORDER_INTERNAL_MARKERS + INCIDENT_INTERNAL_MARKERS
WAIT = 20


def _missing() -> str | None:
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install selenium)"
    for path in (CHROMIUM, CHROMEDRIVER):
        if not os.access(path, os.X_OK):
            return f"{path} is missing (apt-get install -y chromium chromium-driver)"
    return None


if (reason := _missing()) is not None and not os.environ.get("LGV_SKIP_BROWSER"):
    # As .ci/run does: install Debian's Chromium where we can, then look again.
    from tests._support.system import install_debian_packages

    if (why := install_debian_packages("chromium", "chromium-driver")) is None:
        CHROMIUM = shutil.which("chromium") or CHROMIUM
        CHROMEDRIVER = shutil.which("chromedriver") or CHROMEDRIVER
        reason = _missing()
    else:
        reason = f"{reason}; {why}"
if reason is not None:
    if os.environ.get("LGV_SKIP_BROWSER"):
        pytest.skip(
            f"browser tests opted out with LGV_SKIP_BROWSER=1 ({reason})", allow_module_level=True
        )
    pytest.fail(f"browser tests need {reason}, or set LGV_SKIP_BROWSER=1 to opt out", pytrace=False)

from selenium import webdriver  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def server(tmp_path: Path) -> Iterator[str]:
    """`serve()` in a subprocess on 127.0.0.1; yields its base URL, stops it afterwards."""
    port = free_port()
    code = (
        "from lg_visibility.demo.app import serve; "
        f"serve('127.0.0.1', {port}, {str(tmp_path / 'chat.sqlite')!r}, "
        "token_delay=0.03, marked=True)"
    )
    log = (tmp_path / "server.log").open("wb")
    process = subprocess.Popen([sys.executable, "-c", code], stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + WAIT
        while True:
            try:
                with urllib.request.urlopen(base + "/", timeout=1) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    "demo server did not start:\n" + (tmp_path / "server.log").read_text()
                )
            time.sleep(0.1)
        yield base
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


@pytest.fixture
def browser() -> Iterator[Any]:
    """Headless Debian Chromium with a fresh profile, no network besides 127.0.0.1."""
    profile = tempfile.mkdtemp(prefix="lgv-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        f"--user-data-dir={profile}",
        "--window-size=1200,900",
    ):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(WAIT)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


# Records every text any assistant bubble ever shows, so the test can tell that the
# answer appeared token by token and that nothing internal was ever on screen.
RECORDER = """
window.__seen = [];
const box = document.querySelector('#messages');
new MutationObserver(() => {
  for (const node of box.querySelectorAll('.msg.assistant .text, .tool, .card')) {
    window.__seen.push(node.textContent);
  }
  window.__seen.push(document.body.innerText);
}).observe(document.body, {childList: true, subtree: true, characterData: true});
"""


def conversation(driver: Any) -> list[tuple[str, str]]:
    """The visible conversation: (role or kind, text) for every bubble and tool card."""
    items = driver.find_elements(By.CSS_SELECTOR, "#messages > .msg, #messages > .tool")
    out = []
    for item in items:
        if not item.is_displayed():
            continue
        if "tool" in item.get_attribute("class").split():
            out.append(("tool", item.find_element(By.CSS_SELECTOR, ".tool-result").text))
        else:
            out.append(
                (item.get_attribute("data-role"), item.find_element(By.CSS_SELECTOR, ".text").text)
            )
    return out


def wait_for(driver: Any, css: str) -> Any:
    return WebDriverWait(driver, WAIT).until(lambda d: d.find_element(By.CSS_SELECTOR, css))


def wait_status(driver: Any, value: str) -> None:
    WebDriverWait(driver, WAIT).until(
        lambda d: d.find_element(By.ID, "status").get_attribute("data-state") == value
    )


def assert_no_internal(driver: Any) -> None:
    body = driver.find_element(By.TAG_NAME, "body").text
    seen = "\n".join([*driver.execute_script("return window.__seen || []"), body])
    assert [m for m in INTERNAL if m in seen] == []
    # the internal JSON itself, in case a marker were ever stripped from it
    for snippet in ('"delegate"', '"action"', '"customer"', '"normalized_question"'):
        assert snippet not in seen, snippet


def send(driver: Any, text: str) -> None:
    box = driver.find_element(By.ID, "input")
    box.clear()
    box.send_keys(text)
    driver.find_element(By.ID, "send").click()


def test_chat_ui_order_flow_streams_asks_twice_and_survives_reload(
    server: str, browser: Any
) -> None:
    """Send, see the streamed answers, answer both interrupt forms, reload: same conversation."""
    browser.get(server + "/")
    wait_status(browser, "idle")
    browser.execute_script(RECORDER)

    send(browser, "Please create an order")
    form = wait_for(browser, '.interrupt-form[data-type="missing_data"]')
    assert "Which phone number" in form.text
    wait_status(browser, "waiting")
    form.find_element(By.CSS_SELECTOR, 'input[name="phone"]').send_keys("555-0100")
    form.find_element(By.CSS_SELECTOR, 'button[data-action="submit"]').click()

    approval = wait_for(browser, '.interrupt-form[data-type="approval"]')
    assert "phone 555-0100" in approval.text
    approval.find_element(By.CSS_SELECTOR, 'button[data-decision="approve"]').click()

    WebDriverWait(browser, WAIT).until(
        lambda d: len(d.find_elements(By.CSS_SELECTOR, ".msg.assistant.final")) == 2
    )
    wait_status(browser, "idle")
    assert browser.find_elements(By.CSS_SELECTOR, ".interrupt-form") == []
    before = conversation(browser)
    assert before == [
        ("user", "Please create an order"),
        ("assistant", "ORDERVISIBLE Order PO-1001 is created for ACME."),
        ("assistant", "MAINVISIBLE Done: the order desk handled your request."),
    ]
    seen = browser.execute_script("return window.__seen")
    final = before[1][1]
    partial = {text for text in seen if text and final.startswith(text) and text != final}
    assert len(partial) >= 3, "the answer should appear token by token"
    assert_no_internal(browser)

    send(browser, "What is the status of my order?")
    WebDriverWait(browser, WAIT).until(
        lambda d: len(d.find_elements(By.CSS_SELECTOR, '.tool[data-status="success"]')) == 1
    )
    WebDriverWait(browser, WAIT).until(
        lambda d: len(d.find_elements(By.CSS_SELECTOR, ".msg.assistant.final")) == 4
    )
    wait_status(browser, "idle")
    tool = browser.find_element(By.CSS_SELECTOR, ".tool")
    assert (
        "order_status" in tool.text
        and "PO-1001" in tool.find_element(By.CSS_SELECTOR, ".tool-args").text
    )
    live = conversation(browser)
    assert_no_internal(browser)

    browser.refresh()
    WebDriverWait(browser, WAIT).until(lambda d: len(conversation(d)) == len(live))
    assert conversation(browser) == live
    assert browser.find_elements(By.CSS_SELECTOR, ".interrupt-form") == []
    assert len(browser.find_elements(By.CSS_SELECTOR, "#threads li")) == 1
    browser.execute_script(RECORDER)
    assert_no_internal(browser)


def test_chat_ui_reload_while_waiting_shows_the_form_again(server: str, browser: Any) -> None:
    """A reload during the first interrupt restores the conversation and the pending form."""
    browser.get(server + "/")
    wait_status(browser, "idle")
    send(browser, "I want to buy widgets")
    wait_for(browser, '.interrupt-form[data-type="missing_data"]')
    browser.refresh()
    form = wait_for(browser, '.interrupt-form[data-type="missing_data"]')
    wait_status(browser, "waiting")
    assert conversation(browser) == [("user", "I want to buy widgets")]
    form.find_element(By.CSS_SELECTOR, 'input[name="phone"]').send_keys("1")
    form.find_element(By.CSS_SELECTOR, 'button[data-action="submit"]').click()
    wait_for(browser, '.interrupt-form[data-type="approval"]')


def labelled(driver: Any) -> list[tuple[str, str]]:
    """(source label, text) of every assistant bubble and card, in order."""
    out = []
    for item in driver.find_elements(
        By.CSS_SELECTOR, "#messages > .msg.assistant, #messages > .card"
    ):
        if item.is_displayed():
            out.append(
                (
                    item.find_element(By.CSS_SELECTOR, ".source").text,
                    item.find_element(By.CSS_SELECTOR, ".text").text,
                )
            )
    return out


def test_chat_ui_labels_and_cards_survive_reload(server: str, browser: Any) -> None:
    """The incident answer's source labels and both insight cards are the same after a reload."""
    browser.get(server + "/")
    wait_status(browser, "idle")
    send(browser, "Where is my refund?")
    WebDriverWait(browser, WAIT).until(
        lambda d: len(d.find_elements(By.CSS_SELECTOR, ".msg.assistant.final")) == 2
    )
    wait_status(browser, "idle")
    live = labelled(browser)
    assert [source for source, _ in live] == [
        "knowledge_subgraph",
        "insight_subgraph",
        "insight_subgraph",
        "incident",
    ]
    browser.refresh()
    WebDriverWait(browser, WAIT).until(lambda d: len(labelled(d)) == len(live))
    assert labelled(browser) == live


def test_chat_ui_refused_send_leaves_the_chat_with_a_human_message(
    server: str, browser: Any
) -> None:
    """A message sent while a form waits (409) is taken out of the chat and put back in the box."""
    browser.get(server + "/")
    wait_status(browser, "idle")
    send(browser, "Please create an order")
    wait_for(browser, '.interrupt-form[data-type="missing_data"]')
    wait_status(browser, "waiting")
    send(browser, "hello?")
    error = WebDriverWait(browser, WAIT).until(
        lambda d: d.find_element(By.ID, "error") if d.find_element(By.ID, "error").text else None
    )
    assert error.text == (
        "The assistant is waiting for your answer to its question above; answer it first."
    )
    assert conversation(browser) == [("user", "Please create an order")]
    assert browser.find_element(By.ID, "input").get_attribute("value") == "hello?"
    assert "/resume" not in error.text and "POST" not in error.text


def test_chat_ui_delete_control_removes_the_conversation(server: str, browser: Any) -> None:
    """The delete control of a conversation removes it from the list and clears the chat."""
    browser.get(server + "/")
    wait_status(browser, "idle")
    send(browser, "What is the status of my order?")
    WebDriverWait(browser, WAIT).until(
        lambda d: len(d.find_elements(By.CSS_SELECTOR, "#threads li")) == 1
    )
    wait_status(browser, "idle")
    browser.find_element(By.CSS_SELECTOR, "#threads li .delete").click()
    WebDriverWait(browser, WAIT).until(
        lambda d: d.find_elements(By.CSS_SELECTOR, "#threads li") == []
    )
    assert conversation(browser) == []
    browser.refresh()
    wait_status(browser, "idle")
    assert browser.find_elements(By.CSS_SELECTOR, "#threads li") == []


def test_chat_ui_layout_fits_a_360_px_screen(server: str, browser: Any) -> None:
    """At 360 px wide nothing scrolls sideways and the chat column keeps most of the width."""
    browser.set_window_size(360, 740)
    browser.get(server + "/")
    wait_status(browser, "idle")
    width = browser.execute_script("return document.documentElement.clientWidth")
    assert browser.execute_script("return document.documentElement.scrollWidth") <= width
    main = browser.find_element(By.TAG_NAME, "main").rect
    assert main["width"] >= 0.9 * width
    composer = browser.find_element(By.ID, "input").rect
    assert composer["width"] >= 0.6 * width
    assert browser.find_element(By.ID, "send").is_displayed()
