"""One lesson, one screen (issue 38), as a visitor meets it in headless Chromium: the page as it
opens fits in 2.5 screens at 1280x800 with at most 35 buttons and writes every probability one
way; axe-core finds nothing critical or serious at desktop and phone sizes; the strip says what a
token and [CLS] are, and its steps open their detail in place; what the answer rests on is the
map measured most faithful for the model, said with whether the others agree; the answer is a
live region; the strip's patches are reached and chosen from the keyboard; reduced motion is
honoured; Compare pairs the two MNIST models and "How it learned" shows only for a model that
kept snapshots. `python -m bench.page_shape` prints the same figures for docs/benchmarks.md."""
import re
import shutil

import pytest

pytestmark = pytest.mark.browser

if not shutil.which("chromium"):
    pytest.skip("chromium is not installed", allow_module_level=True)
from conftest import ARTIFACTS  # noqa: E402

from vit.text import confidence  # noqa: E402

SHOTS = ARTIFACTS / "browser"
NO_TOUR = "localStorage.setItem('vit-explorer-tour', 'done')"

PERCENT = re.compile(r"\b\d{1,3}(?:[.,]\d+)?\s?%")


def opened(browser, url, width=1280, height=800, **options):
    pg = browser.new_page(viewport={"width": width, "height": height}, **options)
    pg.add_init_script(NO_TOUR)
    # What went wrong, if the example never arrives (CI once waited 60 s here, once in ~30 runs):
    # refused requests and the page's errors go into the failure's message.
    trouble = []
    pg.on("response", lambda r: r.status >= 400 and trouble.append(f"HTTP {r.status} {r.url}"))
    pg.on("pageerror", lambda e: trouble.append(f"page error: {e}"))
    pg.goto(url, wait_until="load")
    try:
        pg.wait_for_function("() => (document.querySelector('#status')?.innerText || '')"
                             ".includes('Example')", timeout=60_000)
    except Exception as e:
        status = pg.evaluate("() => document.querySelector('#status')?.innerText")
        raise AssertionError(f"no example after 60 s; headline {status!r}; {trouble}") from e
    pg.wait_for_function("() => (document.querySelector('#glance-text')?.innerText || '')"
                         ".includes('rests on')", timeout=60_000)
    return pg


def test_the_page_as_it_opens_is_short_has_few_buttons_and_one_number_format(browser, app_server):
    pg = opened(browser, app_server[1])
    shape = pg.evaluate("""() => {
      const seen = e => { const r = e.getBoundingClientRect(); return r.width > 0 && r.height > 0; };
      const first = [...document.querySelectorAll('#status, #pipeline, #glance-text')]
        .map(e => e.innerText).join(' ');
      return {screens: document.documentElement.scrollHeight / innerHeight,
              buttons: [...document.querySelectorAll('button, [role=button]')].filter(seen).length,
              first};
    }""")
    pg.screenshot(path=SHOTS / "lesson-first-screen.png", full_page=True)
    assert shape["screens"] <= 2.5, shape
    # 36: "How it learned" is shown on every model since issue 49, 7 (its title names the model
    # that kept snapshots); before, it was hidden on the default model and nothing said why.
    assert shape["buttons"] <= 36, shape
    written = set(PERCENT.findall(shape["first"]))
    assert written and all(re.fullmatch(r"\d{1,3}\.\d %", w) for w in written), written
    pg.close()


@pytest.mark.parametrize("width,height", [(1280, 800), (390, 844)], ids=["desktop", "phone"])
def test_axe_finds_no_critical_or_serious_violation(browser, app_server, width, height):
    axe = pytest.importorskip("axe_playwright_python.sync_playwright")
    pg = opened(browser, app_server[1], width, height)
    # A phone's "▴ steps" shows only where the answer is folded: not here (it once showed on a
    # desktop, over the headline).
    assert pg.locator("#sheet-toggle").count() == 1 and not pg.locator("#sheet-toggle").is_visible()
    found = axe.Axe().run(pg).response["violations"]
    bad = [f'{v["impact"]} {v["id"]}: {v["nodes"][0]["target"]}' for v in found
           if v["impact"] in ("critical", "serious")]
    assert not bad, bad
    pg.close()


