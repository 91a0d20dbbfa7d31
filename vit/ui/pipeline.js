// The pipeline strip (vit/ui/pipeline.py runs this as gr.HTML's js_on_load, with `element`,
// `props`, `trigger` and `watch` in scope). It draws what the server sends — the model's input,
// its patch grid, the token sequence, [CLS]'s attention and the top classes — and follows the
// pointer: the patch under it is outlined in every step at once, in the browser, with no round
// trip. A tap (or click) chooses the patch: props.value = {pick: n}, then a "pick" event; the
// page's explorer and step-by-step panel follow it.
const pipe = element.querySelector(".pipe");
const readout = pipe.querySelector(".readout");
const PX = 132;                 // canvas pixels of a picture step (CSS scales it)
const CMAP = [[0, 0, 4], [40, 11, 84], [101, 21, 110], [159, 42, 99], [212, 72, 66],
              [245, 125, 21], [250, 193, 39], [252, 255, 164]];   // inferno, as the server's maps
let data = null, img = null, pending = null, hover = null, mode = "rollout";   // all layers first: the clearest

function colour(t) {
  t = Math.max(0, Math.min(1, t)) * (CMAP.length - 1);
  const i = Math.min(Math.floor(t), CMAP.length - 2), f = t - i;
  return CMAP[i].map((c, k) => Math.round(c + (CMAP[i + 1][k] - c) * f));
}

function canvasOf(step) {
  const c = pipe.querySelector(".c-" + step);
  if (!c) return null;
  if (c.width !== PX) { c.width = PX; c.height = PX; }
  const ctx = c.getContext("2d");
  ctx.imageSmoothingEnabled = false;
  return [c, ctx];
}

function outline(ctx, x, y, w, h, col, lw) {
  ctx.strokeStyle = col; ctx.lineWidth = lw;
  ctx.strokeRect(x + lw / 2, y + lw / 2, w - lw, h - lw);
}

function marked() { return hover !== null ? hover : (data ? data.patch : null); }

function drawSeen() {
  const [c, ctx] = canvasOf("seen");
  ctx.fillStyle = "#fff"; ctx.fillRect(0, 0, PX, PX);
  if (!img) return;
  ctx.drawImage(img, 0, 0, PX, PX);
  const m = marked(), g = data.grid, s = PX / g;
  if (m !== null) outline(ctx, (m % g) * s, Math.floor(m / g) * s, s, s, "#22c55e", 2);
}

function drawPatches() {
  const [c, ctx] = canvasOf("patches");
  ctx.fillStyle = "#fff"; ctx.fillRect(0, 0, PX, PX);
  if (!img) return;
  const g = data.grid, gap = g > 10 ? 1 : 2, s = (PX - gap * (g - 1)) / g, n = data.size / g;
  for (let r = 0; r < g; r++) for (let q = 0; q < g; q++)
    ctx.drawImage(img, q * n, r * n, n, n, q * (s + gap), r * (s + gap), s, s);
  const m = marked();
  if (m !== null) outline(ctx, (m % g) * (s + gap) - 1, Math.floor(m / g) * (s + gap) - 1,
                          s + 2, s + 2, "#22c55e", 2);
}

// The sequence: [CLS] on the first row, then the patches in reading order, a row of the grid
// to a row (wrapped any other way, the picture looks scrambled), with gaps between the tokens.
// [CLS]'s row is tall enough for its word at 9 px as shown, at least (`top`: where the
// patches start): a 360-px phone shows the picture at ~58 px, where a row of the tokens' own
// size made the word ~5 px high.
function tokenLayout() {
  const g = data.grid, n = g * g + 1, gap = g > 10 ? 1 : 2;
  const c = pipe.querySelector("canvas.c-tokens"), shown = c && c.clientWidth > 0 ? PX / c.clientWidth : 1;
  const word = 9 * shown, even = (PX - gap * g) / (g + 1);
  const s = word <= even ? even : (PX - gap * g - word * 1.15) / g, row = Math.max(s, word * 1.15);
  const top = row + gap;
  const at = t => t === 0 ? [0, 0] : [((t - 1) % g) * (s + gap), top + Math.floor((t - 1) / g) * (s + gap)];
  return {n, g, gap, s, at, top, word: Math.max(word, s * 0.9)};
}

