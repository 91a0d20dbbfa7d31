"""The model in the visitor's browser (vit/ui/inpage.py, inpage.js): its files, checked and
served from a fixed table; the page model equal to the server's model; in Chromium, the page's
own logits and attention equal to the server's, no request while the pen moves, and the
server's updates when the runtime can't load."""
from __future__ import annotations

import asyncio
import gzip
import hashlib
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import ARTIFACTS

from vit.data.examples import render_digit
from vit.export import PAGE_FILE, export_page
from vit.inference import Predictor
from vit.ui import inpage
from vit.ui.inpage import PREFIX, InPage
from vit.ui.models import Models

ROOT = Path(__file__).resolve().parent.parent
BUNDLED = ("mnist", "mnist-small", "fashion-mnist", "cifar10")


@pytest.fixture(scope="module")
def models():
    return Models(ROOT / "checkpoints", "cpu")


RUNTIME_WASM = inpage.RUNTIME["ort-wasm-simd-threaded.wasm"]


def serve(app, method: str, path: str, headers: dict | None = None) -> tuple[int, dict, bytes]:
    """One request through the middleware alone: (status, headers, body)."""
    sent = []

    async def inner(scope, receive, send):          # what the rest of the app would answer
        await send({"type": "http.response.start", "status": 299, "headers": []})
        await send({"type": "http.response.body", "body": b"app"})

    async def receive():
        return {"type": "http.request", "body": b""}

    async def send(m):
        sent.append(m)
    scope = {"type": "http", "method": method, "path": path,
             "headers": list((headers or {}).items())}
    asyncio.run(app(inner)(scope, receive, send))
    return sent[0]["status"], dict(sent[0]["headers"]), b"".join(m["body"] for m in sent[1:])


def test_every_bundled_model_runs_in_the_page_and_its_files_are_served_by_hash(models):
    site = InPage(models)
    m = site.manifest
    assert m["problem"] is None and set(m["models"]) == set(BUNDLED)
    assert m["labels"] and m["default"] == "mnist"
    # The server's "not a digit" rules the page must apply too: the ink checks' limits for the
    # digit models, and for a model with a feature-distance check, that it has one (the page
    # then says it is still checking).
    from vit.explain import ood
    assert m["models"]["mnist"]["ink"]["DASH_ELONGATION"] == ood.DASH_ELONGATION
    assert m["models"]["mnist"]["server_checks"] is False and m["models"]["fashion-mnist"]["ink"] is None
    assert m["models"]["fashion-mnist"]["server_checks"] is True
    serve_ = site.middleware()
    for entry in [*m["runtime"].values(), *m["models"].values()]:
        status, headers, body = serve(serve_, "GET", entry["url"])
        assert status == 200 and hashlib.sha256(body).hexdigest() == entry["sha256"]
        assert headers[b"cache-control"] == b"public, max-age=31536000, immutable"
    wasm = m["runtime"]["ort-wasm-simd-threaded.wasm"]["url"]
    assert serve(serve_, "GET", wasm)[1][b"content-type"] == b"application/wasm"
    # Gzipped for a browser that takes it: the same bytes, a quarter of the download.
    status, headers, body = serve(serve_, "GET", wasm, {b"accept-encoding": b"gzip, br"})
    assert headers[b"content-encoding"] == b"gzip" and len(body) < 0.3 * len(site.files[wasm][0])
    assert len(site.files[wasm][0]) == 14_239_897                  # the pinned file, unzipped
    assert hashlib.sha256(gzip.decompress(body)).hexdigest() == RUNTIME_WASM
    assert serve(serve_, "HEAD", wasm)[2] == b""
    status, headers, body = serve(serve_, "GET", PREFIX + "manifest.json")
    assert status == 200 and json.loads(body)["models"].keys() == m["models"].keys()
    assert headers[b"cache-control"] == b"no-cache"
    # Nothing else under the prefix, whatever is asked; everything else goes on to the app.
    for path in (PREFIX + "../../etc/passwd", PREFIX + "x/ort.wasm.min.js", PREFIX,
                 PREFIX + "models/mnist.onnx"):
        assert serve(serve_, "GET", path)[0] == 404
    assert serve(serve_, "POST", PREFIX + "manifest.json")[0] == 404
    assert serve(serve_, "GET", "/config")[0] == 299
    assert str(ROOT) not in json.dumps(m)                       # no server path in the manifest


