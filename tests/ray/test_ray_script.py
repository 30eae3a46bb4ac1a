"""``worker_mode="ray"`` from a training script run as ``__main__``, on a local Ray instance of
its own (a subprocess: the suite's shared cluster stays untouched): a task encoder class of the
script reaches the actors, and a loader after ``ray.shutdown(); ray.init()`` (a new cluster)
starts new actors. The batches are those of thread workers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from tests.ray.conftest import ROOT

#: a local Ray instance per test, about 10-20 s each here: opt-in with -m integration
pytestmark = [pytest.mark.slow, pytest.mark.integration]

SCRIPT = textwrap.dedent(
    '''\
    import sys

    import ray

    import fpipe
    from fpipe.encode import DefaultTaskEncoder


    class ScriptEncoder(DefaultTaskEncoder):
        """Defined in the script, as in docs/ray.md: Ray sends the class by value."""

        @fpipe.stateless(restore_seeds=True)
        def encode_sample(self, sample):  # Energon's one-argument form, wrapped twice
            return sample.replace(text=f"{sample.text} {fpipe.sample_rng().integers(1000)}")

        def encode_batch(self, batch):
            return {"texts": batch.text}


    def batches(mode, encoder):
        ds = fpipe.get_train_dataset(
            sys.argv[1], batch_size=2, seed=1, sample_type="TextSample",
            field_map={"text": "text"}, task_encoder=encoder,
        )
        loop = iter(fpipe.get_loader(ds, num_workers=1, worker_mode=mode))
        try:
            return [next(loop) for _ in range(3)]
        finally:
            loop.close()


    def start_ray():
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)


    if __name__ == "__main__":
        start_ray()
        if sys.argv[2] == "script-encoder":
            expected = batches("thread", ScriptEncoder())
            assert batches("ray", ScriptEncoder()) == expected
        else:  # a second cluster in the same process
            expected = batches("thread", None)
            assert batches("ray", None) == expected
            ray.shutdown()
            start_ray()
            assert batches("ray", None) == expected
        print("same batches")
    '''
)


def _run_script(tmp_path, what: str) -> None:
    data = tmp_path / "t.jsonl"
    data.write_text("".join(json.dumps({"text": f"s {i}"}) + "\n" for i in range(12)))
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    env = dict(os.environ, PYTHONPATH=ROOT)
    env.pop("RAY_ADDRESS", None)  # a Ray instance of its own
    out = subprocess.run(
        [sys.executable, str(script), str(data), what],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0 and "same batches" in out.stdout, out.stderr[-3000:]


def test_a_task_encoder_class_of_the_training_script_runs_on_ray_actors(tmp_path):
    _run_script(tmp_path, "script-encoder")


def test_a_loader_after_ray_shutdown_and_a_new_ray_init_starts_new_actors(tmp_path):
    _run_script(tmp_path, "new-cluster")
