"""The sanitizer's harness cases, generated: kernels.harness.CASES as a C header.

    python csrc/sanitize/harness_cases.py build/sanitize/harness_cases.h

writes ``HARNESS_CASES``, an array of check_attention.c's ``struct shape`` (csrc/sanitize/
cases.h, which the driver includes first), one row per shape of the harness: its causal
and non-causal twins are one row, since the driver runs every shape both ways; a case with
a window or sinks carries its band (a side that is None: -1), which the driver runs instead. The batch
shape is flattened into one batch (its product) and a layout other than C is run in C order
(the Python side's business), the name saying so. `make sanitize` runs this with the .venv's
Python (kernels.harness needs NumPy), so the driver has no hand-made copy to drift.
"""
import pathlib
import sys

PROJECT_ROOT = pathlib.Path(__file__).resolve().parents[2]

# kernels.harness's poison names -> enum poison in cases.h
POISONS = {None: "CLEAN", "nan_q": "NAN_Q", "nan_k": "NAN_K", "nan_v": "NAN_V", "inf_q": "INF_Q"}


def shape_name(case):
    """The driver's name for a case: the harness's, marked when its layout is not C."""
    return case.name if case.layout == "C" else f"{case.name} (as C)"


def shapes(cases):
    """The rows of ``HARNESS_CASES`` for ``cases``, in their order: dicts of struct shape's
    fields. ValueError for a poison the driver does not know, or two cases of one name that
    differ in more than causal."""
    rows = {}
    for case in cases:
        if case.poison not in POISONS:
            raise ValueError(f"harness case {case.name!r}: poison {case.poison!r} is not one of "
                             f"check_attention.c's ({', '.join(map(str, POISONS))}); add it there")
        row = {"name": shape_name(case), "batch": int(case.batch), "n_q": case.n_q, "n_k": case.n_k,
               "d": case.d, "d_v": case.d_v, "logit_scale": float(case.logit_scale),
               "poison": POISONS[case.poison], "band": band(case)}
        if rows.setdefault(row["name"], row) != row:
            raise ValueError(f"harness cases named {case.name!r} differ in more than causal")
    if not rows:
        raise ValueError("no harness cases")
    return list(rows.values())


def band(case):
    """(left, right, sinks) of a case with a window or sinks, as the C kernel takes them
    (None: -1, unbounded), or None for full and causal attention (run by every row)."""
    if case.window is None and not case.sinks:
        return None
    if case.causal:
        raise ValueError(f"harness case {case.name!r}: a window with causal=True; give right = 0 instead")
    return tuple(-1 if side is None else side for side in (case.band.left, case.band.right)) + (case.band.sinks,)


def c_string(text):
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in text):
        raise ValueError(f"a control character in {text!r}")
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def header(cases):
    """The header's text for ``cases``."""
    lines = [
        "/* Generated from kernels.harness.CASES by csrc/sanitize/harness_cases.py (`make",
        "   sanitize`): do not edit. Included by check_attention.c after cases.h. */",
        "static const struct shape HARNESS_CASES[] = {",
    ]
    for row in shapes(cases):
        banded = "" if row["band"] is None else ", .banded = 1, .band = {%d, %d, %d}" % row["band"]
        lines.append(
            f"    {{.name = {c_string(row['name'])}, .batch = {row['batch']}, .n_q = {row['n_q']}, "
            f".n_k = {row['n_k']}, .d = {row['d']}, .d_v = {row['d_v']}, "
            f".logit_scale = {row['logit_scale']!r}, .poison = {row['poison']}{banded}}},")
    lines.append("};")
    return "\n".join(lines) + "\n"


def main(argv):
    if len(argv) != 2:
        sys.exit(f"usage: {argv[0]} OUTPUT.h")
    sys.path.insert(0, str(PROJECT_ROOT))   # kernels, from this checkout
    from kernels.harness import CASES

    text = header(CASES)   # before opening the output: an error leaves no half-written header
    target = pathlib.Path(argv[1])
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)


if __name__ == "__main__":
    main(sys.argv)
