"""The web server of ``fpipe view``: the standard library's ``ThreadingHTTPServer``, read-only,
answering GET and HEAD only.

What a request may name is fixed here: a dataset by its number in the target, a sample by its
index, a member by its name among that sample's members, and query values that are numbers or a
sample key. A path segment that is ``.`` or ``..`` or holds a slash, backslash or NUL is refused
(400) before any routing; nothing of a request is ever joined to a file path. Every response
carries a Content-Security-Policy that allows no script and no inline style, so a dataset's text
cannot run in the page. Requests doing work wait for one of :data:`MAX_BUSY` slots (memory and
CPU stay bounded); plan scans and decoding have limits of their own (see
:mod:`fpipe.view.plan_pages`, :mod:`fpipe.view.media`).
"""

from __future__ import annotations

import dataclasses
import re
import sys
import threading
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from fpipe.core.errors import BadSampleError, ConfigError, FpipeError
from fpipe.view import dataset_pages, plan_pages
from fpipe.view.html import CSS, FAVICON, esc, page
from fpipe.view.media import MEDIA_TYPES, check_size, placeholder_png, thumbnail
from fpipe.view.target import ViewTarget

__all__ = ["CSP", "MAX_BUSY", "Response", "ViewServer", "make_server", "route"]

#: The Content-Security-Policy of every response: only this server's own images, media and
#: stylesheet; no script at all, no inline style, no framing.
CSP = (
    "default-src 'none'; img-src 'self'; media-src 'self'; style-src 'self'; "
    "form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)
#: Requests doing work at once; the others wait (up to :data:`_WAIT_S` seconds, then 503).
MAX_BUSY = 4
_WAIT_S = 60.0
_NUMBER = re.compile(r"[0-9]{1,12}")


@dataclasses.dataclass(frozen=True)
class Response:
    status: int
    body: bytes
    content_type: str = "text/html; charset=utf-8"
    headers: tuple[tuple[str, str], ...] = ()


class BadRequest(Exception):
    """A request that names nothing this server serves in a valid form (400)."""


class NotFound(Exception):
    """A request for something the target does not hold (404)."""


def _html(text: str) -> Response:
    return Response(200, text.encode("utf-8"), headers=(("Cache-Control", "no-store"),))


def _number(text: str | None, what: str, *, default: int | None = None) -> int | None:
    if text is None or text == "":
        return default
    if not _NUMBER.fullmatch(text):
        raise BadRequest(f"{what} must be a number, got {text!r}")
    return int(text)


def _segments(target: str) -> tuple[list[str], dict[str, str]]:
    """The decoded path segments and the query of a request target; BadRequest for anything
    but an origin-form path (``/a/b?x=1``) without dot segments, slashes or NULs inside."""
    if not target.startswith("/") or target.startswith("//"):
        raise BadRequest("the request target must be a path starting with one '/'")
    parts = urlsplit(target)
    segs = [unquote(s) for s in parts.path.split("/")[1:]]
    for s in segs:
        if s in (".", "..") or any(c in s for c in "/\\\0"):
            raise BadRequest("path segments may not be '.', '..' or hold '/', '\\' or NUL")
    try:
        q = parse_qs(parts.query, max_num_fields=16, strict_parsing=False)
    except ValueError as e:
        raise BadRequest(str(e)) from None
    return [s for s in segs if s != ""], {k: v[-1] for k, v in q.items()}


def _sample(view: ViewTarget, n_text: str, i_text: str) -> tuple[int, int]:
    """Dataset number and sample index from path segments; NotFound when out of range."""
    if not (_NUMBER.fullmatch(n_text) and _NUMBER.fullmatch(i_text)):
        raise NotFound("no such sample")
    n, i = int(n_text), int(i_text)
    if n >= len(view.names) or i >= len(view.dataset(n)):
        raise NotFound("no such sample")
    return n, i


def _media(view: ViewTarget, n: int, i: int, member: str) -> Response:
    """A member of a sample, raw, for ``<video>`` / ``<audio>``: only a member the sample
    holds, of a media type in :data:`~fpipe.view.media.MEDIA_TYPES`."""
    from fpipe.decode.extensions import last_part

    ctype = MEDIA_TYPES.get(last_part(member))
    if ctype is None:
        raise NotFound("not a media member")
    ds = view.dataset(n)
    check_size(ds, i)
    raw = ds.read(i)
    if member not in raw:
        raise NotFound("no such member")
    return Response(200, raw[member], ctype, (("Cache-Control", "max-age=3600"),))


def route(view: ViewTarget, target: str, cache_dir: Path | None = None) -> Response:  # noqa: C901 - one table of routes
    """The response to GET ``target`` (path and query); raises BadRequest or NotFound."""
    segs, q = _segments(target)
    head = segs[0] if segs else ""
    if not segs:
        return _html(dataset_pages.overview_page(view))
    if segs == ["view.css"]:
        return Response(200, CSS.encode(), "text/css; charset=utf-8")
    if segs == ["favicon.svg"]:
        return Response(200, FAVICON.encode(), "image/svg+xml")
    if head == "d" and len(segs) == 2:
        if not _NUMBER.fullmatch(segs[1]) or int(segs[1]) >= len(view.names):
            raise NotFound("no such dataset")
        page_no = _number(q.get("page"), "page", default=0)
        return _html(dataset_pages.dataset_page(view, int(segs[1]), q.get("split"), page_no or 0))
    if head == "d" and len(segs) >= 4 and segs[2] == "s":
        n, i = _sample(view, segs[1], segs[3])
        rest = segs[4:]
        if not rest:
            return _html(dataset_pages.sample_page(view, n, i))
        if rest == ["thumb"]:
            data = thumbnail(view.dataset(n), i, cache_dir)
            if data is None:
                return Response(200, placeholder_png(), "image/png")
            return Response(200, data, "image/jpeg", (("Cache-Control", "max-age=3600"),))
        if len(rest) == 2 and rest[0] == "media":
            return _media(view, n, i, rest[1])
        raise NotFound("no such page")
    if segs == ["mix"]:
        a, b = _number(q.get("from"), "from"), _number(q.get("to"), "to")
        return _html(plan_pages.mix_page(view, a, b, _number(q.get("window"), "window")))
    if segs == ["step"]:
        step = _number(q.get("step"), "step", default=0) or 0
        return _html(plan_pages.step_page(view, step, _number(q.get("rank"), "rank")))
    if segs == ["find"]:
        a, b = _number(q.get("from"), "from"), _number(q.get("to"), "to")
        key, dataset = q.get("key"), q.get("dataset")
        return _html(plan_pages.find_page(view, key, dataset, a, b))
    if segs == ["state"]:
        if view.state is None:
            raise NotFound("no saved state was given (fpipe view TARGET --state FILE)")
        return _html(plan_pages.state_page(view))
    raise NotFound("no such page")


def _error(status: int, title: str, message: str) -> Response:
    body = page(f"{status} {title}", f"<p>{esc(message)}</p>").encode()
    return Response(status, body, headers=(("Cache-Control", "no-store"),))


class ViewServer(ThreadingHTTPServer):
    """The server: a :class:`ViewTarget`, a thumbnail cache folder, the hosts it answers."""

    daemon_threads = True

    def __init__(
        self,
        address: tuple[str, int],
        view: ViewTarget,
        cache_dir: Path | None,
        *,
        allowed_hosts: Callable[[int], set[str]] | None = None,
        log: bool = False,
    ):
        super().__init__(address, _Handler)
        self.view = view
        self.cache_dir = cache_dir
        self.busy = threading.BoundedSemaphore(MAX_BUSY)
        self.log = log
        port = self.server_address[1]
        self.hosts = None if allowed_hosts is None else allowed_hosts(port)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}/"


