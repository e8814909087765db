"""The one registry of attention kernels: name -> ``Kernel`` record.

Every rung lives in its own module exposing

    run(q, k, v, out, causal, scale)
        q (B, n_q, d), k (B, n_k, d), v (B, n_k, d_v), out (B, n_q, d_v); one dtype
        (float32 or float64); already validated by ``kernels.api``.  Writes all of out.

and, if it materialises n×n buffers, ``workspace_bytes(batch, n_q, n_k, d, d_v,
itemsize, causal)``, which the validation path checks against available memory
before anything large is allocated.  Modules are imported on first use, so that
``import kernels`` does not pay for Numba, the C extension or PyTorch.
"""
import importlib
import importlib.util
from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class Kernel:
    name: str
    description: str
    memory_class: str
    module: str
    materialises: bool = False        # holds n_q x n_k buffers: checked against RAM
    max_scores: Optional[int] = None  # cap on batch * n_q * n_k (the naive loops)
    contiguous: bool = True           # needs C-contiguous inputs (copies otherwise)
    external: bool = False            # a peer baseline, not one of our rungs

    @property
    def implementation(self):
        """The rung's module, imported on first use."""
        return importlib.import_module(self.module)

    @property
    def run(self):
        return self.implementation.run

    def workspace_bytes(self, batch, n_q, n_k, d, d_v, itemsize, causal):
        """Extra bytes a call allocates beyond its output (0 for tiled kernels)."""
        if not self.materialises:
            return 0
        return self.implementation.workspace_bytes(batch, n_q, n_k, d, d_v, itemsize, causal)

    def fits(self, batch, n_q, n_k):
        """False when the problem is above this kernel's size cap."""
        return self.max_scores is None or batch * n_q * n_k <= self.max_scores

    @property
    def cap(self):
        return "-" if self.max_scores is None else f"B·n_q·n_k ≤ {self.max_scores:,}"


def _build():
    kernels = [
        Kernel(
            "naive",
            "the seed's algorithm definition, line by line, in pure Python loops",
            "O(n) per query row",
            "kernels.naive",
            max_scores=256 * 256,
            contiguous=False,
        ),
        Kernel(
            "numpy",
            "vectorised NumPy: BLAS products, stable softmax over the n×n scores",
            "O(n²)",
            "kernels.vectorised",
            materialises=True,
            contiguous=False,
        ),
        Kernel(
            "numba_tiled",
            "Numba JIT: query × key tiles, online softmax, prange over heads × tiles",
            "O(n·d)",
            "kernels.numba_tiled",
        ),
        Kernel(
            "c_tiled",
            "C via cffi: SIMD micro-kernels, online softmax, OpenMP, GIL released",
            "O(n·d)",
            "kernels.c_tiled",
        ),
    ]
    # PyTorch is an optional peer: registered only when installed (find_spec does
    # not import it, so `import kernels` stays fast).
    if importlib.util.find_spec("torch") is not None:
        kernels.append(
            Kernel(
                "torch_sdpa",
                "external peer: PyTorch's scaled_dot_product_attention on the CPU",
                "O(n·d)",
                "kernels.torch_sdpa",
                external=True,
            )
        )
    return {kernel.name: kernel for kernel in kernels}


KERNELS = _build()


def get_kernel(name):
    """The record of ``name``; ValueError listing the known names otherwise."""
    try:
        return KERNELS[name]
    except (KeyError, TypeError):
        known = ", ".join(KERNELS)
        raise ValueError(f"unknown kernel {name!r}; known kernels: {known}") from None