def test_the_strip_says_what_a_token_and_cls_are_and_opens_each_steps_detail_in_place(
        browser, app_server):
    pg = opened(browser, app_server[1])
    tokens = pg.locator("#pipeline .s-tokens .note").inner_text()
    assert "token" in tokens and "[CLS]" in tokens and "gathers the answer" in tokens
    assert not pg.locator("#mechanism .label-wrap.open").count()       # folded at first
    pg.locator("#pipeline .s-tokens a.more").click()
    pg.wait_for_selector("#mechanism .label-wrap.open")
    pg.wait_for_function("() => { const r = document.querySelector('#mechanism')"
                         ".getBoundingClientRect(); return r.top >= -2 && r.top < innerHeight; }")
    pg.evaluate("window.scrollTo(0, 0)")
    pg.locator("#pipeline .s-answer a.more").click()
    pg.wait_for_selector("#why .label-wrap.open")
    pg.close()


def test_what_the_answer_rests_on_is_the_measured_lead_map_with_the_others_said(browser, app_server):
    """The bundled MNIST model measured occlusion most faithful (config.json): the small map
    beside the answer is occlusion's, its words say so and how it was measured, and whether the
    other maps rank the patches alike on this input; the strip's answer step agrees."""
    pg = opened(browser, app_server[1])
    said = pg.locator("#glance-text").inner_text()
    assert "by occlusion" in said and "on average the map that removed the answer fastest" in said
    # ... and, unfolded, that one input may differ (a sixth trial read this input's scoreboard,
    # occlusion last, as the words' contradiction)
    assert "one input may differ" in said
    # How it was measured, unfolded: its words are Markdown read (a trial saw the raw link
    # "[Rank correlation](#term-rank)"), and no correlation reads "-0.00".
    pg.locator("#glance-text summary").click()
    how = pg.locator("#glance-text details").inner_text()
    assert "Rank correlation with it here" in how and "](#" not in how and "-0.00" not in how, how
    assert pg.locator('#glance-text details a[href="#term-rank"]').count() == 1
    assert "rank the patches alike" in said or "at other patches" in said
    drove = pg.locator("#pipeline .drove").inner_text()
    assert "Hiding patch" in drove and "lowers the answer most" in drove and "patch patch" not in drove
    # Pointed at, that patch says its figure in the unit of the map beside the answer, a drop in
    # P(7), not a share of the map's sum (a trial: "carries 37.7 %"), from and to (a fifth
    # trial read "lowers P(7) by 79.3 %" as a part of P(7), not points of it).
    v = pg.evaluate("window.vitStrip.value()")
    pg.locator("#pipeline canvas.c-attention").scroll_into_view_if_needed()   # (the click above scrolled)
    box, g = pg.locator("#pipeline canvas.c-attention").bounding_box(), v["grid"]
    r, c = divmod(v["drove"], g)
    pg.mouse.move(box["x"] + (c + 0.5) / g * box["width"], box["y"] + (r + 0.5) / g * box["height"])
    p = v["classes"][0][1]
    pg.wait_for_function("t => document.querySelector('#pipeline .readout').innerText.includes(t)",
                         arg=f"hiding it lowers P(7) from {confidence(p)} to "
                             f"{confidence(max(0.0, p - max(v['drop'])))} (occlusion)")
    # A patch whose hiding moves nothing the page can write says so, not "from 99.5 % to 99.5 %"
    # (a seventh trial: "lowers P(8) from >99.9 % to >99.9 %").
    still = min(range(g * g), key=lambda k: abs(v["drop"][k]))
    if confidence(p) == confidence(max(0.0, p - v["drop"][still])):
        r, c = divmod(still, g)
        pg.mouse.move(box["x"] + (c + 0.5) / g * box["width"], box["y"] + (r + 0.5) / g * box["height"])
        pg.wait_for_function("t => document.querySelector('#pipeline .readout').innerText.includes(t)",
                             arg=f"hiding it barely changes P(7) ({confidence(p)}; occlusion)")
    # The strip names the maps that point elsewhere, as the words below do (a trial read "Other
    # maps point elsewhere too" beside "Here relevance points at other patches").
    maps = {"rollout", "relevance", "occlusion"}
    below = re.search(r"Here (.+?) points? at other patches", said)
    beside = re.search(r"(\w[\w ]*?) points? elsewhere", drove)
    assert bool(below) == bool(beside) and ("The other maps agree" in drove) == (not below), \
        (said, drove)
    if below:
        assert {w for w in below.group(1).lower().split() if w in maps} == \
            {w for w in beside.group(1).lower().split() if w in maps} != set(), (said, drove)
    # The terms it uses open the folded glossary in place.
    pg.locator("#glance-text a", has_text="occlusion").click()
    pg.wait_for_selector("#glossary button.label-wrap.open")
    pg.close()


