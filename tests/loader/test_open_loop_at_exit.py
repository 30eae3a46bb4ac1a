"""A loop over a loader left open when the program ends: its workers are shut down quietly.

Left to the interpreter's last collection, the loop's cleanup ran after modules were torn down
and printed ``Exception ignored in: <generator object Healer.results ...> TypeError:
'NoneType' object is not callable`` on every such exit; an exit hook now closes open loops
first."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

_SCRIPT = """
import sys
from tests.loader.helpers import build
loops = []
for mode in ("process", "thread"):
    loader = build(sys.argv[1], num_workers=2, worker_mode=mode)
    loop = iter(loader)
    next(loop)
    loops.append(loop)  # still open when the program ends
print("took a batch in each mode")
"""


def test_a_loop_left_open_at_exit_shuts_its_workers_down_quietly(image_dataset):
    path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    env = dict(os.environ, PYTHONPATH=path)
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_SCRIPT), str(image_dataset)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "took a batch in each mode" in proc.stdout
    assert "Exception ignored" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
