"""HTML of ``fpipe view``'s pages: one layout, one stylesheet, and the helpers that put values
into markup.

Every value that comes from a dataset, a config or a request (a caption, a key, a field value,
a dataset name) goes through :func:`esc` (``html.escape`` with quotes) or :func:`url` before it
reaches a page; pages are built from these helpers only. The pages hold no script and no inline
style: the server's Content-Security-Policy forbids both, so a dataset's text can never run as
script even where escaping were forgotten.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import quote, urlencode

__all__ = ["CSS", "FAVICON", "esc", "page", "table", "text_excerpt", "url"]

#: The stylesheet, served as ``/view.css`` (a file of its own: the CSP allows no inline style).
CSS = """\
body{font:14px/1.4 system-ui,sans-serif;margin:0;color:#1a1a1a;background:#fafafa}
header{background:#263238;color:#fff;padding:8px 16px}
header a{color:#cfd8dc;margin-right:14px;text-decoration:none}
header a.here{color:#fff;font-weight:600}
main{padding:12px 16px}
h1{font-size:20px;margin:4px 0 12px}h2{font-size:16px;margin:18px 0 8px}
table{border-collapse:collapse;margin:4px 0 12px}
td,th{border:1px solid #ddd;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#eceff1}
.grid{display:flex;flex-wrap:wrap;gap:10px}
.cell{width:210px;background:#fff;border:1px solid #ddd;padding:6px;overflow:hidden}
.cell img{display:block;max-width:200px;max-height:160px;margin:4px auto}
.key{font-family:monospace;font-size:12px;word-break:break-all}
.dim{color:#666;font-size:12px}
.text{white-space:pre-wrap;word-break:break-word;font-size:13px}
pre{white-space:pre-wrap;word-break:break-word;background:#fff;border:1px solid #ddd;padding:6px}
.warn{background:#fff3e0;border:1px solid #ffb74d;padding:6px 10px}
.skipped{background:#ffebee}
form{margin:6px 0 12px}input{margin-right:8px}
.pager a{margin-right:10px}
video,audio{max-width:480px;display:block;margin:6px 0}
svg{background:#fff;border:1px solid #ddd}
"""

#: The page icon, served as ``/favicon.svg`` (so a browser does not ask for a missing one).
FAVICON = (
    '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 16 16">'
    '<rect width="16" height="16" rx="3" fill="#263238"/>'
    '<path d="M4 4h8M4 8h6M4 12h4" stroke="#fff" stroke-width="2"/></svg>'
)


def esc(value: Any) -> str:
    """``value`` as text safe inside an element or a quoted attribute.

    >>> esc('<img src=x onerror="alert(1)">')
    '&lt;img src=x onerror=&quot;alert(1)&quot;&gt;'
    """
    return html.escape(str(value), quote=True)


def url(path: str, **query: Any) -> str:
    """A link to ``path`` with ``query`` (None values left out), escaped for an attribute;
    ``path`` is made of fixed words and numbers, query values are percent-encoded.

    >>> url("/find", key="a/b&c", steps=None)
    '/find?key=a%2Fb%26c'
    """
    q = urlencode({k: v for k, v in query.items() if v is not None}, quote_via=quote)
    return esc(f"{path}?{q}" if q else path)


def table(head: Iterable[str], rows: Iterable[Iterable[Any]], *, raw: bool = False) -> str:
    """An HTML table; cells are escaped unless ``raw`` (cells already made with these
    helpers)."""
    cell = (lambda v: str(v)) if raw else esc
    out = ["<table><tr>", *(f"<th>{esc(h)}</th>" for h in head), "</tr>"]
    for row in rows:
        out.append("<tr>" + "".join(f"<td>{cell(v)}</td>" for v in row) + "</tr>")
    out.append("</table>")
    return "".join(out)


def text_excerpt(data: bytes | str, limit: int = 300) -> str:
    """The start of a text member, whitespace kept, ``…`` when cut (not escaped)."""
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    return text if len(text) <= limit else text[:limit] + "…"


_NAV = (("/", "overview"), ("/mix", "mix"), ("/step", "step"), ("/find", "find"))


def page(title: str, body: str, *, here: str = "", links: Mapping[str, str] | None = None) -> str:
    """A whole page: header with the navigation, ``title`` (escaped) and ``body`` (markup)."""
    nav = dict(_NAV)
    nav.update(links or {})
    items = "".join(
        f'<a href="{esc(href)}"{" class=here" if href == here else ""}>{esc(name)}</a>'
        for href, name in nav.items()
    )
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        f"<title>{esc(title)} · fpipe view</title>"
        '<link rel=stylesheet href="/view.css"><link rel=icon href="/favicon.svg"></head>'
        f"<body><header>{items}</header><main><h1>{esc(title)}</h1>{body}</main></body></html>"
    )
