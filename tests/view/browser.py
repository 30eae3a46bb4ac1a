"""Headless Chromium through Selenium for the ``fpipe view`` browser tests and the screenshots
of docs/view.md (``python -m tests.view.browser docs/images``)."""

from __future__ import annotations

import shutil
import sys
import tempfile
import threading
from pathlib import Path

__all__ = ["chromium", "serve", "why_no_browser"]


def why_no_browser() -> str | None:
    """Why the browser tests cannot run here (None: they can)."""
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install selenium)"
    if shutil.which("chromedriver") is None:
        return "chromedriver is not installed (apt-get install chromium chromium-driver)"
    return None


def chromium(width: int = 1200, height: int = 900):
    """A headless Chromium WebDriver that keeps the page's console log."""
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    opts = Options()
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                f"--window-size={width},{height}"):  # fmt: skip
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(options=opts, service=Service(shutil.which("chromedriver")))


def serve(view, cache_dir):
    """A started server of ``view`` (stop it with ``shutdown()``)."""
    from fpipe.view import make_server

    server = make_server(view, cache_dir=cache_dir)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    return server


def _screenshots(out: Path) -> None:
    from fpipe.cli._state import show_envelope
    from fpipe.view import open_target
    from tests.view.helpers import make_view_data
    from tests.view.test_view_server import _plan_state

    out.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp())
    data = make_view_data(tmp / "data")
    state = _plan_state(data["plan"], 22)
    view = open_target(data["plan"], state=state, state_info=show_envelope(state),
                       state_name="ckpt/loader_state.bin")  # fmt: skip
    server = serve(view, tmp / "thumbs")
    driver = chromium()
    try:
        for name, path in (("dataset", "/d/0"), ("sample", "/d/0/s/3"),
                           ("mix", "/mix?from=0&to=60&window=2"), ("step", "/step?step=20"),
                           ("state", "/state")):  # fmt: skip
            driver.get(server.url.rstrip("/") + path)
            driver.save_screenshot(str(out / f"view-{name}.png"))
    finally:
        driver.quit()
        server.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    _screenshots(Path(sys.argv[1] if len(sys.argv) > 1 else "docs/images"))
