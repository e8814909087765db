"""attnbench: the kernels package and its C extension (built by cffi from csrc/)."""
from setuptools import find_packages, setup

setup(
    name="attnbench",
    version="0.1.0",
    description="Self-attention on the CPU as a ladder of kernels, measured by asv",
    python_requires=">=3.10",
    # every subpackage of kernels/ (a missing one would be absent from the wheel, and so
    # from asv's environments); package data for any non-Python file they carry
    packages=find_packages(include=["kernels", "kernels.*"]),
    include_package_data=True,
    cffi_modules=["csrc/build_attention.py:ffibuilder"],
    install_requires=[
        "numpy>=1.24",
        # bfloat16 as a NumPy dtype, with correctly rounded casts (the one JAX uses)
        "ml_dtypes>=0.5",
        # the SIMD helpers (kernels/rungs/rung3_numba_simd.py) build their intrinsics on Numba internals
        # (make_array, populate_array, cgutils.alloca_once) that may change between
        # releases: tested with 0.68.1 only, so its series (which pins llvmlite 0.50)
        "numba>=0.68.1,<0.69",
        "cffi>=1.16",
        "threadpoolctl>=3.1",
        "matplotlib>=3.7",
    ],
    extras_require={
        # playwright drives the system's Chromium (no browser download) for the viewer's test
        "test": ["pytest>=7", "hypothesis>=6", "playwright>=1.65"],
        "bench": ["asv>=0.6", "virtualenv"],
        # every other CPU attention measured beside ours, pinned (each is a CPU build here;
        # an unpinned torch pulls a multi-GB CUDA build); onnx builds ONNX Runtime's model
        "peers": ["torch==2.13.0", "onnxruntime==1.32.0", "onnx==1.23.2", "openvino==2026.4.1",
                  "jax[cpu]==0.10.2"],
        # llama.cpp's ggml, built from its sdist with CMake and a C++ compiler (about 2 min)
        "ggml": ["ggml-python==0.0.45"],
    },
    entry_points={"console_scripts": ["attnbench = kernels.cli:main"]},
)
