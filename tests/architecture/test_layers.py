"""The import structure of fpipe: no package imports one above it, no module circles, no
cross-package use of a ``_private`` name (the layers are listed in tests/architecture/layers.py)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import fpipe
from tests.architecture.layers import LAYERS, import_cycles, layer_violations, unit_of

ROOT = Path(fpipe.__file__).parent


def test_every_package_has_a_layer():
    packages = {
        ".".join(p.parent.relative_to(ROOT).parts)
        for p in ROOT.rglob("__init__.py")
        if p.parent != ROOT
    }
    assert all(unit_of(f"fpipe.{pkg}") is not None for pkg in packages), sorted(packages)
    assert all(dep in LAYERS for deps in LAYERS.values() for dep in deps)


def test_no_upward_or_private_imports():
    assert layer_violations(ROOT) == []


def test_no_import_circles():
    assert import_cycles(ROOT) == []


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "fpipe"
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


def test_a_planted_upward_import_is_caught(tmp_path):
    root = _tree(
        tmp_path,
        {
            "__init__.py": "",
            "core/__init__.py": "",
            "core/rng.py": "def key(seed):\n    from fpipe.loader.dataloader import get_loader\n",
            "loader/__init__.py": "",
            "loader/dataloader.py": "from fpipe.core.rng import key\nget_loader = key\n",
        },
    )
    problems = layer_violations(root)
    assert problems == [
        "fpipe.core.rng:2 imports fpipe.loader.dataloader: unit 'core' may not import unit 'loader'"
    ]
    assert import_cycles(root) == [["fpipe.core.rng", "fpipe.loader.dataloader"]]


def test_annotation_only_imports_are_not_edges(tmp_path):
    root = _tree(
        tmp_path,
        {
            "core/__init__.py": "",
            "core/rng.py": """\
                from typing import TYPE_CHECKING
                if TYPE_CHECKING:
                    from fpipe.loader.dataloader import Loader
                """,
            "loader/__init__.py": "",
            "loader/dataloader.py": "from fpipe.core import rng\n",
        },
    )
    assert layer_violations(root) == [] and import_cycles(root) == []


def test_a_private_name_of_another_package_is_caught(tmp_path):
    root = _tree(
        tmp_path,
        {
            "core/__init__.py": "",
            "core/snapshot.py": "_Envelope = object\n",
            "cli/__init__.py": "",
            "cli/state.py": "from fpipe.core.snapshot import _Envelope\n",
        },
    )
    assert layer_violations(root) == [
        "fpipe.cli.state:1 imports fpipe.core.snapshot: private name(s) ['_Envelope'] of another"
        " unit"
    ]


def test_a_lazy_export_of_a_higher_module_is_caught(tmp_path):
    root = _tree(
        tmp_path,
        {
            "plan/__init__.py": '_LAZY = {"Loader": "fpipe.loader.dataloader"}\n',
            "loader/__init__.py": "",
            "loader/dataloader.py": "",
        },
    )
    assert layer_violations(root) == [
        "fpipe.plan:1 imports fpipe.loader.dataloader: unit 'plan' may not import unit 'loader'"
    ]