def test_a_page_model_made_from_other_weights_is_not_offered(tmp_path, models):
    for name in ("mnist", "mnist-small"):
        shutil.copytree(ROOT / "checkpoints" / name, tmp_path / name)
    made = json.loads((tmp_path / "mnist" / "page.json").read_text())
    (tmp_path / "mnist" / "page.json").write_text(json.dumps({**made, "weights_sha256": "0" * 64}))
    (tmp_path / "mnist-small" / PAGE_FILE).write_bytes(b"not the exported model")
    site = InPage(Models(tmp_path, "cpu"))
    assert site.manifest["models"] == {}
    export_page(tmp_path / "mnist")                              # made again: offered again
    assert list(InPage(Models(tmp_path, "cpu")).manifest["models"]) == ["mnist"]


def test_a_runtime_file_that_is_not_the_pinned_one_turns_the_page_model_off(tmp_path, models,
                                                                           monkeypatch):
    for name in inpage.RUNTIME:
        kept = name + ".gz" if (inpage.VENDOR / (name + ".gz")).exists() else name
        shutil.copy(inpage.VENDOR / kept, tmp_path / kept)
    with open(tmp_path / "ort.wasm.min.js", "ab") as f:
        f.write(b"//")
    monkeypatch.setattr(inpage, "VENDOR", tmp_path)
    site = InPage(models)
    assert "not the pinned file" in site.manifest["problem"]
    assert "runtime" not in site.manifest and site.manifest["models"] == {}
    assert InPage(models, disabled=True).manifest["problem"] == "turned off (VIT_INPAGE=0)"


def _inputs(p: Predictor, tmp_path: Path) -> dict:
    """A drawing and an upload (a file on disk) through the server's own reading."""
    from PIL import Image
    if p.config.style.colour:
        rng = np.random.default_rng(0)
        photo = (rng.random((48, 64, 3)) * 255).astype(np.uint8)
        Image.fromarray(photo).save(tmp_path / "upload.png")
        drawn = np.zeros((400, 400, 3), np.uint8) + 255
        drawn[100:300, 150:250] = (200, 30, 30)
    else:
        drawn = 255 - np.asarray(render_digit("4", 400, 26), np.uint8)
        Image.fromarray(np.asarray(render_digit("2", 200, 10), np.uint8)).save(tmp_path / "upload.png")
    return {"drawing": p.analyse(drawn), "upload": p.analyse(str(tmp_path / "upload.png"))}


def _model_input(a) -> list[float]:
    x = a.image[None] if a.image.ndim == 2 else a.image.transpose(2, 0, 1)
    return x.astype(np.float32).ravel().tolist()


def _same(p: Predictor, a, got: dict) -> float:
    """The largest difference between the page's outputs and the server's analysis."""
    e, G = a.explanation, p.grid
    L, H = e.cls_maps.shape[:2]
    cls = np.asarray(got["cls"]).reshape(L, H, G * G + 1)[:, :, 1:].reshape(e.cls_maps.shape)
    return max(np.abs(np.asarray(got["logits"]) - e.logits).max(),
               np.abs(cls - e.cls_maps).max(),
               np.abs(np.asarray(got["rollout"])[1:].reshape(G, G) - e.rollout_map).max())


@pytest.mark.parametrize("name", BUNDLED)
def test_the_page_model_is_the_servers_model(name, tmp_path):
    """The exported graph (Python's onnxruntime here; Chromium's below) against the server's
    torch analysis of the same input: logits, every head's [CLS] row and the rollout."""
    ort = pytest.importorskip("onnxruntime")
    p = Predictor(ROOT / "checkpoints" / name, "cpu")
    session = ort.InferenceSession(str(ROOT / "checkpoints" / name / PAGE_FILE))
    for a in _inputs(p, tmp_path).values():
        x = np.asarray(_model_input(a), np.float32).reshape(1, -1, p.size, p.size)
        logits, cls, roll = session.run(None, {"pictures": x})
        assert _same(p, a, {"logits": logits[0], "cls": cls[0], "rollout": roll}) <= 1e-4


# --- in Chromium --------------------------------------------------------------------------------
NO_TOUR = "localStorage.setItem('vit-explorer-tour', 'done')"


def _page(browser, url, **options):
    pg = browser.new_page(viewport={"width": 1280, "height": 800}, **options)
    pg.add_init_script(NO_TOUR)
    pg.goto(url, wait_until="load")
    pg.wait_for_function("() => window.vitStrip && window.vitStrip.value()", timeout=60_000)
    return pg


def _ready(pg, name="mnist"):
    pg.wait_for_function(f"() => window.vitInPage && window.vitInPage.ready && "
                         f"window.vitInPage.sessions['{name}'] && "
                         f"window.vitInPage.sessions['{name}'].session", timeout=60_000)


