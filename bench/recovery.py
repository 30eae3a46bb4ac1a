"""Self-healing workers: what recovery costs when no fault happens, and what a fault costs.

    python bench/recovery.py             # ~1-2 minutes on 2 busy cores
    python bench/recovery.py --quick     # a smoke run

1. **No fault**: the same image loader (JPEG, decode + crop to 64 px, batch 16) with
   ``recover_workers=True`` and ``False``, interleaved within each repeat, for 2 worker
   processes, 2 thread workers and ``num_workers=0``; the median wall time of ``--batches``
   batches after a warm-up batch, and the ratio on/off (1.0: no cost).
   Wall times on a shared machine move by more than any cost of recovery, so the runs are
   paired (on and off back to back, alternating which goes first) and the main process's CPU
   time is printed too.
2. **Per batch and per sample**, measured alone: the recovery layer the consumer's results
   pass through (one generator step per batch), a worker's sample marks (two writes of a
   shared array per sample) and the send check of a worker's result (``check_sendable``: the
   batch pickled without its tensor data), against materializing a batch in one process.
3. **One SIGKILLed worker**: a loader whose worker kills itself once on one sample; whether
   its batches equal the uninterrupted run's, the recoveries counted, and the extra seconds.

Prints readable lines, then ONE JSON object as the last line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import fpipe  # noqa: E402
from fpipe.decode.image import ImageDecodeOptions  # noqa: E402


def _loader(path, *, workers, mode, recover, encoder=None, timeout=60.0):
    from tests.loader.encoders import RandomCropEncoder

    ds = fpipe.get_train_dataset(
        path, batch_size=16, shuffle_buffer_size=64, max_samples_per_sequence=8, seed=5,
        task_encoder=encoder or RandomCropEncoder(),
        image_decode=ImageDecodeOptions(target_size=64),
    )  # fmt: skip
    return fpipe.get_loader(
        ds, num_workers=workers, worker_mode=mode, recover_workers=recover, timeout=timeout
    )


def _timed_run(loader, batches: int) -> tuple[float, float]:
    """(wall seconds, this process's CPU seconds) of ``batches`` batches after a warm-up one."""
    it = iter(loader)
    next(it)  # warm-up: workers start
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(batches):
        next(it)
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
    it.close()
    return elapsed, cpu


def no_fault(path, batches: int, repeats: int) -> dict:
    out = {}
    for name, workers, mode in (("processes2", 2, "process"), ("threads2", 2, "thread"),
                                ("nw0", 0, "process")):  # fmt: skip
        runs: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
        for r in range(repeats):
            for recover in (True, False) if r % 2 == 0 else (False, True):
                loader = _loader(path, workers=workers, mode=mode, recover=recover)
                runs[recover].append(_timed_run(loader, batches))
        ratios = [a[0] / b[0] for a, b in zip(runs[True], runs[False])]
        on = statistics.median(t for t, _ in runs[True])
        off = statistics.median(t for t, _ in runs[False])
        cpu_on = statistics.median(c for _, c in runs[True])
        cpu_off = statistics.median(c for _, c in runs[False])
        print(f"{name}: recovery on {on:.3f} s, off {off:.3f} s for {batches} batches "
              f"(paired on/off median {statistics.median(ratios):.3f}, "
              f"spread {min(ratios):.2f}-{max(ratios):.2f}); main-process CPU on "
              f"{cpu_on:.3f} s, off {cpu_off:.3f} s")  # fmt: skip
        out[f"{name}_on_s"], out[f"{name}_off_s"] = round(on, 4), round(off, 4)
        out[f"{name}_on_over_off"] = round(statistics.median(ratios), 3)
        out[f"{name}_cpu_on_over_off"] = round(cpu_on / cpu_off, 3)
    return out


def per_batch(path, batches: int) -> dict:
    """What recovery and the send check add, per batch and per sample, measured alone (load
    on the machine moves these far less than whole-loader wall times)."""
    import collections
    import timeit

    from fpipe.loader._recovery import Healer
    from fpipe.loader._send import check_sendable
    from fpipe.loader._workers import WorkerMarks

    loader = _loader(path, workers=0, mode="process", recover=False)
    mat = loader.dataset.materializer
    state, recipes = loader.plan.init(), []
    for _ in range(batches):
        state, out = loader.plan.next(state, 1)
        recipes.append(out[0])
    runs = []
    for _ in range(3):
        t0 = time.perf_counter()
        results = [mat(r) for r in recipes]
        runs.append((time.perf_counter() - t0) / batches)
    per = min(runs)  # the least disturbed run
    per_sample = per / len(recipes[0].refs)
    # the healer's layer: one generator step per batch (what the consumer pays with no fault)
    n = 200_000
    pending: collections.deque = collections.deque()

    def pool(start):
        for i in range(n):
            pending.append((i, 0, None))
            yield i

    def consume(it):
        for _ in it:
            pending.popleft()

    healer_s = min(timeit.repeat(lambda: consume(Healer(mat).results(pool, pending, 0)),
                                 number=1, repeat=3)) / n  # fmt: skip
    plain_s = min(timeit.repeat(lambda: consume(pool(0)), number=1, repeat=3)) / n
    layer = max(healer_s - plain_s, 0.0)
    # a worker's sample marks: two writes of a shared array per sample (outside a worker the
    # writer is None, so time the closure a worker gets)
    array = WorkerMarks(2).array

    def mark(step: int, position: int) -> None:
        array[0], array[1] = step, position

    mark_s = 2 * min(timeit.repeat(lambda: mark(7, 3), number=100_000, repeat=3)) / 100_000
    t0 = time.perf_counter()
    for res in results:
        assert check_sendable(res) is None
    check_s = (time.perf_counter() - t0) / len(results)
    print(f"materialize {per * 1e3:.2f} ms/batch ({per_sample * 1e6:.0f} us/sample); "
          f"recovery layer {layer * 1e6:.2f} us/batch ({layer / per:.4%}); "
          f"marks {mark_s * 1e6:.2f} us/sample ({mark_s / per_sample:.4%}); "
          f"send check {check_s * 1e6:.1f} us/batch ({check_s / per:.3%})")  # fmt: skip
    return {
        "materialize_ms_per_batch": round(per * 1e3, 3),
        "recovery_layer_us_per_batch": round(layer * 1e6, 3),
        "recovery_layer_fraction": round(layer / per, 6),
        "marks_us_per_sample": round(mark_s * 1e6, 3),
        "marks_fraction": round(mark_s / per_sample, 6),
        "send_check_us_per_batch": round(check_s * 1e6, 2),
        "send_check_fraction": round(check_s / per, 5),
    }


def one_kill(path, root: Path, batches: int) -> dict:
    from tests.loader.encoders import FaultEncoder
    from tests.loader.helpers import digest

    ref_loader = _loader(path, workers=2, mode="process", recover=True)
    it = iter(ref_loader)
    ref = [next(it) for _ in range(batches)]
    it.close()
    key = ref[batches // 2]["keys"][0]
    trigger = root / "trigger"
    trigger.write_text("on")
    loader = _loader(path, workers=2, mode="process", recover=True,
                     encoder=FaultEncoder("kill-once", trigger, key))  # fmt: skip
    t0 = time.perf_counter()
    it = iter(loader)
    got = [next(it) for _ in range(batches)]
    with_fault = time.perf_counter() - t0
    it.close()
    t0 = time.perf_counter()
    it = iter(_loader(path, workers=2, mode="process", recover=True))
    for _ in range(batches):
        next(it)
    without = time.perf_counter() - t0
    it.close()
    mismatched = sum(digest(a) != digest(b) for a, b in zip(got, ref))
    stats = loader.stats()
    print(f"one SIGKILL: {stats.recoveries} recovery, {mismatched} batches mismatched, "
          f"{with_fault:.2f} s against {without:.2f} s without the fault")  # fmt: skip
    return {
        "kill_recoveries": stats.recoveries,
        "kill_batches_mismatched": mismatched,
        "kill_extra_s": round(with_fault - without, 3),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batches", type=int, default=60)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    if args.quick:
        args.batches, args.repeats = 20, 2
    from tests.loader.helpers import prepared_images

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        path = prepared_images(root / "images", shards=8, per_shard=64)
        result = {"batches": args.batches, "repeats": args.repeats}
        result |= no_fault(path, args.batches, args.repeats)
        result |= per_batch(path, args.batches)
        result |= one_kill(path, root, min(args.batches, 20))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
