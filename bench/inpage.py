"""The model in the page against the server's updates while the pen moves, paired in one run.

    python -m bench.inpage [--seconds 2] [--crowd] [--crowd-seconds 20]

Starts `python app.py` (VIT_WARM=0) on a loopback port. In headless Chromium, for each path —
"server" (the page opened with ?inpage=0: every update a request, as before) and "page" (the
model in the page, vit/ui/inpage.js) — from a fresh browser profile:
- first visit: bytes downloaded until the page can answer while drawing, and for "page" the
  time from navigation to the model being ready (runtime and model fetched, checked, compiled);
  a second visit in the same profile: bytes downloaded again (what the browser kept);
- one stroke of --seconds, pointer events at the display's rate (each animation frame moves the
  pen, as a hand on a 60 Hz screen): updates of the strip a second, pen -> strip latency per
  update (p50, p90: from the oldest pen movement the update had not yet shown to the strip drawn
  with it), requests sent while the pen moved, and the server's CPU seconds per second of
  drawing (its /proc utime + stime).
--crowd: N simulated visitors at once over the raw queue protocol, each drawing a 1-s stroke
and then thinking for 1 s, again and again: "server" sends the pen's updates as the page does
(one at a time, at most every 120 ms) and then the lift, "page" sends only the lift; after each
lift, the events the page chains to it ("why"; an older app also "folded"). Every update and
every lift carries a drawing of its own (a digit at its own angle, pen width and place, from a
pool of --pool), so no cache on the server answers one it has seen. Prints the pen-lift
answer's p50 and p90 per N, why any stroke got no answer, and the largest N whose p90 stays
under 1 s with every stroke answered. The simulated visitors run on the same 2 cores as the
server, at a lower priority (--client-nice; 0: the same) so that they stand in for browsers on
other machines: their own CPU (urllib, ~1 ms an event) does not delay the server they measure.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import threading
import time
import urllib.request
import uuid
from collections import Counter

import numpy as np

from bench.app_latency import start
from bench.fairness import join
from vit.data.examples import render_digit
from vit.ui.canvas import drawing_value

# The pen's path: a 7, in canvas fractions; the probe moves along it once per animation frame.
PATH = [(0.28, 0.2), (0.72, 0.2), (0.42, 0.85)]
PROBE = """async ([seconds, path]) => {
  const c = document.querySelector('#drawpad canvas'), r = c.getBoundingClientRect();
  const pipe = document.querySelector('#pipeline .pipe');
  const pad = document.querySelector('#drawpad [data-ready]');
  const answered = document.querySelector('#answered');
  const log = {events: [], sends: {}, answers: [], draws: []};
  const seen = new MutationObserver(() => log.sends[pad.dataset.sent] = performance.now());
  seen.observe(pad, {attributes: true, attributeFilter: ['data-sent']});
  const drawn = new MutationObserver(() => log.draws.push(performance.now()));
  drawn.observe(pipe, {attributes: true, attributeFilter: ['data-draws']});
  const echo = new MutationObserver(() => log.answers.push([performance.now(), answered.innerText]));
  echo.observe(answered, {childList: true, subtree: true, characterData: true});
  const at = f => {
    const seg = Math.min(Math.floor(f * (path.length - 1)), path.length - 2), g = f * (path.length - 1) - seg;
    const [x0, y0] = path[seg], [x1, y1] = path[seg + 1];
    return [r.left + (x0 + (x1 - x0) * g) * r.width, r.top + (y0 + (y1 - y0) * g) * r.height];
  };
  const fire = (type, f) => { const [x, y] = at(f);
    c.dispatchEvent(new PointerEvent(type, {clientX: x, clientY: y, pointerId: 1, bubbles: true,
                                            isPrimary: true, button: 0,
                                            buttons: type === 'pointerup' ? 0 : 1})); };
  const t0 = performance.now();
  fire('pointerdown', 0);
  log.events.push(performance.now());
  await new Promise(done => {
    const step = () => {
      const f = (performance.now() - t0) / (1000 * seconds);
      if (f >= 1) return done();
      fire('pointermove', f); log.events.push(performance.now());
      requestAnimationFrame(step);
    };
    requestAnimationFrame(step);
  });
  const t1 = performance.now();
  await new Promise(r => setTimeout(r, 400));          // the last update in flight lands
  const stats = window.vitInPage && window.vitInPage.stats ? window.vitInPage.stats() : null;
  seen.disconnect(); drawn.disconnect(); echo.disconnect();
  return {t0, t1, log, stats};
}"""


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pct(values, q):
    v = sorted(values)
    return v[min(len(v) - 1, int(q * (len(v) - 1) + 0.5))] if v else float("nan")


def server_latencies(run: dict) -> list[float]:
    """Per server update: from the oldest pen movement it had not yet shown (the first after the
    previous update's drawing was sent) to its answer on the page."""
    log, out, covered = run["log"], [], run["t0"] - 1
    sends = {int(k): v for k, v in log["sends"].items() if k.isdigit()}
    for t, text in log["answers"]:
        seq = int(text) if text.strip().isdigit() else None
        if seq not in sends or sends[seq] > run["t1"]:
            continue
        pending = [e for e in log["events"] if covered < e <= sends[seq]]
        if pending:
            out.append(t - pending[0])
        covered = sends[seq]
    return out


def visit(browser, url: str, seconds: float, pid: int) -> dict:
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    context.add_init_script("localStorage.setItem('vit-explorer-tour', 'done')")
    got = {"bytes": 0}
    page = context.new_page()

    def count(response):
        try:
            got["bytes"] += response.request.sizes()["responseBodySize"]
        except Exception:       # a response still streaming (the queue's event stream)
            pass
    page.on("response", count)
    t = time.perf_counter()
    page.goto(url, wait_until="load")
    page.wait_for_function("() => window.vitStrip && window.vitStrip.value()", timeout=120_000)
    inpage = "inpage=0" not in url
    if inpage:
        page.wait_for_function("() => window.vitInPage && window.vitInPage.ready && "
                               "Object.keys(window.vitInPage.loads).length", timeout=120_000)
    ready = time.perf_counter() - t
    first = got["bytes"]
    page.click("#drawpad [data-act=clear]")
    page.wait_for_timeout(3000)
    asked = []
    page.on("request", lambda r: asked.append(r.url))
    before = cpu_seconds(pid)
    run = page.evaluate(PROBE, [seconds, PATH])
    cpu = cpu_seconds(pid) - before
    during = [u for u in asked if "queue/join" in u]
    took = (run["t1"] - run["t0"]) / 1000
    if inpage:
        ms, updates = run["stats"]["ms"], run["stats"]["frames"]
    else:
        ms, updates = server_latencies(run), len(run["log"]["draws"])
    page.close()
    again = context.new_page()
    got["bytes"] = 0
    again.on("response", count)
    again.goto(url, wait_until="load")
    again.wait_for_function("() => window.vitStrip && window.vitStrip.value()", timeout=120_000)
    if inpage:
        again.wait_for_function("() => window.vitInPage && Object.keys(window.vitInPage.loads).length",
                                timeout=120_000)
    second = got["bytes"]
    context.close()
    return {"ready": ready, "first": first, "second": second, "updates": updates / took,
            "p50": pct(ms, 0.5), "p90": pct(ms, 0.9), "requests": len(during),
            "cpu": cpu / took, "n": len(ms)}


# --- the crowd ------------------------------------------------------------------------------
def event(base: str, fn: int, data: list, sid: str, who: str) -> float:
    """One event of a visitor's session (bench/fairness.py's raw queue protocol): seconds until
    its answer; raises on anything but an answer."""
    said, took = join(base, fn, data, who, sid)
    if said != "ok":
        raise RuntimeError(said)
    return took


def drawings(n: int) -> list[dict]:
    """`n` different drawings as the canvas sends them: digits at their own angle, pen width
    and place (the same `n` every run)."""
    rng = random.Random(0)
    return [drawing_value(255 - np.asarray(render_digit(
        str(i % 10), 400, rng.randint(16, 34), (rng.uniform(-12, 12), rng.uniform(-12, 12)),
        rng.uniform(-25, 25)))) for i in range(n)]


def crowd(base: str, fns: dict, n: int, inpage: bool, seconds: float,
          pool: list[dict]) -> tuple[list, Counter]:
    """N visitors' lift → answer times (s), and why any visitor's stroke got no answer."""
    lifts, failed, until = [], Counter(), time.monotonic() + seconds
    turn = itertools.count()

    def visitor(i: int):
        sid, who, seq = uuid.uuid4().hex[:16], f"198.51.{i // 250}.{i % 250 + 1}", 0
        time.sleep(i * 0.05)
        while time.monotonic() < until:
            try:
                stroke_end = time.monotonic() + 1.0
                while not inpage and time.monotonic() < stroke_end:
                    seq += 1
                    t = time.monotonic()
                    value = pool[next(turn) % len(pool)]
                    event(base, fns["follow_drawing"], [{**value, "seq": seq}, "mnist"], sid, who)
                    time.sleep(max(0.0, 0.12 - (time.monotonic() - t)))
                if inpage:
                    time.sleep(1.0)
                seq += 1
                value = pool[next(turn) % len(pool)]
                lifts.append(event(base, fns["analyse_drawing"],
                                   [{**value, "seq": seq}, "mnist", True, 6, 1], sid, who))
                for chained in ("why", "folded"):       # what the page runs after a lift
                    if chained in fns:                   # (an older app: both; now: "why")
                        event(base, fns[chained], [], sid, who)
            except Exception as e:      # counted: a visitor whose lift got no answer
                failed[str(e)[:60]] += 1
            time.sleep(1.0)
    threads = [threading.Thread(target=visitor, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(seconds + 120)
    return lifts, failed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=2.0, help="the stroke's length")
    ap.add_argument("--crowd", action="store_true")
    ap.add_argument("--crowd-seconds", type=float, default=20)
    ap.add_argument("--pool", type=int, default=1500, help="different drawings the crowd sends")
    ap.add_argument("--client-nice", type=int, default=10,
                    help="the simulated visitors' priority below the server's (os.nice)")
    ap.add_argument("--server-ns", default="2,4,6,8,12")
    ap.add_argument("--page-ns", default="8,16,24,32,48")
    ap.add_argument("--app", default="app.py",
                    help="the app.py to start: another checkout's (a `git worktree` of an older "
                         "commit) measures its server path in the same way ('before')")
    ap.add_argument("--paths", default="server,page", help="which paths to measure")
    ap.add_argument("--crowd-only", action="store_true",
                    help="skip the browser (an older app's page has no in-page model to wait for)")
    args = ap.parse_args()
    paths = args.paths.split(",")
    proc, base, took = start([args.app], env={"VIT_WARM": "0", "VIT_UPLOADS_PER_MINUTE": "100000"})
    try:
        from playwright.sync_api import sync_playwright
        if args.crowd_only:
            paths_seen = []
        else:
            paths_seen = paths
        print(f"{args.app} on {base} (started in {took:.1f} s), headless Chromium, stroke "
              f"{args.seconds:g} s at the display's frame rate")
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium",
                                        args=["--headless", "--no-sandbox", "--disable-gpu"])
            for name, url in (("server", base + "?inpage=0"), ("page", base)):
                if name not in paths_seen:
                    continue
                r = visit(browser, url, args.seconds, proc.pid)
                print(f"  {name:6}  updates/s {r['updates']:5.1f}  pen->strip p50 {r['p50']:6.1f} ms "
                      f"p90 {r['p90']:6.1f} ms (n={r['n']})  requests while drawing "
                      f"{r['requests']:3d}  server CPU {r['cpu']:.3f} s/s  first visit "
                      f"{r['first'] / 1e6:.2f} MB, ready in {r['ready']:.1f} s; again "
                      f"{r['second'] / 1e6:.2f} MB")
            browser.close()
        if not args.crowd:
            return
        config = json.loads(urllib.request.urlopen(base + "config", timeout=30).read())
        fns = {d["api_name"]: d["id"] for d in config["dependencies"]
               if d.get("api_name") in ("follow_drawing", "analyse_drawing", "why", "folded")}
        pool = drawings(args.pool)
        os.nice(args.client_nice)                # below the server (started above, at 0)
        crowd(base, fns, 1, True, 0.1, pool)     # warm: the first lift loads the model's caches
        for name, ns in (("server", args.server_ns), ("page", args.page_ns)):
            if name not in paths:
                continue
            best = 0
            for n in map(int, ns.split(",")):
                lifts, failed = crowd(base, fns, n, name == "page", args.crowd_seconds, pool)
                p50, p90 = pct(lifts, 0.5), pct(lifts, 0.9)
                print(f"  crowd {name:6} N={n:3d}: lifts {len(lifts):4d}, failed "
                      f"{sum(failed.values())} {dict(failed) if failed else ''}, "
                      f"lift->answer p50 {1000 * p50:6.0f} ms p90 {1000 * p90:6.0f} ms", flush=True)
                if p90 < 1.0 and not failed:
                    best = n
            print(f"  crowd {name}: largest N with lift p90 < 1 s: {best}")
    finally:
        proc.terminate()
        proc.wait(timeout=20)


if __name__ == "__main__":
    main()
