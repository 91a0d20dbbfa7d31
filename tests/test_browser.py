"""A person in a real browser: headless Chromium draws digits on the page's canvas with the mouse
and a finger, on a desktop and a phone, uploads a file, clicks an example. Screenshots of each
step go to artifacts/browser/ (the README's picture of the page is 20-pipeline-1280x800.png,
docs/app.md's photo-attention.png is 10-photo-attention.png).

Checked: the first view (example on the canvas, its answer and relevance map above the fold,
brush selected, friendly model name); the answer changing while the pen is down and the finished
drawing's answer after it lifts; drawing 1, 7 and 0 with the mouse, clearing, uploading (the
Upload tab asks for a picture first; back on Draw the upload's answer goes), clicking an example;
a switch to the photo model on the Upload tab answering the upload, not the hidden canvas's new
example; the clothing model (its wording and examples; an outline filled with Fill becomes solid
and is read as a trouser); the CIFAR-10 model (its example captions whole, not "aut…"; a scene
on the canvas read in colour as itself, the eraser over a brush stroke bringing the photo back,
every head's map over the colour photo); the step-by-step panel; the Test set tab (the headline
asking for a click, gallery, an image in every view, a click on the confusion matrix); a finger
on a 390x844 phone (the answer pinned in view while drawing, the canvas full width and not
covered, only the headline pinned once scrolled down to the panels); "What drove the answer" for
the answer and another class, the deletion test and a head switched off; a sweep's models in the
app (how one learned, a second beside it, where they differ on the test set), the logit lens and
the scoreboard of four maps."""
import os
import re
import shutil
import time

import numpy as np
import pytest
from conftest import ARTIFACTS, run_module, start_app

from bench.page_drawings import TROUSER

pytestmark = pytest.mark.browser

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
if not os.path.exists(CHROMIUM) or not shutil.which("chromium"):
    if os.environ.get("CI"):
        raise RuntimeError("CI must install chromium (apt-get install chromium)")
    pytest.skip("chromium is not installed", allow_module_level=True)
playwright = pytest.importorskip("playwright.sync_api")

SHOTS = ARTIFACTS / "browser"
# The first-visit tour (vit/ui/page.js) taken already: the tests that are not about it.
NO_TOUR = "localStorage.setItem('vit-explorer-tour', 'done')"

# Strokes in canvas-relative coordinates (0..1), drawn as a person would.
STROKES = {
    "1": [[(0.50, 0.18), (0.50, 0.85)]],
    "7": [[(0.28, 0.20), (0.72, 0.20), (0.42, 0.85)]],
    "0": [[(0.50 + 0.2 * __import__("math").cos(t / 20 * 6.2832),
             0.52 + 0.32 * __import__("math").sin(t / 20 * 6.2832)) for t in range(21)]],
}


@pytest.fixture(scope="module")
def page(browser, app_server):
    pg = browser.new_page(viewport={"width": 1400, "height": 1000})
    pg.add_init_script(NO_TOUR)
    pg.goto(app_server[1])
    wait_status(pg, "Example")          # the first view is in (a test may run alone)
    yield pg
    pg.close()


def status(pg) -> str:
    return pg.locator("#status").inner_text()



def pictures_loaded(page) -> None:
    """Wait until every picture in view has loaded (before a screenshot or a layout check),
    rather than a fixed pause. (Pictures below the fold load lazily, when scrolled to.)"""
    page.wait_for_function(
        "() => [...document.images].every(i => { const r = i.getBoundingClientRect();"
        " const seen = r.width > 0 && r.bottom > 0 && r.top < innerHeight;"
        " return !seen || (i.complete && i.naturalWidth > 0); })", timeout=30_000)

def wait_status(pg, text: str, timeout=30_000):
    try:
        pg.wait_for_function("t => (document.querySelector('#status')?.innerText || '').includes(t)",
                             arg=text, timeout=timeout)
    except playwright.TimeoutError:
        pg.screenshot(path=SHOTS / "failed-wait-status.png", full_page=True)
        raise AssertionError(f"waited for {text!r}; the headline says {status(pg)!r}") from None


def drawing_area(pg):
    """The canvas: a square, drawn on edge to edge."""
    box = pg.locator("#drawpad canvas").first.bounding_box()
    return box["x"], box["y"], box["width"]


def draw(pg, digit: str, lift: bool = True):
    x0, y0, side = drawing_area(pg)
    for stroke in STROKES[digit]:
        pts = [(x0 + u * side, y0 + v * side) for u, v in stroke]
        pg.mouse.move(*pts[0])
        pg.mouse.down()
        for (ax, ay), (bx, by) in zip(pts, pts[1:]):
            for i in range(1, 11):
                pg.mouse.move(ax + (bx - ax) * i / 10, ay + (by - ay) * i / 10)
        if lift:
            pg.mouse.up()


def sent(pg) -> int:
    """How many times the canvas has sent its drawing."""
    return int(pg.evaluate("() => +document.querySelector('#drawpad [data-ready]').dataset.sent || 0"))


def answered(pg) -> int:
    """The number of the last drawing the page shows the answer for."""
    text = pg.locator("#answered").inner_text().strip()
    return int(text) if text.isdigit() else 0


def in_view(pg, selector: str) -> bool:
    return pg.evaluate("s => { const r = document.querySelector(s).getBoundingClientRect();"
                       " return r.height > 0 && r.top >= 0 && r.bottom <= window.innerHeight + 1; }",
                       selector)


def finger(cdp, pts, between=None):
    """One finger along the points (screen pixels), through CDP touch events; `between()` runs
    after each segment, the finger still down."""
    cdp.send("Input.dispatchTouchEvent", {"type": "touchStart",
                                          "touchPoints": [{"x": pts[0][0], "y": pts[0][1]}]})
    for (ax, ay), (bx, by) in zip(pts, pts[1:]):
        for i in range(1, 11):
            cdp.send("Input.dispatchTouchEvent", {"type": "touchMove", "touchPoints": [
                {"x": ax + (bx - ax) * i / 10, "y": ay + (by - ay) * i / 10}]})
        if between:
            between()
    cdp.send("Input.dispatchTouchEvent", {"type": "touchEnd", "touchPoints": []})


def unfold(pg, panel: str) -> None:
    """Open a folded panel under "Go deeper" (no-op when it is open already)."""
    header = pg.locator(f"{panel} > button.label-wrap, {panel} button.label-wrap").first
    if "open" not in (header.get_attribute("class") or ""):
        header.scroll_into_view_if_needed()
        header.click()
    pg.wait_for_selector(f"{panel} button.label-wrap.open")


def assert_answer_in_view(pg):
    assert in_view(pg, "#status") and in_view(pg, "#pipeline")


def clear(pg):
    pg.locator('#drawpad button[aria-label="Clear canvas"]').click()


def test_first_view_shows_an_example_on_the_canvas_with_its_answer_above_the_fold(page):
    """Before anything is done: the drawn 7 on the canvas, its answer and a small relevance map
    beside it, all on the first screen; examples under the canvas; the brush selected."""
    wait_status(page, "Example: a drawn 7 — read as 7")
    page.wait_for_selector("#glance img", timeout=30_000)
    pictures_loaded(page)
    page.screenshot(path=SHOTS / "0-first-view.png")
    for part in ("#drawpad canvas", "#status", "#pipeline", "#glance img", "#glance-text",
                 "#draw-examples"):
        assert in_view(page, part), part
    ink = page.evaluate("() => { const c = document.querySelector('#drawpad canvas');"
                        " const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;"
                        " let n = 0; for (let i = 3; i < d.length; i += 4) n += d[i] > 128;"
                        " return n / (d.length / 4); }")
    assert 0.03 < ink < 0.3                        # the example's strokes are on the canvas
    assert page.locator('#drawpad button[aria-label="Brush"][aria-pressed="true"]').count() == 1
    assert "Handwritten digits (MNIST), 514 k" in page.locator("#model input").input_value()


def test_the_answer_follows_the_pen_before_it_lifts(page):
    """While the pen is down the strip's answer follows it, computed in the page itself
    (vit/ui/inpage.js; tests/test_inpage.py has the server's updates when it can't run); on
    lifting, the server's answer for the finished drawing arrives (bench/inpage.py measures
    both)."""
    page.wait_for_function("() => window.vitInPage && window.vitInPage.ready && "
                           "window.vitInPage.sessions.mnist && window.vitInPage.sessions.mnist.session",
                           timeout=60_000)
    clear(page)
    wait_status(page, "Draw a digit")
    draw(page, "1", lift=False)
    page.wait_for_function("() => (v => v && v.inpage && v.answer === '1')(window.vitStrip.value())",
                           timeout=30_000)                # an answer while the pen is still down
    assert "1" in page.locator("#pipeline .said").inner_text()
    page.mouse.up()
    final = sent(page)
    page.wait_for_function(f"() => document.querySelector('#answered').innerText.trim() === '{final}'",
                           timeout=30_000)
    wait_status(page, "reads this as 1")


@pytest.mark.parametrize("digit", ["1", "7", "0"])
def test_drawing_a_digit_shows_its_prediction_and_attention(page, digit):
    clear(page)
    wait_status(page, "Draw a digit")
    draw(page, digit)
    wait_status(page, f"reads this as {digit}")
    pictures_loaded(page)
    page.screenshot(path=SHOTS / f"1-drawn-{digit}.png", full_page=True)
    label = page.locator("#pipeline .said").inner_text()
    assert digit in label
    unfold(page, "#views")
    for pic in ("#seen img", "#strip img", "#attention img", "#rollout img"):
        page.wait_for_selector(pic, state="attached", timeout=30_000)
    # Each picture is shown whole: nothing of it hidden below its box.
    for pic in ("#seen", "#strip", "#pick", "#row"):
        page.locator(pic).scroll_into_view_if_needed()
        page.wait_for_selector(f"{pic} img", timeout=30_000)
        hidden = page.evaluate("s => { const b = document.querySelector(s);"
                               " const i = b.querySelector('img'); return"
                               " i.getBoundingClientRect().bottom - b.getBoundingClientRect().bottom; }",
                               pic)
        assert hidden <= 1, (pic, hidden)


def test_clearing_resets_the_page(page):
    clear(page)
    wait_status(page, "Draw a digit")
    page.screenshot(path=SHOTS / "2-cleared.png")
    assert page.locator("#attention img").count() == 0


def test_upload_and_example(page, tmp_path):
    from PIL import Image

    from vit.data.examples import render_digit
    img = Image.new("L", (500, 400), 255)
    img.paste(render_digit("4", 300, 24), (150, 50))
    img.save(tmp_path / "four.png")
    page.get_by_role("tab", name="Upload").click()
    wait_status(page, "Upload or paste a picture")      # not the drawing's answer beside it
    page.locator("#upload input[type=file]").set_input_files(str(tmp_path / "four.png"))
    wait_status(page, "reads this as 4")
    page.screenshot(path=SHOTS / "3-uploaded.png", full_page=True)
    page.get_by_role("tab", name="Draw").click()        # the canvas's own answer again
    page.wait_for_function("() => !document.querySelector('#status').innerText.includes('as 4')")
    # Each tile is named by what it shows, not "Thumbnail 3 of 10" (a trial, with the keyboard).
    page.get_by_role("button", name="Example: 2", exact=True).click()
    wait_status(page, "Example: a drawn 2 — read as 2")
    page.screenshot(path=SHOTS / "4-example.png", full_page=True)


def wait_text(pg, selector: str, text: str, timeout=60_000):
    pg.wait_for_function(
        "([s, t]) => document.querySelector(s) && document.querySelector(s).innerText.includes(t)",
        arg=[selector, text], timeout=timeout)


