"""Multi-process tests under ``torchrun`` (gloo on CPU): global mode across 2 ranks, exact
resume on 1, 2 and 3 ranks in new processes, the consistency check, per-rank mode, and the
scenario HF accelerate's DataLoader gets wrong (3 epochs, interrupted after 2 batches of
epoch 2)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

#: about 25 s of CPU (nine processes each import torch): opt-in with -m integration
pytestmark = [pytest.mark.slow, pytest.mark.integration]

torch_dist = pytest.importorskip("torch.distributed")
if not (torch_dist.is_available() and torch_dist.is_gloo_available()):
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

ROOT = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).with_name("torchrun_worker.py")
EXAMPLE = ROOT / "examples" / "accelerate_resume.py"
STEPS_PER_EPOCH = 8  # 48 samples, global batch 6
SAVE_AT = STEPS_PER_EPOCH + 2  # after 2 batches of the second epoch
TIMEOUT = 240


def _free_ports(n: int) -> list[int]:
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def _env() -> dict:
    return dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))


def _start(nproc: int, port: int, script: Path, *args: str) -> subprocess.Popen:
    cmd = [
        sys.executable, "-m", "torch.distributed.run",
        f"--nproc_per_node={nproc}", "--master_addr=127.0.0.1", f"--master_port={port}",
        str(script), *args,
    ]  # fmt: skip
    return subprocess.Popen(
        cmd, cwd=ROOT, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,
    )  # fmt: skip


def _start_ranks(nproc: int, port: int, script: Path, *args: str) -> list[subprocess.Popen]:
    """The rank processes alone, with the variables torchrun gives them (no launcher process:
    each launcher imports torch too, about 2.5 s of CPU)."""
    procs = []
    for rank in range(nproc):
        env = _env() | dict(
            RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(nproc),
            LOCAL_WORLD_SIZE=str(nproc), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
        )  # fmt: skip
        procs.append(subprocess.Popen(
            [sys.executable, str(script), *args], cwd=ROOT, env=env, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True, start_new_session=True,
        ))  # fmt: skip
    return procs


def _wait(proc: subprocess.Popen) -> str:
    """The process's output, once it exited with status 0."""
    try:
        out, _ = proc.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the launcher and its workers (our own group)
        out, _ = proc.communicate()
        pytest.fail(f"torchrun timed out after {TIMEOUT}s:\n{out[-4000:]}")
    assert proc.returncode == 0, f"torchrun failed:\n{out[-4000:]}"
    return out


def _launch_all(jobs, *, launcher: bool = True) -> list[str]:
    """Start every (nproc, script, args) job at once (they are independent); wait for all and
    return their outputs. ``launcher=False`` starts the ranks directly instead of through
    torchrun (one output per rank)."""
    ports = _free_ports(len(jobs))
    procs = []
    for (n, script, args), port in zip(jobs, ports):
        procs += (
            [_start(n, port, script, *args)] if launcher else _start_ranks(n, port, script, *args)
        )
    return [_wait(p) for p in procs]


def _read(out: Path, mode: str, world: int) -> list[dict]:
    return [json.loads((out / f"{mode}_rank{r}.json").read_text()) for r in range(world)]


def _global_order(results: list[dict]) -> list[str]:
    """Keys in global order: step by step, rank by rank."""
    order = []
    for step in range(max(len(r["batches"]) for r in results)):
        for r in results:
            if step < len(r["batches"]):
                order.extend(r["batches"][step]["keys"])
    return order


@pytest.fixture(scope="module")
def runs(text_dataset, tmp_path_factory):
    """The uninterrupted 2-rank run under torchrun (state saved after SAVE_AT batches), then
    resumes of that state in new processes on 1, 2 and 3 ranks (started together, directly)."""
    base = tmp_path_factory.mktemp("torchrun")
    ref = base / "ref"
    ref.mkdir()
    _launch_all([(2, WORKER, ("run", text_dataset, str(ref), "--save-at", str(SAVE_AT)))])
    state = str(ref / "state.pt")
    jobs, outs = [], {}
    for world in (1, 2, 3):
        outs[world] = base / f"resume{world}"
        outs[world].mkdir()
        jobs.append((world, WORKER, ("resume", text_dataset, str(outs[world]), "--state", state)))
    _launch_all(jobs, launcher=False)
    return {
        "ref_dir": ref,
        "ref": _read(ref, "run", 2),
        "resume": {w: _read(o, "resume", w) for w, o in outs.items()},
    }


def test_two_ranks_get_disjoint_samples_covering_each_epoch(runs):
    ref = runs["ref"]
    assert [len(r["batches"]) for r in ref] == [3 * STEPS_PER_EPOCH] * 2
    for epoch in range(3):
        per_rank = [
            [k for b in r["batches"] if b["epoch"] == epoch for k in b["keys"]] for r in ref
        ]
        assert not set(per_rank[0]) & set(per_rank[1])
        assert sorted(per_rank[0] + per_rank[1]) == sorted(set(per_rank[0] + per_rank[1]))
        assert len(per_rank[0]) + len(per_rank[1]) == 48
    epochs = [_global_order([{"batches": [b for b in r["batches"] if b["epoch"] == e]}
                             for r in ref]) for e in range(3)]  # fmt: skip
    assert epochs[0] != epochs[1] != epochs[2]  # a new order every epoch


def test_state_bytes_equal_on_both_ranks(runs):
    a = (runs["ref_dir"] / "state_rank0.bin").read_bytes()
    b = (runs["ref_dir"] / "state_rank1.bin").read_bytes()
    assert a == b and len(a) < 1024


