"""The functional kernel: state records, the counter-based RNG, the step model (fpipe.core.stage),
composition,
snapshot encoding, fingerprints and the contract-test helpers.

Belongs here: pure code over numpy and msgspec. Must not: import torch, PIL or av, touch the
filesystem, read the clock or a global RNG, or keep module-level mutable state.
"""

from typing import TYPE_CHECKING

from fpipe._lazy import lazy_exports
from fpipe.core import rng
from fpipe.core.compose import Lifted, chain
from fpipe.core.errors import (
    BadSampleError,
    ConfigError,
    EmptyIndexError,
    ErrorPolicy,
    FpipeError,
    MaterializeError,
    ResourceLimitError,
    SnapshotError,
    SnapshotMismatchError,
    WorkerError,
)
from fpipe.core.graph import input_root, step_key
from fpipe.core.pipeline import Pipeline, PipelineConfig
from fpipe.core.records import Config, Recipe, Refs, State, Unit
from fpipe.core.stage import Source, Stage, View, stateless

__all__ = [
    "BadSampleError",
    "Config",
    "ConfigError",
    "EmptyIndexError",
    "ErrorPolicy",
    "FpipeError",
    "Lifted",
    "MaterializeError",
    "Pipeline",
    "PipelineConfig",
    "Recipe",
    "Refs",
    "ResourceLimitError",
    "SnapshotError",
    "SnapshotMismatchError",
    "Source",
    "Stage",
    "State",
    "Unit",
    "View",
    "WorkerError",
    "chain",
    "input_root",
    "rng",
    "stateless",
    "step_key",
]

# Submodules load on first use: `import fpipe` then `fpipe.core.<module>` works. Hidden from
# type checkers, which would otherwise take any misspelt name of this package for Any.
if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(__name__, {})