def test_test_set_explorer(page):
    """Browse the test set: the least confident answers, one of them in every view, then a click
    on the confusion matrix filters the gallery to that cell."""
    from vit.pictures.confusion import CELL, LEFT, TOP
    page.get_by_role("tab", name="Test set").click()
    wait_text(page, "#testset-status", "test set")
    wait_status(page, "Click a test image to explain it")      # the answer beside is not one
    page.get_by_label("least confident").check()
    wait_text(page, "#testset-status", "least confident first")
    page.wait_for_selector("#testset-gallery img", timeout=30_000)
    page.screenshot(path=SHOTS / "5-test-set.png", full_page=True)
    # Issue 49, 6: a fifth column was cut at the right edge, the first row lay under the label,
    # and captions were cut ("5→3 99.…"). Every thumbnail and caption is whole now.
    cut = page.evaluate("""() => {
      const g = document.querySelector('#testset-gallery'), wrap = g.querySelector('.grid-wrap');
      const label = g.querySelector('label').getBoundingClientRect(), w = wrap.getBoundingClientRect();
      const items = [...g.querySelectorAll('.thumbnail-item')].map(e => e.getBoundingClientRect());
      const captions = [...g.querySelectorAll('.caption-label')];
      return {wide: wrap.scrollWidth - wrap.clientWidth,
              outside: items.filter(r => r.right > w.right + 1 || r.left < w.left - 1).length,
              under_label: items.filter(r => r.top < label.bottom - 1).length,
              captions_cut: captions.filter(c => c.scrollWidth > c.clientWidth + 1).length,
              n: items.length};
    }""")
    assert cut["n"] > 5 and cut["wide"] <= 0 and cut["outside"] == 0, cut
    assert cut["under_label"] == 0 and cut["captions_cut"] == 0, cut
    page.locator("#testset-gallery img").first.click()
    wait_status(page, "Test image #")
    assert "true class" in status(page)
    # Its result is brought into view (it appears above the tab).
    page.wait_for_function("() => { const r = document.querySelector('#status').getBoundingClientRect();"
                           " return r.top >= -5 && r.top < window.innerHeight; }", timeout=10_000)
    assert page.locator("#reliability img").count() == 1
    unfold(page, "#views")
    page.wait_for_selector("#attention img", state="attached", timeout=30_000)
    page.screenshot(path=SHOTS / "6-test-image.png", full_page=True)
    img = page.locator("#confusion img")
    img.scroll_into_view_if_needed()                     # back down to the tab, as a person would
    box = img.bounding_box()
    scale = box["width"] / page.evaluate("() => document.querySelector('#confusion img').naturalWidth")
    page.mouse.click(box["x"] + (LEFT + 1.5 * CELL) * scale, box["y"] + (TOP + 1.5 * CELL) * scale)
    wait_text(page, "#testset-status", "true class 1, predicted 1")
    page.screenshot(path=SHOTS / "7-confusion-click.png", full_page=True)
    # Quick clicks on the filter: none dropped, the gallery follows the last one.
    for kind in ("all", "mistakes", "least confident", "all"):
        page.locator("#testset-kind").get_by_label(kind, exact=True).check()
    wait_text(page, "#testset-status", "images, true class 1, predicted 1")
    page.wait_for_timeout(1500)
    assert "images, true class 1, predicted 1" in page.locator("#testset-status").inner_text()


def test_touch_drawing_on_a_phone(browser, app_server):
    """A phone-sized viewport, a finger: touch events on the canvas draw and get a prediction."""
    ctx = browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True,
                              has_touch=True, device_scale_factor=2)
    ctx.add_init_script(NO_TOUR)
    pg = ctx.new_page()
    pg.goto(app_server[1])
    wait_status(pg, "Example")
    # The first view: the whole canvas above the pinned answer, unscrolled.
    canvas = pg.locator("#drawpad canvas").bounding_box()
    assert canvas["y"] + canvas["height"] <= pg.locator("#result-col").bounding_box()["y"] + 1
    pg.locator("#drawpad canvas").evaluate("c => c.scrollIntoView({block: 'end'})")
    clear(pg)
    wait_status(pg, "Draw a digit")
    # The pinned answer does not cover the canvas scrolled into view.
    assert (pg.locator("#drawpad canvas").bounding_box()["y"] + drawing_area(pg)[2]
            <= pg.locator("#result-col").bounding_box()["y"] + 1)
    cdp = ctx.new_cdp_session(pg)
    x0, y0, side = drawing_area(pg)
    pts = [(x0 + u * side, y0 + v * side) for u, v in STROKES["7"][0]]
    finger(cdp, pts, between=lambda: assert_answer_in_view(pg))
    wait_status(pg, "reads this as 7")
    assert in_view(pg, "#status") and in_view(pg, "#pipeline") and in_view(pg, "#drawpad canvas")
    box = pg.locator("#drawpad canvas").bounding_box()
    assert box["width"] >= 0.8 * 390              # the canvas fills the width (less the margins)
    pg.screenshot(path=SHOTS / "5-phone-touch.png", full_page=False)
    # Scrolled to the very bottom, the last panel is above the pinned answer, not under it.
    for _ in range(3):                         # pictures below load as they come into view
        pg.evaluate("() => window.scrollTo(0, document.documentElement.scrollHeight)")
        pictures_loaded(pg)
    assert (pg.locator("#glossary").bounding_box()["y"] + 40
            <= pg.locator("#result-col").bounding_box()["y"])
    # Away from the canvas only the headline stays pinned: the panels get the screen.
    pg.locator("#mechanism").scroll_into_view_if_needed()
    pg.wait_for_function("() => !document.querySelector('#pipeline').checkVisibility()")
    assert in_view(pg, "#status") and pg.locator("#result-col").bounding_box()["height"] < 100
    pg.locator("#drawpad canvas").evaluate("c => c.scrollIntoView({block: 'end'})")
    pg.wait_for_function("() => document.querySelector('#pipeline').checkVisibility()")
    ctx.close()


def test_what_drove_the_answer_for_another_class_and_with_heads_off(page):
    """The panel under the explorer: maps for the answer, then for another class ("why 7 and not
    1?"), the deletion test on demand, and a head switched off."""
    page.get_by_role("tab", name="Draw").click()             # an earlier test left the Test set tab
    # The tab's own answer (the canvas's drawing) first, as a person sees it before clearing:
    # a Clear sent at once can be answered before it and then overwritten (docs/app.md).
    page.wait_for_function("() => !/test image/i.test(document.querySelector('#status').innerText)",
                           timeout=30_000)
    clear(page)
    wait_status(page, "Draw a digit")
    draw(page, "7")
    wait_status(page, "reads this as 7")
    unfold(page, "#why")
    page.locator("#relevance").scroll_into_view_if_needed()        # Gradio loads images lazily
    for pic in ("#relevance img", "#occlusion img"):
        page.wait_for_selector(pic, timeout=30_000)
    page.wait_for_function("() => document.querySelector('#faithfulness').innerText.includes('Explaining 7')",
                           timeout=30_000)
    page.locator("#target input").click()
    page.locator('#target li[role="option"][aria-label="1"]').click()
    page.wait_for_function("() => document.querySelector('#faithfulness').innerText.includes('Explaining 1')",
                           timeout=30_000)
    page.locator("#measure").click()
    # The verdict in words; the scores (random order's included) behind its "?".
    page.wait_for_function("() => document.querySelector('#faithfulness').innerText.includes('believe')"
                           " && document.querySelector('#faithfulness').textContent.includes('random order')",
                           timeout=60_000)
    page.locator("#heads label").first.click()
    page.wait_for_function("() => document.querySelector('#ablation').innerText.includes('With 1 head off')",
                           timeout=30_000)
    assert "random order" in page.locator("#faithfulness").text_content()      # still shown
    page.locator("#relevance").scroll_into_view_if_needed()
    pictures_loaded(page)
    page.screenshot(path=SHOTS / "8-what-drove-the-answer.png")
    assert "reads this as 7" in status(page)


def test_how_attention_works_panel_opens_with_the_walk_through_and_figure_7(page):
    """The step-by-step panel: closed (and free) until opened; then one token's trip through a
    head and the model's Figure 7 views."""
    page.get_by_role("tab", name="Draw").click()
    clear(page)
    wait_status(page, "Draw a digit")
    draw(page, "7")
    wait_status(page, "reads this as 7")
    unfold(page, "#mechanism")
    for pic in ("#mech-walk img", "#mech-position img", "#mech-distance img", "#mech-filters img"):
        page.locator(pic.split()[0]).scroll_into_view_if_needed()
        page.wait_for_selector(pic, timeout=60_000)
    assert "largest weights" in page.locator("#mech-walk-text").inner_text().lower()
    page.locator("#mech-walk").scroll_into_view_if_needed()
    page.screenshot(path=SHOTS / "9-how-attention-works.png")


def page_with_model(browser, app_server, option: str, hint: str, example: str):
    """A new page switched to another model, once its Draw tab asks for `hint` and its examples
    include `example`."""
    pg = browser.new_page(viewport={"width": 1400, "height": 1000})
    pg.add_init_script(NO_TOUR)
    pg.goto(app_server[1])
    wait_status(pg, "Example")
    pg.locator("#model input").click()
    pg.get_by_role("option", name=option).click()
    for where, text in (("#draw-hint", hint), ("#draw-examples", example)):
        pg.wait_for_function(f"() => document.querySelector('{where}').innerText.includes('{text}')",
                             timeout=30_000)
    return pg


def test_how_it_learned_is_found_from_the_default_model(browser, app_server):
    """Issue 49, 7: "How it learned" was absent on the default model, nothing saying that another
    model has it. Its title now names the model that kept snapshots; once that model is chosen,
    it opens on its filmstrip."""
    pg = browser.new_page(viewport={"width": 1280, "height": 800})
    pg.add_init_script(NO_TOUR)
    pg.goto(app_server[1])
    wait_status(pg, "Example")
    learned = pg.locator("#learned")
    assert learned.is_visible()
    title = learned.locator("button.label-wrap").inner_text()
    assert title.splitlines()[0].strip() == ("How it learned: only for Handwritten digits "
                                             "(MNIST), 139 k parameters, in the Model menu"), title
    # Opened here, its words send the visitor to that model too, and it shows no slider that
    # moves nothing (a trial: the title said "choose it in the Model menu", the body only
    # "train one", under a slider).
    open_panel(pg, "#learned", "How it learned")
    pg.wait_for_function("() => document.querySelector('#learned-text')?.innerText"
                         ".includes('Model menu')", timeout=30_000)
    assert not pg.locator("#learned-when").is_visible()
    assert not pg.locator("#learned-frame").is_visible()
    open_panel(pg, "#learned", "How it learned")                 # folded again
    # (A teacher's trial: the switch turned the strip's step 4 from "all layers" to "one head",
    # unasked, because the new model's layer differs; its layer and head menus showed in
    # "all layers" mode too.)
    mode = ("() => [document.querySelector('#pipeline [data-mode=rollout]').getAttribute("
            "'aria-checked'), document.querySelector('#pipeline .pick-head').offsetHeight]")
    pg.wait_for_function("() => document.querySelector('#pipeline .said')?.innerText.trim()")
    assert pg.evaluate(mode) == ["true", 0]
    pg.locator("#model input").click()
    pg.get_by_role("option", name="Handwritten digits (MNIST), 139 k parameters").click()
    pg.wait_for_function("() => !document.querySelector('#learned button.label-wrap').innerText"
                         ".includes('only for')", timeout=30_000)
    pg.wait_for_function("() => document.querySelector('#pipeline [data-pick=layer]').options"
                         ".length === 4", timeout=30_000)            # the small model's strip
    assert pg.evaluate(mode) == ["true", 0]
    open_panel(pg, "#learned", "How it learned")
    pg.wait_for_selector("#learned-picture img", timeout=60_000)
    assert "Over training" in pg.locator("#learned-text").inner_text()
    pg.screenshot(path=SHOTS / "49-7-how-it-learned.png", full_page=True)
    pg.close()