def test_consistency_check_catches_a_rank_ahead(runs):
    for r in runs["ref"]:
        assert r["mismatch"] is not None, "the disagreement was not caught"
        assert "ranks [0] took 2; ranks [1] took 3" in r["mismatch"]


def test_ranks_asking_for_different_blend_weights_are_refused(runs):
    for r in runs["ref"]:
        got = r["set_weights"]
        assert got["disagree"] is not None and "different weight changes" in got["disagree"]
        assert got["unchanged"] and got["applied"]


def test_per_rank_mode_disjoint_and_covering(runs):
    parts = [[k for b in r["per_rank"] for k in b] for r in runs["ref"]]
    assert not set(parts[0]) & set(parts[1])
    assert sorted(parts[0] + parts[1]) == sorted(set(parts[0] + parts[1]))
    assert len(parts[0] + parts[1]) == 48
    assert {k.split("/")[0] for k in parts[0]} == {"shard-00", "shard-01"}  # its own shards


def test_replicas_get_their_data_parallel_leaders_stream(runs, text_dataset):
    import fpipe
    from tests.distributed.helpers import batch_keys, build_dataset

    single = [batch_keys(b) for b in fpipe.get_loader(build_dataset(text_dataset, num_epochs=1))]
    for r in runs["ref"]:
        assert r["replica_topology"] == [0, 1]
        assert r["replica"] == single


@pytest.mark.parametrize("world", [1, 3])
def test_resume_on_another_world_size_continues_global_order(runs, world):
    full = _global_order(runs["ref"])
    rest = _global_order(runs["resume"][world])
    assert rest == full[SAVE_AT * 6 :]
    assert [len(r["batches"]) for r in runs["resume"][world]] == [
        3 * STEPS_PER_EPOCH - SAVE_AT
    ] * world


def test_accelerate_scenario_epochs_2_and_3_after_resume(runs):
    """2 processes, 3 shuffled epochs, interrupted after 2 batches of epoch 2, resumed in new
    processes: the rest of epoch 2 and all of epoch 3 equal the uninterrupted run, per rank."""
    for ref, res in zip(runs["ref"], runs["resume"][2]):
        after = ref["batches"][SAVE_AT:]
        assert res["batches"] == after
        assert [b["epoch"] for b in res["batches"]] == [1] * 6 + [2] * 8


@pytest.fixture(scope="module")
def ten_samples(tmp_path_factory):
    """The accelerate scenario's data: 10 text samples in 2 shards."""
    from tests.distributed.helpers import make_text_dataset

    return make_text_dataset(tmp_path_factory.mktemp("ten"), shards=2, per_shard=5)


def _docs_accelerate_flags() -> list[str]:
    """The flags of the ``accelerate launch`` commands of docs/distributed.md (one set)."""
    text = (ROOT / "docs" / "distributed.md").read_text()
    flags = {
        line.split("accelerate launch", 1)[1].split(EXAMPLE.name)[0].replace("examples/", "")
        for line in text.splitlines()
        if line.startswith("accelerate launch") and EXAMPLE.name in line
    }
    assert len(flags) == 1, f"the docs' accelerate commands differ: {flags}"
    return flags.pop().split()


def _start_accelerate(port: int, *args: str) -> subprocess.Popen:
    """The docs' ``accelerate launch`` command (its port made free), accelerate's config
    folder empty so that no user configuration changes what it does."""
    cmd = [
        sys.executable, "-m", "accelerate.commands.launch", *_docs_accelerate_flags(),
        "--main_process_port", str(port), str(EXAMPLE), *args,
    ]  # fmt: skip
    env = _env() | {"HF_HOME": str(Path(args[args.index("--ckpt") + 1]).parent / "hf")}
    return subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,
    )  # fmt: skip


def test_accelerate_register_for_checkpointing(ten_samples, tmp_path):
    """examples/accelerate_resume.py, 2 processes: 10 samples, batch 1 per process, shuffled,
    saved by accelerate after the 2nd batch of the second epoch (by the global epoch, the same
    on both processes), restored in new processes. The first run is the docs' ``accelerate
    launch`` command (it must start 2 processes on this CPU machine); the resume starts the 2
    ranks directly, with the variables torchrun gives them (torchrun itself is run above)."""
    if os.environ.get("CI"):
        import accelerate  # noqa: F401 - in the test extra: CI must run this, not skip it
    else:
        pytest.importorskip("accelerate")
    ckpt = tmp_path / "ckpt"
    common = ("--data", ten_samples, "--ckpt", str(ckpt), "--global-batch-size", "2")
    full, res = str(tmp_path / "full_{rank}.json"), str(tmp_path / "res_{rank}.json")
    _wait(_start_accelerate(_free_ports(1)[0], *common, "--record", full))
    assert (tmp_path / "full_1.json").exists(), "the docs' accelerate command started 1 process"
    outs = _launch_all([(2, EXAMPLE, (*common, "--resume", "--record", res))], launcher=False)
    for rank, out in enumerate(outs):  # the example's own verdict, from the replayed full run
        assert f"process {rank}: the resumed stream equals the uninterrupted one" in out, out
    fulls = [json.loads((tmp_path / f"full_{r}.json").read_text()) for r in range(2)]
    ress = [json.loads((tmp_path / f"res_{r}.json").read_text()) for r in range(2)]
    steps = [[(b["epoch"], b["position"]) for b in f] for f in fulls]
    assert steps[0] == steps[1], "the processes disagree on the global position"
    epochs = [e for e, _ in steps[0]]
    assert len(epochs) == 15 and epochs == sorted(epochs) and epochs[-1] == 2
    save_at = epochs.index(1) + 2  # after the 2nd batch of the second epoch
    for full, res in zip(fulls, ress):
        assert res == full[save_at:]
