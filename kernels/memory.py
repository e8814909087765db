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
