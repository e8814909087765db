"""The start-up section (``Startup``): import, Numba's first compile, a cached first call."""
from .. import bench_spec as spec
from ..output import Column, Table, fmt_seconds
from .document import Section


def startup(run):
    rows = [["import kernels", run.value(spec.IMPORT_SECONDS)],
            ["first Numba call, empty cache (compile)", run.value(spec.COMPILE_SECONDS)],
            ["first Numba call, cached", run.value(spec.CACHED_CALL_SECONDS)]]
    table = Table("startup", (Column("what", "what"), Column("seconds", "seconds", fmt_seconds)), rows)
    return Section("Startup", [table])
