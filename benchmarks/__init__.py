"""The asv suite.

asv (``"launch_method": "forkserver"``, asv.conf.json) imports the suite in a server
process once per ``asv run`` and forks each benchmark's process from it.  In that server
only (asv starts it as ``benchmark.py run_server DIR SOCKET``), the suite also imports
every kernel's module, the peers' libraries among them (PyTorch, JAX: seconds each), and
loads numba_tiled's compiled code from Numba's cache by one call small enough to stay on
the calling thread: once per class, where each benchmark process would pay it again.
None of it starts a thread (a library's pool starts on its first parallel call, in the
child, as ours does).  Anywhere else (asv's discovery, the tests, a process of the
suite's own) importing the suite stays light.  ``make bench`` runs asv a class at a time,
and tells the server of a class none of whose parameters names a peer
(``ATTNBENCH_PRELOAD_PEERS=0``, ``kernels.bench_run.names_a_peer``) to load our rungs
only: 1.7 s a class less here, with every peer installed.
"""
import os
import sys

import numpy as np

import kernels
from kernels.api import ExtensionNotBuilt
from kernels.bench_run import PRELOAD_PEERS_VARIABLE

ASV_FORKSERVER = sys.argv[1:2] == ["run_server"]
PRELOAD_PEERS = os.environ.get(PRELOAD_PEERS_VARIABLE) != "0"


def _preload():
    try:
        for record in kernels.KERNELS.values():
            if PRELOAD_PEERS or not record.external:
                record.implementation  # noqa: B018 (imported for the side effect)
        q = np.zeros((1, 16, 8), np.float32)
        kernels.attention(q, q, q, kernel="numba_tiled")
    except ExtensionNotBuilt:
        pass  # without the C extension the benchmarks of the rungs needing it skip, saying why


if ASV_FORKSERVER:
    _preload()
