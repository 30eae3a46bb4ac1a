"""The mix, step, find and state pages of ``fpipe view``: what the plan says, from the plan
alone (no sample payload is read for them; the step page's thumbnails are requests of their
own).

The step and find pages are :func:`fpipe.datasets.lineage.step_samples` and
:func:`~fpipe.datasets.lineage.find_key` as HTML, so they list exactly what ``fpipe plan
--steps N:N+1 --keys`` and ``fpipe plan --find KEY`` print. The mix page counts the refs of
:func:`~fpipe.datasets.lineage.scan_steps` per window of steps.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from fpipe.core.errors import ConfigError, FpipeError
from fpipe.view.html import esc, page, table, url
from fpipe.view.svg import Marks, share_plot, swatch
from fpipe.view.target import ViewTarget

__all__ = ["MAX_SCAN_REFS", "MAX_SCAN_STEPS", "find_page", "mix_page", "state_page", "step_page"]

#: Most steps one mix or find request plans, and most sample references it looks at: a
#: request's time and memory stay bounded whatever range it asks for.
MAX_SCAN_STEPS = 1_000_000
MAX_SCAN_REFS = 4_000_000


def _no_plan(view: ViewTarget, title: str) -> str:
    return page(title, f'<p class="warn">no plan for this TARGET: {esc(view.plan_error)}</p>')


def _links(view: ViewTarget) -> dict[str, str]:
    return {"/state": "state"} if view.state is not None else {}


def _range(a: int | None, b: int | None, default: int) -> tuple[int, int]:
    a = 0 if a is None else a
    b = a + default if b is None else b
    if a < 0 or b <= a:
        raise ConfigError(f"a step range needs 0 <= from < to, got {a}:{b}")
    return a, min(b, a + MAX_SCAN_STEPS)


def _weight_label(names, weights) -> str:
    return ", ".join(f"{n} {float(w):.3g}" for n, w in zip(names, weights))


def _weight_marks(view: ViewTarget, pd) -> list[tuple[int, str]]:
    """Weight changes: the blend's schedule points and the mix history's online changes."""
    marks = []
    for _, config in pd.plan.parts:
        schedule = getattr(config, "schedule", None)
        points = getattr(schedule, "points", None)
        if points is not None and hasattr(schedule, "weights"):
            for p, w in zip(points, schedule.weights):
                if p > 0:
                    marks.append((int(p), f"schedule from {p}: {_weight_label(view.names, w)}"))
    if view.cfg is not None and view.cfg.mix_history:
        with open(view.cfg.mix_history, encoding="utf-8") as f:
            history = json.load(f)
        for c in history.get("changes") or ():
            w = c["weights"]
            ws = [w.get(n, 0) for n in view.names] if isinstance(w, dict) else w
            marks.append(
                (int(c["step"]), f"set_weights at {c['step']}: {_weight_label(view.names, ws)}")
            )
    return marks


def _token_columns(view: ViewTarget) -> list[np.ndarray | None]:
    unit = getattr(view.cfg.options, "blend_unit", None) if view.cfg else None
    out = []
    for n in range(len(view.names)):
        ds = view.dataset(n)
        name = (
            unit if unit in ds.column_names else ("tokens" if "tokens" in ds.column_names else None)
        )
        out.append(None if name is None else np.asarray(ds.column(name)))
    return out


def mix_data(view: ViewTarget, a: int, b: int, window: int) -> dict[str, Any]:
    """Samples and tokens of each dataset per window of ``window`` steps in ``[a, b)`` (skipped
    steps left out: the model does not see them), the global batch size where it changes, the
    skip ranges and weight changes."""
    from fpipe.datasets.lineage import scan_steps
    from fpipe.plan.skip import normalize_step_ranges, skip_end

    cfg, pd = view.cfg, view.planned()
    assert cfg is not None and pd is not None
    nd = len(view.names)
    nwin = -(-(b - a) // window)
    samples = np.zeros((nwin, nd))
    tokens = np.zeros((nwin, nd))
    cols = _token_columns(view)
    skips = [tuple(r) for r in normalize_step_ranges(cfg.options.skip_steps)]
    sizes: list[tuple[int, int]] = []
    refs_seen, end, truncated = 0, a, False
    for step, refs, bounds in scan_steps(cfg, a, b, pd):
        end = step + 1
        size = int(bounds[-1])
        if not sizes or sizes[-1][1] != size:
            sizes.append((step, size))
        refs_seen += size
        if skip_end(step, skips) is None:
            w = (step - a) // window
            d = np.asarray(refs.columns["dataset"], dtype=np.int64)
            idx = np.asarray(refs.columns["index"], dtype=np.int64)
            samples[w] += np.bincount(d, minlength=nd)[:nd]
            for dd in np.unique(d).tolist():
                if cols[dd] is not None:
                    tokens[w, dd] += float(cols[dd][idx[d == dd]].sum())
        if refs_seen >= MAX_SCAN_REFS:
            truncated = True
            break
    return {
        "edges": [min(a + k * window, end) for k in range(nwin + 1)],
        "samples": samples,
        "tokens": tokens,
        "has_tokens": any(c is not None for c in cols),
        "sizes": sizes,
        "skips": skips,
        "changes": _weight_marks(view, pd),
        "end": end,
        "truncated": truncated,
    }


def _shares(counts: np.ndarray) -> list[list[float]]:
    total = counts.sum(axis=1, keepdims=True)
    return (counts / np.where(total > 0, total, 1)).tolist()


def mix_page(view: ViewTarget, a: int | None, b: int | None, window: int | None) -> str:
    """Each dataset's share of samples and tokens per window of steps, with the weight
    changes, batch sizes and skip ranges marked."""
    if view.cfg is None:
        return _no_plan(view, "mix")
    a, b = _range(a, b, 200)
    window = max(1, window or -(-(b - a) // 50))
    m = mix_data(view, a, b, window)
    marks = Marks(
        m["changes"],
        [(s, f"global batch {n} from step {s}") for s, n in m["sizes"][1:]],
        m["skips"],
    )
    form = (
        '<form action="/mix" method="get">steps from <input name="from" type="number" '
        f'value="{a}"> to <input name="to" type="number" value="{b}"> window '
        f'<input name="window" type="number" value="{window}"><input type="submit" value="plan">'
        "</form>"
    )
    legend = " ".join(f"{swatch(d)} {esc(name)}" for d, name in enumerate(view.names))
    body = form + f"<p>{legend}</p>"
    if m["truncated"] or m["end"] < b:
        why = "the request's limit of refs" if m["truncated"] else "the end of the stream"
        body += f'<p class="warn">planned steps {a}..{m["end"] - 1} only ({esc(why)})</p>'
    edges = m["edges"]
    body += "<h2>Share of samples</h2>" + share_plot(
        "share of samples", edges, _shares(m["samples"]), marks
    )
    if m["has_tokens"]:
        body += "<h2>Share of tokens</h2>" + share_plot(
            "share of tokens", edges, _shares(m["tokens"]), marks
        )
    else:
        body += "<p class=dim>no token column (tokens) in the index: shares of samples only</p>"
    total_s, total_t = m["samples"].sum(axis=0), m["tokens"].sum(axis=0)
    rows = [
        (
            f"{swatch(d)} {esc(name)}",
            int(total_s[d]),
            f"{100 * total_s[d] / max(total_s.sum(), 1):.1f}%",
            int(total_t[d]),
            f"{100 * total_t[d] / max(total_t.sum(), 1):.1f}%",
        )
        for d, name in enumerate(view.names)
    ]
    body += "<h2>Totals (skipped steps left out)</h2>" + table(
        ("dataset", "samples", "share", "tokens", "share"), rows, raw=True
    )
    body += "<h2>Marks</h2>" + table(
        ("step", "what"),
        [(s, t) for s, t in m["changes"]]
        + [(s, f"global batch size {n}") for s, n in m["sizes"]]
        + [(f"{s0}..{s1 - 1}", "skipped") for s0, s1 in m["skips"]],
    )
    return page("Mix", body, here="/mix", links=_links(view))


def step_page(view: ViewTarget, step: int, rank: int | None) -> str:
    """The samples of global ``step`` on each rank (or on ``rank``), in delivery order."""
    from fpipe.datasets.lineage import step_samples
    from fpipe.view.dataset_pages import sample_cell

    if view.cfg is None:
        return _no_plan(view, "step")
    world = view.cfg.world_size
    if step < 0 or (rank is not None and not 0 <= rank < world):
        raise ConfigError(f"step >= 0 and rank in 0..{world - 1}, got step {step} rank {rank}")
    rows = [r for r in step_samples(view.cfg, (step, step + 1)) if rank in (None, r["rank"])]
    form = (
        f'<form action="/step" method="get">step <input name="step" type="number" value="{step}"> '
        f'rank <input name="rank" type="number" value="{"" if rank is None else rank}" '
        f'min="0" max="{world - 1}"> of world size {world} '
        '<input type="submit" value="show"></form>'
    )
    nav = f'<a href="{url("/step", step=step - 1, rank=rank)}">prev</a> ' if step > 0 else ""
    nav += f'<a href="{url("/step", step=step + 1, rank=rank)}">next</a>'
    body = form + f'<p class="pager">{nav}</p>'
    if not rows:
        body += '<p class="warn">past the end of the stream</p>'
    if any(r.get("skipped") for r in rows):
        body += (
            '<p class="warn skipped">SKIPPED (skip_steps): the loader does not deliver these '
            "samples</p>"
        )
    for r in range(world):
        mine = [row for row in rows if row["rank"] == r]
        if not mine:
            continue
        cells = []
        for row in mine:
            n = view.names.index(row["dataset"])
            extra = (
                f'<div class="dim">{esc(row["dataset"])} · position {row["position"]} · '
                f"epoch {row['epoch']} · index {row['index']}</div>"
            )
            cells.append(sample_cell(view, n, row["index"], extra, text=False))
        body += f'<h2>rank {r}: {len(mine)} samples</h2><div class="grid">{"".join(cells)}</div>'
    return page(f"Step {step}", body, here="/step", links=_links(view))


def find_page(
    view: ViewTarget, key: str | None, dataset: str | None, a: int | None, b: int | None
) -> str:
    """Every (step, rank, position) where the sample ``key`` is delivered in steps ``[a, b)``."""
    from fpipe.datasets.lineage import find_key

    if view.cfg is None:
        return _no_plan(view, "find")
    a, b = _range(a, b, 1000)
    form = (
        '<form action="/find" method="get">key <input name="key" '
        f'value="{esc(key or "")}"> steps from <input name="from" type="number" value="{a}"> '
        f'to <input name="to" type="number" value="{b}"><input type="submit" value="find"></form>'
    )
    body = form
    if key:
        try:
            got = find_key(view.cfg, key, (a, b), dataset=dataset or None)
        except ConfigError as e:
            body += f'<p class="warn">{esc(e)}</p>'
        else:
            body += (
                f"<p>{len(got['hits'])} time(s) in steps {got['steps'][0]}..{got['steps'][1] - 1} "
                f"({got['scanned_refs']} refs scanned)</p>"
            )
            rows = [
                (
                    f'<a href="{url("/step", step=h["step"], rank=h["rank"])}">{h["step"]}</a>',
                    h["rank"],
                    h["position"],
                    h["epoch"],
                    esc(h["dataset"]),
                    "skipped" if h["skipped"] else "",
                )
                for h in got["hits"]
            ]
            body += table(("step", "rank", "position", "epoch", "dataset", ""), rows, raw=True)
    return page("Find a sample", body, here="/find", links=_links(view))


def _find(obj: Any, test) -> dict | None:
    """The first dict in nested dicts and lists for which ``test`` holds."""
    if isinstance(obj, dict):
        if test(obj):
            return obj
        obj = list(obj.values())
    if isinstance(obj, (list, tuple)):
        for v in obj:
            got = _find(v, test)
            if got is not None:
                return got
    return None


def _state_summary(view: ViewTarget, decoded: dict[str, Any]) -> list[tuple[str, Any]]:
    from fpipe.plan.online_mix import decode_mix, entry_weights

    state = decoded["state"]
    rows: list[tuple[str, Any]] = []
    batch = _find(
        state, lambda d: str(d.get("__type__", "")).endswith("BatchState") and "step" in d
    )
    step = batch["step"] if batch else state.get("batches", 0) + state.get("skipped", 0)
    rows.append(("next global step", f'<a href="{url("/step", step=step)}">{step}</a>'))
    for name in ("batches", "samples", "skipped", "epoch", "skip", "finished"):
        if isinstance(state, dict) and name in state:
            rows.append((name, esc(state[name])))
    blend = _find(state, lambda d: d.get("__type__") == "BlendState")
    if blend is not None:
        n = len(view.names)
        extra = bytes(blend.get("weights") or b"")[2 * n :]  # after the schedule's digests
        mix = decode_mix(extra, n) if extra else None
        now = [e for e in mix.entries if e.position <= blend["position"]] if mix else []
        if now:
            weights = _weight_label(view.names, entry_weights(now[-1].weights))
            rows.append(("weights in force", esc(f"{weights} (set online)")))
        else:
            rows.append(("weights in force", "the configured weights (no online change yet)"))
        if mix is not None:
            rows.append(("online changes", esc(f"{mix.changes}, the last at step {mix.step}")))
        rows.append(("taken per dataset", esc(_weight_label(view.names, blend.get("taken", ())))))
    return rows


def state_page(view: ViewTarget) -> str:
    """What the saved state says: envelope, step, epoch, weights in force, fingerprint."""
    from fpipe.datasets.plan_queries import decode_with_config

    info = view.state_info or {}
    env = [
        ("file", esc(view.state_name)),
        ("kind", esc(info.get("kind"))),
        ("bytes", esc(info.get("bytes"))),
        ("checksum", "ok" if info.get("checksum_ok") else "MISMATCH"),
        ("fingerprint", esc(info.get("fingerprint"))),
        (
            "format / order version",
            esc(f"{info.get('format_version')} / {info.get('order_version')}"),
        ),
    ]
    body = table(("", ""), env, raw=True)
    if view.cfg is None or view.state is None:
        body += f'<p class="warn">no plan to read the state with: {esc(view.plan_error)}</p>'
        return page("Saved state", body, links=_links(view))
    try:
        decoded = decode_with_config(view.state, str(info.get("kind", "loader")), view.cfg)
    except FpipeError as e:
        body += f'<p class="warn">the state does not fit this plan: {esc(e)}</p>'
        return page("Saved state", body, links=_links(view))
    body += "<h2>What it says</h2>" + table(("", ""), _state_summary(view, decoded), raw=True)
    body += "<p>the fingerprint matches this TARGET's plan.</p>"
    return page("Saved state", body, here="/state", links=_links(view))
