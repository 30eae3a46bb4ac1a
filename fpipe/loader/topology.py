"""Who this process is: rank and world size of the data-parallel group, and its workers.

``Topology.from_env()`` reads ``torch.distributed`` when it is initialized, else the usual
environment variables (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``), else a single process.
Energon users know this record as ``WorkerConfig``; that name is an alias.
"""

from __future__ import annotations

import os

import msgspec

from fpipe.core.errors import ConfigError

__all__ = ["Topology", "WorkerConfig"]


class Topology(msgspec.Struct, frozen=True, kw_only=True):
    """Data-parallel position of this process.

    Attributes:
      rank: this process's rank in the data-parallel group.
      world_size: number of data-parallel ranks (ranks that replicate data, such as tensor or
        pipeline-parallel peers, share their leader's rank here).
      num_workers: DataLoader worker processes per rank (does not change the output).
    """

    rank: int = 0
    world_size: int = 1
    num_workers: int = 0

    def __post_init__(self):
        if self.world_size < 1 or not 0 <= self.rank < self.world_size:
            raise ConfigError(
                f"need 0 <= rank < world_size, got rank={self.rank}, world_size={self.world_size}"
            )
        if self.num_workers < 0:
            raise ConfigError(f"num_workers must be >= 0, got {self.num_workers}")

    @classmethod
    def from_env(cls, num_workers: int = 0, data_parallel_group=None) -> Topology:
        """Rank and world size from torch.distributed (if initialized) or RANK / WORLD_SIZE."""
        try:
            import torch.distributed as dist

            if dist.is_available() and dist.is_initialized():
                return cls(
                    rank=dist.get_rank(group=data_parallel_group),
                    world_size=dist.get_world_size(group=data_parallel_group),
                    num_workers=num_workers,
                )
        except ImportError:  # pragma: no cover - torch is a dependency
            pass
        rank = int(os.environ.get("RANK", "0"))
        world = int(os.environ.get("WORLD_SIZE", "1"))
        return cls(rank=rank, world_size=world, num_workers=num_workers)

    @classmethod
    def default_worker_config(cls, num_workers: int = 0) -> Topology:
        """Energon's spelling of :meth:`from_env`."""
        return cls.from_env(num_workers=num_workers)


WorkerConfig = Topology