def test_clothing_model_asks_for_clothing_and_its_fill_tool_fills_an_outline(browser, app_server):
    """Switching to Fashion-MNIST changes what the page asks for and its examples; an outline is
    "not a piece of clothing", and filled with the Fill tool it becomes a solid shape, read as
    what it shows."""
    pg = page_with_model(browser, app_server, "Clothing and shoes (Fashion-MNIST)",
                         "piece of clothing", "Ankle boot")
    assert "Fill" in pg.locator("#draw-hint").inner_text()
    # The drawing on screen, read again by the clothing model, arrives after the switch: wait
    # for it, or it could land after the Clear below and replace its "Draw a piece of clothing".
    pg.wait_for_function("() => document.querySelector('#pipeline .bars').innerText.includes('Ankle boot')",
                         timeout=60_000)
    clear(pg)
    wait_status(pg, "Draw a piece of clothing")
    x0, y0, side = drawing_area(pg)
    outline = TROUSER              # the same trousers bench.page_drawings reads before a bundling
    pg.mouse.move(x0 + outline[0][0] * side, y0 + outline[0][1] * side)
    pg.mouse.down()
    for (ax, ay), (bx, by) in zip(outline, outline[1:]):
        for i in range(1, 9):
            pg.mouse.move(x0 + (ax + (bx - ax) * i / 8) * side, y0 + (ay + (by - ay) * i / 8) * side)
    pg.mouse.up()
    # An outline is not what the clothing model knows (garments are filled silhouettes; it was
    # shown outlines as "none of these"): it says so, and the Fill tool makes it a garment.
    wait_status(pg, "Not a piece of clothing")
    # ... and says what to do, in the headline's two lines (a trial: nothing said Fill)
    assert "An outline? Tap inside it with Fill." in pg.locator("#status").inner_text()
    assert pg.locator("#status").bounding_box()["height"] <= 62 + 1
    ink = ("() => { const c = document.querySelector('#drawpad canvas');"
           " const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;"
           " let n = 0; for (let i = 3; i < d.length; i += 4) n += d[i] > 128; return n / (d.length / 4); }")
    before, seq = pg.evaluate(ink), sent(pg)
    pg.wait_for_selector("#glance img", timeout=30_000)
    glance = pg.locator("#glance img").get_attribute("src")
    pg.locator('#drawpad button[aria-label="Fill"]').click()
    pg.mouse.click(x0 + 0.35 * side, y0 + 0.5 * side)                    # inside a leg
    pg.wait_for_function(f"() => document.querySelector('#answered').innerText.trim() === '{seq + 1}'",
                         timeout=30_000)
    assert pg.evaluate(ink) > before + 0.1                                # the shape is now solid
    wait_status(pg, "reads this as Trouser")
    # The small relevance map beside the answer follows: it is the filled shape's.
    pg.wait_for_function("s => { const i = document.querySelector('#glance img');"
                         " return i && i.src !== s; }", arg=glance, timeout=30_000)
    pg.screenshot(path=SHOTS / "10-clothing-filled.png")
    pg.close()


COLOURFUL = """(sel) => { const im = document.querySelector(sel);
  const c = document.createElement('canvas'); c.width = im.naturalWidth; c.height = im.naturalHeight;
  const x = c.getContext('2d'); x.drawImage(im, 0, 0);
  const d = x.getImageData(0, 0, c.width, c.height).data;
  let s = 0; for (let i = 0; i < d.length; i += 4) s += Math.abs(d[i] - d[i + 2]);
  return s / (d.length / 4); }"""


def test_photo_model_keeps_the_colours_and_shows_a_photos_attention_maps(browser, app_server):
    """CIFAR-10: the page asks for a picture, its examples are the project's own scenes, a scene
    goes on the canvas and to the model in colour (not as grey ink) and is read as itself, and
    every head's map is drawn over the colour photo (docs/app.md's picture of it)."""
    from vit.data.examples import SCENES
    pg = page_with_model(browser, app_server, "Photos of animals and vehicles (CIFAR-10)",
                         "Pick a picture", "horse")
    # The digit on the canvas means nothing to a photo model: its first example replaces it.
    wait_status(pg, "Example: a picture of a ship — read as ship", timeout=60_000)
    pg.locator("#draw-examples img").nth(list(SCENES).index("horse")).click()
    wait_status(pg, "Example: a picture of a horse — read as horse", timeout=60_000)
    pg.locator("#draw-examples img").nth(list(SCENES).index("ship")).click()
    wait_status(pg, "Example: a picture of a ship — read as ship", timeout=60_000)
    # (waited for, not read at once: on CI's busy run the headline read "" a moment after its
    # ship had shown, hidden again while an answer was checked)
    wait_status(pg, "It knows: airplane")
    # Every example's caption is whole ("automobile", not "aut…").
    captions = pg.locator("#draw-examples .caption-label")
    assert captions.count() == len(SCENES)
    assert pg.evaluate("() => [...document.querySelectorAll('#draw-examples .caption-label')]"
                       ".filter(e => e.scrollWidth > e.clientWidth).map(e => e.innerText)") == []
    canvas_colour = pg.evaluate(
        "() => { const c = document.querySelector('#drawpad canvas');"
        " const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;"
        " let s = 0; for (let i = 0; i < d.length; i += 4) s += Math.abs(d[i] - d[i + 2]);"
        " return s / (d.length / 4); }")
    assert canvas_colour > 40, canvas_colour          # blue sky and sea: blue far above red
    unfold(pg, "#views")
    for picture in ("#seen img", "#attention img"):
        pg.locator(picture).scroll_into_view_if_needed()
        pg.wait_for_function(f"() => {{ const i = document.querySelector('{picture}');"
                             " return i && i.complete && i.naturalWidth > 0; }", timeout=30_000)
        assert pg.evaluate(COLOURFUL, picture) > 15, picture
    pg.locator("#attention").screenshot(path=SHOTS / "10-photo-attention.png")
    # Brush across the photo, then the eraser over the stroke: the photo comes back (not white).
    row = ("() => [...document.querySelector('#drawpad canvas').getContext('2d')"
           ".getImageData(100, 200, 200, 1).data]")
    photo = pg.evaluate(row)
    pg.locator("#drawpad canvas").scroll_into_view_if_needed()
    for tool in ("Brush", "Eraser"):
        pg.locator(f'#drawpad button[aria-label="{tool}"]').click()
        x0, y0, side = drawing_area(pg)
        pg.mouse.move(x0 + 0.3 * side, y0 + 0.5 * side)
        pg.mouse.down()
        for i in range(1, 21):
            pg.mouse.move(x0 + (0.3 + 0.4 * i / 20) * side, y0 + 0.5 * side)
        pg.mouse.up()
        now = np.array(pg.evaluate(row))
        diff = np.abs(now - np.array(photo)).max()
        assert diff > 100 if tool == "Brush" else diff <= 2, (tool, diff)
    pg.locator('#drawpad button[aria-label="Brush"]').click()
    clear(pg)
    wait_status(pg, "Pick a picture below the canvas")
    pg.locator("#model input").click()                  # back to digits: a digit, not the photo
    pg.get_by_role("option", name="Handwritten digits (MNIST), 514 k parameters").click()
    wait_status(pg, "Example: a drawn 7 — read as 7", timeout=60_000)
    pg.close()


def test_a_model_switch_on_the_upload_tab_answers_the_upload_not_the_hidden_canvas(
        browser, app_server, tmp_path):
    """Switching to the photo model puts its example on the (hidden) canvas; on the Upload tab
    the answer must stay the upload's, read by the new model ("not a photo"), until the Draw tab
    is opened."""
    from PIL import Image
    one = Image.new("L", (200, 200), 255)
    one.paste(0, (90, 40, 110, 160))
    one.save(tmp_path / "one.png")
    pg = browser.new_page(viewport={"width": 1400, "height": 1000})
    pg.add_init_script(NO_TOUR)
    pg.goto(app_server[1])
    wait_status(pg, "Example")
    pg.get_by_role("tab", name="Upload").click()
    pg.locator("#upload input[type=file]").set_input_files(str(tmp_path / "one.png"))
    wait_status(pg, "reads this as 1")
    pg.locator("#model input").click()
    pg.get_by_role("option", name="Photos of animals and vehicles (CIFAR-10)").click()
    pg.wait_for_function("() => !document.querySelector('#status').innerText.includes('as 1 (')",
                         timeout=60_000)                 # the upload, read by the photo model
    pg.wait_for_timeout(3000)                            # the canvas's example has loaded by now
    # A bar drawn on white is not a photo: the photo model says so (vit/explain/typical.py), and
    # it is the upload's answer, not the canvas example's.
    assert "Not a photo" in status(pg) and "Example" not in status(pg), status(pg)
    # Back to the digits, still on the Upload tab: the digit example goes on the hidden canvas,
    # and the page's own model (ready by now) must not read it into the strip beside the
    # upload's answer.
    in_page_ready(pg)
    pg.evaluate("""() => { window.saids = []; const look = () => {
        const e = document.querySelector('#pipeline .said');
        saids.push(e && e.checkVisibility({visibilityProperty: true}) ? e.innerText.trim() : null);
        if (saids.length < 3000) requestAnimationFrame(look); }; look(); }""")
    pg.locator("#model input").click()
    pg.get_by_role("option", name="Handwritten digits (MNIST), 514 k parameters").click()
    wait_status(pg, "reads this as 1", timeout=60_000)
    pg.wait_for_timeout(2000)                            # the canvas's example has loaded by now
    saids = pg.evaluate("window.saids")
    assert saids[-1] == "1" and "7" not in saids, [x for i, x in enumerate(saids) if x != saids[i - 1]]
    pg.locator("#model input").click()
    pg.get_by_role("option", name="Photos of animals and vehicles (CIFAR-10)").click()
    wait_status(pg, "Not a photo", timeout=60_000)
    pg.get_by_role("tab", name="Draw").click()
    wait_status(pg, "Example: a picture of a ship", timeout=60_000)
    pg.close()


# Every frame: whether the canvas holds a photo (opaque all over: the photo model's example),
# and what the strip's answer step and the headline say where they are shown (None: hidden).
# (innerText leaves out what is hidden; a transition once kept hidden parts on screen for frames)
RECORD_FRAMES = """() => { window.frames_seen = [];
    const c = document.querySelector('#drawpad canvas'), x = c.getContext('2d');
    const said = () => { const e = document.querySelector('#pipeline .said');
        return e && e.checkVisibility({visibilityProperty: true}) ? e.innerText.trim() : null; };
    const look = () => {
        let opaque = 0;
        for (let i = 1; i < 5; i++) for (let j = 1; j < 5; j++)
            opaque += x.getImageData(c.width * i / 5, c.height * j / 5, 1, 1).data[3] === 255;
        const menu = document.querySelector('#model input').value;
        window.frames_seen.push({photo: opaque === 16, said: said(),
                                 status: document.querySelector('#status').innerText.trim(),
                                 menu: window.vitInPage.m?.labels[menu] || menu,
                                 strip: window.vitStrip.value()?.model});
        if (window.frames_seen.length < 3000) requestAnimationFrame(look); };
    look(); }"""


def test_a_switch_never_shows_the_new_models_picture_beside_the_old_answer(browser, app_server):
    """Issue 49, 1: a sixth trial switched from the digits to the photo model and saw its ship
    on the canvas beside the headline's "reads this as 1 (99.9 %)" and the strip's 1 for ~0.6 s
    (the picture lands before its answer). Until the ship's answer lands they say nothing."""
    ctx, pg = fresh(browser, app_server)
    clear(pg)
    draw(pg, "1")
    wait_status(pg, "reads this as 1")
    pg.evaluate(RECORD_FRAMES)
    pg.locator("#model input").click()
    pg.get_by_role("option", name="Photos of animals and vehicles (CIFAR-10)").click()
    wait_status(pg, "Example: a picture of a ship", timeout=60_000)
    pg.wait_for_function("() => document.querySelector('#pipeline .said')?.innerText.trim() === 'ship'"
                         " && !document.querySelector('#pipeline[data-stale]')", timeout=30_000)
    pg.wait_for_timeout(300)                   # (a few more frames recorded after it landed)
    frames = pg.evaluate("window.frames_seen")
    with_ship = [f for f in frames if f["photo"]]
    assert with_ship, "the ship never reached the canvas"
    old = [f for f in with_ship if f["said"] == "1" or "as 1" in (f["status"] or "")]
    assert not old, f"{len(old)} of {len(with_ship)} frames showed the ship beside the 1: {old[0]}"
    assert with_ship[-1]["said"] == "ship"
    ctx.close()


