// The model in the visitor's browser (vit/ui/inpage.py serves this, page.js loads it). While the
// pen moves, canvas.js hands each frame here instead of sending it to the server: the drawing is
// laid out as the server lays it out (vit/preprocessing/layout.py, the steps that matter for a
// drawing on this canvas), the model runs in onnxruntime-web's WebAssembly build, and the strip
// is drawn from its logits, [CLS] attention and rollout. At most one frame runs at a time; the
// newest frame waits for it and every older one is dropped, never queued. When the pen lifts the
// server answers as always, and its answer replaces these. The page applies the server's "not a
// digit" rules itself (the ink checks of vit/explain/ood.py, then the confidence threshold).
// Every file is checked against the SHA-256 the server's manifest gives before it is used; in a
// page that is not a secure context (no crypto.subtle) nothing runs here and the server answers.
(() => {
  const S = {m: null, ready: false, sessions: {}, busy: false, scheduled: false, pending: null,
             since: 0, frames: 0, ms: [], loads: {}, problem: null, lastName: null};
  window.vitInPage = S;
  S.unsure = unsure;          // the refusal's words, as the server writes them (tests compare)

  function hex(buf) {
    return [...new Uint8Array(buf)].map(b => b.toString(16).padStart(2, "0")).join("");
  }

  async function verified(url, sha) {
    const r = await fetch(url);
    if (!r.ok) throw new Error(`${url}: HTTP ${r.status}`);
    const bytes = await r.arrayBuffer();
    if (!(self.crypto && crypto.subtle)) throw new Error("not a secure context: files can't be checked");
    if (hex(await crypto.subtle.digest("SHA-256", bytes)) !== sha) throw new Error(`${url} failed its check`);
    return bytes;
  }

  function script(entry) {
    return new Promise((ok, no) => {
      const s = document.createElement("script");
      s.src = entry.url; s.integrity = entry.integrity; s.crossOrigin = "anonymous";
      s.onload = ok; s.onerror = () => no(new Error("the runtime's script did not load"));
      document.head.appendChild(s);
    });
  }

  function say(text) { if (window.vitNote) window.vitNote(text); }

  // Why the page can't run the model, in a visitor's words (S.problem keeps the browser's own,
  // for tests and bug reports): "Failed to fetch" said nothing to anybody.
  function plainly(problem) {
    if (/fetch|network|load failed|did not load|HTTP \d/i.test(problem)) return "its files could not be downloaded";
    if (/failed its check/.test(problem)) return "its files arrived changed, so they were not used";
    if (/WebAssembly|wasm/i.test(problem)) return "this browser can't run WebAssembly here";
    return "it stopped with an error";
  }

  function fail(e) {
    S.problem = String(e && e.message || e);
    S.ready = false;
    say("While you draw, the server answers (this browser can't run the model: " + plainly(S.problem) + ").");
  }

  S.start = async function (m) {
    S.m = m;
    try {
      const rt = m.runtime;
      const [, mjs, wasm] = await Promise.all([
        script(rt["ort.wasm.min.js"]),
        verified(rt["ort-wasm-simd-threaded.mjs"].url, rt["ort-wasm-simd-threaded.mjs"].sha256),
        verified(rt["ort-wasm-simd-threaded.wasm"].url, rt["ort-wasm-simd-threaded.wasm"].sha256)]);
      // Threads need a cross-origin isolated page (SharedArrayBuffer); a Space is not one.
      ort.env.wasm.numThreads = self.crossOriginIsolated ? Math.min(4, navigator.hardwareConcurrency || 1) : 1;
      ort.env.wasm.wasmBinary = wasm;
      ort.env.wasm.wasmPaths = {mjs: URL.createObjectURL(new Blob([mjs], {type: "text/javascript"}))};
      S.ready = true;
      // The model on screen loads before the pen goes down, and again after a switch (polled:
      // Gradio's script sets the menu's value, and a script's assignment fires no DOM event).
      const follow = () => { if (S.ready) model(chosen()); };
      follow();
      setInterval(follow, 500);
    } catch (e) { fail(e); }
  };

  // A model's session, loaded once (its file is cached by the browser for a year).
  function model(name) {
    if (S.sessions[name]) return S.sessions[name];
    const entry = S.m && S.m.models[name];
    const s = S.sessions[name] = {entry: entry, session: null};
    if (!entry) say("While you draw, the server answers (this model does not run in the page).");
    if (!entry || !S.ready) return s;
    const t0 = performance.now();
    verified(entry.url, entry.sha256)
      .then(bytes => ort.InferenceSession.create(bytes, {executionProviders: ["wasm"],
                                                        graphOptimizationLevel: "all"}))
      .then(session => {
        s.session = session;
        S.loads[name] = performance.now() - t0;
        if (chosen() === name) say("While you draw, this browser answers itself; when you lift the pen, the server's answer replaces it.");
      })
      .catch(fail);
    return s;
  }

  function current() { return (window.vitStrip && window.vitStrip.value()) || {}; }

  // The model chosen in the page's menu (its label, as the manifest names it), else the default.
  function chosen() {
    const el = document.querySelector("#model input");
    return (el && S.m.labels[el.value]) || S.m.default;
  }

  // canvas.js: a frame of the drawing, or ("loaded") a picture the server put on the canvas.
  // True when this page answers it (then nothing is sent while the pen moves).
  S.frame = function (canvas, kind) {
    if (!S.ready || (kind && !onDraw())) return false;
    const name = chosen();
    const s = model(name);
    if (!s.session) return false;
    if (!S.pending) S.since = performance.now();
    S.pending = {canvas: canvas, name: name, kind: kind || ""};
    // a drawing newer than the one last sent is on the canvas (not at a switch: the same one)
    if (kind !== "switch") S.frameAt = sent();
    if (!S.scheduled && !S.busy) { S.scheduled = true; requestAnimationFrame(run); }
    return true;
  };

  // What belongs to the last lifted drawing: the headline; on the "why" lane, what the answer
  // rests on and, when a second model is shown, Compare's words, strip and maps.
  const STALE = ["status", "why-row"], SECOND = ["compare-text", "compare-strip", "compare-maps"];
  const LATER = ["why-row", ...SECOND];          // (what the "why" lane draws: landed)
  const compared = () => !!document.getElementById("compare-strip")?.checkVisibility?.();

  async function run() {
    S.scheduled = false;
    const job = S.pending, since = S.since;
    S.pending = null;
    if (!job) return;
    S.busy = true;
    try {
      const value = await answer(job.canvas, job.name);
      if (value && job.kind) value.live = job.kind;         // (the strip's readout says which)
      if (value && chosen() === job.name) {
        window.vitStrip.show(value);
        // The strip is this input's now, with the chosen model's answer (a picture loaded or a
        // model chosen had hidden the last one's; a trial drew right after a switch and saw no
        // strip until the server answered). The headline and what the answer rests on are the
        // server's last answer: hidden, and saying so, until it answers this input (page.css:
        // one input, one answer).
        document.getElementById("pipeline")?.removeAttribute("data-stale");
        // (a drawing or a picture: this input's own wait follows; the switch's own reading
        // still waits for the server's answer with that model)
        if (S.switching === job.name && job.kind !== "switch") S.switching = null;
        for (const id of compared() ? [...STALE, ...SECOND] : STALE)
          document.getElementById(id)?.setAttribute("data-stale", job.kind);
        // A phone's folded answer is this one line while the pen is down (page.css): the
        // drawing's answer so far in it, not only "lift the pen" (a trial: the answer that
        // "follows as you draw" was nowhere on a short screen).
        document.getElementById("status")?.style.setProperty("--live", JSON.stringify(
          `Now: ${soFar(value)} · ${job.kind ? "checking it" : "lift for the full answer"}`));
        S.shown = true;
        S.frames += 1;
        S.ms.push(performance.now() - since);
        if (S.ms.length > 2000) S.ms.shift();
      }
    } catch (e) { fail(e); }
    S.busy = false;
    if (S.pending && !S.scheduled) { S.scheduled = true; requestAnimationFrame(run); }
  }

  // A probability as the page writes one: the strip's own (pipeline.js conf; vit/text.py
  // confidence on the server), which draws every answer this writes.
  const conf = p => window.vitStrip.conf(p);

  // The answer so far in a few words: "7 (99.5 %)", or "Not a digit".
  function soFar(v) {
    if (v.refused) return v.answer;
    const [c, p] = v.classes[0];
    return `${c} (${conf(p)})`;
  }

  async function answer(canvas, name) {
    const s = S.sessions[name], e = s.entry;
    const x = e.style.colour ? colourInput(canvas, e.size) : greyInput(canvas, e);
    if (!x) return null;                                   // nothing drawn yet
    const shape = [1, e.channels, e.size, e.size];
    const out = await s.session.run({pictures: new ort.Tensor("float32", x, shape)});
    const value = stripValue(e, name, x, out.logits.data, out.cls_attention.data, out.rollout.data);
    return judged(value, e, e.ink ? inkVerdict(canvas, e.ink) : null);
  }

  // The server's rules (vit/explain/ood.py's judge), in its order: the ink checks, then the
  // feature distance, then the confidence threshold (stripValue applied it). The page cannot
  // measure the distance (its model gives no [CLS] features) nor ask the digit model of a digit
  // check (Predictor.checked): its answer then says it is still checking.
  function judged(value, e, refusal) {
    if (refusal) {
      const noun = e.not_label.replace(/^not an? /, "");
      value.refused = true;
      value.reason = refusal.replaceAll("{noun}", noun);
      value.answer = e.not_label.charAt(0).toUpperCase() + e.not_label.slice(1);
    } else if (e.server_checks && !value.refused) {
      value.checking = true;
      value.answer += ` — still checking it is ${e.not_label.replace(/^not /, "")}`;
    }
    return value;
  }

  // What pipeline.js draws, as vit/ui/pipeline.py's strip_value gives it (live: no lead map).
  function stripValue(e, name, x, logits, cls, roll) {
    const C = e.classes.length, T = e.grid * e.grid + 1, t = e.temperature || 1;
    const top = Math.max(...Array.from(logits, v => v / t));
    const ex = Array.from(logits, v => Math.exp(v / t - top)), sum = ex.reduce((a, b) => a + b, 0);
    const probs = ex.map(v => v / sum);
    const order = [...probs.keys()].sort((a, b) => probs[b] - probs[a]);
    const now = current();
    const L = Math.min(Math.max((now.layer || e.layers) - 1, 0), e.layers - 1);
    const H = Math.min(Math.max((now.head || 1) - 1, 0), e.heads - 1);
    const row = cls.subarray((L * e.heads + H) * T + 1, (L * e.heads + H) * T + T);
    const refused = e.reject_below != null && probs[order[0]] < e.reject_below;
    const first = e.classes[order[0]], second = e.classes[order[1]];
    const answer = refused ? e.not_label.charAt(0).toUpperCase() + e.not_label.slice(1)
      : probs[order[0]] < 0.6 ? `Probably ${article(first)}${first}; maybe ${article(second)}${second}` : first;
    return {model: name, image: png(x, e), size: e.size, grid: e.grid, layer: L + 1, head: H + 1,
            layers: e.layers, heads: e.heads, patch: now.patch === undefined ? null : now.patch,
            classes: order.slice(0, 5).map(i => [e.classes[i], probs[i]]), answer: answer,
            refused: refused, live: true, colour: e.style.colour, even: 1 / T,
            head_map: Array.from(row), rollout: Array.from(roll.subarray(1)), lead: null,
            share: null, drove: null, agree: null, inpage: true,
            reason: refused && e.unsure ? unsure(e.unsure, first, second, probs[order[0]],
                                                 probs[order[1]]) : null};
  }

  // A refusal's best guess, as vit/explain/ood.py best_guess writes it: two classes that read
  // alike at one decimal are both named ("3 or 5 at 45.2 % each").
  function unsure(words, first, second, p1, p2) {
    const tie = second !== undefined && conf(p2) === conf(p1);
    return words.replace("{best}", tie ? `${first} or ${second}` : first)
      .replace("{p}", tie ? `${conf(p1)} each` : conf(p1));
  }

  // As vit/ui/words.py says it: "a 7", "an 8", "a T-shirt".
  function article(name) {
    const s = name.replace(/^[* ]+|[* ]+$/g, "").toLowerCase();
    if (!s) return "a ";
    if (/\d/.test(s[0])) return s[0] === "8" || s === "11" || s === "18" ? "an " : "a ";
    return "aeio".includes(s[0]) || (s[0] === "u" && !/^(uni|use|usu)/.test(s)) ? "an " : "a ";
  }

  const small = document.createElement("canvas");
  function png(x, e) {
    small.width = small.height = e.size;
    const c = small.getContext("2d"), im = c.createImageData(e.size, e.size), n = e.size * e.size;
    for (let i = 0; i < n; i++) {
      for (let k = 0; k < 3; k++)
        im.data[4 * i + k] = Math.round(255 * x[e.channels === 3 ? k * n + i : i]);
      im.data[4 * i + 3] = 255;
    }
    c.putImageData(im, 0, 0);
    return small.toDataURL("image/png");
  }

  // --- vit/explain/ood.py's ink checks, on the canvas the server is sent ---------------------
  // The limits come from the server (its manifest's "ink"), so there is one list of them.
  // Returns null (accepted) or the kind of refusal, in the server's words.

  // ood.ink_map: the ink (alpha) box-averaged by a whole factor to ~INK_SIDE, its polarity
  // from the border (layout._ink), area-shrunk to INK_SIDE, as uint8; null for a photo.
  function inkMap(canvas, L) {
    const W = canvas.width, H = canvas.height;
    const d = canvas.getContext("2d", {willReadFrequently: true}).getImageData(0, 0, W, H).data;
    let w = W, h = H, a = new Float64Array(W * H);
    for (let i = 0; i < W * H; i++) a[i] = d[4 * i + 3] / 255;
    const f = Math.floor(Math.max(W, H) / L.INK_SIDE);
    if (f >= 2 && Math.min(Math.floor(H / f), Math.floor(W / f)) > 0) {
      const nh = Math.floor(H / f), nw = Math.floor(W / f), b = new Float64Array(nh * nw);
      for (let y = 0; y < nh * f; y++) for (let x = 0; x < nw * f; x++)
        b[Math.floor(y / f) * nw + Math.floor(x / f)] += a[y * W + x];
      for (let i = 0; i < b.length; i++) b[i] = Math.fround(b[i] / (f * f));
      a = b; w = nw; h = nh;
    }
    const k = Math.max(1, Math.floor(Math.min(h, w) / 50)), border = [];
    for (let y = 0; y < h; y++) for (let x = 0; x < w; x++)
      if (y < k || y >= h - k) border.push(a[y * w + x]);
    for (let y = 0; y < h; y++) for (let x = 0; x < w; x++)
      if (x < k || x >= w - k) border.push(a[y * w + x]);
    if (median(border) > 0.5) a = a.map(v => 1 - v);
    let small = a, sw = w, sh = h;
    if (Math.max(h, w) > L.INK_SIDE) {
      const s = L.INK_SIDE / Math.max(h, w);
      sh = Math.max(1, pyRound(h * s)); sw = Math.max(1, pyRound(w * s));
      small = area(Float32Array.from(a), w, h, sw, sh);
    }
    const out = new Uint8Array(sw * sh), levels = new Uint32Array(256);
    for (let i = 0; i < out.length; i++) {
      out[i] = Math.min(Math.max(Math.floor(Math.fround(small[i] * 255 + 0.5)), 0), 255);
      levels[out[i]]++;
    }
    return Math.max(...levels) >= L.CLEAN_SHARE * out.length ? {ink: out, w: sw, h: sh, levels} : null;
  }

  function median(v) {
    const s = Float64Array.from(v).sort(), n = s.length;
    return n % 2 ? s[(n - 1) / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
  }

  // numpy's percentile (linear) of the values a histogram of uint8 levels counts, from `from` up.
  function levelPercentile(levels, q, above = -1) {
    let n = 0;
    for (let v = above + 1; v < 256; v++) n += levels[v];
    const pos = q / 100 * (n - 1), i = Math.floor(pos);
    let seen = 0, lo = null, hi = null;
    for (let v = above + 1; v < 256; v++) {
      seen += levels[v];
      if (lo === null && seen > i) lo = v;
      if (seen > i + 1 || (seen > i && i + 1 >= n)) { hi = v; break; }
    }
    return lo + (hi - lo) * (pos - i);
  }

  // ood.measure: the ink mask (layout.contrast_range's stretch, then INK_THRESHOLD), its marks
  // (8-connected after a 3x3 dilation), stroke width, and the principal axis of its pixels.
  function measure(m, L) {
    const {ink, w, h, levels} = m;
    const lo = levelPercentile(levels, 1);
    let hi = 255; while (hi > 0 && !levels[hi]) hi--;
    if (hi <= lo) return null;
    const top = levelPercentile(levels, 90, Math.floor(lo + L.INK_THRESHOLD * (hi - lo)));
    const cut = lo + L.INK_THRESHOLD * Math.max(top - lo, 1e-6);
    const mask = new Uint8Array(w * h);
    let area = 0, sx = 0, sy = 0;
    for (let i = 0; i < mask.length; i++) if (ink[i] > cut) { mask[i] = 1; area++; }
    if (!area) return null;
    let edges = 0, y0 = h, y1 = -1, x0 = w, x1 = -1;
    for (let y = 0; y < h; y++) for (let x = 0; x < w; x++) {
      const v = mask[y * w + x];
      if (y + 1 < h) edges += v !== mask[(y + 1) * w + x];
      if (x + 1 < w) edges += v !== mask[y * w + x + 1];
      if (v) {
        edges += (y === 0) + (y === h - 1) + (x === 0) + (x === w - 1);   // ink on the map's edge
        y0 = Math.min(y0, y); y1 = Math.max(y1, y); x0 = Math.min(x0, x); x1 = Math.max(x1, x);
        sx += x; sy += y;
      }
    }
    const mx = sx / area, my = sy / area;
    let cxx = 0, cyy = 0, cxy = 0;
    for (let y = 0; y < h; y++) for (let x = 0; x < w; x++) if (mask[y * w + x]) {
      cxx += (x - mx) ** 2; cyy += (y - my) ** 2; cxy += (x - mx) * (y - my);
    }
    const dof = area > 1 ? area - 1 : 1, A = (area > 1 ? cxx / dof : 0) + 1 / 12;
    const C = (area > 1 ? cyy / dof : 0) + 1 / 12, B = area > 1 ? cxy / dof : 0;
    const mid = (A + C) / 2, r = Math.hypot((A - C) / 2, B), large = mid + r, small = mid - r;
    const [vx, vy] = B !== 0 ? [large - C, B] : A >= C ? [1, 0] : [0, 1];
    let angle = Math.atan2(vy, vx) * 180 / Math.PI;
    angle = angle > 90 ? angle - 180 : angle < -90 ? angle + 180 : angle;
    const found = marks(mask, w, h), biggest = found.reduce((b, k) => Math.max(b, k.area), 0);
    const kept = found.filter(k => k.area >= L.MARK_SHARE * biggest).sort((a, b) => a.left - b.left);
    const box = {top: y0, left: x0, bottom: y1 + 1, right: x1 + 1, area: area};
    return {canvas: Math.max(w, h), box: box, stroke: 2 * area / Math.max(edges, 1), marks: kept,
            elongation: Math.sqrt(large / small), angle: angle};
  }

  function marks(mask, w, h) {
    const grown = new Uint8Array(w * h), label = new Int32Array(w * h).fill(-1), out = [];
    for (let y = 0; y < h; y++) for (let x = 0; x < w; x++) if (mask[y * w + x])
      for (let dy = -1; dy <= 1; dy++) for (let dx = -1; dx <= 1; dx++) {
        const yy = y + dy, xx = x + dx;
        if (yy >= 0 && yy < h && xx >= 0 && xx < w) grown[yy * w + xx] = 1;
      }
    const stack = [];
    for (let i = 0; i < w * h; i++) {
      if (!grown[i] || label[i] >= 0) continue;
      const k = out.length, m = {top: h, left: w, bottom: 0, right: 0, area: 0};
      out.push(m); label[i] = k; stack.push(i);
      while (stack.length) {
        const j = stack.pop(), y = Math.floor(j / w), x = j % w;
        if (mask[j]) {
          m.area++; m.top = Math.min(m.top, y); m.bottom = Math.max(m.bottom, y + 1);
          m.left = Math.min(m.left, x); m.right = Math.max(m.right, x + 1);
        }
        for (let dy = -1; dy <= 1; dy++) for (let dx = -1; dx <= 1; dx++) {
          const yy = y + dy, xx = x + dx, n = yy * w + xx;
          if (yy >= 0 && yy < h && xx >= 0 && xx < w && grown[n] && label[n] < 0) {
            label[n] = k; stack.push(n);
          }
        }
      }
    }
    return out.map(m => Object.assign(m, {height: m.bottom - m.top, width: m.right - m.left}));
  }

  // ood.check_ink and side_by_side. "{noun}" is the model's noun ("digit").
  function inkVerdict(canvas, L) {
    const m = inkMap(canvas, L);
    if (!m) return null;                      // a photo: the server judges it by confidence alone
    const s = measure(m, L);
    if (!s) return "There is no ink to read.";
    const bh = s.box.bottom - s.box.top, bw = s.box.right - s.box.left, span = Math.max(bh, bw);
    const extent = span / Math.max(s.canvas, 1), pct = Math.round(100 * extent);
    if (extent < L.TINY_EXTENT) return `The mark is too small to read: it spans ${pct} % of the picture.`;
    if (span < L.DOT_SPAN * s.stroke && s.box.area >= L.DOT_FILL * bh * bw && extent < L.DOT_EXTENT)
      return `A single dot or blob, ${pct} % of the box across — there is no {noun} shape to read.`;
    if (s.marks.length === 1 && s.elongation >= L.DASH_ELONGATION && Math.abs(s.angle) <= L.DASH_ANGLE)
      return "A flat dash — no {noun} is that wide and flat.";
    const n = sideBySide(s, L);
    if (n) return `${n} separate marks side by side — this model reads one {noun} at a time.`;
    if (s.marks.length >= L.MANY_MARKS)
      return `${s.marks.length} separate marks scattered about — this model reads one {noun} at a time.`;
    return null;
  }

  function sideBySide(s, L) {
    const cols = [];
    for (const m of [...s.marks].sort((a, b) => a.left - b.left)) {
      const c = cols[cols.length - 1];
      if (c && m.left < c.right) {
        cols[cols.length - 1] = {top: Math.min(c.top, m.top), left: c.left,
                                 bottom: Math.max(c.bottom, m.bottom), right: Math.max(c.right, m.right),
                                 area: c.area + m.area};
      } else cols.push({...m});
    }
    const height = s.box.bottom - s.box.top;
    const tall = cols.map(c => ({...c, height: c.bottom - c.top, width: c.right - c.left}))
      .filter(c => c.height >= L.SIDE_HEIGHT * height);
    const apart = (a, b) => {
      const overlap = Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top), gap = b.left - a.right;
      return overlap >= L.SIDE_OVERLAP * Math.min(a.height, b.height)
        && gap >= Math.max(L.SIDE_GAP * Math.max(a.width, b.width), L.SIDE_GAP_STROKES * s.stroke)
        && Math.min(a.area, b.area) >= L.SIDE_SHARE * Math.max(a.area, b.area);
    };
    let best = 1, run = 1;
    for (let i = 1; i < tall.length; i++) { run = apart(tall[i - 1], tall[i]) ? run + 1 : 1; best = Math.max(best, run); }
    return best >= 2 ? best : 0;
  }

  // --- the drawing laid out as vit/preprocessing/layout.py lays it out -----------------------
  const INK = 0.25, RIM = 1, STROKES = [1.25, 4.2], STROKE_TARGET = 2.2;

  function pyRound(v) {                   // Python's round(): halves to even
    const f = Math.floor(v), d = v - f;
    return d > 0.5 || (d === 0.5 && f % 2 !== 0) ? f + 1 : f;
  }

  function greyInput(canvas, e) {
    const W = canvas.width, H = canvas.height;
    const d = canvas.getContext("2d", {willReadFrequently: true}).getImageData(0, 0, W, H).data;
    let ink = new Float32Array(W * H), hist = new Uint32Array(256);
    for (let i = 0; i < W * H; i++) { const a = d[4 * i + 3]; ink[i] = a / 255; hist[a]++; }
    // Contrast: background (1st percentile) -> 0, the strong ink's 90th percentile -> 1.
    const lo = percentile(hist, 0, 0.01) / 255;
    let hi = 255; while (hi > 0 && !hist[hi]) hi--;
    if (hi / 255 - lo < 0.08) return null;
    const cut = Math.floor(255 * (lo + INK * (hi / 255 - lo))) + 1;
    const top = Math.max(percentile(hist, cut, 0.9) / 255, lo + 1e-6);
    for (let i = 0; i < ink.length; i++) ink[i] = Math.min(Math.max((ink[i] - lo) / (top - lo), 0), 1);
    let [crop, h, w, cw] = cropToInk(ink, W, H);
    if (!crop) return null;
    const box = Math.max(1, pyRound(e.size * e.style.box));
    if (Math.max(h, w) > 4 * box) {          // worked on at 4x the final size, as the server does
      const inner = sub(crop, cw, RIM, RIM, w, h), side = 4 * box, f = side / Math.max(h, w);
      const nh = Math.max(1, pyRound(h * f)), nw = Math.max(1, pyRound(w * f));
      const shrunk = area(inner, w, h, nw, nh);
      crop = pad(shrunk, nw, nh, RIM); h = nh; w = nw; cw = nw + 2 * RIM;
    }
    let scale = box / Math.max(h, w);
    if (e.style.strokes) {
      const width = strokeWidth(crop, cw, h + 2 * RIM) * scale;
      if (width < STROKES[0] || width > STROKES[1]) {
        const goal = width < STROKES[0] ? STROKE_TARGET : STROKES[1];
        const r = pyRound(Math.abs(goal - width) / 2 / scale), grow = width < STROKES[0];
        if (r >= 1) {
          const src = grow ? pad(crop, cw, h + 2 * RIM, r) : crop;
          const sw = grow ? cw + 2 * r : cw, sh = grow ? h + 2 * RIM + 2 * r : h + 2 * RIM;
          const changed = morph(src, sw, sh, r, grow);
          if (grow || sum(changed) > 0.35 * sum(crop)) {
            const again = cropToInk(changed, sw, sh);
            if (again[0]) { [crop, h, w, cw] = again; scale = box / Math.max(h, w); }
          }
        }
      }
    }
    let [small, nh, nw] = rescale(crop, cw, h + 2 * RIM, scale);
    if (e.style.strokes) {
      const s = Math.min(Math.max(Math.abs(Math.log(scale)) / Math.log(2), 0), 1);
      const a = s * 0.05, b = 1 - s * 0.2;
      small = small.map(v => Math.min(Math.max((v - a) / (b - a), 0), 1));
    }
    const S = e.size, out = new Float32Array(S * S);
    let t0, l0;
    if (e.style.by_mass) {
      let tot = 0, cy = 0, cx = 0;
      for (let y = 0; y < nh; y++) for (let x = 0; x < nw; x++) {
        const v = small[y * nw + x]; tot += v; cy += v * y; cx += v * x;
      }
      if (tot <= 0) return null;
      t0 = pyRound(S / 2 - cy / tot); l0 = pyRound(S / 2 - cx / tot);
    } else {
      t0 = pyRound(S / 2 - 1 - h * scale / 2); l0 = pyRound(S / 2 - 1 - w * scale / 2);
    }
    for (let y = 0; y < nh; y++) for (let x = 0; x < nw; x++) {
      const yy = y + t0, xx = x + l0;
      if (yy >= 0 && yy < S && xx >= 0 && xx < S) out[yy * S + xx] = small[y * nw + x];
    }
    return out;
  }

  function percentile(hist, from, q) {
    let n = 0; for (let i = from; i < 256; i++) n += hist[i];
    if (!n) return from;
    const want = q * (n - 1);
    let seen = 0;
    for (let i = from; i < 256; i++) { seen += hist[i]; if (seen > want) return i; }
    return 255;
  }

  function sum(a) { let s = 0; for (const v of a) s += v; return s; }

  function sub(a, aw, x0, y0, w, h) {
    const out = new Float32Array(w * h);
    for (let y = 0; y < h; y++) out.set(a.subarray((y + y0) * aw + x0, (y + y0) * aw + x0 + w), y * w);
    return out;
  }

  function pad(a, w, h, p) {
    const W = w + 2 * p, out = new Float32Array(W * (h + 2 * p));
    for (let y = 0; y < h; y++) out.set(a.subarray(y * w, y * w + w), (y + p) * W + p);
    return out;
  }

  // The ink's box (pixels above INK) with a rim of RIM pixels: [crop, h, w, crop's width].
  function cropToInk(a, W, H) {
    let y0 = H, y1 = -1, x0 = W, x1 = -1;
    for (let y = 0; y < H; y++) for (let x = 0; x < W; x++) if (a[y * W + x] > INK) {
      if (y < y0) y0 = y; if (y > y1) y1 = y; if (x < x0) x0 = x; if (x > x1) x1 = x;
    }
    if (y1 < 0) return [null, 0, 0, 0];
    const h = y1 - y0 + 1, w = x1 - x0 + 1, cw = w + 2 * RIM, out = new Float32Array(cw * (h + 2 * RIM));
    for (let y = -RIM; y < h + RIM; y++) for (let x = -RIM; x < w + RIM; x++) {
      const sy = y + y0, sx = x + x0;
      if (sy >= 0 && sy < H && sx >= 0 && sx < W) out[(y + RIM) * cw + x + RIM] = a[sy * W + sx];
    }
    return [out, h, w, cw];
  }

  // torch's "area" interpolation: each output pixel the mean of its input span.
  function area(a, w, h, nw, nh) {
    const out = new Float32Array(nw * nh);
    for (let y = 0; y < nh; y++) {
      const ya = Math.floor(y * h / nh), yb = Math.ceil((y + 1) * h / nh);
      for (let x = 0; x < nw; x++) {
        const xa = Math.floor(x * w / nw), xb = Math.ceil((x + 1) * w / nw);
        let s = 0;
        for (let yy = ya; yy < yb; yy++) for (let xx = xa; xx < xb; xx++) s += a[yy * w + xx];
        out[y * nw + x] = s / ((yb - ya) * (xb - xa));
      }
    }
    return out;
  }

  function strokeWidth(a, w, h) {
    let n = 0, edges = 0;
    for (let y = 0; y < h; y++) for (let x = 0; x < w; x++) {
      const m = a[y * w + x] > INK;
      n += m;
      if (x + 1 < w && m !== (a[y * w + x + 1] > INK)) edges++;
      if (y + 1 < h && m !== (a[(y + 1) * w + x] > INK)) edges++;
    }
    return 2 * n / Math.max(1, edges);
  }

  function morph(a, w, h, r, grow) {           // max (or min) over a (2r+1)^2 square, as max_pool2d
    const tmp = new Float32Array(w * h), out = new Float32Array(w * h), pick = grow ? Math.max : Math.min;
    const edge = grow ? -Infinity : Infinity;
    for (let y = 0; y < h; y++) for (let x = 0; x < w; x++) {
      let v = edge;
      for (let k = Math.max(0, x - r); k <= Math.min(w - 1, x + r); k++) v = pick(v, a[y * w + k]);
      tmp[y * w + x] = v;
    }
    for (let y = 0; y < h; y++) for (let x = 0; x < w; x++) {
      let v = edge;
      for (let k = Math.max(0, y - r); k <= Math.min(h - 1, y + r); k++) v = pick(v, tmp[k * w + x]);
      out[y * w + x] = v;
    }
    return out;
  }

  // layout.py's _rescale: the box inside its rim resized by exactly `scale` (PIL's bilinear,
  // averaging when it shrinks), its corner on a pixel corner, the rim one output pixel wide.
  function rescale(x, w, h, scale) {
    const k = 1, nh = Math.max(1, Math.ceil((h - 2 * RIM) * scale - 1e-6)) + 2 * k;
    const nw = Math.max(1, Math.ceil((w - 2 * RIM) * scale - 1e-6)) + 2 * k;
    const p = Math.ceil((k + 1) / scale) + 1, start = p + RIM - k / scale;
    const src = pad(x, w, h, p), sw = w + 2 * p, sh = h + 2 * p;
    const rows = resample1d(src, sw, sh, nw, start, start + nw / scale, true);
    const out = resample1d(rows, nw, sh, nh, start, start + nh / scale, false);
    return [out.map(v => Math.min(Math.max(v, 0), 1)), nh, nw];
  }

  // One axis of PIL's BILINEAR resample over [b0, b1) of the input (horizontal or vertical).
  function resample1d(a, w, h, n, b0, b1, horizontal) {
    const len = horizontal ? w : h, other = horizontal ? h : w;
    const out = new Float32Array(horizontal ? n * h : w * n);
    const step = (b1 - b0) / n, fs = Math.max(step, 1), support = fs;
    for (let i = 0; i < n; i++) {
      const c = b0 + (i + 0.5) * step;
      const lo = Math.max(0, Math.floor(c - support + 0.5)), hi = Math.min(len, Math.floor(c + support + 0.5));
      const wts = [];
      let tot = 0;
      for (let j = lo; j < hi; j++) {
        const t = Math.abs((j - c + 0.5) / fs), v = t < 1 ? 1 - t : 0;
        wts.push(v); tot += v;
      }
      for (let o = 0; o < other; o++) {
        let s = 0;
        for (let j = lo; j < hi; j++) s += wts[j - lo] * (horizontal ? a[o * w + j] : a[j * w + o]);
        const v = tot ? s / tot : 0;
        if (horizontal) out[o * n + i] = v; else out[i * w + o] = v;
      }
    }
    return out;
  }

  // A colour model: the canvas over white, its centre square shrunk to the model's size.
  function colourInput(canvas, size) {
    small.width = small.height = size;
    const c = small.getContext("2d", {willReadFrequently: true});
    c.fillStyle = "#fff"; c.fillRect(0, 0, size, size);
    c.imageSmoothingEnabled = true; c.imageSmoothingQuality = "high";
    const side = Math.min(canvas.width, canvas.height);
    c.drawImage(canvas, (canvas.width - side) / 2, (canvas.height - side) / 2, side, side, 0, 0, size, size);
    const d = c.getImageData(0, 0, size, size).data, n = size * size, x = new Float32Array(3 * n);
    for (let i = 0; i < n; i++) for (let k = 0; k < 3; k++) x[k * n + i] = d[4 * i + k] / 255;
    return x;
  }

  // When the server's answer for the lifted pen arrives (the page echoes its drawing number in
  // #answered), its strip is drawn again, even when its value is the one it had before the pen
  // went down (Gradio then sends no change), and the headline is current again. Only the echo of
  // the drawing last sent counts: Gradio marks #answered busy as soon as the lift is sent, and
  // taking that for the answer showed the headline of the drawing before ("Draw a digit in the
  // box") beside the strip's "3" until the server answered (a trial, on a busy machine).
  const sent = () => +(document.querySelector("#drawpad [data-ready]")?.dataset.sent || 0);
  function watchAnswers() {
    const answered = document.querySelector("#answered");
    if (!answered) { setTimeout(watchAnswers, 500); return; }
    new MutationObserver(() => {
      // (the number alone: Gradio's busy marker, with its own words, sits beside it)
      const echo = answered.querySelector(".html-container") || answered;
      // (a model switch waits for that model's own strip: the echo of the same drawing, read
      // again by the new model, comes before it — switched, below)
      if ((parseInt(echo.textContent, 10) || 0) < sent() || S.drawing() || S.switching) return;
      document.getElementById("status")?.removeAttribute("data-stale");
      // (its strip's value lands beside the echo, maybe just after it)
      if (S.shown) { S.shown = false; setTimeout(() => window.vitStrip && window.vitStrip.reload(), 150); }
      if (S.waiting !== sent()) { S.waiting = sent(); landed(sent(), performance.now()); }
    }).observe(answered, {childList: true, subtree: true, characterData: true, attributes: true});
  }
  // The strip and what the answer rests on stay hidden until their own values for the drawing
  // answered land: the strip's value says which drawing it answers (`drawing`) and whether the
  // "why" lane, which comes after the answer, sent it (`explained`: what the answer rests on
  // lands beside it).
  // A trial saw the 8's headline beside the loop's "rests on" for 60–300 ms after the lift, and
  // a ship put on the canvas at a switch beside the last drawing's strip. The 8 s: a server
  // that never sends them. A newer drawing's own answer clears them.
  // (one wait per drawing: the echo's element changes a few times per answer)
  function landed(n, since) {
    waitFor(v => +v.drawing >= n && !v.live, since, ["pipeline"],
            () => sent() !== n || S.drawing() || !!S.switching, () => { S.waiting = 0; });
  }
  // Shows again what waited for the strip's own value (`mine`): `first` as soon as the strip is
  // it, the "why" lane's parts once it was `explained` too; `over` — a newer wait took over.
  // The 8-s fallback shows only a strip of the model the menu names: a switch answered slowly (a
  // busy CI machine) showed the last model's 1 beside the new model's ship for a frame; a model
  // that fails to load puts the menu back on the last one, whose strip then shows. (A switch
  // never answered keeps polling, ten times a second, till the next drawing or switch.)
  function waitFor(mine, since, first, over, done) {
    const step = () => {
      if (over()) { done(false); return; }
      const v = window.vitStrip?.value?.();
      const late = performance.now() - since > 8000 && (!v || v.model === chosen());
      const own = !v || mine(v);                  // (!v: a cleared canvas)
      if (own || late) for (const id of first) document.getElementById(id)?.removeAttribute("data-stale");
      if (!v || (own && v.explained) || late) {
        for (const id of LATER) document.getElementById(id)?.removeAttribute("data-stale");
        done(true);
      } else setTimeout(step, 100);
    };
    step();
  }
  // Whether the canvas holds strokes drawn since the last drawing was sent (the pen down again
  // right after a lift): the answer to the drawing sent is then an older drawing's, not current
  // (a trial: an L's answer arrived while a 4 was being finished, was taken as current, and
  // stood beside the 4, unmarked, until the 4's came 6 s later).
  S.drawing = () => S.frameAt === sent();
  // A picture the server put on the canvas (an example clicked; at a switch, the new model's
  // example): until the server answers it, everything the screen says belongs to the picture
  // before — hidden, and the headline says it is checking (a sixth trial: a ship on the canvas
  // beside "reads this as 1" and the strip's 1). canvas.js then sends it, as at a lift.
  // (on another tab the answer shown is that tab's input's, which a picture put on the hidden
  // canvas does not replace: neither hidden nor read by the page)
  const onDraw = () => document.querySelector("[role=tab][data-tab-id=draw]")?.getAttribute("aria-selected") !== "false";
  S.loaded = function () {
    if (!onDraw()) return;
    for (const id of ["pipeline", ...STALE, ...(compared() ? SECOND : [])])
      document.getElementById(id)?.setAttribute("data-stale", "loaded");
    document.getElementById("status")?.style.setProperty("--live", JSON.stringify("Checking this picture…"));
  };
  // Another model chosen in the Model menu: until the strip is that model's, what the screen
  // says is the last model's — hidden, and the headline says it is checking (a seventh trial saw
  // the clothing model's "not a piece of clothing" beside the digit model's example for ~1 s;
  // on a switch within one kind of model the input stays, and only its answer changes).
  function switched(label) {
    const name = S.m && S.m.labels[label], v = window.vitStrip?.value?.();
    if (!name || (v && v.model === name)) return;
    for (const id of ["status", "pipeline", "why-row", ...(compared() ? SECOND : [])])
      document.getElementById(id)?.setAttribute("data-stale", SECOND.includes(id) ? "lifted" : "switch");
    S.switching = name;
    // (the new model's own strip; a model that fails to load leaves the menu on the last one,
    // whose strip then shows after the 8 s)
    waitFor(v => v.model === name && !v.live, performance.now(), ["status", "pipeline"],
            () => S.switching !== name, own => { if (own) S.switching = null; });
    // Within one kind of model the input stays, and the page reads it with the chosen model as
    // soon as that model is loaded here, rather than leave the strip blank until the server has
    // answered (a ninth trial: ~2 s on this CPU). Between kinds the canvas gets the new model's
    // example, which the page reads as it lands (canvas.js shown).
    const was = v && S.m.models[v.model], now = S.m.models[name];
    if (!was || !now || !onDraw() || JSON.stringify(was.classes) !== JSON.stringify(now.classes)) return;
    const t0 = performance.now(), read = () => {
      if (S.switching !== name) return;
      const c = document.querySelector("#drawpad canvas");
      if (chosen() === name && model(name).session && c) S.frame(c, "switch");
      else if (performance.now() - t0 < 8000) setTimeout(read, 100);
    };
    setTimeout(read, 50);
  }
  // (on the press: Gradio's list chooses on mousedown and is gone by the click)
  document.addEventListener("pointerdown", e => {
    const o = e.target.closest?.("#model [role=option]");
    if (o) switched(o.getAttribute("aria-label"));
  }, true);
  document.addEventListener("keydown", e => {
    if (e.key !== "Enter" || !e.target.matches?.("#model input[aria-expanded=true]")) return;
    const id = e.target.getAttribute("aria-activedescendant");
    const o = id && document.getElementById(id);
    if (o) switched(o.getAttribute("aria-label"));
  }, true);
  // The pen lifted (canvas.js): what is hidden now waits for the server's answer, and says so.
  S.lifted = function () {
    if (S.shown && window.vitStrip && window.vitStrip.lifted) window.vitStrip.lifted();
    for (const id of [...STALE, ...SECOND]) {
      const el = document.getElementById(id);
      // (a loaded picture is sent as a lift is: its words stay "this picture")
      if (el && el.hasAttribute("data-stale") && el.dataset.stale !== "loaded") el.setAttribute("data-stale", "lifted");
    }
  };
  watchAnswers();

  S.sent = sent;                    // pipeline.js: the drawing last sent
  S.greyInput = greyInput;          // for tests: the layout, apart from the model
  S.inkVerdict = inkVerdict;        // for tests: the ink checks, apart from the model
  // For the agreement test: the page's whole answer (layout, model, rules) for a canvas.
  S.answerFor = async function (name, canvas) {
    const s = model(name);
    for (let i = 0; i < 400 && !s.session; i++) await new Promise(r => setTimeout(r, 25));
    return answer(canvas, name);
  };
  S.stats = () => ({frames: S.frames, ms: S.ms.slice(), loads: S.loads, problem: S.problem,
                    ready: S.ready, threads: S.ready ? ort.env.wasm.numThreads : 0});
  // For the parity test: the model alone, on a given input.
  S.run = async function (name, x) {
    const s = model(name);
    for (let i = 0; i < 400 && !s.session; i++) await new Promise(r => setTimeout(r, 25));
    const e = s.entry, out = await s.session.run(
      {pictures: new ort.Tensor("float32", Float32Array.from(x), [1, e.channels, e.size, e.size])});
    return {logits: Array.from(out.logits.data), cls: Array.from(out.cls_attention.data),
            rollout: Array.from(out.rollout.data)};
  };
})();
