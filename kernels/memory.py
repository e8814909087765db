"""Memory facts the validation path and the benchmarks share.

``available_bytes()`` is what a new allocation may use before the machine starts
to swap or the OOM killer steps in (``MemAvailable`` on Linux).
"""
import os


def total_bytes():
    """Physical memory of this machine in bytes."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def available_bytes():
    """Bytes a new allocation may take now (MemAvailable; total RAM if unknown)."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return total_bytes()


def format_bytes(n_bytes):
    """1536 -> '1.5 KiB'; binary units, as the kernels' error messages use."""
    value = float(n_bytes)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024


def peak_extra_bytes(call):
    """Peak resident memory ``call()`` adds to the process, in bytes.

    Counts NumPy, Numba, C and PyTorch allocations alike, because it reads the
    kernel's own high-water mark: freed heap is first handed back to the OS
    (malloc_trim), the peak is reset to the current RSS (``5`` into
    /proc/self/clear_refs), and VmHWM after the call minus VmRSS before it is what
    the call needed on top of what existed (its output included).
    Raises NotImplementedError where /proc cannot do this (not Linux).
    """
    _trim_heap()
    try:
        with open("/proc/self/clear_refs", "w") as clear_refs:
            clear_refs.write("5")
    except OSError as error:
        raise NotImplementedError(f"cannot reset the peak RSS here: {error}") from None
    before = _status_bytes("VmRSS")
    call()
    return max(0, _status_bytes("VmHWM") - before)


def _status_bytes(field):
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise NotImplementedError(f"/proc/self/status has no {field}")


def _trim_heap():
    # glibc keeps freed chunks below its (adaptive, up to 32 MiB) mmap threshold in
    # the heap; without a trim a call could reuse them and look free of cost.
    import ctypes
    import ctypes.util

    try:
        ctypes.CDLL(ctypes.util.find_library("c")).malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: nothing to trim
        pass
