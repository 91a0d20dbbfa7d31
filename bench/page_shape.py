"""The page's shape as a first-time visitor meets it, in headless Chromium: how tall the page is
when it opens (in screens), how many buttons it has, how many words are on the first screen, the
ways it writes the answer's probability, and what axe-core finds (by impact), at desktop and phone
sizes. Issue 38's "Done when" figures.

    python -m bench.page_shape [--url http://127.0.0.1:7860] [--shots DIR]

Without --url it starts `python app.py` on a free port (as the README says) and stops it after.
Needs Chromium (/usr/bin/chromium) and, for the axe counts, axe-playwright-python.
"""
from __future__ import annotations

import argparse
import collections
import os
import re
import sys
from pathlib import Path

from bench.draw_latency import start_app  # `python app.py` on a free port, as the README says

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
SIZES = {"desktop": (1280, 800), "phone": (390, 844)}
# Every way a probability can be written on the page: "100.0 %", "100 %", "100%", "0.99".
PERCENT = re.compile(r"\b\d{1,3}(?:\.\d+)?\s?%")

MEASURE = """() => {
  const vis = e => { const r = e.getBoundingClientRect(); const s = getComputedStyle(e);
    return r.width > 0 && r.height > 0 && s.visibility !== 'hidden' && s.display !== 'none'; };
  const buttons = [...document.querySelectorAll('button, [role=button], input[type=button]')]
    .filter(vis);
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  let words = 0, first = [];
  while (walker.nextNode()) {
    const n = walker.currentNode, el = n.parentElement;
    if (!el || !n.textContent.trim() || !vis(el)) continue;
    // Folded text (a closed <details> past its summary) and screen-reader-only text
    // (1 px wide) are not on the screen.
    const folded = el.closest('details:not([open])');
    if (folded && !el.closest('summary')) continue;
    if (el.getBoundingClientRect().width <= 1) continue;
    const r = el.getBoundingClientRect();
    if (r.top + scrollY < innerHeight) { words += n.textContent.trim().split(/\\s+/).length;
                                          first.push(n.textContent.trim()); }
  }
  return {height: document.documentElement.scrollHeight / innerHeight,
          buttons: buttons.length, words, first: first.join(' ')};
}"""


def measure(browser, url: str, size: str, shots: Path | None) -> dict:
    w, h = SIZES[size]
    pg = browser.new_page(viewport={"width": w, "height": h})
    pg.add_init_script("localStorage.setItem('vit-explorer-tour', 'done')")
    pg.goto(url, wait_until="load")
    pg.wait_for_function("() => (document.querySelector('#status')?.innerText || '')"
                         ".includes('Example')", timeout=60_000)
    pg.wait_for_timeout(1500)                 # the answer's pictures settle
    out = pg.evaluate(MEASURE)
    out["percent_formats"] = sorted({re.sub(r"\d+", "9", m) for m in PERCENT.findall(out["first"])})
    try:
        from axe_playwright_python.sync_playwright import Axe
        res = Axe().run(pg)
        out["axe"] = dict(collections.Counter(v["impact"] for v in res.response["violations"]))
        out["axe_rules"] = sorted(f'{v["impact"]}:{v["id"]}({len(v["nodes"])})'
                                  for v in res.response["violations"])
    except ImportError:
        out["axe"] = "axe-playwright-python not installed"
    if shots:
        shots.mkdir(parents=True, exist_ok=True)
        pg.screenshot(path=str(shots / f"{size}.png"), full_page=True)
    pg.close()
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url")
    ap.add_argument("--shots", type=Path)
    args = ap.parse_args(argv)
    from playwright.sync_api import sync_playwright
    proc, url = (None, args.url) if args.url else start_app()
    url = url.rstrip("/") + "/"
    try:
        with sync_playwright() as p:
            b = p.chromium.launch(executable_path=CHROMIUM,
                                  args=["--headless", "--no-sandbox", "--disable-gpu"])
            for size in SIZES:
                m = measure(b, url, size, args.shots)
                print(f"{size} {SIZES[size][0]}x{SIZES[size][1]}: {m['height']:.1f} screens, "
                      f"{m['buttons']} buttons, {m['words']} words on the first screen, "
                      f"probability written as {m['percent_formats']}")
                print(f"  axe: {m['axe']}  {' '.join(m.get('axe_rules', []))}")
            b.close()
    finally:
        if proc:
            proc.terminate()
            proc.wait(timeout=30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
