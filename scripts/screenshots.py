"""Screenshots of the dashboard's pages for docs/, taken with headless
Chromium (Debian's ``chromium`` and ``chromium-driver``).

    bash scripts/demo.sh --seconds 60 &       # prints the dashboard's address
    .venv/bin/python scripts/screenshots.py http://127.0.0.1:PORT

Writes docs/dashboard-overview.png, -schedules.png, -history.png and
-runtime-form.png.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path
from urllib.parse import quote

from selenium import webdriver
from selenium.webdriver.chrome.service import Service

DOCS = Path(__file__).resolve().parents[1] / "docs"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1400,860",
]


def main(base: str) -> int:
    profile = tempfile.mkdtemp(prefix="cron-shots-")
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for flag in [*FLAGS, f"--user-data-dir={profile}"]:
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    try:
        pages = {
            "overview": "/",
            "schedules": "/schedules",
            "history": "/schedule?id=" + quote("heartbeat/* * * * * *@UTC"),
            "runtime-form": "/runtime/new?actor=report",
        }
        for name, path in pages.items():
            driver.get(base.rstrip("/") + path)
            driver.save_screenshot(str(DOCS / f"dashboard-{name}.png"))
            print(f"docs/dashboard-{name}.png")
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8080"))