def test_the_answer_is_announced_and_the_strips_patches_work_from_the_keyboard(browser, app_server):
    pg = opened(browser, app_server[1])
    assert pg.locator("#status").get_attribute("aria-live") == "polite"
    # What the live region holds at each change is the answer alone (a screen reader says all of
    # it): Gradio's progress words inside it ("queue: 1/1 | processing | 0.1/0.2s") were said too.
    pg.evaluate("""() => { const s = document.querySelector('#status'); window.said = [];
        new MutationObserver(() => window.said.push(s.innerText))
            .observe(s, {childList: true, subtree: true, characterData: true}); }""")
    pg.locator("#draw-examples button.thumbnail-item").nth(3).click()
    pg.wait_for_function("() => document.querySelector('#status').innerText.includes('drawn 3')")
    pg.wait_for_function("() => document.querySelector('#glance img')")       # the "why" lane
    pg.wait_for_timeout(1000)
    said = pg.evaluate("window.said")
    assert said and not [s for s in said if re.search(r"processing|queue|\d\.\ds", s)], said
    # Each step's "?" is named by its step (a trial heard "?" five times over).
    names = pg.evaluate("[...document.querySelectorAll('#pipeline details.q summary')]"
                        ".map(s => s.getAttribute('aria-label'))")
    assert len(names) == 5 and len(set(names)) == 5, names
    assert all(n.endswith(": the precise version") and n[0].isupper() for n in names), names
    patches = pg.locator("#pipeline canvas.c-patches")
    patches.focus()
    assert pg.evaluate("() => document.activeElement.classList.contains('c-patches')")
    for key in ("ArrowRight", "ArrowRight", "ArrowDown"):
        pg.keyboard.press(key)
    # From patch 1: two right, one down = patch 1 + 2 + grid (7 for the bundled MNIST model).
    assert "Patch 10 " in pg.locator("#pipeline .readout").inner_text()
    pg.keyboard.press("Enter")
    pg.wait_for_function("() => (document.querySelector('#pipeline .readout')?.innerText || '')"
                         ".includes('See where it looks')")
    pg.close()


def test_reduced_motion_is_honoured(browser, app_server):
    pg = opened(browser, app_server[1], reduced_motion="reduce")
    assert pg.evaluate("() => matchMedia('(prefers-reduced-motion: reduce)').matches")
    moving = pg.evaluate("() => [...document.querySelectorAll('.gradio-container *')].filter(e =>"
                         " parseFloat(getComputedStyle(e).transitionDuration) > 0 ||"
                         " getComputedStyle(e).animationName !== 'none').length")
    assert moving == 0
    pg.close()


