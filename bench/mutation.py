"""Mutation testing of the plan modules that decide order and mixing: do the tests have teeth?

For each module below, mutmut (3.x, the ``mutation`` extra: ``pip install -e '.[mutation]'``)
makes small changes to its functions (``<`` to ``<=``, ``+ 1`` to ``+ 2``, ``and`` to ``or``, a
value to ``None``, ...), one at a time, and runs the tests that call the changed function. A
mutant is *killed* when a test fails (or hangs: a timeout), and *survives* when all pass: a
change in behaviour no test notices. Some mutants do not change behaviour at all (a clamp that
can never bind, a default argument every caller passes); those are *equivalent*, listed with a
one-line reason in ``bench/mutation_equivalent.yaml`` and left out of the score.

Each module runs in its own work folder outside the repository (``--workdir``, default
``$TMPDIR/fpipe-mutation/<module>``): a copy of ``fpipe/``, ``tests/``, ``property_tests/`` and
``conftest.py``, with a ``pyproject.toml`` naming that module and its tests (``TESTS`` below:
the module's unit tests and the property tests that exercise it). The property tests run under
a small, derandomized Hypothesis profile (``--examples``, default 10 per property), so a mutant
run is fast and every run gives the same verdicts. mutmut keeps its results in the work folder:
a rerun only re-checks the functions (or tests) that changed; ``--fresh`` starts over.

Usage::

    python bench/mutation.py                        # every module, 2 workers (~25-40 min)
    python bench/mutation.py --modules skip,distribute -j 2
    python bench/mutation.py --show-survivors       # print each survivor's diff

Targets: overall ``mutation_score`` >= 0.9 and every module's >= 0.8, where
``mutation_score = killed / (mutants - equivalent)``. The last line of output is one JSON
object: per module and overall ``mutants``, ``killed``, ``equivalent``, ``survived``,
``mutation_score``, and ``min_module_score``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
EQUIVALENT_FILE = ROOT / "bench" / "mutation_equivalent.yaml"

# module path -> the tests that exercise it (mutmut runs, per mutant, those of them that call
# the mutated function).

#: what tests the weight changes and seeks of a steered loader (fpipe/loader/ steering,
#: seek, blend_changes, mix_history: one module before it was split by job)
STEERING_TESTS = [
    "tests/loader/test_online_weights.py",
    "tests/plan/test_seek_cost.py",
    "tests/plan/test_advance.py",
    "property_tests/test_online_mix.py",
    "property_tests/test_fast_seek.py",
    "property_tests/test_seek_walk.py",
    # the state machine's kept sequences (its random run takes ~30 s per mutant)
    "property_tests/test_loader_machine.py::test_found_sequences",
]

TESTS: dict[str, list[str]] = {
    "fpipe/plan/skip.py": [
        "tests/plan/test_skip.py",
        "tests/plan/test_skip_ranges.py",
        "tests/distributed/test_skip_steps.py::test_normalize_merges_sorts_and_refuses_bad_ranges",
        "property_tests/test_fast_seek.py",
    ],
    "fpipe/plan/batch_schedule.py": [
        "tests/plan/test_batch_schedule.py",
        "tests/plan/test_batch_schedule_megatron.py",
        "tests/plan/test_skip.py",
        "tests/plan/test_advance.py",
    ],
    "fpipe/plan/distribute.py": [
        "tests/plan/test_batch_distribute.py",
        "tests/plan/test_distribute_rules.py",
        "tests/plan/test_batch_schedule.py",
        "tests/plan/test_skip.py",
        "tests/plan/test_contract_sweep.py",
        "property_tests/test_worker_independence.py",
    ],
    "fpipe/plan/_shuffle.py": [
        "tests/plan/test_shuffle.py",
        "tests/plan/test_slice_shuffle_rules.py",
        "tests/plan/test_advance.py",
        "tests/plan/test_contract_sweep.py",
        "property_tests/test_rng_properties.py",
        "property_tests/test_order_differs.py",
        "property_tests/test_containment.py",
    ],
    "fpipe/plan/slice_order.py": [
        "tests/plan/test_slice_order.py",
        "tests/plan/test_shard_slices.py",
        "tests/plan/test_shuffle.py",
        "property_tests/test_coverage.py",
    ],
    "fpipe/plan/shard_slices.py": [
        "tests/plan/test_shard_slices.py",
        "tests/plan/test_slice_order.py",
        "property_tests/test_coverage.py",
    ],
    "fpipe/plan/blend.py": [
        "tests/plan/test_blend_rules.py",
        "tests/plan/test_blend.py",
        "tests/plan/test_blend_advance.py",
        "property_tests/test_blend_fidelity.py",
        "property_tests/test_token_blend.py",
        # the quota draw (its reference) and its weight changes mid-block
        "tests/plan/test_blend_quota.py",
        "tests/plan/test_blend_quota_refusals.py",
        "tests/loader/test_online_weights.py",
    ],
    "fpipe/plan/blend_state.py": [
        "tests/plan/test_blend_rules.py",
        "tests/plan/test_blend.py",
        "tests/plan/test_blend_advance.py",
        "property_tests/test_blend_fidelity.py",
        "property_tests/test_token_blend.py",
        # the quota draw (its reference) and its weight changes mid-block
        "tests/plan/test_blend_quota.py",
        "tests/plan/test_blend_quota_refusals.py",
        "tests/loader/test_online_weights.py",
    ],
    "fpipe/plan/blend_block.py": [
        "tests/plan/test_blend_rules.py",
        "tests/plan/test_blend.py",
        "tests/plan/test_blend_advance.py",
        "property_tests/test_blend_fidelity.py",
        "property_tests/test_token_blend.py",
        # the quota draw (its reference) and its weight changes mid-block
        "tests/plan/test_blend_quota.py",
        "tests/loader/test_online_weights.py",
    ],
    "fpipe/plan/blend_choice.py": [
        "tests/plan/test_blend.py",
        "tests/plan/test_blend_choice_rules.py",
        "property_tests/test_blend_fidelity.py",
        "property_tests/test_token_blend.py",
        # the quota draw (its reference) and its weight changes mid-block
        "tests/plan/test_blend_quota.py",
        "tests/loader/test_online_weights.py",
    ],
    "fpipe/plan/blend_advance.py": [
        "tests/plan/test_blend_advance.py",
        "tests/plan/test_blend.py",
        "tests/plan/test_advance.py",
        "property_tests/test_fast_seek.py",
    ],
    "fpipe/plan/_blend_units.py": [
        "tests/plan/test_blend_units.py",
        "tests/plan/test_blend.py",
        "property_tests/test_token_blend.py",
    ],
    "fpipe/plan/recipe_blend.py": [
        "tests/plan/test_recipe_blend.py",
    ],
    "fpipe/plan/online_mix.py": [
        "tests/plan/test_blend.py",
        "tests/plan/test_online_mix_rules.py",
        "tests/plan/test_blend_quota.py",
        "property_tests/test_online_mix.py",
    ],
    "fpipe/core/advance.py": [
        "tests/plan/test_advance.py",
        "property_tests/test_fast_seek.py",
        # sources whose steps may hold nothing for a rank (next_steps): blends of whole datasets
        "tests/plan/test_recipe_blend.py",
        "tests/loader/test_batch_blend.py::test_seek_lands_on_the_same_step_on_every_rank_past_a_short_last_batch",
    ],
    "fpipe/loader/seek.py": STEERING_TESTS,
    "fpipe/loader/rank_epoch.py": ["property_tests/test_seek_walk.py"],
    "fpipe/plan/blend_count.py": [
        "property_tests/test_blend_count.py",
        "property_tests/test_fast_seek.py",
    ],
    "fpipe/loader/steering.py": STEERING_TESTS,
    "fpipe/loader/blend_changes.py": STEERING_TESTS,
    "fpipe/loader/mix_history.py": STEERING_TESTS,
    "fpipe/loader/_steering.py": [
        "tests/loader/test_online_weights.py",
        "property_tests/test_online_mix.py",
        "property_tests/test_loader_machine.py::test_found_sequences",
    ],
}

# mutmut exit code -> verdict. A timeout or a crash is a detected mutant; "no tests" (no test
# calls the function) and "suspicious" count as survivors: nothing caught them.
KILLED_CODES = {1, 3, 24, -24, 152, 255, 36, -11, -9}


def short_name(module: str) -> str:
    return Path(module).stem


def copy_tree(src: Path, dst: Path) -> None:
    shutil.copytree(
        src,
        dst,
        ignore=shutil.ignore_patterns("__pycache__", "*.pyc", ".hypothesis"),
        dirs_exist_ok=True,
    )


def prepare(work: Path, module: str, examples: int, fresh: bool) -> None:
    """Write ``work``: the sources and tests, and a pyproject.toml naming ``module``."""
    if fresh and work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True, exist_ok=True)
    for name in ("fpipe", "tests", "property_tests"):
        # Replace (not merge) so files deleted in the repository go away here too.
        if (work / name).exists():
            shutil.rmtree(work / name)
        copy_tree(ROOT / name, work / name)
    conftest = (ROOT / "conftest.py").read_text()
    conftest += (
        "\n\n# bench/mutation.py: a small, derandomized profile so each mutant run is fast.\n"
        f'settings.register_profile("mutation", max_examples={examples}, deadline=None,\n'
        "    derandomize=True, database=None, suppress_health_check=list(HealthCheck))\n"
        'settings.load_profile("mutation")\n'
    )
    write_if_changed(work / "conftest.py", conftest)
    pyproject = (ROOT / "pyproject.toml").read_text()
    pyproject += (
        "\n[tool.mutmut]\n"
        'source_paths = ["fpipe"]\n'
        f"only_mutate = [{json.dumps(module)}]\n"
        'also_copy = ["property_tests/", "conftest.py"]\n'
        f"pytest_add_cli_args_test_selection = {json.dumps(TESTS[module])}\n"
        # One process per mutant run (no xdist), no cache folder; the integration marker is
        # already deselected by the project's addopts.
        'pytest_add_cli_args = ["-n", "0", "-p", "no:cacheprovider", "-W", "ignore"]\n'
        "use_git_change_detection = false\n"
        "timeout_multiplier = 10.0\n"
    )
    write_if_changed(work / "pyproject.toml", pyproject)


def write_if_changed(path: Path, text: str) -> None:
    # mutmut invalidates its cached results when pyproject.toml changes; keep it untouched.
    if not path.exists() or path.read_text() != text:
        path.write_text(text)


def recheck_survivors(work: Path, module: str) -> None:
    """Forget the cached verdicts of survivors, so this run checks them against the tests as
    they are now (mutmut keeps a verdict until the function itself changes)."""
    meta = work / "mutants" / (module + ".meta")
    if not meta.exists():
        return
    data = json.loads(meta.read_text())
    codes = data["exit_code_by_key"]
    for key, code in codes.items():
        if code not in KILLED_CODES:
            codes[key] = None
    meta.write_text(json.dumps(data))


def run_mutmut(work: Path, jobs: int, quiet: bool) -> None:
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    env.pop("HYPOTHESIS_PROFILE", None)
    cmd = [sys.executable, "-m", "mutmut", "run", "--max-children", str(jobs)]
    out = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True)
    tail = (out.stdout + out.stderr).strip().splitlines()
    if out.returncode != 0:
        print("\n".join(tail[-40:]))
        raise SystemExit(f"mutmut failed in {work} (exit {out.returncode})")
    if not quiet:
        # mutmut's progress line is redrawn with \r; keep its last state.
        last = [line.rsplit("\r", 1)[-1] for line in tail[-3:]]
        print("   ", " | ".join(x.strip() for x in last if x.strip()))


def verdicts(work: Path, module: str) -> dict[str, int | None]:
    meta = work / "mutants" / (module + ".meta")
    return json.loads(meta.read_text())["exit_code_by_key"]


def function_of(mutant: str) -> str:
    """``fpipe.plan.skip.x_next_recipe__mutmut_3`` -> ``next_recipe``; methods ->
    ``Class.method``."""
    name = mutant.rsplit(".", 1)[-1]
    name = re.sub(r"__mutmut_\d+$", "", name)
    if name.startswith("x\u01c1"):
        return ".".join(name[2:].split("\u01c1"))
    return name[2:] if name.startswith("x_") else name


def diffs_of(work: Path, module: str, mutants: list[str]) -> dict[str, tuple[str, str]]:
    """The original and the mutated lines of each mutant (stripped, joined with ' / ')."""
    from mutmut.configuration import reset_config
    from mutmut.mutation.diff_apply import get_diff_for_mutant

    cwd = os.getcwd()
    os.chdir(work)  # mutmut reads its config and the mutants folder from the working directory
    reset_config()
    try:
        out = {}
        for mutant in mutants:
            minus, plus = [], []
            for line in get_diff_for_mutant(mutant, path=module).splitlines():
                if line.startswith(("---", "+++")):
                    continue
                if line.startswith("-"):
                    minus.append(line[1:].strip())
                elif line.startswith("+"):
                    plus.append(line[1:].strip())
            out[mutant] = (" / ".join(minus), " / ".join(plus))
        return out
    finally:
        os.chdir(cwd)


def load_equivalent() -> list[dict]:
    if not EQUIVALENT_FILE.exists():
        return []
    data = yaml.safe_load(EQUIVALENT_FILE.read_text()) or {}
    entries = data.get("equivalent", []) or []
    for e in entries:
        missing = {"module", "function", "line", "mutated", "why"} - set(e)
        if missing:
            raise SystemExit(f"{EQUIVALENT_FILE.name}: entry {e} lacks {sorted(missing)}")
    return entries


def is_equivalent(entries: list[dict], module: str, function: str, line: str, mutated: str):
    for e in entries:
        if (
            e["module"] == module
            and e["function"] == function
            and " ".join(e["line"].split()) == " ".join(line.split())
            and (e["mutated"] == "*" or " ".join(e["mutated"].split()) == " ".join(mutated.split()))
        ):
            return e
    return None


def score(killed: int, mutants: int, equivalent: int) -> float | None:
    n = mutants - equivalent
    return round(killed / n, 4) if n else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--modules", default="", help="comma-separated stems (default: all)")
    ap.add_argument("-j", "--jobs", type=int, default=2, help="mutmut --max-children")
    ap.add_argument("--examples", type=int, default=10, help="Hypothesis examples per property")
    ap.add_argument(
        "--workdir", default=os.path.join(tempfile.gettempdir(), "fpipe-mutation"), type=Path
    )
    ap.add_argument("--fresh", action="store_true", help="discard cached mutmut results")
    ap.add_argument("--show-survivors", action="store_true", help="print each survivor's diff")
    args = ap.parse_args()

    wanted = {m.strip() for m in args.modules.split(",") if m.strip()}
    modules = [m for m in TESTS if not wanted or short_name(m) in wanted]
    unknown = wanted - {short_name(m) for m in TESTS}
    if unknown:
        raise SystemExit(f"unknown modules: {sorted(unknown)}; known: {[*map(short_name, TESTS)]}")
    workdir = args.workdir.resolve()
    if ROOT in workdir.parents or workdir == ROOT:
        raise SystemExit("--workdir must be outside the repository")
    equivalent_entries = load_equivalent()
    print(f"mutmut over {len(modules)} modules, -j {args.jobs}, {args.examples} examples/property")

    per_module: dict[str, dict] = {}
    survivors_out: list[dict] = []
    used_equivalent: set[int] = set()
    for module in modules:
        work = workdir / short_name(module)
        print(f"{module}: tests {' '.join(TESTS[module])}")
        prepare(work, module, args.examples, args.fresh)
        recheck_survivors(work, module)
        run_mutmut(work, args.jobs, quiet=False)
        codes = verdicts(work, module)
        killed = sum(1 for c in codes.values() if c in KILLED_CODES)
        equivalent = 0
        survived = []
        diffs = diffs_of(work, module, [m for m, c in codes.items() if c not in KILLED_CODES])
        for mutant, code in sorted(codes.items()):
            if code in KILLED_CODES:
                continue
            function = function_of(mutant)
            line, mutated = diffs[mutant]
            entry = is_equivalent(equivalent_entries, module, function, line, mutated)
            if entry is not None:
                equivalent += 1
                used_equivalent.add(id(entry))
                continue
            status = {0: "survived", 33: "no tests", 5: "no tests"}.get(code, f"exit {code}")
            survived.append(
                {
                    "mutant": mutant,
                    "function": function,
                    "status": status,
                    "line": line,
                    "mutated": mutated,
                }
            )
        row = {
            "mutants": len(codes),
            "killed": killed,
            "equivalent": equivalent,
            "survived": len(survived),
            "mutation_score": score(killed, len(codes), equivalent),
        }
        per_module[module] = row
        survivors_out += [dict(s, module=module) for s in survived]
        print(f"    {json.dumps(row)}")
        for s in survived:
            print(f"    SURVIVED {s['mutant']} ({s['status']})")
            if args.show_survivors:
                print(f"        - {s['line']}\n        + {s['mutated']}")

    stale = [
        e for e in equivalent_entries if id(e) not in used_equivalent and e["module"] in modules
    ]
    for e in stale:
        print(
            f"note: equivalent entry matched no surviving mutant: {e['module']} {e['function']}"
            f" {e['line']!r} -> {e['mutated']!r}"
        )
    total = {
        k: sum(r[k] for r in per_module.values())
        for k in ("mutants", "killed", "equivalent", "survived")
    }
    total["mutation_score"] = score(total["killed"], total["mutants"], total["equivalent"])
    scores = [r["mutation_score"] for r in per_module.values() if r["mutation_score"] is not None]
    result = {
        "modules": per_module,
        "overall": total,
        "mutation_score": total["mutation_score"],
        "min_module_score": min(scores) if scores else None,
        "survivors": [
            f"{s['module']}:{s['function']}: {s['line']} -> {s['mutated']}" for s in survivors_out
        ],
        "jobs": args.jobs,
        "hypothesis_examples": args.examples,
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