function drawTokens() {
  const [c, ctx] = canvasOf("tokens");
  ctx.fillStyle = "#fff"; ctx.fillRect(0, 0, PX, PX);
  if (!img) return;
  const {n, s, at, word} = tokenLayout(), g = data.grid, px = data.size / g;
  const m = marked();
  for (let t = 0; t < n; t++) {
    const [x, y] = at(t);
    if (t === 0) {                       // [CLS]: no pixels of its own, so named in words
      ctx.fillStyle = "#6366f1"; ctx.fillRect(x, y, s, s);
      ctx.fillStyle = "#312e81"; ctx.font = `bold ${Math.round(word)}px sans-serif`;
      ctx.textBaseline = "top"; ctx.fillText("[CLS]", x + s + 3, y);
      continue;
    }
    const p = t - 1;
    ctx.drawImage(img, (p % g) * px, Math.floor(p / g) * px, px, px, x, y, s, s);
    ctx.strokeStyle = "rgba(99,102,241,0.35)"; ctx.lineWidth = 1;    // the position it was told
    ctx.strokeRect(x + 0.5, y + 0.5, s - 1, s - 1);
    if (p === m) outline(ctx, x - 1, y - 1, s + 2, s + 2, "#22c55e", 2);
  }
}

function attentionMap() { return data ? (mode === "rollout" ? data.rollout : data.head_map) : null; }

function drawAttention() {
  const [c, ctx] = canvasOf("attention");
  ctx.fillStyle = "#fff"; ctx.fillRect(0, 0, PX, PX);
  const map = attentionMap(), hi = pipe.querySelector(".s-attention .hi");
  if (!img || !map) {
    hi.textContent = "";
    if (img) { ctx.fillStyle = "#777"; ctx.font = "12px sans-serif";
               ctx.fillText("after the pen lifts", 14, PX / 2); }
    return;
  }
  // One scale with every attention picture on the page: to the map's largest weight, or
  // VIVID times an even spread if that is larger, so a nearly flat map stays dull.
  const scale = pipe.querySelector(".s-attention .scale"), u = data.even;
  const peak = Math.max(...map), top = Math.max(peak, (+scale.dataset.vivid || 1) * u) || 1;
  const g = data.grid, s = PX / g;
  ctx.globalAlpha = 0.35; ctx.drawImage(img, 0, 0, PX, PX); ctx.globalAlpha = 1;
  for (let p = 0; p < g * g; p++) {
    const [r, gg, b] = colour(map[p] / top);
    ctx.fillStyle = `rgba(${r},${gg},${b},0.82)`;
    ctx.fillRect((p % g) * s, Math.floor(p / g) * s, Math.ceil(s), Math.ceil(s));
  }
  const m = marked();
  if (m !== null) outline(ctx, (m % g) * s, Math.floor(m / g) * s, s, s, "#22c55e", 2);
  hi.textContent = pct(top);
  // Where "spread evenly" and this map's largest weight fall on that scale.
  const even = scale.querySelector(".even"), most = scale.querySelector(".peak");
  even.style.left = (100 * Math.min(1, u / top)).toFixed(1) + "%";
  even.title = `even: ${pct(u)} each`;
  most.style.left = (100 * Math.min(1, peak / top)).toFixed(1) + "%";
  most.title = `this map's largest weight: ${pct(peak)}`;
}

// One format on the whole page (vit/text.py percent): "99.5 %".
function pct(v) { return (100 * v).toFixed(1) + " %"; }
// A class's probability, as vit/text.py `confidence` writes it: never "100.0 %" or "0.0 %".
// A probability as the page writes one (vit/text.py confidence; inpage.js writes with this one).
function conf(p) { return p >= 0.9995 ? ">99.9 %" : p < 0.0005 ? "<0.1 %" : pct(p); }

