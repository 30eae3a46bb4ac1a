"""Stream stages of the reference: plain generators over an iterator of refs (docs/plan.md).

Every stage pulls from its input only what its next output needs, one ref at a time, so the
refs a stage has *drawn* are exactly those the plan's lookahead has computed: a window shuffle
that began a block has drawn the whole block and nothing of the next. That is what makes the
blend's position the frontier of an online weight change (docs/design/blend.md).
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Callable, Iterable, Iterator

from property_tests.reference.rng import fold_in, permute, step_key
from property_tests.reference.views import Ref

OPS: dict[str, Callable] = {
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
    "==": operator.eq,
    "!=": operator.ne,
}


class Counters(dict):
    """Refs dropped, by cause (``"filtered"``, ``"global_remainder"`` ...)."""

    def add(self, cause: str, n: int = 1) -> None:
        self[cause] = self.get(cause, 0) + n


def window_shuffle(refs: Iterable[Ref], window: int, root: int, name="window_shuffle"):
    """Blocks of ``window`` refs along the stream (the last may be short); output ``i`` of
    block ``b`` is its input ``pi(i)``, ``pi`` keyed ``fold_in(step_key(root, name), b)``."""
    it = iter(refs)
    k = step_key(root, name)
    for b in itertools.count():
        block = list(itertools.islice(it, window))
        if not block:
            return
        bk = fold_in(k, b)
        for i in range(len(block)):
            yield block[permute(bk, len(block), i)]


def filter_refs(
    refs: Iterable[Ref], column: str, op: str, value, counters: Counters
) -> Iterator[Ref]:
    """Keep refs whose ``column op value`` holds; count the others as ``"filtered"``."""
    test = OPS[op]
    for ref in refs:
        if test(ref.meta[column], value):
            yield ref
        else:
            counters.add("filtered")
