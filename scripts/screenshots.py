"""Screenshots of the dashboard's pages for docs/, taken with headless
Chromium (Debian's ``chromium`` and ``chromium-driver``) at a laptop's
width (1366 px) and a phone's (390 px).

    bash scripts/demo.sh --seconds 90 &       # prints the dashboard's address
    .venv/bin/python scripts/screenshots.py http://127.0.0.1:PORT

Writes docs/dashboard-<page>.png (1366 px) and docs/dashboard-<page>-phone.png
(390 px) for the overview, schedules, next-to-run, history, runtime-form and
confirm pages.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any
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
]
#: Suffix of the file name -> (width, height, a phone's layout).
WIDTHS = {"": (1366, 860, False), "-phone": (390, 844, True)}
PAGES = {
    "overview": "/",
    "schedules": "/schedules",
    "next": "/next",
    "history": "/schedule?id=" + quote("report"),
    "runtime-form": "/runtime/new?actor=report",
    "confirm": "/trigger?schedule=heartbeat",
}


def main(base: str) -> int:
    profile = tempfile.mkdtemp(prefix="cron-shots-")
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for flag in [*FLAGS, f"--user-data-dir={profile}"]:
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    try:
        for suffix, (width, height, mobile) in WIDTHS.items():
            _emulate(driver, width, height, mobile)
            for name, path in PAGES.items():
                driver.get(base.rstrip("/") + path)
                wide = driver.execute_script("return document.documentElement.scrollWidth;")
                if wide > width:
                    print(f"warning: {path} is {wide}px wide at {width}px", file=sys.stderr)
                out = DOCS / f"dashboard-{name}{suffix}.png"
                driver.save_screenshot(str(out))
                print(out.relative_to(DOCS.parent))
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)
    return 0


def _emulate(driver: Any, width: int, height: int, mobile: bool) -> None:
    driver.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": mobile},
    )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8080"))