# Every animation frame for ~10 s: [the headline's data-stale, the drawing number the server's
# answer echoes, the drawing number the canvas last sent, the strip's readout line].
FRAMES = """() => { window.__frames = []; const f = () => {
  const s = document.querySelector('#status'), a = document.querySelector('#answered .html-container');
  window.__frames.push([s.getAttribute('data-stale'), parseInt(a?.textContent, 10) || 0,
                        +document.querySelector('#drawpad [data-ready]').dataset.sent,
                        document.querySelector('#pipeline .readout').innerText]);
  if (window.__frames.length < 600) requestAnimationFrame(f); }; requestAnimationFrame(f); }"""


def _stroke(pg, points=((0.28, 0.2), (0.72, 0.2), (0.42, 0.85)), steps=25):
    box = pg.locator("#drawpad canvas").bounding_box()
    at = [(box["x"] + x * box["width"], box["y"] + y * box["height"]) for x, y in points]
    pg.mouse.move(*at[0])
    pg.mouse.down()
    for (x0, y0), (x1, y1) in zip(at, at[1:]):
        for i in range(1, steps + 1):
            pg.mouse.move(x0 + (x1 - x0) * i / steps, y0 + (y1 - y0) * i / steps)
            pg.wait_for_timeout(16)


@pytest.mark.browser
def test_in_chromium_the_pages_logits_and_attention_are_the_servers(browser, app_server, tmp_path):
    pg = _page(browser, app_server[1])
    _ready(pg)
    worst = {}
    for name in BUNDLED:
        p = Predictor(ROOT / "checkpoints" / name, "cpu")
        for kind, a in _inputs(p, tmp_path).items():
            got = pg.evaluate("([n, x]) => window.vitInPage.run(n, x)", [name, _model_input(a)])
            worst[(name, kind)] = _same(p, a, got)
    print("largest difference, page vs server:", {f"{n} {k}": f"{v:.1e}" for (n, k), v in worst.items()})
    assert max(worst.values()) <= 1e-4, worst
    assert pg.evaluate("window.vitInPage.stats().threads") == 1      # not cross-origin isolated
    # A refusal's best guess in the page's words is the server's (two that tie: both named).
    from vit.explain.ood import best_guess
    for probs in ([0.3002, 0.2998], [0.41, 0.19], [0.30049, 0.29951], [0.9996, 0.0004]):
        guess, at = best_guess(["7", "8"], np.array(probs))
        got = pg.evaluate("([p1, p2]) => window.vitInPage.unsure('{best} at {p}', '7', '8', p1, p2)",
                          probs)
        assert got == f"{guess} at {at}", (probs, got)
    # One way to write a probability, in the page as on the server (a trial: 95.6 % in the
    # headline, 95.7 % in the strip, for one answer).
    from vit.text import confidence
    values = [0, 0.0004, 0.0005, 0.00051, 0.0125, 0.0175, 0.5, 0.95649, 0.95651, 0.9994, 0.99949,
              0.9995, 1]
    assert pg.evaluate("vs => vs.map(v => window.vitStrip.conf(v))", values) == \
        [confidence(v) for v in values]
    pg.close()


@pytest.mark.browser
def test_while_the_pen_moves_the_page_answers_itself_and_asks_the_server_nothing(browser, app_server):
    pg = _page(browser, app_server[1])
    _ready(pg)
    pg.click("#drawpad [data-act=clear]")
    pg.wait_for_timeout(3000)                         # the clear's own answers are in
    asked = []
    pg.on("request", lambda r: asked.append(r.url))
    _stroke(pg)
    during = list(asked)
    stats = pg.evaluate("window.vitInPage.stats()")
    live = pg.evaluate("JSON.stringify(window.vitStrip.value())")
    stale = pg.get_attribute("#status", "data-stale")
    # From the lift until the server's answer for this drawing, every frame: the headline shown
    # is never the answer of the drawing before (a trial: "Draw a digit in the box" beside the
    # strip's "3" for a second, as Gradio marked the echo busy and that was taken for the answer).
    pg.evaluate(FRAMES)
    pg.mouse.up()
    assert during == [] and stats["frames"] >= 20, (during, stats)
    value = json.loads(live)
    assert value["inpage"] and value["answer"] == "7" and len(value["rollout"]) == 49
    assert "this browser answers itself" in pg.inner_text("#inpage-note")
    assert stale is not None                  # the headline is the last answer, dimmed
    # The pen lifts: the server answers the finished drawing, and its answer replaces the page's.
    pg.wait_for_function("() => (v => v && !v.inpage && v.live === false)(window.vitStrip.value())",
                         timeout=30_000)
    pg.wait_for_function("() => !document.querySelector('#status').hasAttribute('data-stale')")
    frames = pg.evaluate("window.__frames")
    early = [f for f in frames if f[1] < f[2] and not f[0]]
    assert frames and not early, early[:3]
    assert any(f[0] == "lifted" for f in frames), frames[:3]   # "Checking your finished drawing…"
    # … and the strip, still the page's own answer then, no longer says "reading while you draw"
    waiting = [f[3] for f in frames if f[1] < f[2]]
    assert waiting and not any("while you draw" in t for t in waiting), waiting[:3]
    assert any("checking the finished drawing" in t for t in waiting), waiting[:3]
    assert any("queue/join" in u for u in asked[len(during):])
    assert "7" in pg.inner_text("#status")
    # Issue 49, 8: who answers while the pen moves is not said beside an upload's answer.
    pg.get_by_role("tab", name="Upload").click()
    pg.wait_for_selector("#inpage-note", state="hidden", timeout=10_000)
    pg.get_by_role("tab", name="Draw").click()
    pg.wait_for_selector("#inpage-note", state="visible", timeout=10_000)
    pg.close()