function drawAnswer() {
  const box = pipe.querySelector(".bars"), drove = pipe.querySelector(".drove");
  box.replaceChildren();
  drove.hidden = !(data && data.drove !== null && data.drove !== undefined && !data.refused);
  if (!drove.hidden) {
    const d = data.drove, g = data.grid;
    const where = document.createElement("span");
    where.className = "where";
    where.textContent = ` (row ${Math.floor(d / g) + 1}, column ${d % g + 1})`;
    // Said plainly, by what the lead map measures (config.json's faithfulness).
    const plain = {occlusion: ["Hiding ", " lowers the answer most"],
                   relevance: ["", " pushed the answer most (relevance)"],
                   rollout: ["", " fed [CLS] most (rollout)"]}[data.lead] ||
                  ["", ` matters most (${data.lead})`];
    const lead = document.createElement("span");
    lead.className = "most"; lead.textContent = plain[0];
    const by = document.createElement("span");
    by.className = "by";
    by.textContent = plain[1] +
      (img && !data.colour && emptyPatch(d) ? " (an empty patch: where the ink is not counts too)" : "") +
      (data.slight ? ", though hiding any one patch barely changes it" : "");
    const short = document.createElement("span");
    // (a phone's narrow step: the long words folded away, this left)
    short.className = "short"; short.textContent = "Rests most on ";
    const at = document.createElement("span");     // (a phone's shorter "where")
    at.className = "at"; at.textContent = `, row ${Math.floor(d / g) + 1}, column ${d % g + 1}`;
    const barely = document.createElement("span");  // (a phone's shorter "though barely")
    barely.className = "barely"; barely.textContent = data.slight ? " (barely)" : "";
    drove.replaceChildren(short, lead, `${plain[0] ? "patch" : "Patch"} ${d + 1}`, where, at, barely, by);
    // Said, not asserted: the other maps may rank the patches differently for this input.
    const others = ["rollout", "relevance", "occlusion"].filter(k => k !== data.lead);
    const differ = others.filter(k => !(data.agree || []).includes(k));
    const agree = document.createElement("span");
    agree.className = "agree";
    // (named, as "What the answer rests on" below names them: a trial read "other maps" here
    // beside "Here relevance points at other patches" there)
    const named = differ.join(" and ");
    agree.textContent = differ.length === 0
      ? " The other maps agree."
      : ` ${named[0].toUpperCase()}${named.slice(1)} ${differ.length > 1 ? "point" : "points"} ` +
        "elsewhere: read it as a region, not one cause.";
    drove.append(agree);
    drove.title = `The patch the answer rests on most, by ${data.lead}: the map measured most ` +
                  "faithful for this model (\u201cWhat drove the answer\u201d below). Point here " +
                  "to see it in every step; click to choose it.";
  }
  if (!data) return;
  const head = document.createElement("div");
  head.className = "said" + (data.refused ? " refused" : "");
  head.textContent = data.answer;
  box.appendChild(head);
  if (data.refused && data.reason) {      // why not; the bars are what the model alone reads
    const why = document.createElement("div");
    why.className = "why-not";
    why.textContent = `${data.reason} On its own the model reads:`;
    box.appendChild(why);
  }
  for (const [name, p] of data.classes) {
    const row = document.createElement("div");
    row.className = "bar"; row.setAttribute("role", "listitem");
    const label = document.createElement("span"); label.className = "name"; label.textContent = name;
    const track = document.createElement("span"); track.className = "track";
    const fill = document.createElement("i"); fill.style.width = (100 * p).toFixed(1) + "%";
    track.appendChild(fill);
    const val = document.createElement("span"); val.className = "val"; val.textContent = conf(p);
    row.append(label, track, val);
    box.appendChild(row);
  }
}

// What the page's own answer is waiting for (inpage.js: the pen lifted, a picture loaded, another
// model chosen); otherwise it reads while the pen moves.
const LIVE = {lifted: " (checking the finished drawing)", loaded: " (checking this picture)",
              switch: " (reading it with the model you chose)"};

