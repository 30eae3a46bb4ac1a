"""One options record for building a dataset: the keyword arguments of get_train_dataset /
get_val_dataset are its fields (same names, same defaults), a misspelt keyword names the closest
option, a mode is checked once, and a plan YAML converts to the same record."""

from __future__ import annotations

import inspect

import msgspec
import pytest
import yaml

import fpipe
from fpipe.core.errors import ConfigError, ErrorPolicy
from fpipe.datasets.options import PYTHON_ONLY, DatasetOptions
from fpipe.datasets.plan_config import build_dataset, load_plan_config
from fpipe.decode.image import ImageDecodeOptions
from fpipe.loader import Topology
from tests.distributed.helpers import make_text_dataset

FIELDS = DatasetOptions.__struct_fields__
DEFAULTS = msgspec.structs.asdict(DatasetOptions())


def _keywords(fn) -> dict[str, inspect.Parameter]:
    params = inspect.signature(fn).parameters
    return {n: p for n, p in params.items() if p.kind is inspect.Parameter.KEYWORD_ONLY}


def test_train_keywords_are_the_record_fields_with_the_same_defaults():
    kw = _keywords(fpipe.get_train_dataset)
    assert set(kw) == set(FIELDS) - {"limit"}  # limit: the validation pass's own
    for name, p in kw.items():
        assert p.default == DEFAULTS[name], name


def test_val_keywords_are_record_fields_with_its_own_defaults():
    kw = _keywords(fpipe.get_val_dataset)
    assert set(kw) <= set(FIELDS)
    assert kw["split"].default == "val"
    assert kw["batch_size"].default is inspect.Parameter.empty  # required, as before
    for name, p in kw.items():
        if name not in ("split", "batch_size"):
            assert p.default == DEFAULTS[name], name


def test_help_shows_the_options():
    text = inspect.signature(fpipe.get_train_dataset).__str__()
    assert "shuffle_buffer_size" in text and "bucket_window" in text
    assert "shuffle_buffer_size" in (fpipe.get_train_dataset.__doc__ or "")


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda: fpipe.get_train_dataset("nowhere", shufle_buffer_size=3),
            "get_train_dataset() got an unexpected keyword argument 'shufle_buffer_size'; "
            "did you mean 'shuffle_buffer_size'?",
        ),
        (
            lambda: fpipe.get_val_dataset("nowhere", batch_size=2, limt=3),
            "get_val_dataset() got an unexpected keyword argument 'limt'; did you mean 'limit'?",
        ),
        (
            lambda: fpipe.get_train_dataset("nowhere", zzz=1),
            "get_train_dataset() got an unexpected keyword argument 'zzz'",
        ),
        (
            lambda: fpipe.get_loader(None, num_worker=2),
            "get_loader() got an unexpected keyword argument 'num_worker'; "
            "did you mean 'num_workers'?",
        ),
    ],
)
def test_an_unknown_keyword_names_the_closest_option(call, message):
    with pytest.raises(TypeError) as info:
        call()
    assert str(info.value) == message


def test_a_bad_mode_is_a_config_error_naming_the_option_and_its_values():
    with pytest.raises(
        ConfigError, match="distribution must be 'global', 'per_rank' or 'energon', got 'x'"
    ):
        DatasetOptions(distribution="x")
    with pytest.raises(ConfigError, match="schedule_mode must be 'step' or 'linear', got 'x'"):
        fpipe.get_train_dataset("nowhere", schedule_mode="x")
    assert DatasetOptions(schedule_mode="linear").schedule_mode == "linear"


def test_the_record_rejects_an_unknown_field():
    with pytest.raises(msgspec.ValidationError, match="unknown field `shufle`"):
        msgspec.convert({"shufle": 3}, DatasetOptions)


@pytest.fixture(scope="module")
def text(tmp_path_factory):
    return make_text_dataset(tmp_path_factory.mktemp("text"), shards=2, per_shard=8)


def _write(tmp_path, cfg) -> str:
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


def test_a_plan_yaml_holds_any_plain_option(text, tmp_path):
    cfg = load_plan_config(
        _write(
            tmp_path,
            {
                "path": text,
                "world_size": 2,
                "batch_size": 2,
                "seed": 3,
                "columns": ["text.chars"],
                "error_policy": "skip",
                "image_decode": {"out": "numpy"},
                "repeat": False,
                "distribution": "per_rank",
            },
        ),
        {"seed": 4, "split": None},  # flags win; None is "not given"
    )
    opts = cfg.options
    assert cfg.world_size == 2 and opts.seed == 4 and opts.split == "train"
    assert opts.columns == ("text.chars",) and opts.error_policy is ErrorPolicy.SKIP
    assert opts.image_decode == ImageDecodeOptions(out="numpy")
    # The plan of a config is the plan of get_train_dataset with the same options.
    pd = build_dataset(cfg, rank=1)
    same = fpipe.get_train_dataset(
        text,
        batch_size=2,
        seed=4,
        columns=["text.chars"],
        error_policy="skip",
        repeat=False,
        distribution="per_rank",
        topology=Topology(1, 2),
    )
    assert pd.plan.describe() == same.plan.describe() and len(pd) == len(same)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"shufle": 3}, r"plan.yaml: unknown keys \['shufle'\]"),
        ({"shuffle_bufer_size": 3}, "did you mean 'shuffle_buffer_size'"),
        ({"task_encoder": "mine"}, r"\['task_encoder'\] take Python objects"),
        ({"batch_size": "two"}, r"plan.yaml: Expected `int \| null`, got `str` - at `\$.batch_s"),
        ({"distribution": "random"}, r"plan.yaml: .*'random'.*distribution"),
    ],
)
def test_a_bad_plan_yaml_names_the_file_and_the_key(text, tmp_path, extra, message):
    with pytest.raises(ConfigError, match=message):
        load_plan_config(_write(tmp_path, {"path": text, "batch_size": 2, **extra}))


def test_python_only_options_are_fields():
    assert set(FIELDS) >= PYTHON_ONLY