HIDDEN = ("el => [...el.children].every(c => getComputedStyle(c).visibility === 'hidden')"
          " && getComputedStyle(el, '::before').content")


@pytest.mark.browser
def test_while_the_pen_is_down_the_strip_is_the_only_answer_on_screen(browser, app_server):
    """Issue 49, 1: drawing again, the headline still said the last drawing's answer (greyed)
    beside the strip's live one, and "what the answer rests on" showed the last drawing's map and
    words; after Clear that box was an empty frame. Now what belongs to the last drawing is hidden,
    in place (nothing below moves), and says when this drawing's answer comes."""
    pg = _page(browser, app_server[1])
    _ready(pg)
    pg.click("#drawpad [data-act=clear]")
    pg.wait_for_function("() => document.querySelector('#status').innerText.includes('Draw')")
    # (the map's lane answers after the headline's)
    pg.wait_for_function("() => !document.querySelector('#glance img') && "
                         "getComputedStyle(document.querySelector('#glance')).visibility === 'hidden'",
                         timeout=30_000)
    _stroke(pg)
    pg.mouse.up()                                                   # a 7, answered by the server
    pg.wait_for_function("() => document.querySelector('#status').innerText.includes('reads this as 7')"
                         " && !document.querySelector('#status').hasAttribute('data-stale')",
                         timeout=30_000)
    pg.wait_for_selector("#glance img", timeout=30_000)
    # Issue 49, 8: the map's frame was a button without a name that did nothing.
    pg.wait_for_function("() => [...document.querySelectorAll('#glance button')].every("
                         "b => b.tabIndex === -1 && b.getAttribute('role') === 'none')")
    assert "the answer rests on" in pg.locator("#glance img").get_attribute("alt")   # still said
    strip_top = pg.locator("#pipeline").bounding_box()["y"]
    _stroke(pg, ((0.5, 0.2), (0.5, 0.85)))                          # pen down again: a stroke more
    live = json.loads(pg.evaluate("JSON.stringify(window.vitStrip.value())"))
    status, why = pg.locator("#status"), pg.locator("#why-row")
    assert live["inpage"]
    assert "reads this as" not in status.inner_text()               # the old answer is not shown
    assert "lift the pen" in status.evaluate(HIDDEN)                # and it says why
    assert "lift the pen" in why.evaluate(HIDDEN)
    assert pg.locator("#pipeline").bounding_box()["y"] == strip_top  # nothing jumped
    pg.screenshot(path=ARTIFACTS / "browser" / "49-1-pen-down.png")
    pg.mouse.up()
    pg.wait_for_function("() => !document.querySelector('#status').hasAttribute('data-stale')"
                         " && document.querySelector('#status').innerText.includes('reads this as')",
                         timeout=30_000)
    # (what the answer rests on, once its own map lands: the test below)
    pg.wait_for_function("() => !document.querySelector('#why-row').hasAttribute('data-stale')",
                         timeout=30_000)
    assert not why.evaluate(HIDDEN)
    # Issue 49, 8: a one-line answer and a two-line one ("Not a digit" and why) leave the strip
    # where it was (it jumped ~40 px at each lift between them).
    pg.click("#drawpad [data-act=clear]")
    _stroke(pg, ((0.3, 0.5), (0.7, 0.5)))
    pg.mouse.up()
    pg.wait_for_function("() => document.querySelector('#status').innerText.includes('Not a digit')"
                         " && !document.querySelector('#status').hasAttribute('data-stale')",
                         timeout=30_000)
    assert pg.locator("#pipeline").bounding_box()["y"] == strip_top
    # The strip's answer says why too, and what its bars are (a trial read "Not a digit" over
    # "1 >99.9 %" as a broken rule).
    why_not = pg.locator("#pipeline .s-answer .why-not").inner_text()
    assert "flat dash" in why_not and "On its own the model reads" in why_not, why_not
    pg.close()


