"""The user docs name things that exist, and speak to users.

* Every ``fpipe.*`` dotted name in a code span of ``README.md`` or ``docs/**/*.md`` (single or
  double backticks, e.g. ``fpipe.plan.pack`` or ``fpipe.core.snapshot.decode_state``) resolves:
  the longest importable module prefix is imported, then the rest is looked up attribute by
  attribute. So are the names the Python code blocks write (``fpipe.encode.DefaultTaskEncoder``)
  and import (``from fpipe... import a, b``, ``import fpipe...``).
* Each of those names also works after nothing but ``import fpipe`` (subpackages and their
  modules load on first attribute access), checked in one fresh interpreter.
* Every ``fpipe/....py`` source path the docs name is a file of the repository.
* No page of ``docs/`` (nor the README) speaks of a tracker "issue": the docs say what is
  measured or decided, not which ticket asked for it. ``ISSUE_ALLOWED`` lists the few lines that
  may use the word (none today).
"""

from __future__ import annotations

import importlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# A dotted name starting with ``fpipe.``, not part of a path (``.fpipe/``, ``fpipe/x.py``) or of a
# longer word. ``fpipe prepare`` (a command) has no dot and never matches.
_NAME = re.compile(r"(?<![\w./-])fpipe(?:\.[A-Za-z_]\w*)+(?![\w/-])")
_SOURCE_PATH = re.compile(r"(?<![\w.-])(?:\.\./)*(fpipe/[\w/]+\.py)\b")
_FENCE = re.compile(r"^\s*(```|~~~)")
_PY_IMPORT = re.compile(r"^\s*from\s+(fpipe(?:\.\w+)*)\s+import\s+\(?([\w\s,]+)\)?\s*(?:#.*)?$")
_PY_PLAIN_IMPORT = re.compile(r"^\s*import\s+(fpipe(?:\.\w+)*)\s*(?:#.*)?$")

# Lines of the docs that may say "issue" (a project's own tracker quoted by name). Each entry is
# (page relative to the repository root, a substring of the line). Keep it short: reword first.
ISSUE_ALLOWED: tuple[tuple[str, str], ...] = ()
_ISSUE = re.compile(r"\bissues?\b", re.IGNORECASE)


def doc_pages() -> list[Path]:
    """``README.md`` and every Markdown page under ``docs/``, in a stable order."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def split_fences(text: str) -> tuple[str, list[tuple[str, str]]]:
    """The prose of a page (fenced blocks blanked out) and its fenced blocks as (info, body)."""
    prose: list[str] = []
    blocks: list[tuple[str, str]] = []
    fence: str | None = None
    info = ""
    body: list[str] = []
    for line in text.splitlines():
        m = _FENCE.match(line)
        if fence is None and m:
            fence, info, body = m.group(1), line.strip()[3:].strip(), []
            prose.append("")
        elif fence is not None and m and m.group(1) == fence and not line.strip()[3:].strip():
            blocks.append((info, "\n".join(body)))
            fence = None
            prose.append("")
        elif fence is not None:
            body.append(line)
            prose.append("")
        else:
            prose.append(line)
    return "\n".join(prose), blocks


_TICKS = re.compile(r"`+")


def code_spans(prose: str) -> list[str]:
    """The contents of the inline code spans (CommonMark: a run of N backticks up to the next run
    of exactly N), which may cross a line break within a paragraph."""
    spans = []
    for paragraph in re.split(r"\n\s*\n", prose):
        pos = 0
        while m := _TICKS.search(paragraph, pos):
            close = re.compile(rf"(?<!`){m.group(0)}(?!`)").search(paragraph, m.end())
            if close is None:  # an unmatched run is literal backticks
                pos = m.end()
                continue
            spans.append(paragraph[m.end() : close.start()])
            pos = close.end()
    return spans


def documented_names(page: Path) -> set[str]:
    """The ``fpipe.*`` names a page refers to: in code spans, and in Python code blocks (the
    names their code writes and those it imports)."""
    prose, blocks = split_fences(page.read_text(encoding="utf-8"))
    names: set[str] = set()
    for span in code_spans(prose):
        names.update(_NAME.findall(span))
    for info, body in blocks:
        if info not in ("python", "py", ""):
            continue
        for line in body.splitlines():
            if m := _PY_IMPORT.match(line):
                for attr in m.group(2).replace("\n", " ").split(","):
                    attr = attr.strip()
                    if attr:
                        names.add(f"{m.group(1)}.{attr}")
            elif m := _PY_PLAIN_IMPORT.match(line):
                names.add(m.group(1))
            else:
                names.update(_NAME.findall(line))
    return names


def resolve(name: str) -> object:
    """The object a dotted name means: import the longest importable module prefix, then look up
    the rest as attributes. Raises ImportError or AttributeError when it names nothing."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        module_name = ".".join(parts[:cut])
        try:
            obj = importlib.import_module(module_name)
        except ModuleNotFoundError as e:
            # Only "this module does not exist" means: try a shorter prefix. A module that
            # exists but fails to import (a missing dependency, a bad import) is an error.
            if e.name is None or not module_name.startswith(e.name):
                raise
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(f"no importable prefix of {name!r}")