function say() {
  const m = marked();
  readout.replaceChildren();
  // (a phone's pinned answer shows the line only when it says something of a patch: page.css)
  readout.classList.toggle("marked", !!data && m !== null);
  if (!data) return;
  const live = !data.live ? "" : LIVE[data.live] || " (reading while you draw)";
  if (m === null) {
    readout.textContent = "Point at (or tap) a patch to follow it through every step." + live;
    return;
  }
  const g = data.grid, map = attentionMap();
  let text = `Patch ${m + 1} (row ${Math.floor(m / g) + 1}, column ${m % g + 1}) is token ` +
             `${m + 2} of ${g * g + 1} ([CLS] is token 1)`;
  if (map) text += mode === "rollout"
    ? `; ${pct(map[m])} of what flows into [CLS] over all layers comes from it`
    : `; [CLS] gives it ${pct(map[m])} of its attention in layer ${data.layer}, head ${data.head}`;
  // (when no patch matters much, a share of it would read as a large part of the answer: a
  // trial's "24.4 %" beside "hiding any one changes P(1) by at most 0.6 points")
  if (data.share) text += data.slight ? `; no one patch matters much to the answer here (${data.lead})`
    // (from and to, not "by 79.3 %": a drop of 79.3 points, not a 79.3 % part of it — a trial)
    : data.drop ? dropSaid(data.classes[0], data.drop[m])
    : `; it carries ${pct(data.share[m])} of what the answer rests on (${data.lead})`;
  readout.append(text + "." + live);
  if (hover === null && data.patch !== null && data.patch !== undefined) {
    // The chosen patch: the panels below follow it — say where, and take the reader there.
    const go = document.createElement("button");
    go.type = "button"; go.className = "go";
    go.textContent = "See where it looks \u2193";
    go.onclick = () => window.vitOpenPanel?.("views");
    readout.append(" ", go);
  }
}

// What hiding one patch does to the answer's probability, from and to (a seventh trial read
// "lowers P(8) from >99.9 % to >99.9 %": where both read alike, it barely moves it).
function dropSaid([name, p], drop) {
  const from = conf(p), to = conf(Math.max(0, p - drop));
  return from === to ? `; hiding it barely changes P(${name}) (${from}; occlusion)`
    : `; hiding it lowers P(${name}) from ${from} to ${to} (occlusion)`;
}

// Whether a patch of the model's input is all background (its pixels all near the darkest).
function emptyPatch(p) {
  const g = data.grid, n = data.size / g, c = document.createElement("canvas");
  c.width = c.height = data.size;
  const ctx = c.getContext("2d");
  ctx.drawImage(img, 0, 0);
  const d = ctx.getImageData((p % g) * n, Math.floor(p / g) * n, n, n).data;
  for (let i = 0; i < d.length; i += 4) if (d[i] + d[i + 1] + d[i + 2] > 3 * 40) return false;
  return true;
}

function drawAll() {
  pipe.dataset.empty = data ? "0" : "1";
  pipe.querySelectorAll("[data-mode]").forEach(x =>
    x.setAttribute("aria-checked", String(x.dataset.mode === mode)));
  // The map's largest weight said once, in words beside what the map is (the blue tick shows
  // where it falls on the scale; a trial read a bar's end, "10.0 %", as the brightest patch).
  // ("max 4.0 %" kept on one line: its own span, page.css)
  const map = attentionMap(), max = document.createElement("span");
  max.className = "whole";
  max.textContent = map ? `max ${pct(Math.max(...map))}` : "";
  // One head's layer and head are said by their menus ("layer 6", "head 1"), in the line the
  // rollout's words take: the step keeps its height in both (the menus below the words pushed
  // everything under the strip down 45 px).
  pipe.querySelector(".showing").replaceChildren(...(!data ? [] : mode === "rollout"
    ? ["All layers (rollout), ", max] : [max]));
  const menus = pipe.querySelector(".pick-head");
  menus.hidden = !data || mode !== "head";
  if (data) for (const [key, n] of [["layer", data.layers], ["head", data.heads]]) {
    const sel = menus.querySelector(`[data-pick="${key}"]`);
    if (sel.options.length !== n) {
      sel.replaceChildren(...Array.from({length: n}, (_, i) => new Option(`${key} ${i + 1}`, String(i + 1))));
    }
    sel.value = String(data[key]);
  }
  drawSeen(); drawPatches(); drawTokens(); drawAttention(); drawAnswer(); say();
}