@pytest.mark.browser
def test_what_the_answer_rests_on_stays_hidden_until_its_own_drawings_maps_land(browser,
                                                                                  app_server):
    """A sixth trial: a loop lifted, then a second loop to make an 8; for 60–300 ms after the
    lift the 8's headline stood beside the loop's "what the answer rests on" (its words and map),
    because the map's lane answers after the headline's. It stays hidden, saying it is coming,
    until the 8's own map lands."""
    pg = _page(browser, app_server[1])
    _ready(pg)
    pg.click("#drawpad [data-act=clear]")
    pg.wait_for_function("() => !document.querySelector('#glance img')", timeout=30_000)
    _stroke(pg, ((0.5, 0.15), (0.5, 0.85)))
    pg.mouse.up()                                                   # a 1, and its map
    pg.wait_for_function("() => document.querySelector('#status').innerText.includes('reads this as')"
                         " && !document.querySelector('#why-row').hasAttribute('data-stale')"
                         " && document.querySelector('#glance img')", timeout=30_000)
    old = pg.evaluate("document.querySelector('#glance img').src")
    _stroke(pg, ((0.3, 0.15), (0.7, 0.15)))                        # a bar on top: a 7
    pg.evaluate("""() => { window.__why = []; const f = () => {
        const w = document.querySelector('#why-row'), i = document.querySelector('#glance img');
        window.__why.push([w.hasAttribute('data-stale'), i ? i.src : '']);
        if (window.__why.length < 900) requestAnimationFrame(f); }; f(); }""")
    pg.mouse.up()
    pg.wait_for_function("old => !document.querySelector('#why-row').hasAttribute('data-stale')"
                         " && document.querySelector('#glance img')?.src !== old",
                         arg=old, timeout=30_000)
    frames = pg.evaluate("window.__why")
    shown_old = [n for n, (stale, src) in enumerate(frames) if not stale and src == old]
    assert not shown_old, (len(frames), shown_old[:5])
    pg.close()


@pytest.mark.browser
def test_compares_second_answer_is_hidden_while_the_pen_is_down(browser, app_server):
    """A sixth trial: with a second model shown, a second stroke made the strip read "9" while
    Compare still said "… reads 0 (>99.9 %) … They agree" until the lift. Its words, strip and
    maps belong to the last lifted drawing: hidden while the pen is down, saying so."""
    import re
    pg = _page(browser, app_server[1])
    _ready(pg)
    pg.locator("#compare .label-wrap").click()
    pg.locator("#compare-choice input").click()
    pg.locator("#compare-choice").get_by_role("option", name=re.compile("139 k parameters")).click()
    pg.wait_for_function("() => /reads/.test(document.querySelector('#compare-text')?.innerText || '')",
                         timeout=60_000)
    pg.locator("#drawpad").scroll_into_view_if_needed()
    _stroke(pg, ((0.5, 0.2), (0.5, 0.85)))                          # pen down: a stroke more
    for part in ("#compare-text", "#compare-strip", "#compare-maps"):
        assert pg.locator(part).get_attribute("data-stale") is not None, part
    assert "comes when you lift the pen" in pg.locator("#compare-text").evaluate(HIDDEN)
    assert pg.locator("#compare-strip").evaluate("e => getComputedStyle(e).visibility") == "hidden"
    pg.mouse.up()
    pg.wait_for_function("() => !document.querySelector('#compare-text').hasAttribute('data-stale')",
                         timeout=30_000)
    assert pg.locator("#compare-strip").evaluate("e => getComputedStyle(e).visibility") == "visible"
    pg.close()


ECHO = ("() => [parseInt(document.querySelector('#answered .html-container')?.textContent, 10) || 0,"
        " +document.querySelector('#drawpad [data-ready]').dataset.sent,"
        " document.querySelector('#status').getAttribute('data-stale'),"
        " !!(window.vitStrip.value() || {}).live]")


