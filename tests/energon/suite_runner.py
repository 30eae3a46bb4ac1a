"""Run Energon's own test files against ``fpipe.energon`` by the porting rule (not a test).

Usage (from any directory, with a Python that has fpipe's dependencies and pytest, e.g. the one
``.ci/run`` installs fpipe into)::

    python tests/energon/suite_runner.py --energon /path/to/megatron-energon-7.4.0

(``--energon``: a checkout of Energon's repository at the venv's version, whose ``tests/`` are
run; ``--fpipe``: another fpipe checkout than this script's.)

The porting promise is "Energon code ports by changing ``megatron.energon`` to ``fpipe.energon``
in its imports". This script checks it on Energon's own test suite:

1. It copies the checkout's ``tests/`` folder to a temporary directory and rewrites every
   ``megatron.energon[...]`` import *statement of the test files* (the AST decides, so strings,
   YAML text and comments stay as they are). The copy keeps its line numbers.
2. Each rewritten import resolves its names at run time (``tests/_energon_port.py`` in the copy):

   - **behaviour under test** -> fpipe. ``megatron.energon.X.Y`` is looked up first as the
     module ``fpipe.energon.X.Y`` (where fpipe mirrors Energon's submodule path), else as a name
     of ``fpipe.energon.av`` (for ``megatron.energon.av[...]``), ``fpipe.energon.transforms``
     (for ``megatron.energon.transforms[...]``) or ``fpipe.energon`` (everything else). A name
     fpipe does not have becomes a placeholder that raises ``MissingName`` where it is used, so a
     module still collects and each test fails on its own.
   - **data writing** -> real Energon. What the tests call to write their fixture datasets keeps
     Energon's own code, so both loaders read the same bytes: ``energon prepare``
     (``tools.prepare.command``, ``cli.main.prepare_media_command``),
     ``BaseWebdatasetFactory`` / ``CrudeJsonlDatasetFactory`` (used only for
     ``.prepare_dataset``), ``prepare_filesystem_dataset`` with its ``MediaFilterConfig`` /
     ``MediaFilterStrategy`` arguments, and the on-disk layout constants of
     ``flavors.webdataset.config`` (``MAIN_FOLDER_NAME``, ...). A path object from fpipe handed
     to these becomes Energon's ``EPath``.
3. It runs each test file with pytest in the Energon venv (``--python``; Energon's prepare code
   needs it; by default ``$FPIPE_ENERGON_PYTHON``, else the ``.venv-energon`` that ``.ci/run``
   creates in the fpipe checkout), with the fpipe source root (``--fpipe``) first on
   ``PYTHONPATH``. Packages the venv lacks (fpipe's ``msgspec``, ``av`` and ``obstore``; pytest
   and its pure-Python dependencies, which ``.ci/run`` does not install there) are linked from the
   Python running this script into a side folder (``--extras``), which is also on
   ``PYTHONPATH``.

4. torchvision: ``test_transforms.py`` and ``test_av_decoder.py`` import it at module level,
   and what they (and Energon's ``transforms``) use of it is ``torchvision.transforms``: pure
   Python over torch's own operators. torchvision's Linux wheels on PyPI are CUDA builds; on a
   CPU-only torch, ``torchvision/_C`` fails to load (it needs ``libtorch_cuda``) and
   ``import torchvision`` then stops in ``torchvision._meta_registrations`` ("operator
   torchvision::nms does not exist"), before ``transforms`` is reached. The runner therefore
   puts a ``sitecustomize.py`` of its own (written into the temporary copy, ``_SHIM_MODULE``
   below) first on ``PYTHONPATH`` of both runs, fpipe's and ``--reference``: when torchvision's
   C operators are absent, ``torchvision._meta_registrations`` and
   ``torchvision._autograd_registrations`` import as empty modules (they only register fake
   and autograd kernels of the C operators: ``nms``, ``roi_align``, ...), and nothing else
   changes. So ``torchvision.ops`` (detection operators) would still fail where called; no test
   of the two files calls it. Where torchvision is not installed at all, the shim does nothing
   and the two files fail to collect (counted as "not collectable here" in the summary). The
   venv used here got the wheel with ``pip install --no-deps
   torchvision-0.28.0-cp311-cp311-manylinux_2_28_x86_64.whl`` (the release made for torch 2.13),
   and ``soundfile`` (``test_av_decoder.py``'s WAV comparison skips itself without it); the
   runner's first line says which torchvision the venv has and whether the shim is active.

It prints per-file counts, one line per failing test with its first error, and the total over
the user-facing tests: every test of the suite except those listed in ``EXCLUDED`` below (each
with its reason: Energon internals that no porting user imports, tests whose subject is
Energon's own command-line tools, and helpers that are not tests). The remote-storage tests
(``msc://`` datasets on the local S3 emulator of Energon's tests, ``dss://`` paths) count.
``--reference`` runs the same files unrewritten, against Energon itself.
"""