def test_compare_pairs_the_two_mnist_models_and_how_it_learned_follows_the_model(
        browser, app_server):
    pg = opened(browser, app_server[1])
    assert pg.locator("#compare").is_visible()
    # The big MNIST model kept no snapshots: the panel's title names the model that did (issue
    # 49, 7: it was hidden, and nothing said that another model had it).
    assert "only for" in pg.locator("#learned .label-wrap").inner_text()
    pg.locator("#compare .label-wrap").click()
    # Before a second model is picked: the words ask for one, and no empty strip, maps frame or
    # test-set button stands beside them (a trial took them for a broken panel).
    pg.wait_for_function("() => document.querySelector('#compare-text')?.innerText"
                         ".includes('Pick a second model')", timeout=30_000)
    for part in ("#compare-strip", "#compare-maps", "#compare-differ"):
        assert not pg.locator(part).is_visible(), part
    pg.locator("#compare-choice input").click()
    # The menu never offers the page's own model (a trial picked it: a model beside itself).
    offered = pg.locator("#compare-choice").get_by_role("option").all_inner_texts()
    assert not any("514 k" in o for o in offered), offered
    pg.locator("#compare-choice").get_by_role("option", name=re.compile("139 k parameters")).click()
    pg.wait_for_function("() => /reads|read/.test(document.querySelector('#compare-text')"
                         "?.innerText || '')", timeout=60_000)
    for part in ("#compare-strip", "#compare-maps", "#compare-differ"):
        pg.locator(part).wait_for(state="visible", timeout=30_000)
    pg.locator("#model input").click()
    pg.locator("#model").get_by_role("option", name=re.compile("139 k parameters")).click()
    pg.wait_for_function("() => !document.querySelector('#learned .label-wrap').innerText"
                         ".includes('only for')", timeout=60_000)
    # The second model became the page's: the menu says "no second model" and offers the other.
    pg.wait_for_function("() => document.querySelector('#compare-choice input').value"
                         " === 'no second model'", timeout=30_000)
    pg.wait_for_function("() => document.querySelector('#compare-text')?.innerText"
                         ".includes('Pick a second model')", timeout=30_000)
    pg.locator("#compare-choice input").click()
    offered = pg.locator("#compare-choice").get_by_role("option").all_inner_texts()
    assert any("514 k" in o for o in offered) and not any("139 k" in o for o in offered), offered
    pg.close()


def test_at_200_percent_zoom_the_answer_follows_the_canvas_instead_of_covering_it(browser,
                                                                                  app_server):
    """1280x800 at 200 % zoom is a 640x400 window: a pinned answer took 42 % of it. There the
    answer, the strip and what the answer rests on follow the canvas in the page."""
    pg = opened(browser, app_server[1], 640, 400)
    assert pg.evaluate("() => getComputedStyle(document.querySelector('#result-col')).position"
                       ) == "static"
    pg.locator("#pipeline").scroll_into_view_if_needed()
    # The canvas scrolled away: a phone would fold the answer to its headline; here nothing is
    # pinned, so nothing folds, and the headline offers no "▴ steps" (CI once found the strip
    # folded away here, by a phone's rule more specific than this screen's).
    pg.wait_for_function("() => document.getElementById('top').classList.contains('canvas-away')")
    pg.wait_for_function("() => { const r = document.querySelector('#pipeline .steps')"
                         ".getBoundingClientRect(); return r.height > 50 && r.top < innerHeight; }")
    assert not pg.locator("#sheet-toggle").is_visible()
    assert pg.locator("#glance-text").is_visible()
    pg.screenshot(path=SHOTS / "lesson-zoom-200.png")
    pg.close()


def test_clearing_the_canvas_does_not_shorten_the_strip(browser, app_server):
    """Issue 49, 8: after Clear, step 4's line saying which map it shows ("All layers (rollout),
    max 4.0 %") was empty, the strip 31 px shorter, and the first stroke of the next drawing
    pushed everything below it (what the answer rests on, the examples' row) down by as much."""
    pg = opened(browser, app_server[1])
    assert pg.locator("#pipeline .s-attention .scale").is_visible()
    height = "() => document.querySelector('#pipeline .steps').getBoundingClientRect().height"
    drawn = pg.evaluate(height)
    pg.locator("#drawpad button", has_text="Clear").first.click()
    pg.wait_for_function("() => (document.querySelector('#status')?.innerText || '')"
                         ".includes('Draw')", timeout=30_000)
    pg.wait_for_timeout(500)
    assert abs(pg.evaluate(height) - drawn) <= 1, (drawn, pg.evaluate(height))
    # Nor does step 4 keep the last map's colour bar, faded, as a scale of nothing.
    assert not pg.locator("#pipeline .s-attention .scale").is_visible()
    pg.close()