@pytest.mark.browser
def test_an_answer_landing_while_the_pen_is_down_again_is_not_taken_for_the_new_drawing(
        browser, app_server):
    """A fifth trial: an L lifted, and the pen down again at once to make it a 4. The L's answer
    arrived while the 4 was being drawn and was taken as current: the headline said the L's "Not
    a digit" during the stroke, and, the stroke ended, the L's headline and strip ("Seen": the L)
    stood beside the 4, unmarked, until the 4's answer came 6 s later on a busy machine."""
    pg = _page(browser, app_server[1])
    _ready(pg)
    pg.click("#drawpad [data-act=clear]")
    pg.wait_for_function("() => document.querySelector('#status').innerText.includes('Draw')")
    _stroke(pg, ((0.35, 0.2), (0.35, 0.6), (0.7, 0.6)), steps=10)
    pg.mouse.up()                                                   # the L, sent
    box = pg.locator("#drawpad canvas").bounding_box()
    x, y = box["x"] + 0.6 * box["width"], box["y"] + 0.3 * box["height"]
    pg.mouse.move(x, y)
    pg.mouse.down()                                                 # at once, the 4's stroke
    for i in range(400):                                            # until the L's answer lands
        pg.mouse.move(x, y + i * 0.1)
        pg.wait_for_timeout(16)
        echo, sent, _, _ = pg.evaluate(ECHO)
        if echo >= sent:
            break
    assert echo >= sent, "the L was never answered"
    pg.wait_for_timeout(500)                       # the pen held still: no frame redraws the 4's
    echo, sent, stale, live = pg.evaluate(ECHO)
    assert stale is not None and live, (echo, sent, stale, live)    # the 4's: the page's own
    pg.mouse.up()
    echo, sent, stale, live = pg.evaluate(ECHO)
    assert echo >= sent or stale == "lifted", (echo, sent, stale)  # waiting, and saying so
    pg.wait_for_function(f"() => ({ECHO})()[0] >= {sent} && "
                         "!document.querySelector('#status').hasAttribute('data-stale')", timeout=30_000)
    pg.close()


@pytest.mark.browser
def test_the_strips_attention_is_on_the_pictures_scale(browser, app_server):
    """Issue 49, 4: the strip drew a map on its own scale ("0 … 5.4 %") where the page's picture
    of the same map had a bar to 10 % (five times an even spread) and a title "max 0.05". Now the
    strip's bar ends where the pictures' does (attention_maps.VIVID), marks the map's largest
    weight, and writes shares as the page writes every share."""
    from vit.pictures.attention_maps import VIVID, share
    pg = _page(browser, app_server[1])
    _ready(pg)
    pg.click("#drawpad [data-act=clear]")
    _stroke(pg)
    pg.mouse.up()
    pg.wait_for_function("() => document.querySelector('#status').innerText.includes('reads this as')"
                         " && !document.querySelector('#status').hasAttribute('data-stale')",
                         timeout=30_000)
    scale = pg.locator("#pipeline .s-attention .scale")
    pg.wait_for_function("() => document.querySelector('#pipeline .s-attention .hi').textContent")
    assert scale.get_attribute("data-vivid") == str(VIVID)
    hi = scale.locator(".hi").inner_text()
    even = float(scale.locator(".even").get_attribute("title").split()[1]) / 100     # "even: 2.0 % each"
    peak = float(scale.locator(".peak").get_attribute("title").split(": ")[1].split()[0]) / 100
    assert hi == share(max(peak, VIVID * even))
    assert peak < VIVID * even or hi == share(peak)
    # The largest weight is said in words, beside what the map is (a fourth trial read the bar's
    # end as the brightest patch), on both of the step's maps.
    showing = pg.locator("#pipeline .s-attention .showing")
    said = showing.inner_text
    assert said() == f"All layers (rollout), max {share(peak)}"
    height = "() => document.querySelector('#pipeline .steps').getBoundingClientRect().height"
    rollout = pg.evaluate(height)
    pg.locator("#pipeline [data-mode=head]").click()
    pg.wait_for_function("() => document.querySelector('#pipeline .pick-head').offsetHeight > 0")
    pg.wait_for_function("() => !document.querySelector('#pipeline .showing').innerText.includes('All')")
    peak = float(scale.locator(".peak").get_attribute("title").split(": ")[1].split()[0]) / 100
    # one head: its menus say which ("layer 6", "head 1"), the line its largest weight
    picked = pg.evaluate("() => [...document.querySelectorAll('#pipeline .pick-head select')]"
                         ".map(s => s.selectedOptions[0].text)")
    assert re.fullmatch(r"layer \d+", picked[0]) and re.fullmatch(r"head \d+", picked[1]), picked
    assert said() == f"max {share(peak)}", said()
    # ... in the room the rollout's words take: nothing under the strip moves (a trial: the
    # menus, added under the words, pushed everything below down 45 px)
    assert abs(pg.evaluate(height) - rollout) <= 1, (pg.evaluate(height), rollout)
    pg.close()


