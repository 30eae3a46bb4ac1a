"""Run Megatron-LM's own multimodal data code (``examples/multimodal``: dataloader_provider.py,
dataset_helpers.py, energon_util.py) on fpipe, with only its import lines changed, or on
Energon itself; not collected by pytest (CI has no Megatron-LM checkout).

    python tests/energon/megatron_example_check.py MEGATRON_EXAMPLE_DIR DATA_ROOT \\
        --loader fpipe|energon [--packing-buffer-size N] --out RESULT.json

``DATA_ROOT`` holds ``a/wds`` and ``b/wds`` (LLaVA-pretrain-style shards prepared by
``energon prepare`` as VQASample, the README's recipe) and ``blend.yaml``. With ``--loader
fpipe`` the three files are copied with ``megatron.energon`` changed to ``fpipe.energon``;
Megatron-LM's own ``megatron.core`` / ``megatron.training`` names (args, tokenizer,
parallel state) and the image tiling of ``image_processing`` (torchvision) are stand-ins here,
the same for both loaders. The script trains a few steps through the example's
``EnergonDataloader``, saves the loader state as Megatron-LM's checkpointing does
(``torch.save`` of ``{"dataloader_state_dict": ...}``), rebuilds everything with ``args.load``
set (the example's restore path) and checks the resumed batches; then it plays each validation
loader. It writes the batches' keys and token sums to ``--out``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import shutil
import sys
import tempfile
import types
from pathlib import Path

import numpy as np

IGNORE_INDEX, IMAGE_TOKEN, VIDEO_TOKEN = -100, "<image>", "<video>"


def _module(name: str, **attrs) -> types.ModuleType:
    mod = types.ModuleType(name)
    mod.__dict__.update(attrs)
    sys.modules[name] = mod
    return mod


class _Tokenizer:
    """Characters as token ids; the assistant's turn is the target."""

    pad = 0

    def convert_tokens_to_ids(self, token):
        return 1

    def tokenize_conversation(self, conv, return_target, add_generation_prompt):
        ids, target = [], []
        for turn in conv:
            text = turn["content"].replace(IMAGE_TOKEN, "\x01")
            toks = [1 if c == "\x01" else 2 + ord(c) % 500 for c in text]
            ids += toks
            target += toks if turn["role"] == "assistant" else [IGNORE_INDEX] * len(toks)
        return np.array(ids, dtype=np.int64), np.array(target, dtype=np.int64)


def _image_transform(img_h, vision_model_type):
    import torch

    def tiles(img, h, w, use_tiling, max_num_tiles, use_thumbnail, augment, **_kw):
        arr = np.asarray(img.convert("RGB").resize((w, h)), dtype=np.float32) / 255.0
        return [torch.from_numpy(arr).permute(2, 0, 1).contiguous()]

    return tiles


def install_stand_ins(args, checkpoint_dir: Path) -> None:
    """Megatron-LM's names the example imports, outside Energon."""
    import importlib.util

    real = importlib.util.find_spec("megatron")  # megatron.energon, when Energon is installed
    _module("megatron").__path__ = list(real.submodule_search_locations) if real else []
    _module("megatron.core").__path__ = []
    ps = _module(
        "megatron.core.parallel_state",
        get_data_parallel_rank=lambda: 0,
        get_data_parallel_world_size=lambda: 1,
        get_data_parallel_group=lambda: None,
        get_pipeline_model_parallel_rank=lambda: 0,
        get_pipeline_model_parallel_world_size=lambda: 1,
        get_tensor_model_parallel_rank=lambda: 0,
    )
    sys.modules["megatron.core"].parallel_state = ps
    _module("megatron.core.num_microbatches_calculator", get_num_microbatches=lambda: 2)
    for pkg in ("models", "models.multimodal", "models.vision"):
        _module(f"megatron.core.{pkg}").__path__ = []
    _module("megatron.core.models.multimodal.context_parallel", get_padding=lambda *a, **k: 0)
    _module(
        "megatron.core.models.multimodal.llava_model",
        IGNORE_INDEX=IGNORE_INDEX,
        IMAGE_TOKEN=IMAGE_TOKEN,
        VIDEO_TOKEN=VIDEO_TOKEN,
    )
    _module("megatron.core.models.vision.clip_vit_model", get_num_image_embeddings=lambda *a: 4)
    tokenizer = _Tokenizer()
    _module("megatron.training", get_args=lambda: args, get_tokenizer=lambda: tokenizer)
    _module(
        "megatron.training.checkpointing",
        get_checkpoint_name=lambda d, it, pipeline_rank=0, basename="": str(
            checkpoint_dir / f"iter_{it:07d}_{basename}"
        ),
    )
    _module(
        "image_processing",
        ImageTransform=_image_transform,
        find_closest_aspect_ratio=lambda *a, **k: (1, 1),
        find_closest_area_weighted_aspect_ratio=lambda *a, **k: (1, 1),
    )
    _module("torchvision").__path__ = []
    _module("torchvision.transforms", ToPILImage=object)


