"""Open arguments: which ones a layout's opener takes, and the refusal of those none takes.

:func:`~fpipe.storage.read.layouts.open_dataset` gives its keyword arguments to the opener of
the path's layout, and one that opener does not take is a ConfigError naming it. A
metadataset's datasets are opened with arguments given once for all of them (its
``open_kwargs``, the CLI's ``--media-root``): each dataset takes those its layout takes
(``media_root`` means something to a prepared table only, ``index_dir`` to a URL only), and
:func:`refuse_untaken` refuses one that no dataset took, so a misspelt or misplaced argument is
not dropped without a word. What an opener takes is read from its signature, so a new keyword
of an opener is taken with no list to update.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import os
from collections.abc import Callable
from typing import Any

from fpipe.core.errors import ConfigError

__all__ = [
    "Opener",
    "SUPPLIED",
    "keywords_of",
    "refuse_untaken",
    "supplied_args",
    "taken_args",
    "takes",
]

#: Keywords the dispatch gives an opener whose signature has them, never the caller:
#: ``plan_only`` (open for planning only) and ``reopen`` (the function a pickled dataset is
#: opened again with in a worker, and a prepared table opens its auxiliary dataset with).
SUPPLIED = frozenset({"plan_only", "reopen"})


@dataclasses.dataclass(frozen=True)
class Opener:
    """The opener of one layout: ``open(path, **kwargs)`` builds its dataset; ``kind`` names
    the layout in messages; ``passes_on``: the open arguments ``open`` takes through ``**`` and
    hands on (a table file's to :func:`~.tables.table_record`, a corpus's GPT options)."""

    open: Callable[..., Any]
    kind: str
    passes_on: frozenset[str] = frozenset()


@functools.cache
def keywords_of(fn: Callable[..., Any]) -> frozenset[str]:
    """The names ``fn`` takes by keyword after its first (the path), ``**`` ones left out."""
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    params = list(inspect.signature(fn).parameters.values())[1:]
    return frozenset(p.name for p in params if p.kind in kinds)


@functools.cache
def takes(opener: Opener) -> frozenset[str]:
    """The open arguments ``opener`` takes: its keyword parameters and those it passes on,
    less the :data:`SUPPLIED` ones."""
    return (keywords_of(opener.open) | opener.passes_on) - SUPPLIED


def taken_args(
    path: str | os.PathLike, opener: Opener, shared: dict[str, Any], own: dict[str, Any]
) -> dict[str, Any]:
    """The arguments ``opener`` opens ``path`` with: all of ``own`` and those of ``shared`` it
    takes (``own`` wins); an argument of ``own`` it does not take is a ConfigError."""
    taking = takes(opener)
    unknown = sorted(set(own) - taking)
    if unknown:
        raise ConfigError(
            f"{path}: open argument(s) {unknown} do not apply to this dataset "
            f"({opener.kind}; it takes {sorted(taking)})"
        )
    return {**{k: v for k, v in shared.items() if k in taking}, **own}


def supplied_args(opener: Opener, **values: Any) -> dict[str, Any]:
    """Those of ``values`` (:data:`SUPPLIED` keywords) that ``opener``'s signature has."""
    assert set(values) <= SUPPLIED, sorted(set(values) - SUPPLIED)
    params = keywords_of(opener.open)
    return {k: v for k, v in values.items() if k in params}


def refuse_untaken(where: str, shared: dict[str, Any] | None, taken: list[dict[str, Any]]) -> None:
    """Raise ConfigError naming the ``shared`` open arguments that none of the datasets opened
    from ``where`` (a metadataset) took (``taken``: each one's, from
    :func:`~fpipe.storage.read.layouts.open_taking`): a misspelt or misplaced argument is
    refused, not dropped without a word."""
    unused = sorted(set(shared or {}).difference(*taken))
    if unused:
        raise ConfigError(
            f"{where}: open argument(s) {unused} apply to none of its {len(taken)} dataset(s) "
            f"(their layouts take {sorted(set().union(*taken)) or 'none of those given'}); "
            "remove them or check their spelling"
        )
