"""``fpipe view`` in headless Chromium (opt-in: ``-m integration``): thumbnails load, the plot
renders, no console errors, a hostile caption does not run, and a page of a 10^6-sample dataset
loads in under a second."""

from __future__ import annotations

import time

import pytest

from fpipe.view import open_target
from tests.view.browser import chromium, serve, why_no_browser
from tests.view.helpers import HOSTILE, make_view_data

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(why_no_browser() is not None, reason=str(why_no_browser())),
]


@pytest.fixture(scope="module")
def driver():
    try:
        d = chromium()
    except Exception as e:  # noqa: BLE001 - a browser that does not start: say why
        pytest.skip(f"headless Chromium did not start: {e}")
    yield d
    d.quit()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    data = make_view_data(tmp_path_factory.mktemp("view"))
    s = serve(open_target(data["plan"]), tmp_path_factory.mktemp("thumbs"))
    yield s
    s.shutdown()


@pytest.fixture(scope="module")
def big_server(tmp_path_factory):
    """A dataset of 10^6 text samples (one Parquet file, indexed in place)."""
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    from fpipe.storage import prepare_dataset

    root = tmp_path_factory.mktemp("big")
    n = 1_000_000
    table = pa.table(
        {"text": [f"caption {i}" for i in range(n)], "tokens": [i % 50 for i in range(n)]}
    )
    pq.write_table(table, root / "part-0.parquet", row_group_size=50_000)
    prepare_dataset(root, fields={"text": "text"}, sample_type="TextSample")
    s = serve(open_target(str(root)), tmp_path_factory.mktemp("thumbs"))
    yield s
    s.shutdown()


def _open(driver, server, path: str) -> None:
    driver.get_log("browser")  # drop earlier entries
    driver.get(server.url.rstrip("/") + path)


def _errors(driver) -> list:
    return [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def test_thumbnails_load_without_console_errors(driver, server):
    for path in ("/d/0", "/step?step=20", "/d/0/s/3"):
        _open(driver, server, path)
        widths = driver.execute_script(
            "return Array.from(document.images).map(i => i.complete ? i.naturalWidth : -1)"
        )
        assert widths and all(w > 0 for w in widths), (path, widths)
        assert _errors(driver) == [], path


def test_mix_plot_renders(driver, server):
    _open(driver, server, "/mix?from=0&to=60&window=2")
    plots = driver.find_elements("css selector", "svg.plot")
    assert len(plots) == 2  # samples and tokens
    assert all(p.size["width"] > 100 and p.size["height"] > 100 for p in plots)
    assert len(plots[0].find_elements("css selector", "rect")) > 10
    assert plots[0].find_elements("css selector", "rect.skip")  # the skip range is marked
    assert _errors(driver) == []


def test_hostile_caption_is_text(driver, server):
    from selenium.common.exceptions import NoAlertPresentException

    for path in ("/d/0", "/d/0/s/3"):
        _open(driver, server, path)
        with pytest.raises(NoAlertPresentException):
            driver.switch_to.alert.text  # noqa: B018 - an alert would mean the caption ran
        assert HOSTILE in driver.find_element("tag name", "body").text
        assert driver.find_elements("css selector", "img[src='x']") == []


def test_page_of_a_million_samples_loads_in_under_a_second(driver, big_server):
    for path in ("/d/0", "/d/0?page=40000", "/step?step=41000", "/mix"):
        start = time.perf_counter()
        _open(driver, big_server, path)
        elapsed = time.perf_counter() - start
        assert elapsed < 1.0, (path, elapsed)
        assert _errors(driver) == []
