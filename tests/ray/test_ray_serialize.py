"""What ``worker_mode="ray"`` sends to its actors, checked without starting Ray: a task encoder
class of the training script travels (Ray's cloudpickle sends such a class by value, with the
hooks fpipe wrapped), an object that cannot travel is a ConfigError naming it, and the actor
pool notices a new Ray cluster."""

from __future__ import annotations

import json
import threading
import types

import numpy as np
import pytest

import fpipe
from fpipe.core import ConfigError
from fpipe.encode import DefaultTaskEncoder
from fpipe.loader import _ray_pool
from fpipe.samples import TextSample


@pytest.fixture
def texts(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps({"text": f"s {i}"}) + "\n" for i in range(8)))
    return str(path)


def _materializer(path, encoder):
    ds = fpipe.get_train_dataset(
        path,
        batch_size=2,
        seed=1,
        sample_type="TextSample",
        field_map={"text": "text"},
        task_encoder=encoder,
    )
    return ds.materializer


def _script_encoder():
    """A task encoder as a training script writes it. The class is local, so cloudpickle sends
    it by value, as it does a class of ``__main__``; its hooks are the ones fpipe wraps."""

    class ScriptEncoder(DefaultTaskEncoder):
        def encode_sample(self, sample):  # Energon's one-argument form
            return sample.replace(text=f"{sample.text} {fpipe.sample_rng().integers(1000)}")

        @fpipe.stateless(restore_seeds=True)
        def postencode_sample(self, sample):
            return sample.replace(text=f"{sample.text} {np.random.randint(1000)}")  # noqa: NPY002

    return ScriptEncoder()


def test_a_task_encoder_class_of_the_script_travels_with_its_hooks(texts):
    cloudpickle = pytest.importorskip("ray.cloudpickle")  # Ray's serializer
    materializer = _materializer(texts, _script_encoder())
    copy = cloudpickle.loads(cloudpickle.dumps(materializer))
    sample = TextSample(text="a", __key__="k")
    out = []
    for enc in (materializer.task_encoder, copy.task_encoder):
        rng = np.random.default_rng(5)
        out.append(enc.postencode_sample(enc.encode_sample(sample, rng), rng).text)
    assert out[0] == out[1]
    assert len(out[0].split()) == 3, out  # both hooks ran


def test_an_object_that_cannot_travel_is_a_config_error_naming_it(texts):
    cloudpickle = pytest.importorskip("ray.cloudpickle")
    lock = threading.Lock()

    class Locked(DefaultTaskEncoder):
        def encode_batch(self, batch):
            with lock:
                return batch

    ray = types.SimpleNamespace(  # ray.put raises the TypeError that its serializer raises
        put=cloudpickle.dumps, cloudpickle=cloudpickle, get_runtime_context=_Context
    )
    with pytest.raises(ConfigError, match=r"task_encoder -> class Locked -> encode_batch -> lock"):
        _ray_pool._Pool().ship(ray, _materializer(texts, Locked()))


class _Materializer:
    """Stands for a materializer: the pool keeps what it sent per materializer, weakly."""


class _Context:
    def __init__(self) -> None:
        self.node = "node-of-cluster-1"

    def get_job_id(self) -> str:
        return "01000000"  # every new cluster numbers its jobs from 1

    def get_node_id(self) -> str:
        return self.node


def test_a_new_ray_cluster_gets_new_actors_and_a_new_copy_of_the_materializer():
    context = _Context()
    ray = types.SimpleNamespace(get_runtime_context=lambda: context, put=lambda value: object())
    pool, materializer = _ray_pool._Pool(), _Materializer()
    ref = pool.ship(ray, materializer)
    assert pool.ship(ray, materializer) is ref  # sent once per cluster
    pool.give_back("options", [_ray_pool._Actor(handle=None, started=None, slot="a1")])
    context.node = "node-of-cluster-2"  # ray.shutdown(); ray.init(): the same job id
    assert pool.ship(ray, materializer) is not ref
    assert pool.idle == {}  # the old cluster's actors are not lent again