def test_a_slow_switch_never_shows_the_last_models_strip_under_the_new_models_name(browser,
                                                                                   app_server):
    """Issue 49, 1, on a busy CI machine: the switch to the photo model took the server more than
    the strip's 8-s fallback, which then showed the digit model's "1" again under a menu naming
    CIFAR-10 (and, a frame later, beside the ship). The server is held for 9 s here: the strip
    stays hidden till the photo model's own answer."""
    ctx, pg = fresh(browser, app_server)
    clear(pg)
    draw(pg, "1")
    wait_status(pg, "reads this as 1")
    in_page_ready(pg)
    _, release = held_answers(pg, lambda body: True)
    pg.evaluate(RECORD_FRAMES)
    pg.locator("#model input").click()
    pg.get_by_role("option", name="Photos of animals and vehicles (CIFAR-10)").click()
    pg.wait_for_timeout(9000)                       # past the 8-s fallback, the server still busy
    release()
    pg.wait_for_function("() => document.querySelector('#pipeline .said')?.innerText.trim() === 'ship'"
                         " && !document.querySelector('#pipeline[data-stale]')", timeout=60_000)
    frames = pg.evaluate("window.frames_seen")
    wrong = [f for f in frames if f["said"] is not None and f["strip"] != f["menu"]]
    assert not wrong, f"{len(wrong)} of {len(frames)} frames: {wrong[0]}"
    assert any(f["menu"] == "cifar10" and f["said"] is None for f in frames)   # (the switch seen)
    ctx.close()


def test_an_example_clicked_never_stands_beside_the_last_drawings_map(browser, app_server):
    """Issue 49, 1 (a seventh trial, 3 of 3): example 3 clicked after a drawn 7: the headline
    "Example: a drawn 3" stood beside the 7's "rests on" map and words for 0.1-0.3 s (the map
    in hand came on the answer's lane, the map's panel on the "why" lane after it: the 3 seen
    before, its maps are in hand)."""
    ctx, pg = fresh(browser, app_server)
    pg.locator("#draw-examples button.thumbnail-item").nth(3).click()
    wait_status(pg, "Example: a drawn 3")
    pg.wait_for_function("() => !document.querySelector('#why-row[data-stale]')", timeout=30_000)
    clear(pg)
    draw(pg, "7")
    wait_status(pg, "reads this as 7")
    pg.wait_for_function("() => !document.querySelector('#why-row[data-stale]')", timeout=30_000)
    old = pg.evaluate("document.querySelector('#glance img').src")
    pg.evaluate("""() => { window.frames_seen = [];
        const look = () => { const t = document.querySelector('#glance-text');
            frames_seen.push({status: document.querySelector('#status').innerText,
                              why: t.checkVisibility({visibilityProperty: true}),
                              map: document.querySelector('#glance img')?.src});
            if (frames_seen.length < 3000) requestAnimationFrame(look); };
        look(); }""")
    pg.locator("#draw-examples button.thumbnail-item").nth(3).click()
    wait_status(pg, "Example: a drawn 3")
    pg.wait_for_function("() => !document.querySelector('#why-row[data-stale]')", timeout=30_000)
    frames = pg.evaluate("window.frames_seen")
    mixed = [f for f in frames if "drawn 3" in f["status"] and f["why"] and f["map"] == old]
    assert not mixed, f"{len(mixed)} frames: the 3's headline beside the 7's map"
    assert pg.evaluate("document.querySelector('#glance img').src") != old
    ctx.close()


def test_a_switch_within_the_digits_never_shows_the_last_models_answer(browser, app_server):
    """Issue 49, 1 (a seventh trial): after choosing another model, the page showed the last
    model's answer, strip and "rests on" under the new name in the menu for up to ~1 s."""
    ctx, pg = fresh(browser, app_server)
    clear(pg)
    draw(pg, "1")
    wait_status(pg, "reads this as 1")
    pg.wait_for_selector("#pipeline .drove:not([hidden])", timeout=30_000)
    pg.evaluate(RECORD_FRAMES)
    pg.locator("#model input").click()
    pg.get_by_role("option", name="Handwritten digits (MNIST), 139 k parameters").click()
    pg.wait_for_function("() => window.vitStrip.value()?.model !== 'mnist' "
                         "&& !document.querySelector('#status[data-stale], #pipeline[data-stale]')",
                         timeout=30_000)
    pg.wait_for_timeout(300)                   # (a few more frames recorded after it landed)
    frames = pg.evaluate("window.frames_seen")
    new = frames[-1]["menu"]
    assert new != "mnist" and frames[-1]["strip"] == new
    old = [f for f in frames if f["menu"] == new and f["strip"] != new
           and (f["said"] or "reads this as" in f["status"])]
    assert not old, f"{len(old)} frames showed the last model's answer under the new name: {old[0]}"
    ctx.close()


def held_answers(pg, hold):
    """Holds the page's calls to the server for which `hold(post body)` is true (a busy server,
    made certain). Returns the calls held, and a function that sends them on and stops holding."""
    held, open_ = [], []

    def route(r):
        if not open_ and hold(r.request.post_data or ""):
            held.append(r)
        else:
            r.continue_()

    def release():
        open_.append(True)
        for r in held:
            r.continue_()
    pg.route("**/queue/join*", route)
    return held, release


def in_page_ready(pg, model="mnist"):
    pg.wait_for_function("m => window.vitInPage?.stats?.().ready && m in window.vitInPage.stats().loads",
                         arg=model, timeout=60_000)


def test_an_example_clicked_is_read_by_the_page_while_the_server_checks_it(browser, app_server):
    """Issue 49 (an eighth look): a clicked example's strip stood empty, titles and all, until
    the server answered, and the headline said "Checking your finished drawing…" of a picture
    nobody drew. The page's own model reads it at once; the headline says it checks the picture."""
    ctx, pg = fresh(browser, app_server)
    in_page_ready(pg)
    held, release = held_answers(pg, lambda body: '"seq"' in body)   # the canvas's, not the click's
    pg.locator("#draw-examples button.thumbnail-item").nth(3).click()
    pg.wait_for_function("() => document.querySelector('#pipeline .said')?.innerText.trim() === '3'"
                         " && !document.querySelector('#pipeline[data-stale]')", timeout=30_000)
    assert held, "the canvas sent nothing"
    assert pg.get_attribute("#status", "data-stale") == "loaded"       # "Checking this picture…"
    assert "checking this picture" in pg.inner_text("#pipeline .readout")
    release()
    wait_status(pg, "Example: a drawn 3")
    pg.wait_for_function("() => !document.querySelector('#status[data-stale], #why-row[data-stale]')",
                         timeout=30_000)
    ctx.close()


def held_switch_to_the_small_model(browser, app_server):
    """A new page switched to the 139 k digit model while the server answers nothing (a busy
    server, made certain), once that model runs in the page: (context, page, release)."""
    ctx, pg = fresh(browser, app_server)
    in_page_ready(pg)
    _, release = held_answers(pg, lambda body: True)
    pg.locator("#model input").click()
    pg.get_by_role("option", name="Handwritten digits (MNIST), 139 k parameters").click()
    in_page_ready(pg, "mnist-small")
    return ctx, pg, release


# The page's own answer with the small model on the strip, shown (before the switch's 8-s
# fallback shows the strip anyway).
SMALL_IN_PAGE = ("() => window.vitStrip.value()?.model === 'mnist-small'"
                 " && !document.querySelector('#pipeline[data-stale]')"
                 " && document.querySelector('#pipeline .said')?.checkVisibility()")
# The server's answer with the small model landed, nothing hidden.
SMALL_LANDED = ("() => window.vitStrip.value()?.model === 'mnist-small' && !window.vitStrip.value().live"
                " && !document.querySelector('#status[data-stale], #pipeline[data-stale]')")


def test_a_switch_within_one_kind_is_read_by_the_page_while_the_server_answers(browser, app_server):
    """A ninth trial: after choosing the other digit model the strip stood blank for ~2 s, until
    the server had answered. The drawing stays on a switch within one kind, and the page reads
    it with the chosen model as soon as that model is loaded; the headline still says it is
    reading it with that model until the server's answer lands."""
    ctx, pg, release = held_switch_to_the_small_model(browser, app_server)
    pg.wait_for_function(SMALL_IN_PAGE, timeout=4_000)
    assert pg.inner_text("#pipeline .said").strip() == "7"
    assert pg.get_attribute("#status", "data-stale") == "switch"    # "Reading it with the model…"
    assert "with the model you chose" in pg.inner_text("#pipeline .readout")
    release()
    pg.wait_for_function(SMALL_LANDED, timeout=30_000)
    wait_status(pg, "Example: a drawn 7")
    ctx.close()


def test_a_drawing_made_while_a_switch_is_answered_shows_its_strip_at_once(browser, app_server):
    """Issue 49 (an eighth look): drawing within a second of choosing another model showed no
    strip until the server answered the switch: the page's answer with the chosen model is the
    drawing's (the drawing's own reading, not the switch's), and shows."""
    ctx, pg, release = held_switch_to_the_small_model(browser, app_server)
    pg.screenshot(path=SHOTS / "switch-held.png")
    draw(pg, "1", lift=False)                     # over the example 7
    pg.screenshot(path=SHOTS / "switch-drawn.png")
    pg.wait_for_function(SMALL_IN_PAGE + " && window.vitStrip.value().live === true", timeout=4_000)
    pg.mouse.up()
    release()
    pg.wait_for_function(SMALL_LANDED, timeout=30_000)
    wait_status(pg, "reads this as")
    ctx.close()


def test_the_eighth_trials_keyboard_and_tablet_points(browser, app_server, tmp_path):
    """An eighth trial: a panel's title did not say whether it was open; a model chosen with the
    keyboard left the focus on the page's start; a notice (a damaged picture) lay over the Model
    menu and the headline; on a tablet (800 px) Clear wrapped to a row of its own."""
    ctx, pg = fresh(browser, app_server, 800, 1100)
    tops = pg.evaluate("[...document.querySelectorAll('#drawpad .tools button')]"
                       ".filter(b => b.checkVisibility())"
                       ".map(b => Math.round(b.getBoundingClientRect().top))")
    assert len(tops) == 5 and len(set(tops)) == 1, tops                   # one row
    clear(pg)                      # no links to the detail of a drawing that is not there
    pg.wait_for_selector("#pipeline .pipe[data-empty='1']", timeout=30_000)
    assert not pg.evaluate("[...document.querySelectorAll('#pipeline .more')]"
                           ".some(a => a.checkVisibility({visibilityProperty: true}))")
    title = pg.locator("#views button.label-wrap").first
    assert title.get_attribute("aria-expanded") == "false"
    unfold(pg, "#views")
    pg.wait_for_function("() => document.querySelector('#views button.label-wrap')"
                         ".getAttribute('aria-expanded') === 'true'", timeout=5_000)
    title.click()                                                        # closed again
    pg.wait_for_function("() => document.querySelector('#views button.label-wrap')"
                         ".getAttribute('aria-expanded') === 'false'", timeout=5_000)
    pg.locator("#model input").focus()
    pg.keyboard.press("ArrowDown")
    pg.keyboard.press("ArrowDown")
    pg.keyboard.press("Enter")
    pg.wait_for_function("() => window.vitStrip.value()?.model"
                         " && window.vitStrip.value().model !== 'mnist'"
                         " && !document.querySelector('#status[data-stale], #pipeline[data-stale]')",
                         timeout=30_000)
    pg.wait_for_timeout(500)
    assert pg.evaluate("!!document.activeElement.closest('#model')"), pg.evaluate(
        "document.activeElement.outerHTML.slice(0, 80)")
    (tmp_path / "bad.png").write_bytes(b"\x89PNG\r\n\x1a\nnot really a picture")
    pg.get_by_role("tab", name="Upload").click()
    pg.locator("#upload input[type=file]").set_input_files(str(tmp_path / "bad.png"))
    toast = pg.locator(".toast-body").first
    toast.wait_for(timeout=30_000)
    box, menu = toast.bounding_box(), pg.locator("#model").bounding_box()
    assert box["y"] > menu["y"] + menu["height"] and box["x"] < 400, (box, menu)   # bottom left
    pg.screenshot(path=SHOTS / "49-8-tablet-notice.png")
    ctx.close()