from __future__ import annotations

import argparse
import ast
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

#: Tests outside the user-facing set, by file (a file name alone: the whole file) -> reason.
EXCLUDED: dict[str, str] = {
    "test_epathlib.py": "Energon internals: EPath / MSC / DSS path-library internals",
    "test_file_cache_pool.py": "Energon internals: the file cache pool's own API (eviction, "
    "sizes, concurrency); the user-facing cache behaviour is in test_crudedataset",
    "test_weakref.py": "Energon internals: fork hooks and weak callbacks",
    "test_webdataset_prepare.py": "Energon internals: prepare's aggregator pool and sqlite "
    "index writer",
    "test_sample_utils.py": "Energon internals: debug formatting helper",
    "test_metadataset_v2.py::test_joiner": "not a test: a joiner function the tests name in "
    "YAML (pytest collects it by its name and errors on its arguments in Energon too)",
    "test_crudedataset.py::TestDataset::test_prepare_dataset_s3_cmdline": "remote storage and "
    "Energon's CLI: `energon prepare` against the S3 emulator",
    "test_dataset.py::TestDataset::test_prepare_dataset_s3_cmdline": "remote storage and "
    "Energon's CLI: `energon prepare` against the S3 emulator",
    "test_dataset.py::TestDataset::test_validate_captioning_dataset": "Energon's CLI: "
    "`energon lint`",
    "test_dataset.py::TestDataset::test_prepare_dataset": "Energon's CLI: `energon prepare` "
    "(data writing stays Energon's)",
    "test_dataset.py::TestDataset::test_prepare_dataset_noninteractive": "Energon's CLI: "
    "`energon prepare` (data writing stays Energon's)",
    "test_dataset.py::TestDataset::test_prepare_dataset_noninteractive_crude": "Energon's CLI: "
    "`energon prepare` (data writing stays Energon's)",
    "test_dataset.py::TestDataset::test_preview_captioning_dataset": "Energon's CLI: "
    "`energon preview`",
    "test_dataset.py::TestDataset::test_info_captioning_dataset": "Energon's CLI: `energon info`",
    "test_jsonl_dataset.py::TestJsonlDataset::test_prepare": "Energon's CLI: `energon prepare` "
    "(data writing stays Energon's)",
    "test_dataset_det.py::TestDataset::test_redist": "Energon's CLI: `energon checkpoint redist` "
    "on Energon's own state format",
}

#: Energon names kept real because the tests call them only to write fixture data.
KEEP_REAL_MODULES = (
    "megatron.energon.tools.prepare",
    "megatron.energon.cli.main",
    "megatron.energon.flavors.webdataset.config",
)
KEEP_REAL_NAMES = (
    ("megatron.energon.flavors", "BaseWebdatasetFactory"),
    ("megatron.energon.flavors", "CrudeJsonlDatasetFactory"),
    ("megatron.energon.media.filesystem_prepare", "prepare_filesystem_dataset"),
    ("megatron.energon.media.extractor", "MediaFilterConfig"),
    ("megatron.energon.media.extractor", "MediaFilterStrategy"),
)
#: Import names the runs need that Energon's venv may lack (linked from this script's Python):
#: fpipe's dependencies (obstore: the remote-storage tests read through it), and pytest with its
#: own (pure Python: the same Python version suffices).
FPIPE_DEPENDENCIES = ("msgspec", "av", "obstore")
PYTEST_DEPENDENCIES = ("pytest", "_pytest", "py", "pluggy", "iniconfig", "packaging", "pygments")

