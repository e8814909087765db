"""The memory-wall section (``MemoryWall``): the tiled kernels at an n where the n × n
scores cannot exist."""
from .. import bench_spec as spec
from ..memory import format_bytes
from ..output import Column, Table, fmt_seconds, missing
from ..registry import KERNELS
from .document import Section
from .plots import ram_text
from .results import materialises


def wall_need(run, kernel):
    """For a materialising kernel: why it cannot run the memory wall, in words."""
    if not materialises(kernel):
        return ""
    need = KERNELS[kernel].workspace_bytes(1, spec.WALL_SEQ_LEN, spec.WALL_SEQ_LEN, spec.HEAD_DIM,
                                           spec.HEAD_DIM, spec.ITEMSIZE[spec.WALL_DTYPE],
                                           spec.WALL_CAUSAL)
    if missing(run.ram_bytes):
        return f"would need {format_bytes(need)}"
    relation = ">" if need > run.ram_bytes else "≤"
    return f"would need {format_bytes(need)} {relation} RAM {ram_text(run)}"


def memory_wall(run):
    rows = [[kernel, run.value(spec.WALL_MEMORY, kernel=kernel),
             run.value(spec.WALL_SECONDS, kernel=kernel), wall_need(run, kernel)]
            for kernel in run.kernels(spec.WALL_MEMORY, spec.WALL_SECONDS)]
    table = Table("memory_wall", (
        Column("kernel", "kernel"), Column("peak_extra_bytes", "peak extra memory", format_bytes),
        Column("seconds", "time per call", fmt_seconds), Column("note", "note")), rows)
    mask = "causal" if spec.WALL_CAUSAL else "full"
    return Section(f"The memory wall: n = {spec.WALL_SEQ_LEN:,}", [
        f"{spec.WALL_DTYPE}, one head, {mask}: what the tiled kernels need where the n × n "
        "scores cannot exist.",
        table,
    ])
