"""Screenshots of the operator console's main pages, for docs/operators/console.md.

    python plugins/http-remote/tests/console_screenshots.py [OUTPUT_DIR]

Starts a `memvault serve` over the browser tests' seeded store, drives headless chromium
through the pages an operator uses, and writes console-<page>.png (default OUTPUT_DIR:
docs/operators/img). Needs what the browser tests need (chromium, chromedriver, selenium).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from console_support import (  # noqa: E402 - the tests' helpers, importable once HERE is on the path
    ACME,
    ADMIN_TOKEN,
    SUBJECT,
    browser_binaries,
    browser_login,
    follow,
    start_chromium,
    start_console_service,
)


def main(out: Path) -> None:
    found = browser_binaries()
    if isinstance(found, str):
        raise SystemExit(found)
    from selenium.webdriver.common.by import By

    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        server = start_console_service(root)
        driver = start_chromium(*found, root / "profile")
        try:
            url = server.url

            def shot(name: str) -> None:
                path = out / f"console-{name}.png"
                driver.save_screenshot(str(path))
                print(f"wrote {path}")

            driver.get(url + "/console/login")
            shot("login")
            browser_login(driver, url, ADMIN_TOKEN)
            driver.get(f"{url}/console/w/{ACME}")
            shot("documents")
            driver.get(f"{url}/console/w/{ACME}/search?agent=support&q=green+tea+peanuts")
            shot("search")
            driver.get(f"{url}/console/w/{ACME}/quarantine")
            shot("quarantine")
            driver.get(f"{url}/console/w/{ACME}/erase")
            driver.find_element(By.ID, "subject").send_keys(SUBJECT)
            follow(driver, driver.find_element(By.ID, "erase"))
            shot("erasure")
            driver.get(url + "/console/health")
            shot("health")
        finally:
            driver.quit()
            server.stop()


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE.parents[2] / "docs" / "operators" / "img")