_PORT_MODULE = '''"""Name resolution for the rewritten imports (written by suite_runner.py)."""
import functools
import importlib
import inspect
import os

KEEP_REAL_MODULES = {keep_modules!r}
KEEP_REAL_NAMES = {keep_names!r}


class MissingName(ImportError):
    """An Energon name that fpipe does not provide."""


class _MissingMeta(type):
    def __call__(cls, *args, **kwargs):
        raise MissingName(cls._message)

    def __getattr__(cls, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        raise MissingName(cls._message)

    def __getitem__(cls, item):
        return cls


def _missing(message):
    return _MissingMeta("Missing", (), {{"_message": message}})


def _to_real(value):
    if type(value).__module__.startswith("fpipe") and hasattr(value, "__fspath__"):
        from megatron.energon.epathlib import EPath

        return EPath(os.fspath(value))
    return value


def _real(module, name):
    value = getattr(importlib.import_module(module), name)
    if inspect.isfunction(value):

        @functools.wraps(value)
        def call_real(*args, **kwargs):
            args = [_to_real(a) for a in args]
            kwargs = {{k: _to_real(v) for k, v in kwargs.items()}}
            return value(*args, **kwargs)

        return call_real
    return value


def _fpipe_module(module):
    """The fpipe module for an Energon module path: the mirrored path, else its top level."""
    mirrored = "fpipe" + module[len("megatron"):]
    try:
        return importlib.import_module(mirrored)
    except ImportError:
        pass
    for sub in ("av", "transforms"):
        prefix = "megatron.energon." + sub
        if module == prefix or module.startswith(prefix + "."):
            return importlib.import_module("fpipe.energon." + sub)
    return importlib.import_module("fpipe.energon")


def resolve(module, name):
    """The object the porting rule gives ``from <module> import <name>``."""
    if module in KEEP_REAL_MODULES or (module, name) in KEEP_REAL_NAMES:
        return _real(module, name)
    target = _fpipe_module(module)
    try:
        return getattr(target, name)
    except AttributeError:
        return _missing(
            f"missing name: {{target.__name__}}.{{name}} (Energon's {{module}}.{{name}})"
        )


def resolve_module(module):
    """The object the porting rule gives ``import <module>``."""
    mirrored = "fpipe" + module[len("megatron"):]
    try:
        return importlib.import_module(mirrored)
    except ImportError:
        return _missing(f"missing module: {{mirrored}} (Energon's {{module}})")
'''


#: ``sitecustomize.py`` of the runs (see point 4 of the module docstring).
_SHIM_MODULE = '''"""Written by suite_runner.py: lets ``import torchvision`` work when its C
operators are absent (a CUDA wheel on a CPU-only torch), by importing the two modules that
register fake / autograd kernels of those operators as empty modules.
``torchvision.transforms`` (pure Python) is all Energon's tests use."""
import importlib.abc
import importlib.machinery
import sys

_REGISTRATIONS = ("torchvision._meta_registrations", "torchvision._autograd_registrations")


def _c_ops_absent():
    import torch

    try:
        torch.ops.torchvision.nms
    except (AttributeError, RuntimeError):
        return True
    return False


class _EmptyRegistrations(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path=None, target=None):
        if name in _REGISTRATIONS and _c_ops_absent():
            return importlib.machinery.ModuleSpec(name, self)
        return None

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        module.SHIMMED = True


sys.meta_path.insert(0, _EmptyRegistrations())
'''

#: Run in the venv with the shim on its path: which torchvision it has, and whether shimmed.
_TORCHVISION_PROBE = """
try:
    import torchvision, torchvision.transforms
except Exception as e:
    print(f"not importable ({type(e).__name__}: {e})"[:200])
else:
    shimmed = getattr(torchvision._meta_registrations, "SHIMMED", False)
    print(torchvision.__version__ + (" (C operators absent: their registrations skipped; "
          "torchvision.transforms only)" if shimmed else ""))
"""