def copy_example(example: Path, dest: Path, loader: str) -> None:
    """The three files; for fpipe with ``megatron.energon`` changed to ``fpipe.energon`` in
    their import lines (and nowhere else)."""
    for name in ("dataloader_provider.py", "dataset_helpers.py", "energon_util.py"):
        text = (example / name).read_text()
        if loader == "fpipe":
            text = re.sub(
                r"^(from|import) megatron\.energon\b",
                r"\1 fpipe.energon",
                text,
                flags=re.M,
            )
        (dest / name).write_text(text)


def _summary(batch) -> list:
    toks = batch["tokens"]
    return [
        list(batch["__key__"]),
        int(toks.sum()),
        hashlib.sha1(toks.numpy().tobytes()).hexdigest()[:12],
        repr(batch["__restore_key__"])[:300],
    ]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("example", type=Path)
    ap.add_argument("data", type=Path)
    ap.add_argument("--loader", choices=("fpipe", "energon"), required=True)
    ap.add_argument("--packing-buffer-size", type=int, default=None)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--num-workers", type=int, default=2)
    opts = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="megatron-example-"))
    args = types.SimpleNamespace(
        data_path=[str(opts.data / "blend.yaml")],
        micro_batch_size=1 if opts.packing_buffer_size else 2,  # packs: one per batch
        num_workers=opts.num_workers,
        eval_iters=3,
        packing_buffer_size=opts.packing_buffer_size,
        packing_seq_length=200 if opts.packing_buffer_size else 0,
        dataloader_seq_length=None,
        prompt_path=str(opts.example / "manual_prompts.json"),
        img_h=16,
        img_w=16,
        patch_dim=8,
        vision_model_type="clip",
        disable_vision_class_token=False,
        pixel_shuffle=False,
        use_tile_tags=False,
        max_num_tiles=1,
        tokenizer_prompt_format="none",
        use_area_weighted_aspect_ratio=False,
        use_tiling=False,
        use_thumbnail=False,
        fp8=False,
        load=None,
        dataloader_save=str(work / "ckpt"),
        iteration=opts.steps,
    )
    (work / "ckpt").mkdir()
    install_stand_ins(args, work / "ckpt")
    code = work / "code"
    code.mkdir()
    copy_example(opts.example, code, opts.loader)
    sys.path.insert(0, str(code))

    import torch
    from dataloader_provider import train_valid_test_dataloaders_provider
    from megatron.training.checkpointing import get_checkpoint_name

    train, valid, _test = train_valid_test_dataloaders_provider(None)
    head = [_summary(next(train)) for _ in range(opts.steps)]
    state = train.save_state()
    ckpt = get_checkpoint_name(
        args.dataloader_save,
        args.iteration,
        pipeline_rank=0,
        basename="train_dataloader_dprank000.pt",
    )
    torch.save({"dataloader_state_dict": state}, ckpt)
    tail = [_summary(next(train)) for _ in range(4)]

    args.load = str(work / "ckpt")
    resumed, _valid, _ = train_valid_test_dataloaders_provider(None)
    again = [_summary(next(resumed)) for _ in range(4)]

    val = []
    for loader in valid:
        val.append([_summary(next(loader)) for _ in range(args.eval_iters * 2)])
    result = {
        "loader": opts.loader,
        "packing_buffer_size": opts.packing_buffer_size,
        "state_bytes": len(Path(ckpt).read_bytes()),
        "train_head": head,
        "train_tail": tail,
        "resumed": again,
        "resume_exact": again == tail,
        "val": val,
    }
    opts.out.write_text(json.dumps(result, indent=1))
    print(json.dumps({k: result[k] for k in ("loader", "packing_buffer_size", "resume_exact")}))
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