# --- A newcomer's page (issue 26), at a laptop's 1280x800 and a phone's 390x844 ----------------

def fresh(browser, app_server, width=1280, height=800, tour=False):
    """A new visitor's page (its own context: nothing remembered), once its first answer is in."""
    phone = width < 500
    ctx = browser.new_context(viewport={"width": width, "height": height}, is_mobile=phone,
                              has_touch=phone)
    if not tour:
        ctx.add_init_script(NO_TOUR)
    pg = ctx.new_page()
    pg.goto(app_server[1])
    wait_status(pg, "Example")
    pg.wait_for_function("() => document.querySelector('#pipeline .said')?.innerText.trim()",
                         timeout=30_000)
    return ctx, pg


def strip_point(pg, step: str, patch: int, grid: int = 7):
    """The screen point at the centre of `patch` (0-based) in a picture step of the strip."""
    box = pg.locator(f"#pipeline canvas.c-{step}").bounding_box()
    r, c = divmod(patch, grid)
    return box["x"] + (c + 0.5) / grid * box["width"], box["y"] + (r + 0.5) / grid * box["height"]


def green_at(pg, step: str, patch: int, grid: int = 7) -> bool:
    """Whether the strip's `step` picture outlines `patch` (the green of the chosen patch)."""
    return pg.evaluate("""([step, p, g]) => {
        const c = document.querySelector('#pipeline canvas.c-' + step), s = c.width / g;
        const x = Math.floor((p % g) * s) - 1, y = Math.round(Math.floor(p / g) * s + s / 2);
        const d = c.getContext('2d').getImageData(x, y, 4, 1).data;
        for (let i = 0; i < 16; i += 4) if (d[i + 1] > d[i] + 60 && d[i + 1] > d[i + 2] + 40) return true;
        return false; }""", [step, patch, grid])


def test_the_pipeline_strip_is_above_the_fold_live_while_drawing_and_follows_the_pointer(
        browser, app_server):
    """1280x800: the canvas, the headline and the strip (input -> patches -> tokens -> attention
    -> answer) on the first screen; the strip answers while the pen is still down; pointing at a
    patch in one step outlines it in every step and says where it is, counted from 1."""
    ctx, pg = fresh(browser, app_server)
    for part in ("#drawpad canvas", "#status", "#pipeline", "#pipeline .bars"):
        assert in_view(pg, part), part
    assert pg.locator("#pipeline .said").inner_text().strip() == "7"
    pg.screenshot(path=SHOTS / "20-pipeline-1280x800.png")
    x, y = strip_point(pg, "attention", 9)                  # row 2, column 3
    below = "document.querySelector('#why-row').getBoundingClientRect().top"
    before = pg.evaluate(below)
    # Nothing below moves when the page's own model has loaded (CI: its line, added then,
    # pushed the page down 22 px a second after the first answer) or the "why" lane comes in.
    pg.wait_for_function("() => document.querySelector('#inpage-note')?.innerText"
                         ".includes('this browser answers itself')", timeout=60_000)
    pg.wait_for_selector("#pipeline .drove:not([hidden])", timeout=30_000)
    assert pg.evaluate(below) == before
    pg.mouse.move(x, y)
    readout = "() => document.querySelector('#pipeline .readout').innerText"
    pg.wait_for_function(f"() => ({readout})().includes('Patch 10')")
    assert "Patch 10 (row 2, column 3) is token 11 of 50" in pg.evaluate(readout)
    # Nothing below moves while a patch is pointed at (a trial: the readout's second line
    # pushed the page down 17 px at every point).
    assert pg.evaluate(below) == before
    for step in ("seen", "attention"):
        assert green_at(pg, step, 9), step
    pg.screenshot(path=SHOTS / "21-pipeline-hover.png",
                  clip={"x": 480, "y": 180, "width": 800, "height": 330})
    # While the pen is down the strip reads the drawing; when it lifts, the finished one.
    clear(pg)
    wait_status(pg, "Draw a digit")
    draw(pg, "1", lift=False)
    pg.wait_for_function(f"() => ({readout})().includes('while you draw')", timeout=30_000)
    pg.mouse.up()
    # (the strip is empty for a moment while it reloads the server's answer: no element then)
    pg.wait_for_function(f"() => !({readout})().includes('while you draw') && "
                         "(document.querySelector('#pipeline .said')?.innerText || '').trim() === '1'",
                         timeout=30_000)
    # A plain 1 rests on no patch much (hiding any one moves P(1) by under a point): pointed at,
    # a patch is not said to carry "24.4 % of what the answer rests on" (a teacher's trial).
    pg.wait_for_selector("#pipeline .drove:not([hidden])", timeout=30_000)
    assert pg.evaluate("window.vitStrip.value().slight") is True
    pg.mouse.move(*strip_point(pg, "attention", 24))
    pg.wait_for_function(f"() => ({readout})().includes('Patch 25')")
    said = pg.evaluate(readout)
    assert "no one patch matters much to the answer here (occlusion)" in said and "carries" not in said
    ctx.close()


def test_a_tapped_patch_is_the_one_the_explorer_and_the_step_by_step_panel_follow(
        browser, app_server):
    """One choice of layer, head and patch: a tap in the strip chooses the patch; the explorer's
    sliders move the strip's head and the step-by-step walk; the walk opens filled, at once; a
    new drawing starts from the centre patch again."""
    ctx, pg = fresh(browser, app_server)
    x, y = strip_point(pg, "patches", 16)
    pg.mouse.click(x, y)
    pg.wait_for_function("() => document.querySelector('#pipeline .readout').innerText.includes('Patch 17')")
    # (That the model's pictures are ready before anyone opens the panel is tested without a
    # clock in test_newcomer and test_mechanism: a wall-clock bound here failed on a busy CI.)
    unfold(pg, "#mechanism")
    pg.wait_for_function("() => document.querySelector('#mech-walk img') && "
                         "document.querySelector('#mech-walk-text').innerText.includes('Patch 17')",
                         timeout=30_000)
    assert "Patch 17, layer 6, head 1" in pg.locator("#mech-walk-text").inner_text()
    assert pg.locator("#mech-layer, #mech-head").count() == 0          # no sliders of its own
    unfold(pg, "#views")
    head = pg.locator("#head input[type=number]")
    head.fill("3")
    head.press("Enter")
    walk = "document.querySelector('#mech-walk-text').innerText"
    pg.wait_for_function(f"() => {walk}.includes('layer 6, head 3')")
    # The strip shows the head just chosen, and its own menus choose for the whole page.
    pg.wait_for_function("() => document.querySelector('#pipeline [data-pick=head]').value === '3'"
                         " && document.querySelector('#pipeline [data-mode=head]')"
                         ".getAttribute('aria-checked') === 'true'")
    pg.locator("#pipeline [data-pick=layer]").select_option("2")
    pg.wait_for_function(f"() => {walk}.includes('layer 2, head 3')")
    assert pg.locator("#layer input[type=number]").input_value() == "2"
    pg.locator("#mech-walk").scroll_into_view_if_needed()
    pg.screenshot(path=SHOTS / "22-walk-follows-the-choice.png")
    pg.locator("#drawpad canvas").scroll_into_view_if_needed()
    clear(pg)
    draw(pg, "7")
    wait_status(pg, "reads this as 7")
    pg.wait_for_function("() => document.querySelector('#mech-walk-text').innerText.includes('Patch 25,')",
                         timeout=30_000)
    ctx.close()


@pytest.mark.parametrize("size", [(1280, 800), (390, 844), (390, 664)],
                         ids=["desktop", "phone", "phone-with-bars"])
def test_no_tour_bubble_covers_the_lesson(browser, app_server, size):
    """Issue 49, 5: the tour's first bubble lay over strip steps 1-2, and steps 4-5 over the
    examples; then step 5 over the first two "Go deeper" titles it describes. At every step the
    bubble covers neither the part it names nor the canvas, the strip, what the answer rests on
    or a "Go deeper" panel's title. On a phone's visible 390x664 the canvas and the pinned answer
    fill the screen: there it never covers the part it names (placed before the page scrolled,
    step 1 once lay over the canvas it names)."""
    ctx, pg = fresh(browser, app_server, *size, tour=True)
    pg.wait_for_selector("#tour", timeout=30_000)
    others = [] if size[1] < 700 else ['#drawpad', '#pipeline', '#glance', '#glance-text', '#why',
                                       '#views', '#mechanism']
    for n in range(1, 6):
        pg.wait_for_function(f"() => document.querySelector('#tour .tour-count').innerText === '{n} / 5'")
        pg.wait_for_timeout(300)                          # a page that moves under it, moved
        # (step 1, the canvas, on a phone: nor the pinned answer, nor how to scroll past the
        # canvas — a fourth and a fifth trial saw them covered)
        mine = others + (["#status", "#scroll-hint"] if n == 1 and size[0] < 700 else [])
        # (a phone's step 5, "Go deeper": with what the answer rests on in the page above its
        # title and the panels' titles below, the bubble lies over the end of the map's words,
        # step 4's subject, not over the panels it names)
        if n == 5 and size[0] < 700:
            mine = [q for q in mine if q not in ("#glance-text", "#glance")]
        covered = pg.evaluate("""(others) => {
          const t = document.querySelector('#tour').getBoundingClientRect(), out = {};
          for (const e of [document.querySelector('.tour-target'),
                           ...others.map(q => document.querySelector(q))]) {
            if (!e || !e.getClientRects().length) continue;
            const r = e.getBoundingClientRect();
            const x = Math.min(t.right, r.right) - Math.max(t.left, r.left);
            const y = Math.min(t.bottom, r.bottom) - Math.max(t.top, r.top);
            if (x > 1 && y > 1) out[e.id || e.className] = Math.round(x * y);
          }
          return out; }""", mine)
        if covered:                           # (what it lay over, for whoever reads a failure)
            pg.screenshot(path=SHOTS / f"49-5-tour-{size[0]}x{size[1]}-{n}-covered.png")
        assert not covered, (n, covered)
        # The outline round the strip's one-line answer (a phone's step 4) leaves the colour
        # bar's end labels above it readable (a trial: it lay over "0 … 10.0 %").
        gap = pg.evaluate("""() => { const d = document.querySelector('#pipeline .drove.tour-target');
          if (!d) return null; const s = getComputedStyle(d);
          const reach = Math.max(0, parseFloat(s.outlineOffset) + parseFloat(s.outlineWidth));
          const above = [...document.querySelectorAll('#pipeline .scale')]
            .filter(e => e.checkVisibility()).map(e => e.getBoundingClientRect().bottom);
          return above.length ? d.getBoundingClientRect().top - reach - Math.max(...above) : null; }""")
        assert gap is None or gap >= 0, (n, gap)
        # its "n / 5" readable on the dark bubble at every step (inside the strip, the strip's
        # text colour once made it dark on dark)
        assert pg.evaluate("getComputedStyle(document.querySelector('#tour .tour-count')).color"
                           ) == "rgb(255, 255, 255)", n
        # ... and its words in one size at every step (inside the strip, step 3's took the
        # strip's bigger size: a seventh trial)
        look = pg.evaluate("""() => { const p = getComputedStyle(document.querySelector('#tour p'));
            return [p.fontSize, p.lineHeight,
                    getComputedStyle(document.querySelector('#tour .tour-next')).fontSize]; }""")
        assert look == ["14px", "18.9px", "14px"], (n, look)
        pg.screenshot(path=SHOTS / f"49-5-tour-{size[0]}x{size[1]}-{n}.png")
        pg.locator("#tour .tour-next").click()
    ctx.close()


STEPS = ("seen", "patches", "tokens", "attention", "answer")


