"""Headless Chromium (Debian's package) driven by Playwright, for the dashboard tests and benchmarks.

Only the driver comes from Playwright; the browser is the system Chromium, so
nothing is downloaded at test time. The flags keep Chromium from reaching for
Google services that a closed network refuses.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from playwright.sync_api import Browser, Page, Playwright, sync_playwright

REPO_ROOT = Path(__file__).resolve().parents[2]
DASHBOARD_DIR = REPO_ROOT / "web" / "dist"
SCREENSHOTS = REPO_ROOT / "artifacts" / "screenshots"

CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]

# Installed into every page before its scripts run: records, per task card, the
# highest version the page ever displayed and any time a card showed a lower one.
VERSION_WATCH = """
(() => {
  const shown = new Map();
  window.__versionRegressions = [];
  window.__versionChanges = [];
  const check = (el) => {
    const id = el.dataset.taskId, v = el.dataset.version;
    if (!id || !v) return;
    const value = BigInt(v);
    const before = shown.get(id);
    if (before !== undefined && value < before) window.__versionRegressions.push({ id, from: String(before), to: v });
    if (before === undefined || value > before) {
      shown.set(id, value);
      window.__versionChanges.push({ id, version: v, at: performance.timeOrigin + performance.now() });
    }
  };
  const scan = () => document.querySelectorAll('article.task[data-task-id]').forEach(check);
  new MutationObserver(scan).observe(document, {
    subtree: true, childList: true, attributes: true, attributeFilter: ['data-version'],
  });
})();
"""


def chromium_path() -> str:
    path = os.environ.get("TASK_OBSERVER_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(path).exists():
        raise RuntimeError("Chromium is missing: apt-get install chromium (./scripts/services install chromium)")
    return path


def require_dashboard() -> Path:
    if not (DASHBOARD_DIR / "index.html").is_file():
        raise RuntimeError("the dashboard is not built: scripts/web build")
    return DASHBOARD_DIR


@contextmanager
def chromium() -> Iterator[tuple[Playwright, Browser]]:
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium_path(), headless=True, args=CHROMIUM_FLAGS)
        try:
            yield playwright, browser
        finally:
            browser.close()


def open_dashboard(browser: Browser, base_url: str, token: str, query: str = "", page: str = "") -> Page:
    """A fresh browser context (its own storage) with the version watch, logged in via the URL fragment
    (``page``: another page of the built site, e.g. ``react.html``)."""
    context = browser.new_context(viewport={"width": 1280, "height": 860})
    context.add_init_script(VERSION_WATCH)
    tab = context.new_page()
    tab.on("console", lambda message: _console(message.type, message.text))
    tab.goto(f"{base_url}/dashboard/{page}{query}#token={token}")
    return tab


def _console(kind: str, text: str) -> None:
    if kind in ("error", "warning"):
        print(f"[browser {kind}] {text}")


def screenshot(page: Page, name: str) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path
