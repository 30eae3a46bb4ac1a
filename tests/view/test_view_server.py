"""``fpipe view`` without a browser: the server on port 0 in a thread, pages fetched with
http.client; escaping, refused paths and hosts, and the step page against lineage."""

from __future__ import annotations

import html
import http.client
import re
import threading

import pytest

from fpipe.cli._state import show_envelope
from fpipe.cli.main import main
from fpipe.datasets.lineage import step_samples
from fpipe.datasets.plan_config import build_dataset, load_plan_config
from fpipe.view import make_server, open_target
from fpipe.view.server import CSP
from tests.view.helpers import HOSTILE, make_view_data


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return make_view_data(tmp_path_factory.mktemp("view"))


def _plan_state(plan_yaml: str, steps: int) -> bytes:
    """A plan snapshot after ``steps`` steps (what the state page reads)."""
    pd = build_dataset(load_plan_config(plan_yaml), 0)
    state = pd.plan.init()
    for _ in range(steps):
        state, _ = pd.plan.next(state, 1)
    return pd.plan.snapshot(state)


@pytest.fixture(scope="module")
def servers(data, tmp_path_factory):
    cache = tmp_path_factory.mktemp("thumbs")
    state = _plan_state(data["plan"], 22)
    views = {
        "web": open_target(data["web"]),
        "mix": open_target(data["mix"], {"mix_history": data["history"]}),
        "plan": open_target(
            data["plan"], state=state, state_info=show_envelope(state), state_name="s.bin"
        ),
    }
    out = {}
    for name, view in views.items():
        server = make_server(view, cache_dir=cache)
        threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
        out[name] = server
    yield out
    for server in out.values():
        server.shutdown()
        server.server_close()


def _get(server, path: str, host: str | None = None, method: str = "GET"):
    c = http.client.HTTPConnection(*server.server_address[:2], timeout=30)
    headers = {} if host is None else {"Host": host}
    c.request(method, path, headers=headers)
    r = c.getresponse()
    body = r.read()
    c.close()
    return r.status, dict(r.getheaders()), body


PAGES = ["/", "/d/0", "/d/0?page=0", "/d/0/s/3", "/d/1", "/mix", "/mix?from=0&to=40&window=4",
         "/step?step=20", "/step?step=13&rank=1",
         "/find?key=shard-00/00003&from=0&to=30"]  # fmt: skip


@pytest.mark.parametrize("name", ["web", "mix", "plan"])
def test_every_page_answers_with_the_csp(servers, name):
    server = servers[name]
    for path in PAGES:
        if (name == "web" and path.startswith("/d/1")) or (name != "plan" and "rank" in path):
            continue  # one dataset; one rank
        status, headers, body = _get(server, path)
        assert status == 200, (name, path, body[-300:])
        assert headers["Content-Security-Policy"] == CSP
        assert b"<script" not in body.lower()
    status, headers, body = _get(server, "/d/0/s/3/thumb")
    assert status == 200 and headers["Content-Type"] == "image/jpeg" and body[:2] == b"\xff\xd8"


def test_state_page_says_step_and_weights(servers):
    status, _, body = _get(servers["plan"], "/state")
    text = body.decode()
    assert status == 200 and 'href="/step?step=22"' in text
    assert "set online" in text  # the history's change at step 20 is in force at step 22
    assert _get(servers["web"], "/state")[0] == 404  # no --state given


def test_captions_are_escaped(servers):
    for path in ("/d/0", "/d/0/s/3"):
        body = _get(servers["web"], path)[2].decode()
        assert html.escape(HOSTILE) in body
        assert "<img src=x" not in body and "<script>" not in body


@pytest.mark.parametrize(
    "path,status",
    [
        ("/../etc/passwd", 400),
        ("/d/0/s/0/media/..%2F..%2Fetc%2Fpasswd", 400),
        ("/%2Fetc%2Fpasswd", 400),
        ("/d/0/s/0/media/%2Fetc%2Fpasswd", 400),
        ("/d/..", 400),
        ("http://127.0.0.1/etc/passwd", 400),
        ("/etc/passwd", 404),
        ("/d/0/s/0/media/etc", 404),
        ("/d/0/s/0/media/jpg", 404),  # not a media member: never served raw
        ("/d/7", 404),
        ("/d/0/s/12", 404),
        ("/d/0/s/-1", 404),
        ("/step?step=x", 400),
    ],
)
def test_paths_outside_the_target_are_refused(servers, path, status):
    assert _get(servers["web"], path)[0] == status


def test_other_hosts_and_methods_are_refused(servers):
    assert _get(servers["web"], "/", host="evil.example:80")[0] == 400
    assert _get(servers["web"], "/", method="POST")[0] == 501


@pytest.mark.parametrize("step,rank", [(20, None), (13, None), (2, 1)])
def test_step_page_lists_the_keys_lineage_gives(servers, data, step, rank):
    cfg = load_plan_config(data["plan"])
    rows = [r for r in step_samples(cfg, (step, step + 1)) if rank in (None, r["rank"])]
    query = f"/step?step={step}" + ("" if rank is None else f"&rank={rank}")
    body = _get(servers["plan"], query)[2].decode()
    keys = re.findall(r'<span class="key">([^<]*)</span>', body)
    assert keys == [html.escape(r["key"]) for r in rows] and keys
    assert ("SKIPPED" in body) == (12 <= step < 15)


def test_view_help_has_an_example(capsys):
    with pytest.raises(SystemExit):
        main(["view", "--help"])
    assert "fpipe view data/coco" in capsys.readouterr().out


def test_a_sample_page_cooks_one_sample_at_a_time(data, monkeypatch):
    """The pages' threads share the plan's materializer (its open datasets, its caches are one
    worker's): a sample is cooked under the view's lock, as its datasets are opened."""
    from fpipe.view.dataset_pages import _cooked

    view = open_target(data["plan"])
    mat = view.planned().materializer
    real, held = mat.sample, []

    def sample(*args):
        held.append(view._lock.locked())
        return real(*args)

    monkeypatch.setattr(mat, "sample", sample)
    page = _cooked(view, 0, 3)
    assert held == [True] and "warn" not in page