def open_pop(pg, step: str, width: int):
    """Open a strip step's "?"; check its pop-up lies next to the "?", on the screen, and over
    none of its own step's parts (picture, words, buttons, boxes). Returns the pop-up."""
    pg.locator(f"#pipeline .s-{step} summary").click()
    pop = pg.locator(f"#pipeline .s-{step} .pop")
    assert pop.is_visible(), step
    box, ask = pop.bounding_box(), pg.locator(f"#pipeline .s-{step} summary").bounding_box()
    assert 0 <= box["y"] - (ask["y"] + ask["height"]) <= 30, (step, box, ask)
    assert 0 <= box["x"] and box["x"] + box["width"] <= width, (step, box)
    for part in pg.locator(f"#pipeline .s-{step} :is(canvas, .note, .modes, .showing, .drove,"
                           " .bars, .scale)").all():
        if part.is_visible():
            b = part.bounding_box()
            assert box["y"] >= b["y"] + b["height"] - 1 or box["x"] >= b["x"] + b["width"] \
                or box["x"] + box["width"] <= b["x"], (step, box, b)
    return pop


def test_the_first_visit_tour_the_question_marks_and_the_glossary(browser, app_server):
    """A first visit starts a five-step tour, which can be skipped and is not shown again; "Take
    the tour" starts it over. A "?" opens the precise version in place; the glossary names
    every term the captions use."""
    ctx, pg = fresh(browser, app_server, tour=True)
    pg.wait_for_selector("#tour", timeout=30_000)
    assert "Draw on this canvas" in pg.locator("#tour").inner_text()
    assert "tour-target" in pg.locator("#drawpad").get_attribute("class")     # outlined
    # Not over the input's tabs nor the line above the canvas (a fourth trial: step 1 lay over
    # both).
    covered = pg.evaluate("""() => { const b = document.querySelector('#tour').getBoundingClientRect();
        return ['#input-col [role=tablist]', '#draw-hint'].filter(q => {
          const r = document.querySelector(q).getBoundingClientRect();
          return r.left < b.right && b.left < r.right && r.top < b.bottom && b.top < r.bottom; }); }""")
    assert covered == [], covered
    pg.screenshot(path=SHOTS / "23-tour.png")
    for n in (2, 3, 4, 5):
        pg.locator("#tour .tour-next").click()
        pg.wait_for_function(f"() => document.querySelector('#tour .tour-count').innerText === '{n} / 5'")
        if n == 3:        # the tokens step says what a token and [CLS] are
            said = pg.locator("#tour").inner_text()
            assert "A token is" in said and "[CLS] is" in said
        if n == 5:        # a trial: nothing in the tour said other models are a menu away
            assert "Model menu" in pg.locator("#tour").inner_text()
    pg.locator("#tour .tour-next").click()                      # Done
    assert pg.locator("#tour").count() == 0
    pg.reload()
    wait_status(pg, "Example")
    pg.wait_for_timeout(1500)
    assert pg.locator("#tour").count() == 0                     # remembered
    pg.locator("#tour-start").click()
    pg.wait_for_selector("#tour")
    # Issue 49, 5: the keyboard. The bubble is one Tab from the part it names, both ways (its
    # buttons were 51 stops away after one Tab), and Escape closes it, focus back on its start.
    assert pg.evaluate("document.activeElement.className") == "tour-next"
    pg.keyboard.press("Tab")
    pg.keyboard.press("Shift+Tab")
    assert pg.evaluate("document.activeElement.className") == "tour-next"
    # Tab stays between its buttons (focus went on into the page, the bubble up over what it
    # reached).
    pg.keyboard.press("Tab")
    assert pg.evaluate("document.activeElement.className") == "tour-skip"
    pg.keyboard.press("Tab")
    assert pg.evaluate("document.activeElement.className") == "tour-next"
    pg.keyboard.press("Escape")
    assert pg.locator("#tour").count() == 0
    assert pg.evaluate("document.activeElement.id") == "tour-start"
    pg.locator("#tour-start").click()
    pg.wait_for_selector("#tour")
    pg.locator("#tour .tour-skip").click()
    assert pg.locator("#tour").count() == 0
    pg.locator("#pipeline .s-tokens summary").click()
    assert pg.locator("#pipeline .s-tokens .pop").is_visible()
    assert "position" in pg.locator("#pipeline .s-tokens .pop").inner_text()
    # Issue 49, 8: a step's "?" opened over the picture it explains; under the picture, over the
    # captions; under the whole step, 365 px from its "?" and over the words below the strip.
    # Each opens beside its own step now, next to its "?", over none of the step's parts.
    for step in STEPS:
        pop = open_pop(pg, step, 1280)
        # Step 5's says what the step shows before how far to trust it (a fifth trial clicked
        # "?" on the answer and read only of temperatures and ECE).
        assert step != "answer" or pop.inner_text().startswith("The bars:"), pop.inner_text()
        if step in ("attention", "answer"):
            pg.screenshot(path=SHOTS / f"49-b-pop-{step}.png")
    pg.keyboard.press("Escape")
    pg.get_by_role("link", name="Glossary").first.click()
    pg.wait_for_selector("#glossary button.label-wrap.open")     # the link opens it in place
    pg.wait_for_function("() => document.querySelector('#glossary').innerText.includes('rollout')")
    glossary = pg.locator("#glossary").inner_text()
    for term in ("patch", "token", "[CLS]", "layer", "head", "attention", "rollout",
                 "relevance", "calibrated"):
        assert term in glossary, term
    pg.wait_for_function("() => document.querySelector('#glossary').getBoundingClientRect().top"
                         " < 800", timeout=10_000)
    ctx.close()


def test_a_narrow_strip_keeps_its_steps_titles_and_question_marks_apart(browser, app_server):
    """A tablet's portrait (800 px: the page keeps two columns, the strip gets ~380 px): the five
    steps side by side ran their titles over each other's "?" and their links over the captions.
    The strip lays them three to a row; every title and "?" stands clear, every pop-up on screen."""
    ctx, pg = fresh(browser, app_server, 800, 900)
    # each title within its own column (one that overflows runs over the next step's "?")
    over = pg.evaluate("() => [...document.querySelectorAll('#pipeline .step .title')]"
                       ".map(t => t.scrollWidth - t.clientWidth)")
    assert max(over) <= 1, over
    for step in STEPS:
        open_pop(pg, step, 800)
        pg.locator(f"#pipeline .s-{step} summary").click()          # closed again
    # One head's menus say "layer 6" and "head 1" whole, clear of their arrows (a sixth trial:
    # the browser's wide arrows covered the numbers): the words and the room left of the
    # drawn arrow (the right padding) fit the menu.
    pg.locator("#pipeline [data-mode=head]").click()
    pg.wait_for_function("() => document.querySelector('#pipeline .pick-head').offsetHeight > 0")
    room = pg.evaluate("""() => [...document.querySelectorAll('#pipeline .pick-head select')].map(s => {
        const c = document.createElement('canvas').getContext('2d'), st = getComputedStyle(s);
        c.font = `${st.fontSize} ${st.fontFamily}`;
        return [parseFloat(st.paddingRight), s.clientWidth - parseFloat(st.paddingLeft)
                - parseFloat(st.paddingRight) - c.measureText(s.selectedOptions[0].text).width]; })""")
    assert all(arrow >= 10 and left >= 0 for arrow, left in room), room     # (its arrow: 8 px)
    pg.screenshot(path=SHOTS / "49-narrow-strip.png")
    ctx.close()


def test_head_maps_have_their_own_scales_by_default_and_one_scale_a_tick_away(browser, app_server):
    ctx, pg = fresh(browser, app_server)
    unfold(pg, "#views")
    box = pg.locator("#shared-scale input")
    box.scroll_into_view_if_needed()
    assert not box.is_checked()
    pg.wait_for_selector("#attention img", timeout=30_000)
    before = pg.locator("#attention img").get_attribute("src")
    box.check()
    pg.wait_for_function("s => document.querySelector('#attention img').src !== s", arg=before,
                         timeout=30_000)
    pg.locator("#attention").scroll_into_view_if_needed()
    pg.screenshot(path=SHOTS / "24-shared-scale.png")
    ctx.close()


def test_a_model_switch_offers_the_new_models_example_and_everything_follows(browser, app_server):
    """A digit on the canvas, then the clothing model: not a silent re-read — its own example
    goes on the canvas, the headline says what it knows, and the hint, examples and the Test
    set tab follow (here its test set is missing: the tab says what a visitor can do)."""
    ctx, pg = fresh(browser, app_server)
    clear(pg)
    draw(pg, "1")
    wait_status(pg, "reads this as 1")
    height = "() => document.querySelector('#status').getBoundingClientRect().height"
    answered = pg.evaluate(height)
    pg.locator("#model input").click()
    pg.get_by_role("option", name="Clothing and shoes (Fashion-MNIST)").click()
    wait_status(pg, "Example: a drawn Ankle boot")
    wait_status(pg, "It knows: T-\u2060shirt/top, Trouser")
    # One line under the example's heading, as under an answer's: the strip does not move down
    # and back up between the example and the next answer (it moved 20 px).
    assert pg.evaluate(height) == answered, (pg.evaluate(height), answered)
    assert "piece of clothing" in pg.locator("#draw-hint").inner_text()
    assert "Trouser" in pg.locator("#draw-examples").inner_text()
    pg.screenshot(path=SHOTS / "25-switch-to-clothing.png")
    # Undo does not bring back the drawing made for the other model: the canvas started afresh.
    pg.locator('#drawpad button[aria-label="Undo"]').click()
    pg.wait_for_timeout(1000)
    assert "Example: a drawn Ankle boot" in status(pg)
    pg.get_by_role("tab", name="Test set").click()
    pg.wait_for_function("() => /not on this server|Fashion-MNIST test set/.test("
                         "document.querySelector('#testset-status').innerText)", timeout=60_000)
    text = pg.locator("#testset-status").inner_text()
    if "not on this server" in text:        # (Debian's dataset-fashion-mnist package not here)
        assert "draw or upload" in text and "VIT_DATA_DIR" not in text and "python -m" not in text
    else:                                   # its classes in the filters
        pg.locator("#testset-true input").click()
        pg.get_by_role("option", name="Trouser").wait_for(timeout=10_000)
    ctx.close()


def test_a_phone_shows_the_answer_and_the_strip_and_scrolls_over_the_canvas(browser, app_server):
    """390x844: the headline and the strip pinned on the first screen with the canvas; every
    caption at 12 px or more; with Scroll chosen, a swipe over the canvas moves the page and
    draws nothing; the brush is a share of the canvas; a small digit drawn with a finger is
    read."""
    ctx, pg = fresh(browser, app_server, 390, 844)
    for part in ("#drawpad canvas", "#status", "#pipeline .steps"):
        assert in_view(pg, part), part
    pg.screenshot(path=SHOTS / "26-phone-first-screen.png")
    sizes = pg.evaluate("""() => [...document.querySelectorAll(
        '#pipeline .title, #pipeline .bar, #pipeline .said, #draw-examples .caption-label, #status h3')]
        .filter(e => e.checkVisibility()).map(e => parseFloat(getComputedStyle(e).fontSize))""")
    assert sizes and min(sizes) >= 12, sizes
    # The model menu's name whole: it was cut to "514 k para…", what tells the digit models apart.
    assert pg.evaluate("() => { const i = document.querySelector('#model input');"
                       " return i.value.endsWith('parameters') && i.scrollWidth <= i.clientWidth }")
    # The six tools in one row, one height (a trial: Scroll, the last, was 4 px taller).
    tools = pg.evaluate("() => [...document.querySelectorAll('#drawpad .tools button')]"
                        ".filter(b => b.checkVisibility()).map(b => b.getBoundingClientRect())"
                        ".map(r => [Math.round(r.top), Math.round(r.height)])")
    assert len(tools) == 6 and len(set(map(tuple, tools))) == 1, tools
    cdp = ctx.new_cdp_session(pg)

    def swipe_up():                               # a finger from low on the canvas upwards
        x0, y0, side = drawing_area(pg)
        finger(cdp, [(x0 + side / 2, y0 + side * 0.8), (x0 + side / 2, y0 + side * 0.2)])
        pg.wait_for_timeout(600)

    pg.locator('#drawpad button[aria-label="Scroll"]').click()
    before, drawn = pg.evaluate("window.scrollY"), sent(pg)
    swipe_up()
    assert pg.evaluate("window.scrollY") > before + 100
    assert sent(pg) == drawn                         # nothing drawn, nothing sent
    pg.locator('#drawpad button[aria-label="Brush"]').click()       # the brush draws again
    pg.evaluate("() => window.scrollTo(0, 0)")
    clear(pg)
    wait_status(pg, "Draw a digit")
    drawn, before = sent(pg), pg.evaluate("window.scrollY")
    swipe_up()
    assert sent(pg) > drawn and pg.evaluate("window.scrollY") == before
    # The brush is a share of the canvas (6.5 % of its side), not a fixed number of screen
    # pixels: the stroke just drawn is 2 x 13 of the canvas's 400 pixels across.
    across = pg.evaluate("""() => { const c = document.querySelector('#drawpad canvas');
        const d = c.getContext('2d').getImageData(0, c.height / 2, c.width, 1).data;
        let n = 0; for (let i = 3; i < d.length; i += 4) n += d[i] > 128; return n; }""")
    assert 22 <= across <= 30, across
    # A small digit drawn with a finger, across 15 % of the canvas: centred and read.
    clear(pg)
    wait_status(pg, "Draw a digit")
    x0, y0, side = drawing_area(pg)
    finger(cdp, [(x0 + side * (0.425 + 0.15 * u), y0 + side * (0.425 + 0.15 * v))
                 for u, v in ((0.1, 0.0), (0.9, 0.0), (0.35, 1.0))])
    pg.wait_for_function("() => document.querySelector('#pipeline .said').innerText.includes('7')",
                         timeout=30_000)
    assert "Not a digit" not in status(pg)
    pg.screenshot(path=SHOTS / "27-phone-small-seven.png")
    ctx.close()


