"""The ladder: one operation, softmax(Q Kᵀ/√d) V, one module per rung, each adding one idea.

    rung1_naive.py           ``naive``: the algorithm as written, each query's scores,
                             softmax and weighted sum in pure Python loops
    rung2_numpy.py           ``numpy``: vectorised, BLAS products over the n × n scores
    rung3_numba_tiled.py     ``numba_tiled``: compiled by Numba, query × key tiles with the
                             online softmax, never holding the scores; on our thread pool
    rung3_numba_split_kv.py  its decode path: a few queries against many keys, split-KV
    rung3_numba_simd.py      the Numba SIMD building blocks rung 3 is compiled from
    rung3_numba_half.py      and its 16-bit inputs and outputs, widened and rounded
    rung4_c_tiled.py         ``c_tiled``: the same tiles in C (csrc/) with AVX-512 or AVX2
                             micro-kernels chosen at run time, called through cffi

Each rung module has ``run(q, k, v, out, causal, scale)``, called by ``kernels.attention``
through the registry (``kernels.registry``), which imports a rung on first use.
"""
