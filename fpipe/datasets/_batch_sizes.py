"""The global batch size of a training plan: one size, or a schedule over steps.

``global_batch_size`` is an int, a ``{step: size}`` table (or ``[(step, size), ...]``), or a
:class:`fpipe.plan.BatchSchedule`; ``rampup_batch_size=(start, increment, samples)`` ramps up
to an int ``global_batch_size`` as Megatron-LM's ``--rampup-batch-size`` does (up to Megatron-LM
core 0.17); a string ``global_batch_size`` is Megatron-LM's ``--step-batch-size-schedule`` (core
0.18 on: ``"0:16 2.4B:320"``, see :meth:`fpipe.plan.BatchSchedule.megatron`). A table of one
size is that size: its plan and snapshots are those of the plain int.
"""

from __future__ import annotations

from fpipe.core.errors import ConfigError
from fpipe.datasets.options import DatasetOptions
from fpipe.plan.batch_schedule import BatchSchedule

__all__ = ["global_batch_sizes"]


def global_batch_sizes(options: DatasetOptions) -> tuple[BatchSchedule | None, int | None]:
    """``(schedule, global size)``: the schedule (None for one size) and the one or final
    global batch size (None when the options give none)."""
    size, ramp = options.global_batch_size, options.rampup_batch_size
    if ramp is not None:
        if isinstance(size, bool) or not isinstance(size, int):
            raise ConfigError(
                "rampup_batch_size=(start, increment, samples) ramps up to global_batch_size: "
                f"give it as one integer (Megatron's --global-batch-size), got {size!r}"
            )
        if len(ramp) != 3:
            raise ConfigError(
                f"rampup_batch_size is (start, increment, samples), as Megatron's "
                f"--rampup-batch-size; got {ramp!r}"
            )
        schedule = BatchSchedule.rampup(*ramp, final=size)
    elif size is None or (isinstance(size, int) and not isinstance(size, bool)):
        return None, size
    elif isinstance(size, str):
        schedule = BatchSchedule.megatron(size)
    else:
        schedule = BatchSchedule.of(size)
    if options.packing_buffer_size:
        raise ConfigError(
            "a global batch size schedule does not combine with packing_buffer_size (the "
            "loader makes batches of packs after the plan); pack in the plan with "
            "plan_stages=[fpipe.plan.pack(...)] or use one global batch size"
        )
    if len(schedule.sizes) == 1:
        return None, schedule.sizes[0]
    return schedule, schedule.sizes[-1]