def test_the_answers_class_names_are_whole_and_its_bars_share_one_scale(browser, app_server):
    """CIFAR-10's "automobile" was cut to "automo…" in step 5 (a name column of fixed width), and
    "airplane" to "ai…" on a phone. Each name is whole now, and on a desktop every bar's track starts at one
    x and has one length, so the bars compare."""
    ctx, pg = fresh(browser, app_server)
    pg.locator("#model input").click()
    pg.locator("#model").get_by_role("option", name=re.compile("CIFAR-10")).click()
    wait_status(pg, "ship", timeout=60_000)
    pg.wait_for_function("() => [...document.querySelectorAll('#pipeline .bar .name')]"
                         ".some(n => n.innerText === 'airplane')", timeout=30_000)
    cut = ("() => [...document.querySelectorAll('#pipeline .bar .name')].filter(n =>"
           " n.checkVisibility()).map(n => [n.innerText, n.scrollWidth - n.clientWidth])")
    assert all(over <= 0 for _, over in pg.evaluate(cut)), pg.evaluate(cut)
    tracks = pg.evaluate("() => [...document.querySelectorAll('#pipeline .bar .track')]"
                         ".map(t => { const r = t.getBoundingClientRect();"
                         " return [Math.round(r.x), Math.round(r.width)] })")
    assert len(tracks) == 5 and len(set(map(tuple, tracks))) == 1 and tracks[0][1] >= 12, tracks
    pg.set_viewport_size({"width": 390, "height": 844})
    # (the phone's layout settles over a few frames, and the pinned answer may fold to its
    # headline over the canvas: opened as a visitor opens it, "▴ steps")
    pg.wait_for_timeout(1000)
    if pg.locator("#sheet-toggle").is_visible():
        pg.locator("#sheet-toggle").click()
    pg.wait_for_function(cut.replace("() =>", "() => (") + ").length === 3", timeout=10_000)
    shown = pg.evaluate(cut)
    assert len(shown) == 3 and all(over <= 0 for _, over in shown), shown
    # (the screen as it is: an element's own screenshot scrolls it into view, which the phone's
    # pinned answer answers by moving, and once waited 30 s for it to stand still)
    pg.screenshot(path=SHOTS / "49-phone-cifar-answer.png")
    ctx.close()


def test_a_phones_visible_screen_keeps_the_canvas_clear_of_the_pinned_answer(browser, app_server):
    """Issue 49, 2: with a phone's browser bars (390x664 visible of 390x844) the pinned answer
    began at y=468 over a canvas running to y=626; the strip's "Most: patch 39" said nothing of
    what it was; the tour's step 4 described a part the phone does not show."""
    ctx, pg = fresh(browser, app_server, 390, 664)
    # The page places the canvas above the pinned answer once the answer has its height (its
    # strip and what it rests on drawn): read where it put it only then (on a busy machine the
    # test once read the page before it had moved, and scrolled "back" to the wrong place).
    pg.wait_for_function("() => document.querySelector('#pipeline .said')?.innerText.trim()"
                         " && document.querySelector('#pipeline .drove')?.innerText.trim()",
                         timeout=30_000)
    pg.wait_for_function("""() => document.querySelector('#drawpad canvas').getBoundingClientRect().bottom
        <= document.querySelector('#result-col').getBoundingClientRect().top""", timeout=10_000)
    pg.wait_for_timeout(500)
    top = pg.evaluate("document.querySelector('#drawpad canvas').getBoundingClientRect().top")
    assert top >= 0                                        # the whole canvas, above the answer
    pg.screenshot(path=SHOTS / "49-2-phone-visible.png")
    # Scrolled back to the page's top (a trial: the lower half of a stroke vanished under the
    # pinned answer), the answer folds to its headline and the canvas stays clear of it; where
    # the canvas fits above it again, the strip comes back.
    placed = pg.evaluate("scrollY")
    pg.evaluate("window.scrollTo(0, 0)")
    clear_of_it = """() => document.querySelector('#drawpad canvas').getBoundingClientRect().bottom
        <= document.querySelector('#result-col').getBoundingClientRect().top"""
    pg.wait_for_function(clear_of_it, timeout=5_000)
    assert pg.locator("#result-col #status").is_visible()           # the headline still answers
    pg.screenshot(path=SHOTS / "49-2-phone-visible-top.png")
    # Folded, the headline opens when tapped (a fourth trial tapped it and nothing opened); the
    # next touch of the canvas folds it again.
    strip, toggle = pg.locator("#result-col #pipeline"), pg.locator("#sheet-toggle")
    assert not strip.is_visible() and toggle.inner_text().strip() == "▴ steps"
    assert toggle.get_attribute("aria-expanded") == "false"
    pg.locator("#result-col #status").tap()
    strip.wait_for(state="visible", timeout=5_000)
    assert toggle.inner_text().strip() == "▾ steps" and toggle.get_attribute("aria-expanded") == "true"
    pg.screenshot(path=SHOTS / "49-g-phone-tapped-open.png")
    pg.locator("#result-col #status").tap()
    strip.wait_for(state="hidden", timeout=5_000)
    # ... and a keyboard opens and folds it too: "▴ steps" is a button (the headline, a live
    # region, was the only way, by a tap).
    toggle.focus()
    pg.keyboard.press("Enter")
    strip.wait_for(state="visible", timeout=5_000)
    pg.keyboard.press("Space")
    strip.wait_for(state="hidden", timeout=5_000)
    assert toggle.get_attribute("aria-expanded") == "false"
    pg.locator("#result-col #status").tap()             # left open: the next stroke folds it
    strip.wait_for(state="visible", timeout=5_000)
    pg.evaluate(f"window.scrollTo(0, {placed})")
    pg.wait_for_function("() => document.querySelector('#result-col #pipeline').getBoundingClientRect()"
                         ".height > 0", timeout=5_000)
    assert pg.evaluate(clear_of_it)
    pg.wait_for_function("() => document.querySelector('#pipeline .drove')?.innerText.trim()",
                         timeout=30_000)
    said = pg.locator("#pipeline .drove").inner_text().strip()
    assert re.fullmatch(r"Rests most on patch \d+, row \d+, column \d+( \(barely\))?", said), said
    # ... on one line under the steps (in the answer's 65-px column it took five lines)
    box = pg.locator("#pipeline .drove").bounding_box()
    assert box["height"] < 24 and box["width"] > 300, box
    # A plain 1 rests on no patch much: the phone's short line says so, as the desktop's long one
    # does (a teacher's trial: "Rests most on patch 25" on the phone, "though hiding any one
    # patch barely changes it" on a laptop).
    clear(pg)
    x0, y0, side = drawing_area(pg)
    finger(ctx.new_cdp_session(pg), [(x0 + 0.5 * side, y0 + 0.15 * side),
                                     (x0 + 0.5 * side, y0 + 0.85 * side)])
    assert not pg.evaluate("document.getElementById('top').classList.contains('sheet-open')")
    pg.wait_for_function("() => (document.querySelector('#pipeline .said')?.innerText || '').trim()"
                         " === '1' && document.querySelector('#pipeline .drove')?.innerText"
                         ".endsWith('(barely)')", timeout=30_000)
    box = pg.locator("#pipeline .drove").bounding_box()
    assert box["height"] < 24, box                         # still one line, not cut
    assert pg.evaluate("(e => e.scrollWidth <= e.clientWidth + 1)(document.querySelector("
                       "'#pipeline .drove'))")
    # The model menu's words end before its arrow (a trial: they ran under it on a phone).
    assert pg.evaluate("""() => { const i = document.querySelector('#model input');
        const r = i.getBoundingClientRect(), a = document.querySelector('#model .icon-wrap');
        return r.right - parseFloat(getComputedStyle(i).paddingRight) <= a.getBoundingClientRect().left;
        }""")
    pg.locator("#tour-start").click()
    for n in (2, 3, 4):
        pg.locator("#tour .tour-next").click()
        pg.wait_for_function(f"() => document.querySelector('#tour .tour-count').innerText === '{n} / 5'")
    # ... and says what that line shows: a second trial read, on the phone, of "the map measured
    # most faithful" and "whether the other maps agree", which the phone does not show.
    # Since a fifth trial (told of a map the phone never showed), the phone shows what the
    # answer rests on, map and words, in the page under the examples: step 4 points at it.
    words = pg.locator("#tour").inner_text()
    assert "What the answer rests on" in words, words
    shown = pg.evaluate("""() => { const t = document.querySelector('.tour-target');
        return t && t.getBoundingClientRect().height > 0 && t.matches('#why-row')
               && !t.closest('#result-col') && !!t.querySelector('#glance img'); }""")
    assert shown
    pg.keyboard.press("Escape")                                   # the tour closed
    # Clear folds an opened answer too (a sixth trial: opened, then emptied by Clear, it stayed
    # over half the canvas until the next stroke).
    opened = "document.getElementById('top').classList.contains('sheet-open')"
    pg.evaluate("window.scrollTo(0, 0)")
    pg.locator("#sheet-toggle").wait_for(state="visible", timeout=5_000)
    pg.locator("#sheet-toggle").tap()
    assert pg.evaluate(opened)
    # A tapped patch is said in words (a sixth trial: outlined in every step, and no words, the
    # line hidden in the pinned answer).
    readout = pg.locator("#result-col #pipeline .readout")
    assert not readout.is_visible()                      # nothing pointed at: no room taken
    x, y = strip_point(pg, "patches", 9)
    pg.touchscreen.tap(x, y)
    readout.wait_for(state="visible", timeout=5_000)
    assert readout.inner_text().startswith("Patch 10 (row 2, column 3)"), readout.inner_text()
    clear(pg)
    assert not pg.evaluate(opened)
    ctx.close()


def test_step_5s_words_stay_put_when_what_the_answer_rests_on_arrives(browser, app_server):
    """Issue 49, 8 (a sixth trial): the "rests on" box comes on the "why" lane, after the bars,
    and pushed step 5's "Read from [CLS] …" down by its height as it came. Measured with the box
    there and without it (the two lanes may land in one frame, so watching frames proves nothing)."""
    ctx, pg = fresh(browser, app_server)
    clear(pg)
    draw(pg, "7")
    pg.wait_for_selector("#pipeline .drove:not([hidden])", timeout=30_000)
    tops = pg.evaluate("""() => { const d = document.querySelector('#pipeline .drove');
        const at = () => document.querySelector('#pipeline .s-answer .note').getBoundingClientRect().top
                         - document.querySelector('#pipeline .s-answer').getBoundingClientRect().top;
        const shown = at(); d.hidden = true; const before = at(); d.hidden = false;
        return [before, shown, d.getBoundingClientRect().height]; }""")
    assert tops[2] > 20 and tops[0] == tops[1], tops
    ctx.close()


