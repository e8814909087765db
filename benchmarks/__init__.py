"""The asv suite.  asv (``"launch_method": "forkserver"``, asv.conf.json) imports the suite
once and forks each benchmark's process from it, so what is imported here is imported
once per run, not once per parameter combination: every kernel's module, the peers'
libraries among them (PyTorch, JAX: seconds each), and numba_tiled's compiled code, loaded
from Numba's cache by one call on a problem small enough to stay on the calling thread.
None of it starts a thread: a library's pool starts on its first parallel call, in the
child, as ours does."""
import numpy as np

import kernels
from kernels.api import ExtensionNotBuilt

try:
    for _record in kernels.KERNELS.values():
        _record.implementation  # noqa: B018 (imported for the side effect)
    _q = np.zeros((1, 16, 8), np.float32)
    kernels.attention(_q, _q, _q, kernel="numba_tiled")
except ExtensionNotBuilt:
    pass  # without the C extension the benchmarks of the rungs needing it skip, saying why