def _local_hosts(port: int) -> set[str]:
    """The Host headers a server bound to 127.0.0.1 answers (a DNS-rebinding guard: a page of
    another site that resolves its own name to 127.0.0.1 gets 400)."""
    return {f"{h}:{port}" for h in ("127.0.0.1", "localhost")} | {"127.0.0.1", "localhost"}


class _Handler(BaseHTTPRequestHandler):
    server: ViewServer
    server_version = "fpipe-view"
    sys_version = ""
    timeout = 30  # seconds a connection may stay idle (slow clients)

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self._answer(send_body=True)

    def do_HEAD(self) -> None:  # noqa: N802
        self._answer(send_body=False)

    def _respond(self) -> Response:
        hosts = self.server.hosts
        if hosts is not None and self.headers.get("Host", "") not in hosts:
            return _error(400, "Bad Request", "unexpected Host header")
        if not self.server.busy.acquire(timeout=_WAIT_S):
            return _error(503, "Busy", "the server is busy; try again")
        try:
            return route(self.server.view, self.path, self.server.cache_dir)
        except BadRequest as e:
            return _error(400, "Bad Request", str(e))
        except (NotFound, IndexError, KeyError) as e:
            return _error(404, "Not Found", str(e))
        except BadSampleError as e:
            return _error(422, "Refused", str(e))
        except (ConfigError, FpipeError) as e:
            return _error(400, "Bad Request", str(e))
        except Exception as e:  # noqa: BLE001 - one page's failure must not stop the server
            print(f"fpipe view: error on {self.path!r}: {e!r}", file=sys.stderr)
            return _error(500, "Error", f"{type(e).__name__}: {e}")
        finally:
            self.server.busy.release()

    def _answer(self, send_body: bool) -> None:
        r = self._respond()
        body, status, extra = r.body, r.status, dict(r.headers)
        rng = self.headers.get("Range", "")
        if (
            status == 200
            and rng.startswith("bytes=")
            and r.content_type.startswith(("video", "audio"))
        ):
            body, status, extra = _ranged(body, rng[6:], extra)
        self.send_response(status)
        self.send_header("Content-Type", r.content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Content-Security-Policy", CSP)
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Referrer-Policy", "no-referrer")
        self.send_header("X-Frame-Options", "DENY")
        for k, v in extra.items():
            self.send_header(k, v)
        self.end_headers()
        if send_body:
            self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's name
        if self.server.log:
            super().log_message(format, *args)


def _ranged(body: bytes, spec: str, extra: Mapping[str, str]) -> tuple[bytes, int, dict]:
    """One byte range ``a-b`` / ``a-`` / ``-n`` of ``body`` (206), for seeking in media."""
    out = dict(extra)
    out["Accept-Ranges"] = "bytes"
    m = re.fullmatch(r"(\d*)-(\d*)", spec.strip())
    n = len(body)
    if m is None or m.group(0) == "-":
        return body, 200, out
    a, b = m.groups()
    start, end = (n - int(b), n - 1) if a == "" else (int(a), min(int(b) if b else n - 1, n - 1))
    if start < 0 or start >= n or end < start:
        out["Content-Range"] = f"bytes */{n}"
        return b"", 416, out
    out["Content-Range"] = f"bytes {start}-{end}/{n}"
    return body[start : end + 1], 206, out


def make_server(
    view: ViewTarget,
    *,
    host: str | None = None,
    port: int = 0,
    cache_dir: str | Path | None = None,
    log: bool = False,
) -> ViewServer:
    """A server of ``view`` on ``host`` (default 127.0.0.1, then only Host headers naming this
    machine are answered) and ``port`` (0: a free one); call ``serve_forever()`` on it (in a
    thread of your own if you like) and ``shutdown()`` to stop."""
    cache = None if cache_dir is None else Path(cache_dir)
    hosts = _local_hosts if host is None else None
    return ViewServer((host or "127.0.0.1", port), view, cache, allowed_hosts=hosts, log=log)