def test_a_tile_is_marked_only_while_its_example_is_shown_and_tab_closes_a_menu(browser, app_server):
    """Issue 49 (a sixth trial): an example's tile stayed marked chosen after the visitor drew
    their own digit; Tab from the Model menu left its list open over the page."""
    ctx, pg = fresh(browser, app_server)
    tile = pg.locator("#draw-examples button.thumbnail-item").nth(3)
    ring = "e => getComputedStyle(e).borderTopColor"
    plain = pg.locator("#draw-examples button.thumbnail-item").nth(4).evaluate(ring)
    tile.click()
    wait_status(pg, "Example: a drawn 3")
    pg.mouse.move(10, 10)                                   # (not hovering it: hover rings it too)
    assert tile.evaluate(ring) != plain                     # chosen, and shown
    draw(pg, "1")                                           # over the 3: no longer the example
    wait_status(pg, "reads this as")
    assert tile.evaluate(ring) == plain
    tile.click()                                            # chosen again: the 3 comes back
    wait_status(pg, "Example: a drawn 3")
    pg.mouse.move(10, 10)
    assert tile.evaluate(ring) != plain
    menu = pg.locator("#model input")
    menu.focus()
    pg.keyboard.press("ArrowDown")
    pg.locator("[role=option]").first.wait_for(state="visible", timeout=5_000)
    pg.keyboard.press("Tab")
    pg.wait_for_function("() => !document.querySelector('[role=option]')", timeout=5_000)
    assert not pg.evaluate("document.activeElement.matches('#model input')")
    assert menu.input_value().startswith("Handwritten digits (MNIST)")      # nothing chosen
    ctx.close()


def test_on_a_phone_a_picture_full_of_labels_keeps_its_size_and_scrolls_sideways(browser, app_server):
    """Issue 49, 6 (a sixth trial): on a phone or a tablet the deeper panels' pictures were scaled
    to the column, their labels 4-6 px high ("0 to 28.0 % · [CLS] 0.1 %" under each of 24 maps).
    They keep their drawn size now and scroll sideways in their own frame, not the page. (At a
    smaller phone's 360 px: the Model menu's name was cut to "514 k para…".)"""
    ctx, pg = fresh(browser, app_server, 360, 740)
    assert pg.evaluate("(i => i.scrollWidth <= i.clientWidth)(document.querySelector('#model input'))")
    # The strip's titles apart, at 12 px ("Attention" ran into "Answer": 3 px between them).
    # (the pinned answer may have folded to its headline: opened, as a visitor opens it)
    visible = "[...document.querySelectorAll('#pipeline .title')].filter(t => t.checkVisibility())"
    if pg.locator("#sheet-toggle").is_visible():
        pg.locator("#sheet-toggle").click()
    pg.wait_for_function(f"() => {visible}.length === 5", timeout=10_000)
    titles = pg.evaluate(f"""() => {visible}.map(t => {{
        const r = document.createRange(); r.selectNode(t.childNodes[1]);     // (its name)
        const b = r.getBoundingClientRect();
        return [t.innerText, b.left, b.right, parseFloat(getComputedStyle(t).fontSize)]; }})""")
    assert all(px >= 12 for *_, px in titles), titles
    assert all(b[1] - a[2] >= 5 for a, b in zip(titles, titles[1:])), titles
    unfold(pg, "#views")                       # (as a visitor opens it: a tap on its title)
    pg.wait_for_function("() => document.querySelector('#attention img')?.naturalWidth > 0",
                         timeout=60_000)
    pg.locator("#attention").scroll_into_view_if_needed()
    size = pg.evaluate("""() => { const im = document.querySelector('#attention img');
        const frame = im.closest('.image-container');
        return {natural: im.naturalWidth, shown: im.getBoundingClientRect().width,
                scrolls: frame.scrollWidth > frame.clientWidth + 50,
                page: document.scrollingElement.scrollWidth}; }""")
    assert abs(size["shown"] - size["natural"]) <= 1, size             # as drawn, not scaled
    assert size["scrolls"] and size["page"] <= 360, size               # its frame scrolls, not the page
    pg.locator("#attention").screenshot(path=SHOTS / "49-6-phone-picture-as-drawn.png")
    ctx.close()


# --- Learn by experiment: a sweep's models in the app, the logit lens, the scoreboard --------
@pytest.fixture(scope="module")
def sweep_server(tiny_data, tmp_path_factory):
    """A real (tiny) `python -m vit.sweep`, then `python app.py --checkpoints DIR` on its folder,
    as docs/experiments.md says to open a sweep's models."""
    out = tmp_path_factory.mktemp("sweep") / "sw"
    r = run_module("vit.sweep", "--data", "mnist", "--data-dir", tiny_data, "--no-download",
                   "--out", out, "--vary", "heads=1,2", "--epochs", "2", "--", "--depth", "2",
                   "--dim", "16", "--mlp-dim", "32", "--val-size", "40", "--negatives", "16",
                   "--batch-size", "32", "--eval-batch-size", "40", timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    proc, url = start_app(["--checkpoints", str(out)], {"VIT_DATA_DIR": str(tiny_data), "VIT_WARM": "0"})
    yield proc, url
    proc.terminate()
    proc.wait(timeout=20)


def open_panel(pg, panel: str, title: str) -> None:
    acc = pg.locator(panel)
    acc.scroll_into_view_if_needed()
    acc.get_by_text(title).first.click()


def test_a_sweeps_models_side_by_side_and_how_they_learned(browser, sweep_server):
    """The sweep's two runs in the app: how the first learned (its snapshots as a filmstrip), and
    the second beside it on the same drawing, with the test images where they differ. Prints the
    time from picking the second model to its maps on the page."""
    ctx, pg = fresh(browser, sweep_server, 1400, 1000)
    assert "heads-1" in pg.locator("#model input").input_value()
    open_panel(pg, "#learned", "How it learned")
    pg.wait_for_selector("#learned-picture img", timeout=60_000)
    said = pg.locator("#learned-text").inner_text()
    assert said.startswith("At the end it answered") and "step 1" in said, said
    number = pg.locator("#learned-when input[type=number]")       # the slider's own number box
    number.fill("0")
    number.press("Enter")
    pg.wait_for_function("() => document.querySelector('#learned-text').innerText"
                         ".startsWith('At 5.6 % (step 1)')", timeout=30_000)
    pg.locator("#learned-frame").scroll_into_view_if_needed()
    pg.screenshot(path=SHOTS / "28-how-it-learned.png")
    open_panel(pg, "#compare", "Compare with another model")
    pg.wait_for_function("() => document.querySelector('#compare-text').innerText"
                         ".includes('Pick a second model')", timeout=30_000)
    pg.locator("#compare-choice input").click()
    t = time.perf_counter()
    pg.get_by_role("option", name="heads-2").click()
    pg.wait_for_function("() => document.querySelector('#compare-text').innerText.includes('(heads-2) reads')"
                         " && document.querySelector('#compare-maps img')", timeout=60_000)
    print(f"\nsecond model shown {1000 * (time.perf_counter() - t):.0f} ms after picking it")
    assert "rank correlation" in pg.locator("#compare-text").inner_text()
    pg.wait_for_function("() => document.querySelector('#compare-strip .said')?.innerText.trim()",
                         timeout=30_000)
    # Who answers while the pen moves is said once, under the first strip (a trial read the
    # second strip's copy, "the server answers until this browser has loaded the model", beside
    # the first's "this browser answers itself"; the two shared one id).
    assert pg.locator("#inpage-note").count() == 1
    assert not pg.locator("#compare-strip #inpage-note").count()
    pg.locator("#compare-differ").click()
    pg.wait_for_function("() => document.querySelector('#compare-differences-text').innerText"
                         ".includes('test images')", timeout=120_000)
    assert "Only heads-1" in pg.locator("#compare-differences-text").inner_text()
    pg.locator("#compare-maps").scroll_into_view_if_needed()
    pg.screenshot(path=SHOTS / "29-second-model.png")
    ctx.close()


def test_the_logit_lens_and_the_scoreboard(page):
    """Where the answer forms, for the drawing on screen; then the scoreboard of four maps and the
    randomisation check's picture, on request."""
    page.get_by_role("tab", name="Draw").click()
    clear(page)
    wait_status(page, "Draw a digit")
    draw(page, "7")
    wait_status(page, "reads this as 7")
    # An earlier test asked the Why panel about class 1; the lens follows that menu: back to
    # the answer.
    unfold(page, "#why")
    page.locator("#target input").click()
    page.get_by_role("option", name="the model's answer").click()
    open_panel(page, "#lens", "Where the answer forms")
    page.wait_for_selector("#lens-picture img", timeout=60_000)
    page.wait_for_function("() => document.querySelector('#lens-text').innerText.includes('answer 7')",
                           timeout=30_000)
    assert "patch tokens would answer 7" in page.locator("#lens-text").inner_text()
    page.locator("#lens-picture").scroll_into_view_if_needed()
    page.screenshot(path=SHOTS / "30-logit-lens.png")
    page.locator("#measure").scroll_into_view_if_needed()
    page.locator("#measure").click()
    page.wait_for_function("() => document.querySelector('#faithfulness').innerText.includes('insertion')"
                           " && document.querySelector('#sanity img')", timeout=120_000)
    text = page.locator("#faithfulness").inner_text()
    assert "raw attention" in text and "rank corr." in text
    page.locator("#sanity").scroll_into_view_if_needed()
    page.screenshot(path=SHOTS / "31-scoreboard.png")


def test_clear_right_after_the_lift_leaves_no_answer_beside_an_empty_canvas(page):
    """A trial: Clear clicked within 50 ms of the pen's lift left "reads this as 7", the strip's
    7 and its map beside the empty canvas (3 tries of 8): the 7's answer landed over the Clear's,
    and the Clear's "why" lane was dropped while the 7's ran."""
    page.get_by_role("tab", name="Draw").click()
    for attempt in range(4):
        clear(page)
        wait_status(page, "Draw a digit")
        draw(page, "7")                                   # the pen lifts at its end
        clear(page)
        page.wait_for_timeout(3000)                       # every lane's answer in
        said = status(page)
        assert "Draw a digit" in said, (attempt, said)
        assert page.locator("#glance img").count() == 0, attempt


def test_on_a_phone_about_this_model_fits_and_how_it_learned_reads_as_a_panel(browser, app_server):
    """A fourth trial at 390x664: "About this model"'s values were cut at the screen's right edge
    ("calibrated: logits divided b"), and "How it learned"'s title, a four-line sentence centred,
    had no arrow and read as a note."""
    ctx, pg = fresh(browser, app_server, 390, 664)
    pg.locator("#about-model .label-wrap").click()
    pg.wait_for_selector("#about-model table")
    wide = pg.evaluate("""() => { const a = document.querySelector('#about-model');
        return [...a.querySelectorAll('table, td, th, pre, code')].filter(e => e.scrollWidth >
          e.clientWidth + 1 || e.getBoundingClientRect().right > a.getBoundingClientRect().right + 1)
          .map(e => e.tagName + ': ' + e.innerText.slice(0, 30)); }""")
    assert wide == [], wide
    title = pg.locator("#learned .label-wrap")
    lines = title.evaluate("e => Math.round(e.getBoundingClientRect().height / "
                           "parseFloat(getComputedStyle(e).lineHeight))")
    assert lines <= 3 and title.evaluate("e => getComputedStyle(e).textAlign") in ("left", "start")
    arrow = title.evaluate("e => { const i = e.querySelector('.icon'); if (!i) return null;"
                           " const r = i.getBoundingClientRect(); return [r.width, r.right]; }")
    assert arrow and arrow[0] > 0 and arrow[1] <= 390, arrow
    pg.locator("#about-model").screenshot(path=SHOTS / "49-about-phone.png")
    ctx.close()
