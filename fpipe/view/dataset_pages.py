"""The overview, dataset and sample pages of ``fpipe view``.

A dataset page reads the index (counts, splits, columns) and the members of the samples on its
page only; thumbnails are separate requests, made once and cached. A sample page shows every
member and the sample as the TaskEncoder receives it (cooked by the plan's materializer).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any
from urllib.parse import quote

import numpy as np

from fpipe.core.errors import FpipeError
from fpipe.view.html import esc, page, table, text_excerpt, url
from fpipe.view.media import check_size, member_kind
from fpipe.view.target import ViewTarget

__all__ = ["PAGE_SIZE", "dataset_page", "member_kinds", "overview_page", "sample_page"]

#: Samples per page of a dataset grid.
PAGE_SIZE = 24


def _token_column(ds) -> str | None:
    names = ds.column_names
    return next((c for c in names if c == "tokens"), None) or next(
        (c for c in names if c.endswith(".tokens")), None
    )


@functools.lru_cache(maxsize=64)
def _kinds_of(ds) -> frozenset[str]:
    try:
        return frozenset(member_kind(e) for e in ds.read(0)) if len(ds) else frozenset()
    except (FpipeError, OSError):
        return frozenset()


def member_kinds(view: ViewTarget, n: int) -> frozenset[str]:
    """The kinds of members (``image``, ``video``, ``audio``, ``text``) of dataset ``n``'s
    samples, from its first sample (read once)."""
    return _kinds_of(view.dataset(n))


def has_picture(view: ViewTarget, n: int) -> bool:
    return bool({"image", "video"} & member_kinds(view, n))


def _plan_rows(view: ViewTarget) -> list[tuple[str, Any]]:
    cfg = view.cfg
    if cfg is None:
        return [("plan", f"none: {view.plan_error}")]
    o = cfg.options
    rows: list[tuple[str, Any]] = [("world size", cfg.world_size), ("split", o.split)]
    for name in ("batch_size", "global_batch_size", "rampup_batch_size", "seed",
                 "shuffle_buffer_size", "num_epochs", "skip_steps", "blend_unit"):  # fmt: skip
        v = getattr(o, name, None)
        if v is not None and v != ():
            rows.append((name, v))
    if cfg.mix_history:
        rows.append(("mix history", cfg.mix_history))
    if view.plan_note:
        rows.append(("note", view.plan_note))
    return rows


def overview_page(view: ViewTarget) -> str:
    rows = []
    for n, name in enumerate(view.names):
        ds = view.dataset(n)
        rows.append(
            (
                f'<a href="{url(f"/d/{n}")}">{esc(name)}</a>',
                esc(ds.path),
                esc(ds.layout),
                len(ds),
                len(ds.shards),
            )
        )
    body = "<h2>Datasets</h2>" + table(
        ("dataset", "path", "layout", "samples", "shards"), rows, raw=True
    )
    body += "<h2>Plan</h2>" + table(("", ""), _plan_rows(view))
    if view.state is not None:
        body += f'<p><a href="/state">saved state: {esc(view.state_name)}</a></p>'
    return page(f"fpipe view: {view.where}", body, here="/", links=_links(view))


def _links(view: ViewTarget) -> dict[str, str]:
    return {"/state": "state"} if view.state is not None else {}


@functools.lru_cache(maxsize=256)
def _split(ds, split: str) -> np.ndarray:
    return np.asarray(ds.split_indices(split))


def _split_of(ds, split: str | None) -> tuple[str, np.ndarray]:
    names = ds.split_names
    if not names:
        return "", np.arange(len(ds))
    split = split if split in names else ("train" if "train" in names else names[0])
    return split, _split(ds, split)


@functools.lru_cache(maxsize=64)
def _column_summary(ds) -> list[tuple[str, str, str, str]]:
    rows = []
    for name in ds.column_names:
        col = np.asarray(ds.column(name))
        if col.size and col.dtype.kind in "iuf":
            rows.append((name, f"{col.min():g}", f"{np.median(col):g}", f"{col.max():g}"))
    return rows


def dataset_page(view: ViewTarget, n: int, split: str | None, page_no: int) -> str:
    """Counts, splits, fields and columns of dataset ``n``, and page ``page_no`` of a grid of
    its samples."""
    ds = view.dataset(n)
    split, indices = _split_of(ds, split)
    pages = max(1, -(-len(indices) // PAGE_SIZE))
    page_no = min(max(page_no, 0), pages - 1)
    info = [
        ("path", ds.path),
        ("layout", ds.layout),
        ("samples", len(ds)),
        ("shards", len(ds.shards)),
        ("sample type", ds.config.sample_type or "(crude)"),
        ("fields", ", ".join(f"{k}={v}" for k, v in dict(ds.config.field_map or {}).items())),
        ("member kinds", ", ".join(sorted(member_kinds(view, n)))),
    ]
    body = table(("", ""), info)
    if ds.split_names:
        links = " ".join(
            f'<a href="{url(f"/d/{n}", split=s)}">{esc(s)}</a> ({len(_split(ds, s))})'
            for s in ds.split_names
        )
        body += f"<p>splits: {links}</p>"
    body += "<h2>Index columns</h2>" + table(
        ("column", "min", "median", "max"), _column_summary(ds)
    )
    body += f"<h2>Samples of {esc(split or 'the dataset')}: page {page_no + 1} of {pages}</h2>"
    pager = []
    if page_no > 0:
        pager.append(f'<a href="{url(f"/d/{n}", split=split or None, page=page_no - 1)}">prev</a>')
    if page_no + 1 < pages:
        pager.append(f'<a href="{url(f"/d/{n}", split=split or None, page=page_no + 1)}">next</a>')
    body += f'<p class="pager">{"".join(pager)}</p>'
    chunk = indices[page_no * PAGE_SIZE : (page_no + 1) * PAGE_SIZE]
    body += _grid(view, n, [int(i) for i in chunk])
    return page(view.names[n], body, links=_links(view))


def sample_cell(view: ViewTarget, n: int, i: int, extra: str = "", text: bool = True) -> str:
    """One cell of a grid: thumbnail (a picture dataset), key, ``extra`` markup and, with
    ``text``, the sample's text members (read here)."""
    ds = view.dataset(n)
    key = ds.key(i)
    out = [f'<div class="cell"><a href="{url(f"/d/{n}/s/{i}")}">']
    if has_picture(view, n):
        out.append(f'<img src="{url(f"/d/{n}/s/{i}/thumb")}" alt="{esc(key)}">')
    out.append(f'<span class="key">{esc(key)}</span></a>{extra}')
    if text and "text" in member_kinds(view, n):
        try:
            check_size(ds, i)
            raw = ds.read(i)
            for ext in sorted(raw):
                if member_kind(ext) == "text":
                    out.append(
                        f'<div class="text"><b>{esc(ext)}</b>: '
                        f"{esc(text_excerpt(raw[ext], 200))}</div>"
                    )
        except (FpipeError, OSError) as e:
            out.append(f'<div class="warn">{esc(e)}</div>')
    tok = _token_column(ds)
    if tok is not None:
        out.append(f'<div class="dim">{esc(tok)}: {esc(ds.column(tok)[i])}</div>')
    out.append("</div>")
    return "".join(out)


