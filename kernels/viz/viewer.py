"""An interactive attention viewer: one self-contained HTML file (the source text's exercise 6:
visualise the weights).

    write_viewer(tokens, weights, path, title=..., meta=...)   weights (layers, heads, n, n)

The page (the template ``viewer.html`` beside this module, filled in here) picks a layer
and a head, or the mean of a layer's heads, and draws that n × n map on a <canvas>
(keys on x, queries on y), so 512 tokens cost one image, not 262,144 elements.
Hovering a token, in the token strip or as a row of the map, outlines its row and
shades every token by the weight that query gives it; clicking a cell shows the exact
weight with its query and key tokens; a button saves the current view as a PNG.
Nothing is fetched: data, script and style are inline, and the file opens from disk.

Every weight is stored as float16 (round to nearest), so the value a click shows is
within ``RELATIVE_PRECISION`` of the weight given here, or ``ABSOLUTE_PRECISION`` for
weights below float16's smallest normal number (6.1e-5).  A head's map is its float16
bytes split into a low-byte and a high-byte plane (the high bytes, sign and exponent,
repeat and compress well), deflated (zlib) and base64-encoded; the page inflates it
with the browser's own DecompressionStream when the head is first shown.  At 512 tokens
the 6 × 12 maps of seeded synthetic weights (softmax of Gaussian scores, which compress
worse than a trained model's) make a file of about 42 MB, where plain JSON numbers would
take over 150 MB; MiniLM's 256 tokens (its truncation) take about 10 MB.

Token text is the user's: it travels only inside the JSON block, whose ``<``, ``>`` and
``&`` are written as JSON escapes so that no token can close the <script> element, and
the page sets it with textContent, never as markup.
"""
import base64
import html
import importlib.resources
import json
import re
import zlib

import numpy as np

from ..output import write_text

# float16 rounds to nearest with 11 significant bits: a relative error of at most 2^-11
# (4.88e-4) for normal numbers; the page shows 6 significant digits, adding at most 5e-6
# relative, so 5e-4 bounds the two.  Below 2^-14 (float16's subnormals) the spacing is
# 2^-24, so half of it, 2^-25 (2.98e-8), plus the display's share bounds the error there.
RELATIVE_PRECISION = 5e-4
ABSOLUTE_PRECISION = 3.1e-8
# rows of float32 softmax weights may sum to 1 with one weight a rounding above it
WEIGHT_SLACK = 1e-6
DEFLATE_LEVEL = 6       # level 9 takes twice as long for about 1% less
TEMPLATE = "viewer.html"
PLACEHOLDERS = re.compile(r"__VIEWER_(TITLE|DATA)__")


def write_viewer(tokens, weights, path, *, title="Attention weights", meta=None):
    """Write the viewer page for ``tokens`` (n strings) and ``weights`` (layers, heads, n, n),
    every row the weights a query gives the keys -> path.

    ``meta``, a mapping of label -> value (text, model, kernel...), is listed under the
    title.  Raises ValueError for a shape that does not match the tokens or a weight
    outside [0, 1].
    """
    tokens = [str(token) for token in tokens]
    weights = np.asarray(weights)
    n = len(tokens)
    if weights.ndim != 4 or weights.shape[2:] != (n, n) or n == 0:
        raise ValueError(f"weights must have shape (layers, heads, n, n) with n = {n} tokens, "
                         f"got {weights.shape}")
    if weights.shape[0] == 0 or weights.shape[1] == 0:
        raise ValueError(f"weights must hold at least one layer and one head, got {weights.shape}")
    if not np.all(np.isfinite(weights)) or weights.min() < 0 or weights.max() > 1 + WEIGHT_SLACK:
        raise ValueError(f"attention weights must lie in [0, 1], got values in "
                         f"[{np.nanmin(weights):g}, {np.nanmax(weights):g}]")
    data = {
        "title": str(title),
        "meta": {str(key): str(value) for key, value in (meta or {}).items()},
        "tokens": tokens,
        "layers": weights.shape[0],
        "heads": weights.shape[1],
        "relative_precision": RELATIVE_PRECISION,
        "absolute_precision": ABSOLUTE_PRECISION,
        "maps": [[_encode_map(head) for head in layer] for layer in weights],
    }
    values = {"TITLE": html.escape(str(title)), "DATA": _script_safe_json(data)}
    # one pass, so that a title containing a placeholder's name is never filled in again
    page = PLACEHOLDERS.sub(lambda match: values[match.group(1)], _template())
    return write_text(path, page)


def _encode_map(weights):
    """One (n, n) map -> base64 text of the deflated float16 bytes, low-byte plane first."""
    half = np.ascontiguousarray(weights, dtype="<f2")
    planes = half.view(np.uint8).reshape(-1, 2).T   # (2, n·n): low bytes, then high bytes
    return base64.b64encode(zlib.compress(planes.tobytes(), DEFLATE_LEVEL)).decode("ascii")


def _script_safe_json(data):
    """JSON that can sit inside <script>: ``<``, ``>``, ``&`` as \\u escapes (JSON.parse
    reads them back), so a token's ``</script>`` or ``<!--`` is never seen as markup."""
    text = json.dumps(data, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _template():
    return importlib.resources.files(__package__).joinpath(TEMPLATE).read_text(encoding="utf-8")