// (the first strip, while a newer drawing is on the canvas than the one the server answered:
// the page's own answer stays, not the older drawing's — inpage.js drawing)
// Nor an answer to a drawing older than the one the page's own answer reads (an example clicked
// while the last drawing's answer was on its way).
function load() {
  if (window.vitStrip?.reload === load && window.vitInPage?.drawing?.()) return;
  const v = props.value;
  if (data?.live && v && +v.drawing < (window.vitInPage?.sent?.() || 0)) return;
  show(v);
}

// Draws a value: the server's (props.value), or the page's own while the pen moves (inpage.js).
function show(v) {
  // A new layer or head chosen (a head map clicked, the sliders, the menus): show that head.
  // Not a model switch, which resets them: the visitor chose nothing.
  const same = v && data && v.layers === data.layers && v.heads === data.heads &&
               (v.model || data.model || "") === (data.model || v.model || "");
  if (v && typeof v === "object" && "grid" in v && same && (v.layer !== data.layer || v.head !== data.head))
    mode = "head";
  pipe.dataset.draws = String((+pipe.dataset.draws || 0) + 1);   // (bench/draw_latency.py counts)
  if (!v || typeof v !== "object" || !("grid" in v)) {
    if (v === null || v === undefined || v === "") { data = null; img = null; pending = null; drawAll(); }
    return;                          // {pick: n}: our own tap going to the server
  }
  // Its words and pictures together: until the new picture is decoded the strip keeps the last
  // value whole (drawn at once, a seventh trial saw the 3's answer beside the 7's Seen, Patches
  // and Tokens for 0.1–0.3 s). The same picture (a head or patch chosen) draws at once.
  if (img && data && v.image === data.image) { pending = null; data = v; drawAll(); return; }
  pending = v;
  const im = new Image();
  const put = ok => { if (pending === v) { pending = null; data = v; img = ok ? im : null; drawAll(); } };
  im.onload = () => put(true);
  im.onerror = () => put(false);
  im.src = v.image;
}

// The patch under the pointer, from any step's picture (null: none).
function patchAt(e) {
  if (!data) return null;
  const c = e.target.closest("canvas");
  if (!c) return null;
  const r = c.getBoundingClientRect(), x = (e.clientX - r.left) / r.width * PX,
        y = (e.clientY - r.top) / r.height * PX, g = data.grid;
  if (c.classList.contains("c-tokens")) {
    const {gap, s, top} = tokenLayout(), r2 = Math.floor((y - top) / (s + gap)), q = Math.floor(x / (s + gap));
    return r2 >= 0 && r2 < g && q >= 0 && q < g && x % (s + gap) < s ? r2 * g + q : null;
  }
  if (c.classList.contains("c-patches")) {
    const gap = g > 10 ? 1 : 2, s = (PX - gap * (g - 1)) / g;
    const q = Math.floor(x / (s + gap)), r2 = Math.floor(y / (s + gap));
    return q >= 0 && q < g && r2 >= 0 && r2 < g ? r2 * g + q : null;
  }
  const q = Math.floor(x / (PX / g)), r2 = Math.floor(y / (PX / g));
  return q >= 0 && q < g && r2 >= 0 && r2 < g ? r2 * g + q : null;
}

pipe.addEventListener("pointermove", e => {
  if (e.pointerType === "touch") return;        // a finger scrolls; a tap chooses
  if (!e.target.closest("canvas")) return;      // ("Drove it" shows its own patch)
  const p = patchAt(e);
  if (p !== hover) { hover = p; drawSeen(); drawPatches(); drawTokens(); drawAttention(); say(); }
});
pipe.addEventListener("pointerleave", () => {
  if (hover !== null) { hover = null; drawAll(); }
});
function choose(p) {
  data.patch = p; hover = null; drawAll();
  props.value = {pick: p};
  trigger("pick");
}

