"""The operator console in a real browser: Debian's headless chromium, driven by selenium through chromedriver.

One browser and one `memvault serve` for the module (CI's time budget). The tests skip, saying
why, when chromium, chromedriver or selenium is missing, except in CI (CI=true), where a missing
browser fails: there the console must have been seen working in a browser.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

import pytest
from console_support import (
    ACME,
    ADMIN_TOKEN,
    INJECTION_DIGEST,
    NARROW_TOKEN,
    OTHER,
    OTHER_SECRET,
    SUBJECT,
    browser_binaries,
    browser_login,
    follow,
    start_chromium,
    start_console_service,
)
from httpremote_support import ServerProcess


def _binaries() -> tuple[str, str]:
    found = browser_binaries()
    if isinstance(found, str):
        if os.environ.get("CI", "").lower() in ("true", "1", "yes"):
            pytest.fail(f"CI runs the console's browser tests: {found}")
        pytest.skip(found)
    return found


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    server = start_console_service(tmp_path_factory.mktemp("console-browser"))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def driver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    chromium, chromedriver = _binaries()
    started = time.monotonic()
    browser = start_chromium(chromium, chromedriver, tmp_path_factory.mktemp("chromium-profile"))
    browser.set_page_load_timeout(30)
    print(f"chromium started in {time.monotonic() - started:.1f} s")
    yield browser
    browser.quit()


@pytest.fixture
def url(service: ServerProcess) -> str:
    return service.url


def _by() -> Any:
    from selenium.webdriver.common.by import By

    return By


def _not_executed(driver: Any) -> None:
    """Nothing the stored payloads would do has happened in the page."""
    assert driver.execute_script("return typeof window.__pwned") == "undefined"
    assert "pwned" not in driver.title


def _csp_reports(driver: Any) -> list[str]:
    return [e["message"] for e in driver.get_log("browser") if "Content Security Policy" in e["message"]]


def test_log_in_and_find_a_memory_by_search(driver: Any, url: str) -> None:
    by = _by()
    browser_login(driver, url, ADMIN_TOKEN)
    workspaces = [a.text for a in driver.find_elements(by.CSS_SELECTOR, "#workspaces a")]
    assert {ACME, OTHER} <= set(workspaces)
    follow(driver, driver.find_element(by.LINK_TEXT, ACME))
    labels = [a.text for a in driver.find_elements(by.CSS_SELECTOR, "a.doc")]
    assert {"AGENT.md", f"peers/{SUBJECT}.md", "peers/mallory.md"} <= set(labels)
    follow(driver, driver.find_element(by.PARTIAL_LINK_TEXT, "search it"))
    driver.find_element(by.ID, "q").send_keys("green tea")
    follow(driver, driver.find_element(by.ID, "search"))
    rows = driver.find_elements(by.CSS_SELECTOR, "#hits tbody tr")
    assert rows, driver.page_source
    cells = [c.text for c in rows[0].find_elements(by.TAG_NAME, "td")]
    assert cells[3] == "AGENT.md"
    assert float(cells[0]) > 0
    assert "green tea" in cells[5]
    follow(driver, rows[0].find_element(by.LINK_TEXT, "AGENT.md"))
    assert "Likes green tea in the morning." in driver.find_element(by.ID, "body").text


def test_stored_script_img_and_javascript_links_never_execute(driver: Any, url: str) -> None:
    by = _by()
    browser_login(driver, url, ADMIN_TOKEN)
    driver.get_log("browser")  # start from an empty log
    driver.get(f"{url}/console/w/{ACME}/doc?agent=support&label=peers/mallory.md")
    body = driver.find_element(by.ID, "body").text
    assert "<script>document.title='pwned-script'" in body  # shown, as text
    assert "<img src=x onerror=" in body
    assert driver.find_elements(by.CSS_SELECTOR, "main img, main svg, main script") == []
    assert [a for a in driver.find_elements(by.TAG_NAME, "a") if "javascript" in (a.get_attribute("href") or "")] == []
    _not_executed(driver)
    for path in (
        f"/console/w/{ACME}/search?agent=support&q=pwned+onerror+javascript+svg",
        f"/console/w/{ACME}/quarantine",
        f"/console/w/{ACME}/quarantine/{INJECTION_DIGEST}",
    ):
        driver.get(url + path)
        assert driver.find_elements(by.CSS_SELECTOR, "main img, main svg, main script") == [], path
        _not_executed(driver)
    # Nothing was even blocked: the payloads never reached the DOM as markup, so the CSP had nothing to stop.
    assert _csp_reports(driver) == []
    # And the CSP is in force behind the escaping: an inline script put into the page does not run.
    driver.execute_script(
        "var s = document.createElement('script'); s.textContent = 'window.__pwned = \"inline\"';"
        "document.body.appendChild(s);"
    )
    _not_executed(driver)
    reports: list[str] = []
    deadline = time.monotonic() + 10
    while not reports and time.monotonic() < deadline:  # the browser log fills asynchronously
        reports += _csp_reports(driver)
        time.sleep(0.1)
    assert reports, "the browser did not report the inline script it refused"


def test_review_and_delete_a_quarantine_copy(driver: Any, url: str) -> None:
    by = _by()
    browser_login(driver, url, ADMIN_TOKEN)
    driver.get(f"{url}/console/w/{ACME}")
    follow(driver, driver.find_element(by.LINK_TEXT, "Quarantine"))
    rows = driver.find_elements(by.CSS_SELECTOR, "#copies tbody tr")
    row = next(r for r in rows if "Ignore all previous instructions" in r.text)
    assert "instruction_override" in row.text
    assert "ignore_previous" in row.text
    assert "agent support" in row.text
    follow(driver, row.find_element(by.LINK_TEXT, "review"))
    assert INJECTION_DIGEST in driver.page_source
    follow(driver, driver.find_element(by.ID, "delete"))
    assert "Deleted 1 copy" in driver.find_element(by.ID, "notice").text
    assert INJECTION_DIGEST not in driver.page_source
    driver.get(f"{url}/console/w/{ACME}/quarantine/{INJECTION_DIGEST}")
    assert driver.find_element(by.TAG_NAME, "h1").text == "404"


def test_erase_a_subject_and_see_the_proof(driver: Any, url: str) -> None:
    by = _by()
    browser_login(driver, url, ADMIN_TOKEN)
    driver.get(f"{url}/console/w/{ACME}")
    follow(driver, driver.find_element(by.LINK_TEXT, "Erase a subject"))
    driver.find_element(by.ID, "subject").send_keys(SUBJECT)
    follow(driver, driver.find_element(by.ID, "erase"))
    status = driver.find_element(by.ID, "erasure-status").text
    assert status.startswith(("COMPLETE", "PENDING")), status
    assert driver.find_element(by.ID, "removed").text == "1"
    assert driver.find_element(by.ID, "left-documents").text == "0"
    assert driver.find_element(by.ID, "left-copies").text == "0"
    assert f"peers/{SUBJECT}.md" in driver.find_element(by.ID, "proof").text
    follow(driver, driver.find_element(by.LINK_TEXT, "Documents"))
    labels = [a.text for a in driver.find_elements(by.CSS_SELECTOR, "a.doc")]
    assert f"peers/{SUBJECT}.md" not in labels
    assert "AGENT.md" in labels


def test_a_token_bound_to_one_workspace_never_sees_another(driver: Any, url: str) -> None:
    by = _by()
    browser_login(driver, url, NARROW_TOKEN)
    assert [a.text for a in driver.find_elements(by.CSS_SELECTOR, "#workspaces a")] == [ACME]
    for path in (
        f"/console/w/{OTHER}",
        f"/console/w/{OTHER}/doc?agent=support&label=AGENT.md",
        f"/console/w/{OTHER}/search?agent=support&q=launch",
        f"/console/w/{OTHER}/quarantine",
    ):
        driver.get(url + path)
        assert driver.find_element(by.TAG_NAME, "h1").text == "403", path
        assert OTHER_SECRET not in driver.page_source
    driver.get(f"{url}/console/w/{ACME}/search?agent=support&q=launch+code")
    assert driver.find_element(by.ID, "hit-count").text == "0 hits"
    assert OTHER_SECRET not in driver.page_source


def test_logging_out_closes_the_console(driver: Any, url: str) -> None:
    by = _by()
    browser_login(driver, url, ADMIN_TOKEN)
    follow(driver, driver.find_element(by.ID, "logout"))
    assert driver.current_url.endswith("/console/login")
    driver.get(f"{url}/console/w/{ACME}")
    assert driver.current_url.endswith("/console/login")
    assert driver.find_elements(by.ID, "token")
