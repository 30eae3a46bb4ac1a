"""fpipe and Megatron-Energon 7.4 give the same data on a folder the real ``energon prepare``
wrote: sample keys, the collation of plain values, the types of a crude sample's members.

Energon runs in its own Python (its package is ``megatron.energon``, with its own torch), found
through ``FPIPE_ENERGON_PYTHON`` or at ``.venv-energon/bin/python`` in the repository (``.ci/run``
creates it: ``python -m venv .venv-energon && .venv-energon/bin/pip install torch==2.13.0
megatron-energon==7.4.0``); without it the test is skipped. One script runs in both Pythons with
only its import changed (``megatron.energon`` or ``fpipe.energon``) and prints what it got as
JSON; in Energon's Python it first runs ``energon prepare`` (Energon's CLI, called in that
process) on the two folders of shards, one typed and one crude.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.energon.energon_folder import write_plain_shards

ROOT = Path(__file__).resolve().parents[2]


def energon_python() -> str | None:
    """The Python that has megatron-energon, or None."""
    given = os.environ.get("FPIPE_ENERGON_PYTHON")
    for cand in (given, ROOT / ".venv-energon" / "bin" / "python"):
        if cand and Path(cand).is_file():
            return str(cand)
    return None


ENERGON = energon_python()
#: another venv's Python, about 15 s: opt-in with -m integration
pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(ENERGON is None, reason="no Python with megatron-energon"),
]

SCRIPT = r'''
import dataclasses, importlib, json, sys
from typing import Any

E = importlib.import_module(sys.argv[1])
typed, crude = sys.argv[2], sys.argv[3]
if sys.argv[1] == "megatron.energon":  # the real `energon prepare`, in this process
    from megatron.energon.cli.main import main

    common = ["--non-interactive", "--split-ratio", "1,0,0"]
    fmap = json.dumps({"image": "jpg", "label": "cls"})
    for args in (
        [typed, *common, "--sample-type", "ImageClassificationSample", "--field-map", fmap],
        [crude, *common, "--sample-type", "CrudeWebdataset"],
    ):
        main(["prepare", *args], standalone_mode=False)


def describe(v):
    """A value as JSON: the type of each leaf and its value (tensors: dtype and shape)."""
    import torch
    if isinstance(v, torch.Tensor):
        return {"tensor": [str(v.dtype).removeprefix("torch."), list(v.shape)]}
    if isinstance(v, (list, tuple)):
        return [describe(x) for x in v]
    if isinstance(v, dict):
        return {str(k): describe(x) for k, x in sorted(v.items())}
    if isinstance(v, bytes):
        return {"bytes": v.decode("latin-1")}
    if v is None or isinstance(v, (str, int, float, bool)):
        return {type(v).__name__: v}
    return {"type": type(v).__name__}


@dataclasses.dataclass
class Cooked(E.Sample):
    txt: Any
    cls: Any
    js: Any
    jpg_type: Any


@E.stateless
def cook(c):
    return Cooked(
        **E.basic_sample_keys(c),
        txt=c["txt"],
        cls=c["cls"],
        js=c["json"],
        jpg_type=type(c["jpg"]).__name__,
    )


class Crude(E.DefaultTaskEncoder):
    cookers = [E.Cooker(cook)]


class RawCrude(Crude):
    decoder = None


def first_batch(path, **kw):
    wc = E.WorkerConfig(rank=0, world_size=1, num_workers=0)
    ds = E.get_val_dataset(path, split_part="train", batch_size=3, worker_config=wc, **kw)
    for batch in E.get_loader(ds):
        return batch


out = {}
b = first_batch(typed)
def sources(batch_sources):
    """(path, index, shard, file names) of each sample's sources (the path as text)."""
    return [[[str(s.dataset_path), s.index, s.shard_name, sorted(s.file_names)] for s in ss]
            for ss in batch_sources]


out["typed"] = {"key": b.__key__, "label": describe(b.label), "label_name": describe(b.label_name),
                "sources": sources(b.__sources__)}
for name, enc in (("crude", Crude()), ("raw", RawCrude())):
    b = first_batch(crude, task_encoder=enc)
    out[name] = {
        "key": b.__key__,
        **{f: describe(getattr(b, f)) for f in ("txt", "cls", "js", "jpg_type")},
        "sources": sources(b.__sources__),
    }
print("RESULT " + json.dumps(out, sort_keys=True))
'''


def _run(python: str, module: str, script: Path, typed: Path, crude: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [python, str(script), module, str(typed), str(crude)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=script.parent,
        env=env,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, f"{module} failed:\n{proc.stdout}\n{proc.stderr[-4000:]}"
    return json.loads(lines[-1][len("RESULT ") :])


@pytest.fixture()
def folders(tmp_path):
    for name in ("typed", "crude"):
        write_plain_shards(tmp_path / name)
    return tmp_path / "typed", tmp_path / "crude"


def test_fpipe_gives_what_energon_gives_on_an_energon_prepared_folder(folders, tmp_path):
    script = tmp_path / "same_code.py"
    script.write_text(SCRIPT)
    energon = _run(ENERGON, "megatron.energon", script, *folders)  # prepares, then loads
    assert (folders[0] / ".nv-meta" / "index.sqlite").is_file()  # written by energon prepare
    ours = _run(sys.executable, "fpipe.energon", script, *folders)
    # what Energon gives, spelled out (so that a change on either side is seen here)
    assert energon["typed"]["key"] == ["000000", "000001", "000002"]
    assert energon["typed"]["label"] == [{"int": 0}, {"int": 1}, {"int": 2}]
    assert energon["crude"]["txt"] == [{"str": "10"}, {"str": "11"}, {"str": "12"}]
    assert energon["raw"]["txt"] == [{"bytes": "10"}, {"bytes": "11"}, {"bytes": "12"}]
    assert energon["typed"]["sources"][1] == [
        [str(folders[0]), 1, "parts/data-0.tar", ["000001.cls", "000001.jpg"]]
    ]
    assert ours == energon