pipe.addEventListener("click", e => {
  const b = e.target.closest("[data-mode]");
  if (b) { mode = b.dataset.mode; drawAll(); return; }
  if (e.target.closest(".drove")) { if (data && data.drove !== null) choose(data.drove); return; }
  const p = patchAt(e);
  if (p !== null) choose(p);
});
pipe.querySelector(".pick-head").addEventListener("change", () => {
  const get = k => +pipe.querySelector(`[data-pick="${k}"]`).value;
  props.value = {layer: get("layer"), head: get("head")};
  trigger("pickhead");           // ("head" is a gr.HTML attribute)
});
const drove = pipe.querySelector(".drove");
drove.addEventListener("pointerenter", () => {
  if (data && data.drove !== null) { hover = data.drove; drawSeen(); drawPatches(); drawTokens(); drawAttention(); say(); }
});
drove.addEventListener("pointerleave", () => { hover = null; drawAll(); });

// The keyboard reaches every patch: the patches step takes focus; the arrow keys move the
// outline (every step follows it, and the readout, a live region, says where it is); Enter or
// Space chooses the patch, as a tap does; Escape lets go.
const keys = pipe.querySelector(".c-patches");
keys.tabIndex = 0;
keys.setAttribute("role", "application");
keys.setAttribute("aria-label", "Patches of your input: the arrow keys move between them, " +
                                "Enter chooses one");
keys.addEventListener("keydown", e => {
  if (!data) return;
  const g = data.grid, at = marked() ?? 0;
  const moves = {ArrowLeft: -1, ArrowRight: 1, ArrowUp: -g, ArrowDown: g};
  if (e.key in moves) {
    const next = at + moves[e.key];
    const row = Math.floor(at / g), sideways = e.key === "ArrowLeft" || e.key === "ArrowRight";
    if (next >= 0 && next < g * g && (!sideways || Math.floor(next / g) === row)) {
      hover = next; drawSeen(); drawPatches(); drawTokens(); drawAttention(); say();
    }
    e.preventDefault();
  } else if (e.key === "Enter" || e.key === " ") {
    choose(at); e.preventDefault();
  } else if (e.key === "Escape") {
    hover = null; drawAll();
  }
});
keys.addEventListener("blur", () => { if (hover !== null) { hover = null; drawAll(); } });

// Each step's "how?" opens its detail in place, below the strip (page.js: openPanel).
pipe.addEventListener("click", e => {
  const a = e.target.closest("a[data-open]");
  if (a && window.vitOpenPanel) { e.preventDefault(); window.vitOpenPanel(a.dataset.open); }
});

// A "?" opens its precise version; another "?", a click elsewhere or Escape closes it.
const asks = [...pipe.querySelectorAll("details.q")];
asks.forEach(d => d.addEventListener("toggle", () => {
  if (d.open) asks.forEach(o => { if (o !== d) o.open = false; });
}));
document.addEventListener("click", e => {
  if (!e.target.closest("#pipeline details.q")) asks.forEach(d => { d.open = false; });
});
document.addEventListener("keydown", e => {
  if (e.key === "Escape") asks.forEach(d => { d.open = false; });
});

watch("value", load);
load();
// The [CLS] word is sized for the tokens picture as shown (tokenLayout): drawn again when that
// size changes (a phone's folded answer drew it at no width, and it was ~4 px high when opened).
let tokensWidth = 0;
new ResizeObserver(([e]) => {
  const w = Math.round(e.contentRect.width);
  if (w && w !== tokensWidth && data) { tokensWidth = w; drawTokens(); }
}).observe(pipe.querySelector("canvas.c-tokens"));
// The first screen's strip (not the compare panel's): what inpage.js draws into, and reads the
// model and the chosen layer, head and patch from.
if (element.closest("#pipeline") || element.querySelector("#pipeline") || element.id === "pipeline")
  window.vitStrip = {show: show, reload: load, value: () => data, conf: conf,
                     // the pen lifted: the page's own answer waits for the server's (inpage.js)
                     lifted: () => { if (data && data.live) { data.live = "lifted"; say(); } }};
else      // who answers while the pen moves is the first strip's: the second model's never does
  element.querySelector("#inpage-note")?.remove();
element.dataset.ready = "1";
