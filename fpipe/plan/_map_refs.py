"""Pure functions over ref chunks: add a metadata column, relabel, and so on."""

from __future__ import annotations

from collections.abc import Callable

from fpipe.core.errors import ConfigError
from fpipe.core.records import Config, Refs
from fpipe.core.stage import Stage, stateless

__all__ = ["MapRefsConfig", "map_refs"]


class MapRefsConfig(Config, frozen=True):
    """Apply the function named ``fn`` to every ref chunk (one output ref per input ref)."""

    fn: str


def map_refs(fn: Callable[[Refs], Refs], *, name: str = "map_refs") -> Stage:
    """A streaming stage applying ``fn(chunk) -> chunk`` with as many refs out as in.

    ``fn`` must be pure (its output may depend only on the chunk). Lambdas need ``name=``.

    Example:
        >>> s = map_refs(lambda r: r.with_columns(area=r.column("w") * 2), name="area")
        >>> s.step(s.init(0), Refs.of(index=[0], w=[3]))[1].column("area").tolist()
        [6]
    """
    qual = f"{getattr(fn, '__module__', '?')}:{getattr(fn, '__qualname__', repr(fn))}"
    if "<lambda>" in qual or "<locals>" in qual:
        if name == "map_refs":
            raise ConfigError("map_refs with a lambda or local function needs name=...")
        qual = f"local:{name}"

    def apply(chunk: Refs) -> Refs:
        out = fn(chunk)
        if len(out) != len(chunk):
            raise ConfigError(
                f"map_refs {name!r} changed the number of refs ({len(chunk)} -> {len(out)}); "
                "use filter_refs to drop refs"
            )
        return out

    return stateless(name, MapRefsConfig(fn=qual), apply)
