"""What the docs say the code returns, checked against the code.

* ``loader.stats()``: every attribute the docs name (``loader.stats().recoveries``) is a field of
  :class:`fpipe.loader.state.LoaderStats`, and every ``dropped["KEY"]`` key is a counter that a
  plan step declares (the dict its ``stats=`` function returns) or the loader adds.
* ``fpipe plan``'s JSON: each example block marked ``<!-- json: fpipe plan ARGS -->`` has
  exactly the fields (nested) of what that command prints for a small dataset.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import re
from pathlib import Path

import pytest

from fpipe.cli.main import main
from fpipe.loader.state import LoaderStats
from tests.distributed.helpers import make_text_dataset
from tests.test_docs_names import doc_pages

ROOT = Path(__file__).resolve().parent.parent

_STATS_ATTR = re.compile(r"stats\(\)\.(\w+)")
_DROPPED_KEY = re.compile(r"dropped\[\"(\w+)\"\]")
_JSON_BLOCK = re.compile(r"<!-- json: (fpipe plan [^>]*?) -->\s*```json\n(.*?)```", re.S)


def _returned_dict_keys(func: ast.FunctionDef) -> set[str]:
    keys: set[str] = set()
    for node in ast.walk(func):
        if isinstance(node, ast.Return) and isinstance(node.value, ast.Dict):
            keys |= {k.value for k in node.value.keys if isinstance(k, ast.Constant)}
    return keys


def declared_drop_counters() -> set[str]:
    """Counter names the code can report under ``stats().dropped``: the keys returned by every
    function a plan step passes as ``stats=``, the causes always reported, and the keys the
    loader sets on ``dropped`` itself."""
    from fpipe.plan.stats import DROP_CAUSES

    counters = set(DROP_CAUSES)
    for path in sorted((ROOT / "fpipe" / "plan").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        funcs = {n.name: n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.keyword)
                and node.arg == "stats"
                and isinstance(node.value, ast.Name)
                and node.value.id in funcs
            ):
                counters |= _returned_dict_keys(funcs[node.value.id])
    loader_stats = ast.parse((ROOT / "fpipe" / "loader" / "_stats.py").read_text())
    for node in ast.walk(loader_stats):
        if (
            isinstance(node, ast.Subscript)
            and isinstance(node.value, ast.Name)
            and node.value.id == "dropped"
            and isinstance(node.slice, ast.Constant)
        ):
            counters.add(node.slice.value)
    return counters


def test_the_counter_scan_finds_the_plan_steps_counters():
    found = declared_drop_counters()
    # one of each kind: a cause always reported, a step's own counter, the loader's
    assert {"global_remainder", "over_budget", "group_remainder", "pack_remainder"} <= found
    assert "remainder" not in found


def test_documented_stats_fields_and_dropped_keys_exist():
    fields = {f.name for f in dataclasses.fields(LoaderStats)}
    counters = declared_drop_counters()
    wrong = []
    for page in doc_pages():
        text = page.read_text(encoding="utf-8")
        rel = page.relative_to(ROOT)
        wrong += [f"{rel}: stats().{a}" for a in _STATS_ATTR.findall(text) if a not in fields]
        wrong += [f'{rel}: dropped["{k}"]' for k in _DROPPED_KEY.findall(text) if k not in counters]
    assert not wrong, f"the docs name stats that the code does not report: {wrong}"


def _shape(value):
    """The nested field names of a JSON value (lists: the union of their items' shapes)."""
    if isinstance(value, dict):
        return {k: _shape(v) for k, v in value.items()}
    if isinstance(value, list):
        merged: dict = {}
        for item in value:
            shape = _shape(item)
            if isinstance(shape, dict):
                for k, v in shape.items():
                    merged[k] = v if merged.get(k) is None else merged[k]
            elif shape is not None:
                return shape
        return [merged] if merged else []
    return None


def _documented_blocks() -> list[tuple[str, str, object]]:
    out = []
    for page in doc_pages():
        for command, body in _JSON_BLOCK.findall(page.read_text(encoding="utf-8")):
            lines = [ln for ln in body.strip().splitlines() if ln.strip()]
            one = body if not command.endswith("--keys") else lines[0]
            out.append((str(page.relative_to(ROOT)), command, json.loads(one)))
    return out


def test_the_plan_json_examples_are_found():
    commands = {c for _, c, _ in _documented_blocks()}
    assert commands == {
        "fpipe plan --step N --json",
        "fpipe plan --find KEY --json",
        "fpipe plan --steps A:B --keys",
    }


_ARGS = {"N": "1", "KEY": "shard-00/00000", "A:B": "0:2"}


@pytest.mark.parametrize(("page", "command", "documented"), _documented_blocks())
def test_fpipe_plan_prints_the_documented_json_fields(tmp_path, capsys, page, command, documented):
    data = make_text_dataset(tmp_path / "text", shards=4, per_shard=12)
    words = [_ARGS.get(w, w) for w in command.split()[2:]]
    settings = ["--global-batch-size", "6", "--world-size", "2", "--seed", "5",
                "--num-epochs", "2"]  # fmt: skip
    assert main(["plan", str(data), *settings, *words]) == 0
    printed = capsys.readouterr().out
    got = (
        [json.loads(x) for x in printed.splitlines()]
        if words[-1] == "--keys"
        else [json.loads(printed)]
    )
    assert _shape(got[0]) == _shape(documented), f"{page}: {command}"


def test_the_documented_mix_history_loads_and_is_what_to_dict_writes():
    """The history-log example of docs/steering.md is a file a user may copy: its digest must
    match its changes, and ``mix_history()`` writes it back as shown (weights as written, not
    their float32 expansions)."""
    from fpipe.loader.steering import MixHistory

    text = (ROOT / "docs" / "steering.md").read_text()
    block = re.search(r'```json\n(\{"format": "fpipe-mix-history".*?)```', text, re.S)
    assert block, "docs/steering.md has no mix-history example"
    documented = json.loads(block.group(1))
    history = MixHistory.of(documented)
    assert history.to_dict() == documented
