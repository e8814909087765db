"""kernels.viz.viewer: the page is self-contained, its data round-trips, user text cannot
run, and in a real headless Chromium a click shows the model's weight.

The browser tests drive Debian's chromium (/usr/bin/chromium) through Playwright for
Python.  On a machine without them they skip, naming the install commands; in CI (the
CI environment variable set) they fail instead, so that they can never silently vanish.
"""
import base64
import json
import os
import pathlib
import re
import zlib

import numpy as np
import pytest

from kernels.models import minilm
from kernels.viz.viewer import ABSOLUTE_PRECISION, RELATIVE_PRECISION, write_viewer

CHROMIUM = pathlib.Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
INSTALL = ("the browser tests need Playwright and Chromium: .venv/bin/pip install playwright "
           "and, as root, apt-get update && apt-get install -y chromium")
SENTENCE = "The cat sat on the mat"
ATTACKS = ["</script><script>window.pwned=1</script>", "<img src=x onerror=window.pwned=1>",
           "<!--", "&amp;", "\u2028"]
DATA_BLOCK = re.compile(r'<script type="application/json" id="viewer-data">(.*?)</script>', re.S)
MEGABYTE = 1e6


def model_or_synthetic(text=SENTENCE):
    """(tokens, weights (6, 12, n, n)): the model's when it is installed, else seeded
    softmax rows of the same shape (the viewer does not depend on the model)."""
    try:
        return minilm.attentions(text)
    except minilm.ModelNotInstalled:
        return ["[CLS]", *text.lower().split(), "[SEP]"], synthetic_weights(len(text.split()) + 2)


def synthetic_weights(n, layers=6, heads=12, seed=0):
    scores = np.random.default_rng(seed).standard_normal((layers, heads, n, n), dtype=np.float32) * 2
    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return weights / weights.sum(axis=-1, keepdims=True)


def page_data(page):
    """The JSON block of a written page, parsed (JSON reads the \\u escapes back)."""
    return json.loads(DATA_BLOCK.search(page).group(1))


def decode_map(text, n):
    """The page's encoding read back: base64 of deflated float16 bytes, low plane first."""
    planes = np.frombuffer(zlib.decompress(base64.b64decode(text)), dtype=np.uint8).reshape(2, n * n)
    return np.ascontiguousarray(planes.T).view("<f2").reshape(n, n)


def assert_within_precision(shown, weights):
    """``shown`` equals ``weights`` to the precision the page states."""
    error = np.abs(np.asarray(shown, dtype=np.float64) - weights)
    bound = RELATIVE_PRECISION * np.abs(weights) + ABSOLUTE_PRECISION
    assert np.all(error <= bound), f"largest error {error.max():.3g} beyond the stated precision"


def test_page_is_self_contained(tmp_path):
    tokens, weights = model_or_synthetic()
    page = write_viewer(tokens, weights, tmp_path / "viewer.html").read_text(encoding="utf-8")
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", page, re.I)
    assert not re.search(r"https?://|//cdn", page, re.I), "a network address in the page"
    assert not re.search(r"<script[^>]*\ssrc\s*=", page, re.I)
    assert not re.search(r"<link\b", page, re.I)
    assert not re.search(r"@import|url\(\s*[\"']?\s*(https?:)?//", page, re.I)


def test_tokens_meta_and_weights_round_trip(tmp_path):
    tokens, weights = model_or_synthetic()
    meta = {"text": SENTENCE, "model": "all-MiniLM-L6-v2"}
    page = write_viewer(tokens, weights, tmp_path / "viewer.html", title="cat", meta=meta).read_text()
    data = page_data(page)
    assert data["tokens"] == list(tokens) and data["meta"] == meta and data["title"] == "cat"
    assert (data["layers"], data["heads"]) == weights.shape[:2]
    assert (data["relative_precision"], data["absolute_precision"]) == (RELATIVE_PRECISION, ABSOLUTE_PRECISION)
    decoded = np.array([[decode_map(text, len(tokens)) for text in layer] for layer in data["maps"]])
    assert_within_precision(decoded, weights)


def test_user_text_cannot_close_the_script_or_become_markup(tmp_path):
    tokens = ["[CLS]", *ATTACKS, "[SEP]"]
    weights = synthetic_weights(len(tokens), layers=1, heads=2)
    path = write_viewer(tokens, weights, tmp_path / "viewer.html", title=ATTACKS[0] + ATTACKS[1],
                        meta={ATTACKS[1]: ATTACKS[0]})
    page = path.read_text(encoding="utf-8")
    scripts = len(re.findall(r"<script\b", page, re.I))
    assert scripts == 2, "the data block and the page's own script, no more"
    assert len(re.findall(r"</script", page, re.I)) == scripts
    assert "<img" not in page.lower() and "<!--" not in DATA_BLOCK.search(page).group(1)
    data = page_data(page)
    assert data["tokens"] == tokens and data["title"] == ATTACKS[0] + ATTACKS[1]
    assert data["meta"] == {ATTACKS[1]: ATTACKS[0]}


@pytest.mark.parametrize("shape, message", [((6, 12, 7, 7), "shape"), ((12, 8, 8), "shape"),
                                            ((1, 0, 8, 8), "one layer")])
def test_a_shape_that_does_not_fit_the_tokens_is_refused(tmp_path, shape, message):
    with pytest.raises(ValueError, match=message):
        write_viewer(["t"] * 8, np.zeros(shape), tmp_path / "viewer.html")


