"""A machine's name for asv: its CPU and the SIMD instruction set the kernels run on.

    python -m kernels.machine_id         # amd-epyc-avx2, intel-xeon-avx512, amd-epyc-avx512-bf16
    machine_name(cpuinfo_text)           # the same from a /proc/cpuinfo text
    isa_of(name)                         # "avx512-bf16" from such a name; None from another

asv names a machine after its hostname, which is "vm" on every VM this project runs
on, so that the results of machines whose kernels rank differently would land in one
folder.  ``make bench`` names it after the CPU's vendor and family (the model name's
first two words) and its best ISA instead.  Off Linux (no /proc/cpuinfo) the name is the
architecture (``platform.machine()``) alone; it never raises.
"""
import pathlib
import platform
import re

CPUINFO = pathlib.Path("/proc/cpuinfo")
# The SIMD instruction sets that rank the kernels (c_tiled has AVX-512 and AVX2 micro-kernels,
# the BLAS and the peers theirs), best first: (the cpuinfo flag that has it, its word in the name).
ISAS = (("avx512f", "avx512"), ("avx2", "avx2"), ("sve", "sve"), ("asimd", "neon"))
# Extensions worth a word after the ISA's: bfloat16 dot products.
EXTENSIONS = (("avx512_bf16", "bf16"),)
# Where a model name's family ends: a model number ("7B13", "i7-8700K") or one of these.
_NOT_FAMILY = {"cpu", "processor"}


def _field(cpuinfo, *keys):
    """The first value of any of ``keys`` in a cpuinfo text ("" when none)."""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip().lower() in keys:
            return value.strip()
    return ""


def _family(model_name):
    """The vendor and family: a model name's words before its model number, at most two
    ("Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz" -> "intel-xeon")."""
    words = re.split(r"[^a-z0-9]+", re.sub(r"\((r|tm)\)", " ", model_name.lower()))
    family = []
    for word in filter(None, words):
        if any(c.isdigit() for c in word) or word in _NOT_FAMILY or len(family) == 2:
            break
        family.append(word)
    return "-".join(family)


def isa(flags):
    """The name's ISA words for a set of cpuinfo flags: "avx512-bf16", "avx2", "" for none known."""
    best = next((word for flag, word in ISAS if flag in flags), "")
    extras = [word for flag, word in EXTENSIONS if flag in flags and best]
    return "-".join([best, *extras]) if best else ""


def machine_name(cpuinfo=None):
    """The machine's name from a /proc/cpuinfo text (default: this machine's, when it has one)."""
    if cpuinfo is None:
        try:
            cpuinfo = CPUINFO.read_text(errors="replace")
        except OSError:
            cpuinfo = ""
    family = _family(_field(cpuinfo, "model name")) or re.sub(r"[^a-z0-9]+", "-", platform.machine().lower())
    flags = set(_field(cpuinfo, "flags", "features").split())
    return "-".join(part for part in (family or "unknown-cpu", isa(flags)) if part)


def isa_of(name):
    """The ISA words of a name ``machine_name`` gave ("amd-epyc-avx512-bf16" -> "avx512-bf16");
    None for a name without them (asv's hostname, or one chosen by hand)."""
    words = name.split("-")
    known = {word for _, word in ISAS}
    start = next((i for i, word in enumerate(words) if word in known), None)
    return None if start is None else "-".join(words[start:])


if __name__ == "__main__":
    print(machine_name())