@pytest.mark.browser
def test_on_a_phone_the_pen_down_note_is_one_whole_line(browser, app_server):
    """A newcomer's trial (issue 49, 1, on a phone): while the finger was down, the pinned
    headline's note was two lines in a one-line box, its top and bottom cut off. On a phone it is
    one short line that fits the box's width."""
    ctx = browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True)
    ctx.add_init_script(NO_TOUR)
    pg = ctx.new_page()
    pg.goto(app_server[1], wait_until="load")
    pg.wait_for_function("() => window.vitStrip && window.vitStrip.value()", timeout=60_000)
    _ready(pg)
    box = pg.locator("#drawpad canvas").bounding_box()
    pg.mouse.move(box["x"] + 0.3 * box["width"], box["y"] + 0.3 * box["height"])
    pg.mouse.down()
    for i in range(1, 26):
        at = 0.3 + 0.016 * i
        pg.mouse.move(box["x"] + at * box["width"], box["y"] + at * box["height"])
    pg.wait_for_function("() => document.querySelector('#status').hasAttribute('data-stale')")
    note = pg.evaluate("""() => { const s = document.querySelector('#status');
      const b = getComputedStyle(s, '::before'), c = document.createElement('canvas').getContext('2d');
      c.font = `${b.fontStyle} ${b.fontSize} ${b.fontFamily}`;
      const text = b.content.replace(/^"|"$/g, '');
      return {text, wide: c.measureText(text).width, room: s.clientWidth, wrap: b.whiteSpace,
              high: s.getBoundingClientRect().height}; }""")
    # ... and says the drawing's answer so far (a fourth trial: on a short screen the answer
    # that "follows as you draw" was nowhere while the finger was down).
    assert re.fullmatch(r"Now: (\d \((>?\d+\.\d|>99\.9) %\)|Not a digit) · lift for the full answer",
                        note["text"]), note
    assert note["wrap"] == "nowrap" and note["wide"] <= note["room"], note
    pg.screenshot(path=ARTIFACTS / "browser" / "49-1-phone-pen-down.png")
    pg.mouse.up()
    ctx.close()


def _blocked(browser, url, pattern):
    """A fresh page whose requests matching `pattern` never arrive."""
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    context.route(pattern, lambda route: route.abort())
    pg = context.new_page()
    pg.add_init_script(NO_TOUR)
    pg.goto(url, wait_until="load")
    return context, pg


@pytest.mark.browser
def test_with_the_runtime_blocked_the_server_answers_while_drawing_and_the_page_says_so(browser, app_server):
    context, pg = _blocked(browser, app_server[1], "**/vit/inpage/**")
    pg.wait_for_function("() => window.vitStrip && window.vitStrip.value()", timeout=60_000)
    # (the line is there from the first frame, saying the page's model is on its way)
    pg.wait_for_function("() => !document.querySelector('#inpage-note')?.innerText"
                         ".includes('until this browser has loaded')", timeout=30_000)
    note = pg.inner_text("#inpage-note")
    # Issue 49, 8: in a visitor's words, not the browser's ("Failed to fetch")
    assert "the server answers" in note and "files for this page could not be downloaded" in note, note
    assert "Failed to fetch" not in note and "TypeError" not in note
    pg.click("#drawpad [data-act=clear]")
    pg.wait_for_timeout(3000)
    asked = []
    pg.on("request", lambda r: asked.append(r.url))
    _stroke(pg)
    pg.wait_for_timeout(1000)
    live = [u for u in asked if "queue/join" in u]
    assert live, "the pen's updates went to the server"
    pg.wait_for_function("() => (v => v && v.live === true && !v.inpage)(window.vitStrip.value())",
                         timeout=30_000)
    pg.mouse.up()
    context.close()
    # The page's script loads and its runtime's file does not: the same words, not the browser's.
    context, pg = _blocked(browser, app_server[1], "**/ort-wasm-simd-threaded.wasm")
    pg.wait_for_function("() => window.vitInPage && window.vitInPage.problem", timeout=60_000)
    note = pg.inner_text("#inpage-note")
    assert "can't run the model: its files could not be downloaded" in note, note
    assert "Failed to fetch" in pg.evaluate("window.vitInPage.problem")   # kept for bug reports
    # The address asks for the server's answers: the line says so, not "until it has loaded".
    pg.goto(app_server[1] + "?inpage=0", wait_until="load")
    pg.wait_for_function("() => document.querySelector('#inpage-note')?.innerText"
                         ".includes('the address asks for it')", timeout=30_000)
    context.close()


STROKES = {   # a hand's strokes, in canvas fractions
    "7": [((0.28, 0.2), (0.72, 0.2), (0.42, 0.85))],
    "1": [((0.5, 0.15), (0.5, 0.85))],
    "4": [((0.6, 0.85), (0.6, 0.15), (0.25, 0.6), (0.75, 0.6))],
    "0": [tuple((0.5 + 0.22 * np.cos(t), 0.5 + 0.33 * np.sin(t)) for t in np.linspace(0, 6.3, 24))],
    "small 2": [((0.42, 0.45), (0.5, 0.4), (0.58, 0.45), (0.42, 0.6), (0.6, 0.6))],
}