@pytest.mark.parametrize("bad", [-0.1, 1.5, np.nan])
def test_a_weight_outside_0_1_is_refused(tmp_path, bad):
    weights = synthetic_weights(4, layers=1, heads=1)
    weights[0, 0, 1, 2] = bad
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        write_viewer(list("abcd"), weights, tmp_path / "viewer.html")


# --- in a real browser -------------------------------------------------------------

@pytest.fixture(scope="module")
def browser():
    """Headless Chromium; skipped (or, in CI, failed) when Playwright or Chromium is missing."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        missing = f"Playwright is not installed; {INSTALL}"
    else:
        missing = None if CHROMIUM.is_file() else f"{CHROMIUM} is missing; {INSTALL}"
    if missing:
        if os.environ.get("CI", "").lower() not in ("", "0", "false"):
            pytest.fail(f"CI must run the browser tests: {missing}")
        pytest.skip(missing)
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def open_page(browser):
    """``open_page(path)``: a new page on the file, its first map drawn, script errors collected
    in ``page.errors``."""
    pages = []

    def open_(path):
        page = browser.new_page(viewport={"width": 1280, "height": 1000})
        page.errors = []
        page.on("pageerror", lambda error: page.errors.append(str(error)))
        page.goto(pathlib.Path(path).as_uri())
        page.wait_for_selector("#map[data-ready]", state="attached")
        pages.append(page)
        return page

    yield open_
    for page in pages:
        page.close()


def show(page, layer, head):
    """Choose a layer and a head (or "mean") and wait until that map is drawn."""
    page.select_option("#layer", value=str(layer))
    page.select_option("#head", value=str(head))
    page.wait_for_selector(f'#map[data-ready="{layer}/{head}"]', state="attached")


def cell_position(page, query, key):
    """The centre of cell (query, key) in the canvas's CSS pixels, from the geometry it states."""
    geometry = page.eval_on_selector("#map", "canvas => canvas.dataset")
    cell = float(geometry["cell"])
    return {"x": float(geometry["left"]) + (key + 0.5) * cell, "y": float(geometry["top"]) + (query + 0.5) * cell}


def click_cell(page, query, key):
    page.locator("#map").click(position=cell_position(page, query, key))
    return {name: page.text_content(f"#detail-{name}") for name in ("weight", "query", "key")}


def test_hover_and_click_show_the_models_weights(open_page, tmp_path, assert_png):
    tokens, weights = model_or_synthetic()
    page = open_page(write_viewer(tokens, weights, tmp_path / "viewer.html"))
    layer, head, query = 2, 4, 3
    show(page, layer, head)

    page.hover(f'.token[data-index="{query}"]')
    assert page.get_attribute("#map", "data-highlight-row") == str(query)
    assert page.get_attribute(".token.is-query", "data-index") == str(query)
    shades = page.eval_on_selector_all(".token", "spans => spans.map(s => Number(s.style.getPropertyValue('--w')))")
    assert int(np.argmax(shades)) == int(np.argmax(weights[layer, head, query])), "shaded by another row"
    # hovering a row of the map highlights the same way
    page.locator("#map").hover(position=cell_position(page, 5, 0))
    assert page.get_attribute("#map", "data-highlight-row") == "5"

    for key in range(len(tokens)):
        shown = click_cell(page, query, key)
        assert_within_precision(float(shown["weight"]), weights[layer, head, query, key])
        assert (shown["query"], shown["key"]) == (tokens[query], tokens[key])
    show(page, layer, "mean")
    assert_within_precision(float(click_cell(page, query, 1)["weight"]), weights[layer, :, query, 1].mean())

    page.screenshot(path=tmp_path / "viewer.png", full_page=True)
    assert_png(tmp_path / "viewer.png")
    with page.expect_download() as download:
        page.click("#save-png")
    download.value.save_as(tmp_path / "view.png")
    assert_png(tmp_path / "view.png", min_bytes=5_000)
    assert not page.errors


def test_malicious_tokens_show_as_text_and_run_nothing(open_page, tmp_path):
    tokens = ["[CLS]", *ATTACKS, "[SEP]"]
    path = write_viewer(tokens, synthetic_weights(len(tokens), layers=2, heads=3), tmp_path / "viewer.html",
                        title=ATTACKS[1], meta={"text": ATTACKS[0]})
    page = open_page(path)
    assert page.evaluate("typeof window.pwned") == "undefined"
    assert page.eval_on_selector_all(".token", "spans => spans.map(s => s.textContent)") == tokens
    assert page.text_content("#title") == ATTACKS[1]
    assert page.evaluate("document.querySelectorAll('img').length") == 0
    assert click_cell(page, 1, 2)["key"] == ATTACKS[1]
    assert page.evaluate("typeof window.pwned") == "undefined" and not page.errors


def test_512_tokens_fit_50_megabytes_and_stay_exact(open_page, tmp_path):
    n = 512
    weights = synthetic_weights(n)
    path = write_viewer([f"t{i}" for i in range(n)], weights, tmp_path / "viewer.html")
    assert path.stat().st_size < 50 * MEGABYTE, f"{path.stat().st_size / MEGABYTE:.1f} MB"
    page = open_page(path)
    show(page, 5, 11)
    for query, key in [(0, 0), (511, 511), (300, 17)]:
        shown = click_cell(page, query, key)
        assert_within_precision(float(shown["weight"]), weights[5, 11, query, key])
        assert (shown["query"], shown["key"]) == (f"t{query}", f"t{key}")
    assert not page.errors