def write_shim(workdir: Path) -> Path:
    """The folder holding the runs' ``sitecustomize.py`` (first on their ``PYTHONPATH``)."""
    folder = workdir / "_site_shim"
    folder.mkdir()
    (folder / "sitecustomize.py").write_text(_SHIM_MODULE)
    return folder


def torchvision_status(python: str, env: dict, cwd: Path) -> str:
    """What ``import torchvision`` gives to ``python`` in the runs' environment ``env`` (the
    shim first on its ``PYTHONPATH``): the version, or why it does not import."""
    proc = subprocess.run(
        [python, "-c", _TORCHVISION_PROBE], capture_output=True, text=True, env=env, cwd=cwd
    )
    lines = (proc.stdout or proc.stderr).strip().splitlines()
    return lines[-1] if lines else f"probe failed (exit {proc.returncode})"


def _is_energon(module: str | None) -> bool:
    return module is not None and (
        module == "megatron.energon" or module.startswith("megatron.energon.")
    )


def rewrite_imports(source: str) -> str:
    """``source`` with each ``megatron.energon`` import replaced by run-time resolution.

    The replacement occupies the statement's first line (its other lines become blank), so line
    numbers in tracebacks match Energon's file.
    """
    lines = source.splitlines(keepends=True)
    edits = []
    for node in ast.walk(ast.parse(source)):
        code = None
        if isinstance(node, ast.ImportFrom) and _is_energon(node.module):
            code = "; ".join(
                f"{a.asname or a.name} = _energon_port.resolve({node.module!r}, {a.name!r})"
                for a in node.names
            )
        elif isinstance(node, ast.Import) and any(_is_energon(a.name) for a in node.names):
            parts = []
            for a in node.names:
                if not _is_energon(a.name):
                    parts.append(f"import {a.name}" + (f" as {a.asname}" if a.asname else ""))
                elif a.asname:
                    parts.append(f"{a.asname} = _energon_port.resolve_module({a.name!r})")
                else:
                    raise ValueError(f"line {node.lineno}: 'import {a.name}' without 'as'")
            code = "; ".join(parts)
        if code is not None:
            edits.append((node.lineno, node.end_lineno or node.lineno, node.col_offset, code))
    for first, last, col, code in sorted(edits, reverse=True):
        indent = lines[first - 1][:col]
        newline = "\n"
        lines[first - 1 : last] = [
            f"{indent}import tests._energon_port as _energon_port; {code}{newline}"
        ] + [newline] * (last - first)
    return "".join(lines)


def prepare_copy(energon: Path, workdir: Path, reference: bool) -> list[str]:
    """Copy Energon's tests into ``workdir`` (rewritten unless ``reference``); the test files."""
    shutil.copytree(
        energon / "tests", workdir / "tests", ignore=shutil.ignore_patterns("__pycache__")
    )
    files = sorted(p.name for p in (workdir / "tests").glob("test_*.py"))
    if not reference:
        for path in (workdir / "tests").glob("*.py"):
            path.write_text(rewrite_imports(path.read_text()))
        (workdir / "tests" / "_energon_port.py").write_text(
            _PORT_MODULE.format(keep_modules=KEEP_REAL_MODULES, keep_names=KEEP_REAL_NAMES)
        )
    return files


def ensure_extras(python: str, extras: Path) -> None:
    """Link what the venv lacks of fpipe's and pytest's dependencies from this script's Python
    into ``extras`` (the venv itself is not changed)."""
    extras.mkdir(parents=True, exist_ok=True)
    for name in FPIPE_DEPENDENCIES + PYTEST_DEPENDENCIES:
        probe = subprocess.run(
            [python, "-c", f"import {name}"],
            capture_output=True,
            env={**os.environ, "PYTHONPATH": ""},
        )
        if probe.returncode == 0:
            continue
        module = __import__(name)
        source = Path(str(module.__file__))
        if source.name != "__init__.py":  # a one-file module (pytest's ``py.py``)
            link = extras / source.name
            if not link.exists():
                link.symlink_to(source)
            continue
        package_dir = source.parent
        for sibling in package_dir.parent.glob(f"{name}*"):
            if sibling.name == name or sibling.name.startswith(f"{name}.libs"):
                link = extras / sibling.name
                if not link.exists():
                    link.symlink_to(sibling)


