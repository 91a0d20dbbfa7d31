() => {
  // The page's own script (vit/ui/app.py launch(js=...)): the first-visit tour. Four steps, each a
  // bubble beside the part it names; no backdrop, so the page stays usable under it. Skipping or
  // finishing it is remembered in this browser (localStorage), and "Take the tour" starts it again.
  const KEY = "vit-explorer-tour";
  const STEPS = [
    ["#drawpad", "Draw on this canvas with a mouse, pen or finger. The model answers while you draw."],
    ["#pipeline", "Read this strip left to right: what the model sees, its patches, the tokens, " +
                  "where it looks, and its answer. Point at (or tap) a patch to follow it."],
    ["#pipeline .s-tokens", "A token is what the model reads instead of pixels: one list of " +
                            "numbers per patch, told its place. [CLS] is one extra token with no " +
                            "pixels: every layer it gathers from the others, and the answer is " +
                            "read from it."],
    // (on a phone the map beside the answer is folded away: the strip's answer step says it,
    // and the bubble says what that line shows — a trial read of a map the phone does not show)
    [["#why-row", "#pipeline .drove"],
     ["What the answer rests on, by the map measured most faithful for this model, and whether " +
      "the other maps agree. Where [CLS] looked (step 4) is not the same as why it answered.",
      "The patch the answer rests on most, by the map measured most faithful for this model " +
      "(the map itself is on a wider screen). Where [CLS] looked is not the same as why it " +
      "answered."]],
    ["#deeper", "Each step opens its detail here: the arithmetic of one head, every map scored, " +
                "every layer and head. The Glossary explains every term; the Model menu at " +
                "the top switches to another model."],
  ];
  // What a bubble should not cover, and how much each counts (show: where it goes).
  // (The "Go deeper" panels' titles count as much: step 5 lay over the first two it describes.
  // The Model menu counts twice: an eighth look found step 3 over it.)
  // (What the answer rests on is its map and its words, not the empty end of their row.)
  // (The input's tabs and the line above the canvas count twice: step 1 lay over both. A
  // phone's line under the canvas, how to scroll past it, counts as the lesson: a fifth trial
  // found step 1 over it.)
  const LESSON = [["#drawpad", 3], ["#pipeline", 3], ["#status", 3], ["#glance", 3], ["#glance-text", 3],
                  ["#draw-hint", 2], ["#input-col [role=tablist]", 2], ["#scroll-hint", 3],
                  ["#draw-examples", 1], ["#intro", 1], ["#deeper", 1], ["#model", 2],
                  ...["#why", "#views", "#mechanism", "#lens", "#learned", "#compare"]
                    .map(q => [q, 3])];
  let bubble = null, opener = null;

  function close(done) {
    document.getElementById("top")?.classList.remove("touring");    // page.css: the strip may fold
    document.querySelectorAll(".tour-target").forEach(t => t.classList.remove("tour-target"));
    const had = bubble !== null && bubble.contains(document.activeElement);
    if (bubble) bubble.remove();
    bubble = null;
    if (done) {
      try { localStorage.setItem(KEY, "done"); } catch (e) { /* private mode */ }
      // Focus goes back where the tour was started from, not to the page's end.
      if (had) (opener && opener.isConnected ? opener : document.querySelector("#tour-start"))
        ?.focus({preventScroll: true});
    }
  }
  // Escape closes the tour, as it closes any dialog (a key pressed: not the one below).
  document.addEventListener("keydown", e => { if (e.key === "Escape" && e.isTrusted && bubble) close(true); });
  // Focus leaving a menu closes its list, as Escape does: a sixth trial tabbed from the Model
  // menu to the tabs and its list stayed open over the page (Gradio's dropdown closes it on blur,
  // then opens it again a few ms later as it puts the chosen name back in its box).
  document.addEventListener("focusout", e => {
    const menu = e.target;
    if (!menu.matches?.("input[role=combobox]")) return;
    setTimeout(() => {
      if (menu !== document.activeElement && menu.getAttribute("aria-expanded") === "true")
        menu.dispatchEvent(new KeyboardEvent("keydown", {key: "Escape", bubbles: true}));
    }, 50);
  }, true);

  // Beside, below or above the part it names (or at the screen's edge where none of those is
  // free, as on a phone): wherever it covers least of what the lesson shows (the canvas, the
  // strip, the answer, what it rests on and the "Go deeper" titles count three times the
  // examples and the rest), and never the part itself.
  function place(bubble, target, w) {
    const r = target.getBoundingClientRect();
    const h = bubble.offsetHeight, W = window.innerWidth, H = window.innerHeight;
    const at = (left, top) => ({left: Math.max(10, Math.min(left, W - w - 10)),
                                top: Math.max(8, Math.min(top, H - h - 8))});
    const spots = [at(r.right + 12, r.top + 8), at(r.left - 12 - w, r.top + 8),
                   at(r.left, r.bottom + 8), at(r.left, r.top - h - 8),
                   at(r.right - w, r.bottom + 8), at(r.right - w, r.top - h - 8),
                   at(r.left, H), at(r.left, 0)];       // a phone: the screen's bottom or top
    const covered = (s, least = 0) => [[target, 100], ...LESSON.map(([q, k]) => [document.querySelector(q), k])]
      .filter(([e, k]) => k >= least && e && e.getClientRects().length)
      .reduce((sum, [e, k]) => {
        const b = e.getBoundingClientRect();
        const x = Math.max(0, Math.min(s.left + w, b.right) - Math.max(s.left, b.left));
        const y = Math.max(0, Math.min(s.top + h, b.bottom) - Math.max(s.top, b.top));
        return sum + k * x * y;
      }, 0);
    let best = spots.reduce((a, b) => covered(b) < covered(a) ? b : a);
    // No spot clear of the part and the lesson (a phone's canvas, with the pinned answer under
    // it: step 1 lay over the answer): the part is scrolled to start just under a bubble at the
    // screen's top, where only the title and the tabs are. Outside the pinned answer it may
    // then fold that answer to its headline (page.css), clear of the part.
    if (covered(best, 3) > 0 && !target.closest("#result-col") && r.height + h + 24 <= H) {
      window.scrollBy({top: r.top - h - 16, behavior: "instant"});
      best = at(r.left, 0);
    }
    bubble.style.top = best.top + "px";
    bubble.style.left = best.left + "px";
  }

  function show(i) {
    close(false);
    document.getElementById("top")?.classList.add("touring");       // the strip stays whole
    const [sel, said] = STEPS[i];
    // The first of its parts that is on the page and shown (a bubble beside nothing says nothing),
    // with the words for that part.
    const parts = [].concat(sel).map(q => document.querySelector(q));
    const k = parts.findIndex(t => t && t.getClientRects().length && t.getBoundingClientRect().height > 0);
    if (k < 0) { if (i + 1 < STEPS.length) show(i + 1); else close(true); return; }
    const target = parts[k], words = [].concat(said), text = words[Math.min(k, words.length - 1)];
    // Only a step in the pinned answer keeps it whole (its strip unfolded: page.css); elsewhere
    // the answer may fold to its headline, as it does without the tour, clear of the canvas.
    if (!target.closest("#result-col")) document.getElementById("top")?.classList.remove("touring");
    const seen = target.getBoundingClientRect();
    if (seen.top < 0 || seen.bottom > window.innerHeight)       // not at an edge: in the middle
      target.scrollIntoView({block: "center", behavior: "instant"});
    bubble = document.createElement("div");
    bubble.id = "tour";
    bubble.setAttribute("role", "dialog");
    bubble.setAttribute("aria-label", `Tour, step ${i + 1} of ${STEPS.length}`);
    const p = document.createElement("p");
    p.textContent = text;
    const step = document.createElement("span");
    step.className = "tour-count";
    step.textContent = `${i + 1} / ${STEPS.length}`;
    const skip = document.createElement("button");
    skip.type = "button"; skip.className = "tour-skip"; skip.textContent = "Skip tour";
    skip.onclick = () => close(true);
    const next = document.createElement("button");
    next.type = "button"; next.className = "tour-next";
    next.textContent = i + 1 < STEPS.length ? "Next" : "Done";
    next.onclick = () => {
      if (i + 1 < STEPS.length) { show(i + 1); return; }
      close(true);
      window.scrollTo({top: 0, behavior: "instant"});      // back to the canvas and the strip
    };
    bubble.append(p, step, skip, next);
    // Tab and Shift+Tab go between its two buttons, as in a tour step of Shepherd or intro.js:
    // focus went on into the page with the bubble still up over what it reached.
    // Escape closes it; the mouse still reaches the page under it.
    bubble.addEventListener("keydown", e => {
      if (e.key !== "Tab") return;
      e.preventDefault();
      (document.activeElement === next ? skip : next).focus({preventScroll: true});
    });
    // Right after the part it names (inside Gradio's container, to which page.css is scoped):
    // fixed on screen, but next to that part for the keyboard — one Tab away, not fifty.
    target.insertAdjacentElement("afterend", bubble);
    // (wider on a wide screen: a shorter bubble fits between the answer and the panels' titles)
    const w = Math.min(window.innerWidth > 900 ? 360 : 300, window.innerWidth - 20);
    bubble.style.width = w + "px";
    place(bubble, target, w);
    // Placed again whenever the part it names moves on screen or anything changes size: the
    // headline folding to one line moved the canvas 31 px, and a phone's page scrolled 164 px,
    // after the bubble was placed, and it then lay over the canvas it was naming. Checked once
    // a frame while the bubble is up (a few rectangles read; nothing is done when none moved).
    let was = "";
    const mine = bubble;
    const follow = () => {
      if (bubble !== mine || !mine.isConnected) return;          // closed, or the next step's
      const r = target.getBoundingClientRect();
      const now = [r.top, r.left, r.width, r.height, bubble.offsetHeight, innerWidth, innerHeight].join();
      if (now !== was) { was = now; place(mine, target, w); }
      requestAnimationFrame(follow);
    };
    follow();
    document.querySelectorAll(".tour-target").forEach(t => t.classList.remove("tour-target"));
    target.classList.add("tour-target");            // outlined while its step is shown
    next.focus({preventScroll: true});
  }

  document.addEventListener("click", e => {
    if (e.target.closest("#tour-start")) { e.preventDefault(); opener = e.target.closest("#tour-start"); show(0); }
    // The glossary is folded: a link to it, or to one of its terms, opens it in place.
    const link = e.target.closest('a[href="#glossary"], a[href^="#term-"]');
    if (link) {
      e.preventDefault();
      openPanel("glossary");
      const id = link.getAttribute("href").slice(1);
      if (id !== "glossary") setTimeout(() => document.getElementById(id)?.scrollIntoView(
        {block: "center", behavior: still() ? "instant" : "smooth"}), 300);
    }
  });

  // A folded panel opened in place: its header clicked if it is closed, then brought into view
  // (at once where the visitor asked for reduced motion).
  const still = () => window.matchMedia("(prefers-reduced-motion: reduce)").matches;
  function openPanel(id) {
    const panel = document.getElementById(id);
    if (!panel) return;
    const header = panel.querySelector("button.label-wrap");
    if (header && !header.classList.contains("open")) header.click();
    setTimeout(() => panel.scrollIntoView({block: "start", behavior: still() ? "instant" : "smooth"}), 50);
    header?.focus({preventScroll: true});
  }
  window.vitOpenPanel = openPanel;

  // A line says who answers while the pen moves: this browser, or the server (and why). Under
  // the strip (its template has the line from the first frame: added when the page's model had
  // loaded, it pushed everything below down a line); on a phone under the canvas, so that the
  // pinned answer stays small.
  const inpageOff = new URLSearchParams(location.search).get("inpage") === "0";
  let noteText = inpageOff ? "While you draw, the server answers (the address asks for it: ?inpage=0)." : null;
  function placeNote() {
    const el = document.getElementById("inpage-note"), pad = document.querySelector("#drawpad");
    if (!el) return;
    if (matchMedia("(max-width: 700px)").matches && pad && el.previousElementSibling !== pad)
      pad.insertAdjacentElement("afterend", el);
    if (noteText !== null && el.textContent !== noteText) el.textContent = noteText;
  }
  window.vitNote = text => { noteText = text; placeNote(); };
  // What the answer rests on (its map and words): in the pinned answer on a wide screen; on a
  // phone under the examples, in the page (the pinned answer has no room for it, and a fifth
  // trial was told of a map the phone never showed). Back where it was if the screen widens.
  const phone = matchMedia("(max-width: 700px)");
  let whyHome = null;
  function placeWhy() {
    const why = document.getElementById("why-row"), after = document.getElementById("draw-examples");
    if (!why || !after) return;
    if (phone.matches && why.closest("#result-col")) {
      whyHome = [why.parentElement, why.nextElementSibling];
      after.insertAdjacentElement("afterend", why);
    } else if (!phone.matches && whyHome && !why.closest("#result-col")) {
      whyHome[0].insertBefore(why, whyHome[1] && whyHome[1].parentElement === whyHome[0] ? whyHome[1] : null);
    }
  }
  phone.addEventListener("change", placeWhy);
  // The answer is announced when it changes (a live region), and an empty picture's label is
  // allowed (Gradio gives a plain <div> an aria-label: axe's aria-prohibited-attr).
  function tidy() {
    placeNote();
    placeWhy();
    const status = document.querySelector("#status");
    if (status && !status.hasAttribute("aria-live")) {
      status.setAttribute("role", "status"); status.setAttribute("aria-live", "polite");
      status.setAttribute("aria-atomic", "true");
    }
    document.querySelectorAll(".empty[aria-label]:not([role])").forEach(e => e.setAttribute("role", "img"));
    // A folded panel's title says whether it is open (Gradio's accordion button says nothing: an
    // eighth trial, with a screen reader's eyes, found all eight "Go deeper" titles mute).
    document.querySelectorAll("button.label-wrap").forEach(b => {
      const open = String(b.classList.contains("open"));
      if (b.getAttribute("aria-expanded") !== open) b.setAttribute("aria-expanded", open);
    });
    // Gradio wraps the map beside the answer in a button that does nothing here: a tab stop
    // without a name. It is made a plain frame; the picture's own alt text still speaks.
    document.querySelectorAll("#glance button:not([role])").forEach(b => {
      b.setAttribute("role", "none"); b.tabIndex = -1;
    });
    // Gradio names every gallery tile "Thumbnail 3 of 10", which a screen reader says instead of
    // what the tile shows (a trial, with the keyboard): the tile's caption is its name.
    document.querySelectorAll("#draw-examples button.thumbnail-item, #testset-gallery button.thumbnail-item")
      .forEach(b => {
        const said = b.querySelector("img")?.alt || b.querySelector(".caption-label")?.textContent;
        const name = (b.closest("#draw-examples") ? "Example: " : "Test image: ") + (said || "").trim();
        if (said && b.getAttribute("aria-label") !== name) b.setAttribute("aria-label", name);
      });
  }
  new MutationObserver(tidy).observe(document.body, {childList: true, subtree: true});
  // Gradio's notices (a picture refused, a model that would not load) open at the top right,
  // over the Model menu and the answer's headline, and stay there on the next tab (an eighth
  // trial). On a wide screen they open at the bottom left, over the examples instead. (Here, not
  // in page.css: Gradio scopes that file to the page's blocks, and the notices are outside them.)
  const notices = document.createElement("style");
  notices.textContent = "@media (min-width: 701px) { .toast-wrap { top: auto !important; " +
    "bottom: 12px !important; left: 12px !important; right: auto !important; align-items: start !important; } }";
  document.head.appendChild(notices);
  // (a panel closed changes a class, not the page's children)
  document.addEventListener("click", e => { if (e.target.closest?.("button.label-wrap")) setTimeout(tidy, 0); });
  // A model chosen with the keyboard (Enter in its list): Gradio redraws the menu as the answer
  // comes, and focus fell to the page's start (an eighth trial): it goes back to the menu.
  document.addEventListener("keydown", e => {
    if (e.key !== "Enter" || !e.target.matches?.("#model input")) return;
    const t0 = performance.now(), back = () => {
      if (document.activeElement === document.body) document.querySelector("#model input")?.focus({preventScroll: true});
      else if (performance.now() - t0 < 8000) setTimeout(back, 150);
    };
    setTimeout(back, 150);
  }, true);
  tidy();
  // The model in this page while the pen moves (vit/ui/inpage.py, inpage.js), unless the address
  // says ?inpage=0 (to compare with the server's updates) or the server offers none.
  const serverAnswers = why => window.vitNote("While you draw, the server answers (" + why + ").");
  let started = false;
  function startInPage() {
    if (started) return;
    started = true;
    fetch("/vit/inpage/manifest.json").then(r => r.json()).then(m => {
      if (!m.script) { serverAnswers(m.problem || "no model runs in this page"); return; }
      const s = document.createElement("script");
      s.src = m.script.url; s.integrity = m.script.integrity; s.crossOrigin = "anonymous";
      s.onload = () => window.vitInPage && window.vitInPage.start(m);
      s.onerror = () => serverAnswers("the model's files for this page could not be downloaded");
      document.head.appendChild(s);
    }).catch(() => serverAnswers("the model's files for this page could not be downloaded"));
  }
  // After the page's first answer, when the browser is idle: the runtime (3.7 MB compressed) and
  // the model never hold up the page's opening; the server answers until they are ready.
  if (!inpageOff) {
    const idle = () => (window.requestIdleCallback || (f => setTimeout(f, 200)))(startInPage, {timeout: 2000});
    const first = setInterval(() => {
      if (window.vitStrip && window.vitStrip.value()) { clearInterval(first); idle(); }
    }, 300);
    setTimeout(() => { clearInterval(first); idle(); }, 20000);
  }
  // On a phone the answer is pinned to the screen's bottom, over the canvas's lower part until the
  // page scrolls: once it has answered, a page the visitor has not scrolled brings the whole canvas
  // above it, again while the pinned answer settles to its height (its first seconds), never after
  // the visitor scrolls.
  let placed = 0;
  function fitCanvas() {
    const canvas = document.querySelector("#drawpad canvas"), sheet = document.querySelector("#result-col");
    if (!canvas || !sheet || Math.abs(window.scrollY - placed) > 1 ||
        getComputedStyle(sheet).position !== "fixed") return;
    // (the answer's whole height, also while it is folded to its headline: canvas.js)
    const full = parseFloat(sheet.dataset.full) || sheet.getBoundingClientRect().height;
    const c = canvas.getBoundingClientRect(), under = c.bottom + 8 - (window.innerHeight - full);
    if (under > 0) {
      window.scrollBy({top: Math.min(under, c.top - 4), behavior: "instant"});
      placed = window.scrollY;
    }
  }
  const fit = setInterval(() => {
    if (!(window.vitStrip && window.vitStrip.value())) return;
    clearInterval(fit);
    fitCanvas();
    const sheet = document.querySelector("#result-col");
    if (sheet && window.ResizeObserver) {
      const watch = new ResizeObserver(fitCanvas);
      watch.observe(sheet);
      setTimeout(() => watch.disconnect(), 5000);
    }
  }, 300);
  setTimeout(() => clearInterval(fit), 30000);
  let seen = null;
  try { seen = localStorage.getItem(KEY); } catch (e) { seen = "done"; }
  if (!seen) {
    const wait = setInterval(() => {
      if (document.querySelector("#pipeline [data-ready]") && document.querySelector("#drawpad canvas")) {
        clearInterval(wait);
        show(0);
      }
    }, 300);
    setTimeout(() => clearInterval(wait), 30000);
  }
}