@pytest.mark.browser
def test_the_pages_layout_of_a_drawing_is_the_servers(browser, app_server):
    """inpage.js lays a drawing out as vit/preprocessing/layout.py does (the steps a drawing on
    this canvas meets); the server's answer at the pen's lift stays the authority, so what the
    page shows while drawing must read the same."""
    import base64
    import io

    from PIL import Image
    pg = _page(browser, app_server[1])
    _ready(pg)
    p = Predictor(ROOT / "checkpoints" / "mnist", "cpu")
    entry = pg.evaluate("window.vitInPage.m.models.mnist")
    worst = {}
    for digit, strokes in STROKES.items():
        pg.click("#drawpad [data-act=clear]")
        for stroke in strokes:
            _stroke(pg, stroke, steps=8)
            pg.mouse.up()
        got = pg.evaluate("""(e) => { const c = document.querySelector('#drawpad canvas');
            return {png: c.toDataURL('image/png'), x: Array.from(window.vitInPage.greyInput(c, e))}; }""",
                          entry)
        drawn = Image.open(io.BytesIO(base64.b64decode(got["png"].split(",", 1)[1])))
        server = p.read(drawn)[0]
        page = np.asarray(got["x"], np.float32).reshape(server.shape)
        a, b = p.analyse_input(server), p.analyse_input(page)
        worst[digit] = (float(np.abs(page - server).mean()), float(np.abs(page - server).max()),
                        int(a.probs.argmax()) == int(b.probs.argmax()),
                        float(np.abs(a.probs - b.probs).max()))
    print("page vs server layout (mean, max grey difference; same answer; largest P change):", worst)
    assert all(same for _, _, same, _ in worst.values()), worst
    assert max(most for _, most, _, _ in worst.values()) <= 1e-4, worst
    pg.close()


def _canvas_png(drawing: np.ndarray) -> str:
    """A black-on-white drawing as the page's canvas sends it: 400 px a side, ink in the alpha."""
    import base64
    import io

    from PIL import Image

    from vit.ui.canvas import CANVAS_SIDE
    grey = np.asarray(Image.fromarray(drawing).resize((CANVAS_SIDE, CANVAS_SIDE), Image.BILINEAR))
    rgba = np.zeros(grey.shape + (4,), np.uint8)
    rgba[..., 3] = 255 - grey
    out = io.BytesIO()
    Image.fromarray(rgba, "RGBA").save(out, "PNG")
    return "data:image/png;base64," + base64.b64encode(out.getvalue()).decode()


PAGE_ANSWERS = """async (urls) => {
  const out = [];
  for (const url of urls) {
    const im = new Image(); im.src = url; await im.decode();
    const c = document.createElement("canvas"); c.width = im.width; c.height = im.height;
    c.getContext("2d").drawImage(im, 0, 0);
    const v = await window.vitInPage.answerFor("mnist", c);
    out.push(v ? {refused: v.refused, top: v.classes[0][0], checking: !!v.checking} : null);
  }
  return out;
}"""


@pytest.mark.browser
def test_on_500_drawings_the_page_and_the_server_give_one_answer(browser, app_server):
    """Issue 47: the page's model applied only the confidence threshold, so a sloppy 5 read
    "5 100.0 %" in the strip while the server said "Not a digit — a flat dash". It now applies
    the server's rules itself (the ink checks too): on 250 redrawn test digits and 250 drawings
    of seven kinds of non-digits, sent as the canvas sends them, the page's answer (its class, or
    "not a digit") is the server's on >= 99 %."""
    from drawings import non_digits, redrawn_digits
    from test_calibration import bundled_predictor, judged, mnist_test_split

    from vit.ui.canvas import read_drawing
    p = bundled_predictor()
    images, labels = mnist_test_split()
    digits, _, _ = redrawn_digits(images, labels, 250, seed=5)
    others = [d for _, d in non_digits(images, per_kind=36, seed=5)][:250]
    urls = [_canvas_png(d) for d in digits + others]
    probs, verdicts = judged(p, [read_drawing({"png": u}) for u in urls])
    server = ["not" if not v else p.config.class_names[int(row.argmax())]
              for row, v in zip(probs, verdicts)]
    pg = _page(browser, app_server[1])
    _ready(pg)
    got = pg.evaluate(PAGE_ANSWERS, urls)
    page = ["not" if g is None or g["refused"] else g["top"] for g in got]
    differ = [(i, s, q) for i, (s, q) in enumerate(zip(server, page)) if s != q]
    refused = sum(s == "not" for s in server)
    print(f"page vs server on 500 drawings: {500 - len(differ)} agree; the server refused "
          f"{refused} ({sum(s == 'not' for s in server[250:])} of the 250 non-digits); differ: {differ}")
    assert len(differ) <= 5 and refused >= 150
    assert not any(g and g["checking"] for g in got)         # MNIST's rules all run in the page
    pg.close()