def default_python(fpipe: Path) -> Path:
    """The Energon venv's Python: ``$FPIPE_ENERGON_PYTHON``, else the ``.venv-energon`` that
    ``.ci/run`` creates in the fpipe checkout (as tests/energon/test_energon_compare.py)."""
    given = os.environ.get("FPIPE_ENERGON_PYTHON")
    return Path(given) if given else fpipe / ".venv-energon" / "bin" / "python"


def _test_id(case: ET.Element) -> str:
    classname = case.get("classname", "")
    parts = classname.split(".")
    cls = parts[-1] if parts and parts[-1] and parts[-1][0].isupper() else None
    return f"{cls}::{case.get('name')}" if cls else str(case.get("name"))


def _first_error(element: ET.Element) -> str:
    message = element.get("message") or ""
    text = element.text or ""
    if not message.strip() and text:
        message = text.strip().splitlines()[-1]
    # Prefer the innermost raised error of the traceback text when it names one.
    errors = re.findall(r"^E\s+(\w+(?:\.\w+)*(?:Error|Exception|Name|Refused)\w*:.*)$", text, re.M)
    if errors:
        message = errors[0]
    return " ".join(message.split())[:220]


def run_file(python: str, workdir: Path, name: str, env: dict, timeout: float) -> list[dict]:
    """Run one test file; one record per test (``id``, ``outcome``, ``error``)."""
    report = workdir / f"{name}.xml"
    cmd = [
        python,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-o",
        "addopts=",
        f"--junitxml={report}",
        f"tests/{name}",
    ]
    try:
        proc = subprocess.run(
            cmd, cwd=workdir, env=env, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return [{"id": "<file>", "outcome": "error", "error": f"timeout after {timeout:.0f} s"}]
    if not report.exists():
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-1:] or ["no output"]
        return [{"id": "<file>", "outcome": "error", "error": tail[0][:220]}]
    records = []
    for case in ET.parse(report).getroot().iter("testcase"):
        outcome, error = "passed", ""
        for tag in ("failure", "error"):
            found = case.find(tag)
            if found is not None:
                outcome, error = ("failed" if tag == "failure" else "error"), _first_error(found)
                break
        if case.find("skipped") is not None:
            outcome = "skipped"
        # a collection error is reported as a test named after the module
        name = str(case.get("name", ""))
        test_id = _test_id(case) if name.startswith("test") and "." not in name else "<file>"
        records.append({"id": test_id, "outcome": outcome, "error": error})
    if not records:
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-3:]
        records.append({"id": "<file>", "outcome": "error", "error": " | ".join(tail)[:220]})
    return records


def declared_tests(source: str) -> list[str]:
    """The tests a file declares (``Class::test_x`` for TestCase methods, ``test_x`` for
    module-level functions), read from its AST so a file that fails to collect still counts."""
    found = []
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test"):
            found.append(node.name)
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            found += [
                f"{node.name}::{f.name}"
                for f in node.body
                if isinstance(f, ast.FunctionDef) and f.name.startswith("test")
            ]
    return found


def _blocked_here(record: dict) -> bool:
    """Whether a test did not collect for a third-party module missing in the venv (e.g.
    torchvision): Energon's own run fails the same way, so it says nothing about fpipe."""
    error = record["error"]
    return (
        error.startswith("not collected:")
        and "No module named" in error
        and ("'fpipe" not in error and "'megatron" not in error and "'tests" not in error)
    )


