"""A second Python process that restores loaders from snapshot files, for exact-resume tests.

Starting a Python process that imports torch costs about 2.5 s of CPU, so the tests share one:
``FreshProcess.restore`` sends a request line (dataset, seed, workers, state files) and reads
back the digests of the batches that follow each restored state. The process has never built
the uninterrupted run it is compared with: it knows the snapshot bytes only (its own hash seed,
memory and module state), which is what "restore in a fresh process" must prove.

    python -m tests.loader.fresh_process      # serves requests on stdin, one JSON line each
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_REPLY = "fresh-process-reply "
TIMEOUT = 300


class FreshProcess:
    """The client side: one server process for a whole test session."""

    def __init__(self) -> None:
        env = dict(
            os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
        )
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "tests.loader.fresh_process"],
            cwd=ROOT, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip

    def restore(self, dataset: str, states: list[str], *, after: int, seed: int,
                num_workers: int = 0) -> list[list[str]]:  # fmt: skip
        """Digests of the ``after`` batches that follow each state file, restored there."""
        request = dict(dataset=dataset, states=states, after=after, seed=seed,
                       num_workers=num_workers)  # fmt: skip
        self._proc.stdin.write(json.dumps(request) + "\n")
        self._proc.stdin.flush()
        while True:
            ready, _, _ = select.select([self._proc.stdout], [], [], TIMEOUT)
            line = self._proc.stdout.readline() if ready else ""
            if not line:
                raise RuntimeError(f"the fresh process gave no answer (exit {self._proc.poll()})")
            if line.startswith(_REPLY):
                reply = json.loads(line[len(_REPLY) :])
                if "error" in reply:
                    raise RuntimeError(f"restore failed in the fresh process:\n{reply['error']}")
                return reply["batches"]

    def close(self) -> None:
        self._proc.stdin.close()
        try:
            self._proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()


def _serve() -> None:
    import traceback

    from tests.loader.helpers import build, take

    for line in sys.stdin:
        req = json.loads(line)
        try:
            out = []
            for path in req["states"]:
                loader = build(req["dataset"], seed=req["seed"], num_workers=req["num_workers"])
                loader.restore(Path(path).read_bytes())
                out.append(take(loader, req["after"]))
            reply = {"batches": out}
        except Exception:  # reported to the test, which fails with the traceback
            reply = {"error": traceback.format_exc()}
        print(_REPLY + json.dumps(reply), flush=True)


if __name__ == "__main__":
    _serve()
