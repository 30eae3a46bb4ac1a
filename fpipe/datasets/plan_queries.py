"""What the plan of a :class:`~fpipe.datasets.plan_config.PlanConfig` says, without reading a
payload: the samples of one step on each rank (``fpipe plan``), the buckets of the first steps,
and a snapshot checked against the plan and decoded with field names (``fpipe state show``).

Each returns plain data (dicts and lists) for the command line to print or dump as JSON.
"""

from __future__ import annotations

from typing import Any

from fpipe.core.errors import ConfigError
from fpipe.datasets.lineage import advance_steps
from fpipe.datasets.plan_config import PlanConfig, build_dataset

__all__ = ["bucket_histogram", "decode_with_config", "plan_step"]


def plan_step(cfg: PlanConfig, step: int, ranks: list[int] | None = None) -> dict[str, Any]:
    """The refs of global step ``step`` on each rank: ``{"step", "skipped", "ranks": [{"rank",
    "samples": [{"key", "index", "epoch"}...]}...]}``; a rank past the end of its stream has
    ``None``. ``skipped``: the step is in the config's ``skip_steps`` (the loader leaves its
    samples out)."""
    from fpipe.plan.skip import normalize_step_ranges, skip_end
    from fpipe.storage import open_dataset

    if step < 0:
        raise ConfigError(f"--step must be >= 0, got {step}")
    world = cfg.world_size
    ranks = list(range(world)) if ranks is None else ranks
    for r in ranks:
        if not 0 <= r < world:
            raise ConfigError(f"rank {r} is not in 0..{world - 1}")
    first = build_dataset(cfg, 0)
    distribution = first.distribution
    sources, names, opened = first.materializer.sources, first.datasets, {}

    def sample(d: int, i: int, e: int) -> dict[str, Any]:
        if d not in opened:
            opened[d] = open_dataset(sources[d].path, **sources[d].open_kwargs)
        out = {"key": opened[d].key(i), "index": i, "epoch": e}
        if len(sources) > 1:  # a blend: say which dataset
            out["dataset"] = names[d]
        return out

    start = None
    if distribution == "global":
        # At a global-batch boundary the plan state is the same on every rank: advance one.
        state, _ = advance_steps(first.plan, first.plan.init(), step)
        start = first.plan.snapshot(state)
    out = []
    for r in ranks:
        pd = first if r == 0 else build_dataset(cfg, r)
        plan = pd.plan
        if start is not None:
            state = plan.restore(start)
        else:
            state, _ = advance_steps(plan, plan.init(), step)
        _, got = plan.next(state, 1)
        if not len(got):
            out.append({"rank": r, "samples": None})
            continue
        refs = got[0].refs
        samples = [sample(*t) for t in refs.triples()]
        out.append({"rank": r, "samples": samples, **_bucket_of(pd, got[0])})
    return {
        "step": step,
        "skipped": skip_end(step, normalize_step_ranges(cfg.options.skip_steps)) is not None,
        "distribution": distribution,
        "world_size": world,
        "batch_size": first.batch_size,
        "ranks": out,
    }


def _bucket_of(pd, recipe) -> dict[str, Any]:
    if pd.buckets is None or recipe.bucket < 0:
        return {}
    b = pd.buckets.buckets[recipe.bucket]
    return {"bucket": b.label, "shape": list(b.shape), "bucket_batch_size": b.batch_size}


def bucket_histogram(cfg: PlanConfig, steps: int) -> dict[str, Any]:
    """How many of the first ``steps`` steps each bucket gets (rank 0's plan; in global mode
    every rank has the same bucket at every step): ``{"steps", "buckets": [{"bucket",
    "shape", "batch_size", "steps", "samples_per_rank"}...], "unfit", "rejected",
    "dropped"}``."""
    from fpipe.plan import drop_counters

    pd = build_dataset(cfg, 0)
    if pd.buckets is None:
        raise ConfigError("--buckets needs a bucket_config in the plan")
    table = pd.buckets
    counts = [0] * len(table)
    state, done = pd.plan.init(), 0
    while done < steps:
        state, got = pd.plan.next(state, min(1024, steps - done))
        if not len(got):
            break
        for r in got:
            counts[r.bucket] += 1
        done += len(got)
    rows = [
        {
            "bucket": b.label,
            "shape": list(b.shape),
            "batch_size": b.batch_size,
            "steps": counts[i],
            "samples_per_rank": counts[i] * b.batch_size,
        }
        for i, b in enumerate(table.buckets)
    ]
    dropped = drop_counters(pd.plan.stats(state))
    return {
        "steps": done,
        "buckets": rows,
        "unfit": dropped.get("unfit", 0),
        "rejected": dropped.get("rejected", 0),
        "dropped": dropped.get("group_remainder", 0),
    }


def decode_with_config(data: bytes, kind: str, cfg: PlanConfig) -> dict[str, Any]:
    """Check snapshot ``data`` (``kind``: ``"loader"`` or ``"plan"``) against the pipeline of
    a plan config and decode its state.

    ``steps`` lists every step in data-flow order (paths ``mix/0/...`` inside a multi-input
    step) with its whole config and its own state (None for random-access views).
    """
    from fpipe.core.fingerprint import canonical, record_fields
    from fpipe.loader.state import decode_loader_state, loader_parts

    pd = build_dataset(cfg, 0)
    plan = pd.plan
    loader = kind == "loader"
    state = decode_loader_state(plan, data, loader_parts(pd)) if loader else plan.restore(data)
    plan_state = state.plan if kind == "loader" else state
    steps = []
    for path, config in plan.parts[1:]:
        try:
            own = canonical(plan.get(plan_state, path), named=True)
        except KeyError:  # a view: its position is the state of the step that reads it
            own = None
        fields = record_fields(config)
        steps.append({"name": path, "type": type(config).__name__, "config": fields, "state": own})
    return {
        "config": plan.describe(),
        "steps": steps,
        "stats": plan.stats(plan_state),
        "state": canonical(state, named=True),
    }