def excluded_reason(file: str, test_id: str) -> str | None:
    """Why ``file::test_id`` is outside the user-facing set (None: it is user-facing)."""
    return EXCLUDED.get(file) or EXCLUDED.get(f"{file}::{test_id}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--energon", type=Path, required=True, help="Energon checkout")
    parser.add_argument(
        "--fpipe",
        type=Path,
        default=Path(__file__).resolve().parents[2],
        help="fpipe source root (default: this script's checkout)",
    )
    parser.add_argument(
        "--python",
        help="Python of a venv with megatron-energon (default: $FPIPE_ENERGON_PYTHON, else "
        "FPIPE/.venv-energon/bin/python, the venv .ci/run creates)",
    )
    parser.add_argument(
        "--extras",
        type=Path,
        default=Path.home() / ".cache" / "fpipe-energon-suite" / "site",
        help="side folder for fpipe dependencies the venv lacks",
    )
    parser.add_argument("--files", nargs="*", help="only these test files (e.g. test_dataset.py)")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per test file")
    parser.add_argument(
        "--reference", action="store_true", help="run the files unrewritten, against Energon itself"
    )
    parser.add_argument("--status-file", type=Path, help="also write the summary here")
    parser.add_argument("--keep", action="store_true", help="keep the temporary copy")
    args = parser.parse_args(argv)
    if args.python is None:
        args.python = str(default_python(args.fpipe))
    if not Path(args.python).is_file():
        parser.error(
            f"no Python at {args.python}: pass --python (a venv with megatron-energon 7.4), "
            "set FPIPE_ENERGON_PYTHON, or create the checkout's .venv-energon as .ci/run does"
        )

    ensure_extras(args.python, args.extras)
    workdir = Path(tempfile.mkdtemp(prefix="energon-suite-"))
    files = prepare_copy(args.energon, workdir, args.reference)
    shim = write_shim(workdir)
    if args.files:
        files = [f for f in files if f in args.files]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            [str(shim), str(workdir)]
            + ([] if args.reference else [str(args.fpipe.resolve())])
            + [str(args.extras)]
        ),
    }
    env.pop("PYTEST_ADDOPTS", None)
    torchvision = torchvision_status(args.python, env, workdir)
    print(f"torchvision in the venv: {torchvision}", flush=True)

    out: list[str] = []
    total = {"passed": 0, "failed": 0, "error": 0, "skipped": 0}
    user_pass = user_all = blocked = 0
    failing: list[str] = []
    for name in files:
        start = time.monotonic()
        records = run_file(args.python, workdir, name, env, args.timeout)
        seen = {r["id"] for r in records}
        file_error = next((r["error"] for r in records if r["id"] == "<file>"), "not run")
        records = [r for r in records if r["id"] != "<file>"] + [
            {"id": t, "outcome": "error", "error": f"not collected: {file_error}"}
            for t in declared_tests((args.energon / "tests" / name).read_text())
            if t not in seen
        ]
        counts = {k: sum(r["outcome"] == k for r in records) for k in total}
        for k in total:
            total[k] += counts[k]
        user = [r for r in records if excluded_reason(name, r["id"]) is None]
        user_all += len(user)
        user_pass += sum(r["outcome"] == "passed" for r in user)
        blocked += sum(_blocked_here(r) for r in user)
        out.append(
            f"{name}: {counts['passed']} passed, {counts['failed']} failed, "
            f"{counts['error']} errors, {counts['skipped']} skipped "
            f"(user-facing {sum(r['outcome'] == 'passed' for r in user)}/{len(user)}; "
            f"{time.monotonic() - start:.0f} s)"
        )
        print(out[-1], flush=True)
        for r in records:
            if r["outcome"] in ("failed", "error"):
                tag = "" if excluded_reason(name, r["id"]) is None else " [excluded]"
                failing.append(f"FAIL {name}::{r['id']}{tag}: {r['error']}")
    mode = "Energon itself (--reference)" if args.reference else f"fpipe at {args.fpipe}"
    summary = (
        f"user-facing: {user_pass} of {user_all} pass ({mode}); of the "
        f"{user_all - blocked} that this environment can collect (the others import a "
        f"third-party module it lacks): {user_pass} pass; all: "
        f"{total['passed']} passed, {total['failed']} failed, {total['error']} errors"
    )
    print("\n".join(failing))
    print(summary)
    if args.status_file:
        stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        args.status_file.write_text(
            f"# Energon suite runner, {stamp}\n\ntorchvision in the venv: {torchvision}\n\n"
            f"{summary}\n\n" + "\n".join(out) + "\n\n" + "\n".join(failing) + "\n"
        )
    if not args.keep:
        shutil.rmtree(workdir, ignore_errors=True)
    else:
        print(f"copy kept at {workdir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
