"""Who this process is: data-parallel rank and world size, its workers, its data-parallel group.

Fields left out are read from ``torch.distributed`` when it is initialized (over
``data_parallel_group`` if one is given), else from the usual environment variables (``RANK``,
then ``LOCAL_RANK``; ``WORLD_SIZE``), else a single process. Energon users know this record as
``WorkerConfig``; that name is an alias.

Ranks that only replicate data (tensor- or pipeline-parallel peers of one data-parallel rank)
must get the same stream as their data-parallel leader. ``rank`` and ``world_size`` are
therefore the *data-parallel* rank and size, not the global ones. Either pass the
data-parallel process group (``Topology(data_parallel_group=mpu.get_data_parallel_group())``:
rank and world size are read from that group, and every tensor-parallel peer has the same rank
in its own group), or pass them yourself
(``Topology(rank=dp_rank, world_size=dp_world_size)``).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import msgspec

from fpipe.core.errors import ConfigError
from fpipe.loader.config_tree import worker_config

__all__ = ["Topology", "WorkerConfig"]


def _dist() -> Any:  # torch.distributed when initialized, else None
    try:
        import torch.distributed as dist
    except ImportError:  # pragma: no cover - torch is a dependency
        return None
    if dist.is_available() and dist.is_initialized():
        return dist
    return None


def _env_int(*names: str) -> int | None:
    for name in names:
        value = os.environ.get(name)
        if value not in (None, ""):
            try:
                return int(value)
            except ValueError:
                msg = f"environment variable {name}={value!r} is not an integer"
                raise ConfigError(msg) from None
    return None


def _detect(data_parallel_group: Any) -> tuple[int, int]:
    """(rank, world_size) of this process in the data-parallel group."""
    dist = _dist()
    if dist is not None:
        return (
            dist.get_rank(group=data_parallel_group),
            dist.get_world_size(group=data_parallel_group),
        )
    if data_parallel_group is not None:
        raise ConfigError(
            "a data_parallel_group was given but torch.distributed is not initialized"
        )
    rank = _env_int("RANK", "LOCAL_RANK")
    world = _env_int("WORLD_SIZE")
    return (0 if rank is None else rank), (1 if world is None else world)


class Topology(msgspec.Struct, frozen=True, repr_omit_defaults=True):
    """Data-parallel position of this process.

    Attributes:
      rank: this process's rank in the data-parallel group (None: detect, see module doc).
      world_size: number of data-parallel ranks (None: detect). Ranks that replicate data
        (tensor / pipeline-parallel peers) share their leader's rank and are not counted.
      num_workers: DataLoader worker processes per rank (does not change the output).
      data_parallel_group: the ``torch.distributed`` process group of the data-parallel ranks
        (None: the default group). Used to detect rank / world size and by the loader's
        consistency check; it is never part of a snapshot or fingerprint.
      seed_offset: Energon's seed of every shuffle and blend: a dataset built with this
        record uses it as its ``seed`` (giving both, they must agree). fpipe never seeds the
        global ``random`` / ``numpy`` / ``torch`` generators in workers (Energon's other use
        of it): use ``fpipe.sample_rng()`` or ``@stateless(restore_seeds=True)``.
      worker_debug_path, worker_log_level: with a level >= 1, the loader appends one JSON line
        per batch taken (its index and sample keys) to this path (``{worker_id}`` becomes
        ``main``: fpipe plans batches in the main process; ``{pid}``: the process id).
      global_error_handler: Energon's ``handler(exception, sample, sources)`` (a two-argument
        ``handler(exception, sample_key)`` gets the key): a sample that fails is skipped and
        counted after the call (see ``get_train_dataset``'s ``handler``); None: the dataset's
        ``error_policy`` decides.

    Example:
        >>> Topology(1, 4)
        Topology(rank=1, world_size=4, num_workers=0)
    """

    if TYPE_CHECKING:
        # What a type checker sees: a constructed Topology always holds ints (``__post_init__``
        # fills in what was left out), while the constructor still takes None for "detect".
        rank: int
        world_size: int

        def __init__(
            self,
            rank: int | None = None,
            world_size: int | None = None,
            num_workers: int = 0,
            data_parallel_group: Any = None,
            seed_offset: int = 0,
            worker_debug_path: str | None = None,
            worker_log_level: int = 0,
            global_error_handler: Any = None,
        ) -> None: ...

    else:  # the record msgspec builds: the same fields, in the same order, None until detected
        rank: int | None = None
        world_size: int | None = None
    num_workers: int = 0
    data_parallel_group: Any = None
    seed_offset: int = 0
    worker_debug_path: str | None = None
    worker_log_level: int = 0
    global_error_handler: Any = None

    def __post_init__(self) -> None:
        if self.rank is None or self.world_size is None:
            rank, world = _detect(self.data_parallel_group)
            if self.world_size is None:
                msgspec.structs.force_setattr(self, "world_size", world)
            if self.rank is None:
                msgspec.structs.force_setattr(self, "rank", rank)
        if self.world_size < 1 or not 0 <= self.rank < self.world_size:
            raise ConfigError(
                f"need 0 <= rank < world_size, got rank={self.rank}, world_size={self.world_size}"
            )
        if self.num_workers < 0:
            raise ConfigError(f"num_workers must be >= 0, got {self.num_workers}")
        if not isinstance(self.seed_offset, int) or isinstance(self.seed_offset, bool):
            raise ConfigError(f"seed_offset must be an int, got {self.seed_offset!r}")
        if self.global_error_handler is not None and not callable(self.global_error_handler):
            raise ConfigError(
                "global_error_handler must be callable(exception, sample_key, sources), got "
                f"{self.global_error_handler!r}"
            )

    @classmethod
    def from_env(cls, num_workers: int = 0, data_parallel_group: Any = None) -> Topology:
        """Rank and world size from torch.distributed (if initialized) or RANK / WORLD_SIZE."""
        return cls(num_workers=num_workers, data_parallel_group=data_parallel_group)

    @classmethod
    def default_worker_config(
        cls, num_workers: int = 4, data_parallel_group: Any = None
    ) -> Topology:
        """Energon's spelling of :meth:`from_env`."""
        return cls.from_env(num_workers=num_workers, data_parallel_group=data_parallel_group)

    def config(self) -> dict[str, Any]:
        """Energon's ``WorkerConfig.config()`` (what its users log and compare): rank, world
        size, workers and the data-parallel group's size (None without a group), the node
        ``loader.config()`` puts under ``worker_config``."""
        return worker_config(self)

    def __reduce__(self) -> tuple[type[Topology], tuple]:
        # Process groups do not pickle; a Topology sent to another process drops its group.
        return (
            type(self),
            (
                self.rank, self.world_size, self.num_workers, None, self.seed_offset,
                self.worker_debug_path, self.worker_log_level, self.global_error_handler,
            ),
        )  # fmt: skip


WorkerConfig = Topology


def _distributed(topo: Topology) -> bool:
    dist = _dist()
    return dist is not None and topo.world_size > 1


def gather_states(state: bytes, dst: int, topo: Topology) -> list[bytes] | None:
    """Every rank's ``state`` as a list by rank on global rank ``dst``, None on the others;
    ``[state]`` without torch.distributed (a collective: every rank must call it)."""
    if not _distributed(topo):
        return [state]
    dist = _dist()
    group = topo.data_parallel_group
    # torch fills the list on rank dst with every rank's bytes
    out: list[Any] | None = [None] * topo.world_size if dist.get_rank() == dst else None
    dist.gather_object(state, out, dst=dst, group=group)
    return out


def scatter_state(states: Any, src: int | None, topo: Topology) -> bytes:
    """This rank's state from :func:`gather_states`' list: taken by rank from the list every
    rank holds (``src=None``), or scattered from rank ``src`` (a collective)."""
    if states is not None and not isinstance(states, (list, tuple)):
        return bytes(states)  # one rank's bytes
    if src is None or not _distributed(topo):
        if states is None or len(states) != topo.world_size:
            n = "None" if states is None else len(states)
            raise ConfigError(
                f"restore_state_global: expected a list of {topo.world_size} rank states, got {n}"
            )
        return bytes(states[topo.rank])
    dist = _dist()
    out: list[Any] = [None]  # torch puts this rank's bytes here
    mine = None
    if dist.get_rank() == src:  # only the source rank's list is read
        if states is None:
            raise ConfigError(
                f"restore_state_global: src_rank {src} must pass the list of "
                f"{topo.world_size} rank states, got None"
            )
        mine = list(states)
    dist.scatter_object_list(out, mine, src=src, group=topo.data_parallel_group)
    return bytes(out[0])