def _grid(view: ViewTarget, n: int, indices: list[int]) -> str:
    return '<div class="grid">' + "".join(sample_cell(view, n, i) for i in indices) + "</div>"


def _where(ds, i: int) -> list[tuple[str, Any]]:
    rows: list[tuple[str, Any]] = []
    if ds.shards:
        rows.append(("shard", ds.shards[int(ds.column("shard_id")[i])]))
    got = ds.read_ahead([i])
    if got is not None and got[1]:
        start = min(r[1] for r in got[1])
        rows.append(("offset", f"{start} ({sum(r[2] for r in got[1])} bytes)"))
    return rows


def _member(n: int, i: int, ext: str, data: bytes) -> str:
    kind = member_kind(ext)
    media = url(f"/d/{n}/s/{i}/media/{quote(ext, safe='')}")
    if kind == "image":
        return f'<img src="{url(f"/d/{n}/s/{i}/thumb")}" alt="{esc(ext)}">'
    if kind == "video":
        return (
            f'<video controls preload="none" poster="{url(f"/d/{n}/s/{i}/thumb")}" '
            f'src="{media}"></video>'
        )
    if kind == "audio":
        return f'<audio controls preload="none" src="{media}"></audio>'
    if kind == "text":
        return f"<pre>{esc(text_excerpt(data, 20_000))}</pre>"
    return ""


def _value(v: Any) -> str:
    """A field value as the task encoder gets it, described (escaped)."""
    shape = getattr(v, "shape", None)
    if shape is not None and hasattr(v, "dtype"):
        return esc(f"{type(v).__name__} shape {list(shape)} dtype {v.dtype}")
    if isinstance(v, str):
        return f"<pre>{esc(text_excerpt(v, 20_000))}</pre>"
    if isinstance(v, (bytes, bytearray)):
        return esc(f"{len(v)} bytes")
    return f"<pre>{esc(text_excerpt(repr(v), 2_000))}</pre>"


def _cooked(view: ViewTarget, n: int, i: int) -> str:
    pd = view.planned()
    if pd is None:
        return f'<p class="warn">no plan to cook samples with: {esc(view.plan_error)}</p>'
    try:
        sample = view.cook(n, i)
    except (FpipeError, OSError) as e:
        return f'<p class="warn">{esc(e)}</p>'
    if dataclasses.is_dataclass(sample):
        items = [(f.name, getattr(sample, f.name)) for f in dataclasses.fields(sample)]
    elif isinstance(sample, dict):
        items = list(sample.items())
    else:
        items = [("sample", sample)]
    rows = [(esc(k), esc(type(v).__name__), _value(v)) for k, v in items]
    return f"<p>{esc(type(sample).__name__)}</p>" + table(
        ("field", "type", "value"), rows, raw=True
    )


def sample_page(view: ViewTarget, n: int, i: int) -> str:
    """Sample ``i`` of dataset ``n``: key, shard, offset, columns, every member, and the
    sample as the TaskEncoder receives it."""
    ds = view.dataset(n)
    key = ds.key(i)
    rows = [("dataset", view.names[n]), ("index", i), ("key", key), *_where(ds, i)]
    rows += [(c, ds.column(c)[i]) for c in ds.column_names if c != "shard_id"]
    body = table(("", ""), rows)
    body += (
        f'<p><a href="{url("/find", key=key, dataset=view.names[n])}">steps of this sample</a></p>'
    )
    body += "<h2>Members</h2>"
    try:
        check_size(ds, i)
        raw = ds.read(i)
        members = [(esc(e), f"{len(d)} bytes", _member(n, i, e, d)) for e, d in sorted(raw.items())]
        body += table(("member", "size", "content"), members, raw=True)
    except (FpipeError, OSError) as e:
        body += f'<p class="warn">{esc(e)}</p>'
    body += "<h2>As the TaskEncoder receives it</h2>" + _cooked(view, n, i)
    return page(key, body, links=_links(view))