def _name_cases() -> list[tuple[str, str]]:
    cases = set()
    for page in doc_pages():
        rel = page.relative_to(ROOT).as_posix()
        cases.update((rel, name) for name in documented_names(page))
    return sorted(cases)


def test_docs_name_some_fpipe_names():
    # The collector finds the names this test exists for; an empty list would pass vacuously.
    names = {name for _, name in _name_cases()}
    assert {"fpipe.get_train_dataset", "fpipe.plan.pack"} <= names
    assert len(names) > 30


# docs/design/layout.md names former module paths; importing one warns that it moved
@pytest.mark.filterwarnings(r"ignore:fpipe\.[\w.]+ moved to fpipe\.:DeprecationWarning")
@pytest.mark.parametrize(("page", "name"), _name_cases())
def test_documented_name_resolves(page, name):
    try:
        resolve(name)
    except (ImportError, AttributeError) as e:
        pytest.fail(f"{page} names `{name}`, which does not resolve: {e}")


#: Run in a fresh interpreter: looks each name (stdin, JSON) up from ``fpipe`` attribute by
#: attribute and prints the names that fail, with the error.
_AFTER_IMPORT_FPIPE = """
import json, sys, warnings
warnings.simplefilter("ignore", DeprecationWarning)  # the docs name a few former module paths
import fpipe
broken = {}
for name in json.load(sys.stdin):
    obj = fpipe
    try:
        for part in name.split(".")[1:]:
            obj = getattr(obj, part)
    except AttributeError as e:
        broken[name] = str(e)
print(json.dumps(broken))
"""


def test_documented_names_work_after_import_fpipe():
    # A snippet that starts with `import fpipe` may write any name the docs show. One fresh
    # interpreter for all names: this one has imported everything already.
    pages: dict[str, list[str]] = {}
    for page, name in _name_cases():
        pages.setdefault(name, []).append(page)
    done = subprocess.run(
        [sys.executable, "-c", _AFTER_IMPORT_FPIPE],
        input=json.dumps(sorted(pages)),
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    broken = json.loads(done.stdout)
    assert not broken, "after `import fpipe` alone, documented names fail:\n" + "\n".join(
        f"{', '.join(pages[name])}: `{name}`: {error}" for name, error in sorted(broken.items())
    )


def test_collector_reads_spans_and_imports(tmp_path):
    page = tmp_path / "probe.md"
    page.write_text(
        "Use `fpipe.plan.pack` or ``fpipe.core.snapshot.decode_state``, not `fpipe prepare`,\n"
        "`fpipe/plan/packing/stage.py` or `.fpipe/index`; `fpipe.get_loader(ds,\n"
        "num_workers=2)` spans a line.\n\n"
        "```python\nfrom fpipe.decode import DecodeLimits, decode_field\nimport fpipe.core\n"
        "x = fpipe.encode.DefaultTaskEncoder(); y = ds.fpipe_state\n```\n\n"
        "```bash\nfrom fpipe.not_python import x\n```\n"
    )
    assert documented_names(page) == {
        "fpipe.plan.pack",
        "fpipe.core.snapshot.decode_state",
        "fpipe.get_loader",
        "fpipe.decode.DecodeLimits",
        "fpipe.decode.decode_field",
        "fpipe.core",
        "fpipe.encode.DefaultTaskEncoder",
    }


def test_resolve_rejects_wrong_names():
    assert resolve("fpipe.plan.pack") is importlib.import_module("fpipe.plan").pack
    for wrong in ("fpipe.plan.no_such_name", "fpipe.no_such_module.x", "fpipe.storage.tar_reader"):
        with pytest.raises((ImportError, AttributeError)):
            resolve(wrong)


def test_docs_source_paths_exist():
    missing = []
    for page in doc_pages():
        for path in sorted(set(_SOURCE_PATH.findall(page.read_text(encoding="utf-8")))):
            if not (ROOT / path).is_file():
                missing.append(f"{page.relative_to(ROOT)}: {path}")
    assert not missing, "docs name source files that do not exist:\n" + "\n".join(missing)


def test_docs_do_not_speak_of_tracker_issues():
    found = []
    for page in doc_pages():
        rel = page.relative_to(ROOT).as_posix()
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            if not _ISSUE.search(line):
                continue
            if any(rel == p and part in line for p, part in ISSUE_ALLOWED):
                continue
            found.append(f"{rel}:{number}: {line.strip()}")
    assert not found, "docs speak of an issue (say what is measured or decided):\n" + "\n".join(
        found
    )


def test_readme_command_line_names_every_command():
    from fpipe.cli.main import COMMANDS

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    start = readme.index("Command line: ")
    listed = readme[start : readme.index("\n\n", start)]
    missing = [name for name in COMMANDS if f"`fpipe {name}" not in listed]
    assert not missing, f"README's command line paragraph leaves out {missing}"
