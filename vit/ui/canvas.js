// The drawing canvas (vit/ui/canvas.py runs this as gr.HTML's js_on_load, with `element`,
// `props`, `trigger` and `watch` in scope). Ink is the canvas's alpha: black strokes on a
// transparent canvas over a white page, so what is sent is exactly where the pen went.
//
// What the server gets: props.value = {png: "data:image/png;base64,…" | null, seq[, example]},
// then a "live" event while the pen moves (at most every THROTTLE_MS: the answer alone) or a
// "lift" event when it lifts (the answer and every picture): the event says which, not the value. A 400x400 line
// drawing is a PNG of a few kilobytes — the Sketchpad uploaded several full-size layer files
// per stroke, and nothing while drawing.
// From the server: a value {load: dataURL | null, seq} puts that picture on the canvas (an
// example) or clears it, then sends it back like a drawing.
const SIDE = 400;              // the canvas's own pixels; CSS scales it to the box
const THROTTLE_MS = 120;       // updates while drawing: at most ~8 a second
const UNDO_DEPTH = 30;         // snapshots kept for Undo (640 KB each)
const pad = element.querySelector(".pad");
const canvas = pad.querySelector("canvas");
const ctx = canvas.getContext("2d", {willReadFrequently: true});
canvas.width = canvas.height = SIDE;
let tool = "brush", down = false, last = null, lastSent = 0, timer = null, inked = false;
let example = null;            // the example's name while the canvas shows it untouched
// A colour model's photo under the strokes (an off-screen canvas), so that the eraser brings it
// back where it passes rather than leaving white holes; null on a drawing.
let photo = null;
const undo = [];               // {image, photo} snapshots
const sizes = {brush: +pad.dataset.brush || 13, eraser: +pad.dataset.eraser || 24};

function select(name) {
  tool = name;
  pad.querySelectorAll("[data-tool]").forEach(b =>
    b.setAttribute("aria-pressed", String(b.dataset.tool === name)));
  canvas.dataset.tool = name;
}

function point(e) {
  const r = canvas.getBoundingClientRect();
  return [(e.clientX - r.left) * SIDE / r.width, (e.clientY - r.top) * SIDE / r.height];
}

function remember() {
  undo.push({image: ctx.getImageData(0, 0, SIDE, SIDE), photo: photo});
  if (undo.length > UNDO_DEPTH) undo.shift();
}

function restore() {
  const u = undo.pop();
  ctx.putImageData(u.image, 0, 0);
  photo = u.photo;
}

function hasInk() {
  const d = ctx.getImageData(0, 0, SIDE, SIDE).data;
  for (let i = 3; i < d.length; i += 4) if (d[i] > 20) return true;
  return false;
}

function send(final) {
  clearTimeout(timer);
  timer = null;
  lastSent = performance.now();
  inked = final ? hasInk() : true;
  const seq = +element.dataset.sent + 1 || 1;      // the page echoes it once this is answered
  element.dataset.sent = String(seq);
  const v = {png: inked ? canvas.toDataURL("image/png") : null, seq: seq};
  if (example && inked) v.example = example;
  // An example's tile is marked chosen only while the canvas shows it untouched (page.css): a
  // sixth trial drew their own digit and the 3's tile stayed marked, as if the 3 were shown.
  document.getElementById("draw-examples")?.toggleAttribute("data-drawn", !v.example);
  props.value = v;
  trigger(final ? "lift" : "live");
  if (final && window.vitInPage && window.vitInPage.lifted) window.vitInPage.lifted();
}

function soon() {                      // throttled update while the pen moves
  // The page runs the model itself where it can (inpage.js): then nothing goes to the server
  // until the pen lifts, and every animation frame is answered.
  if (window.vitInPage && window.vitInPage.frame(canvas)) return;
  const wait = THROTTLE_MS - (performance.now() - lastSent);
  if (wait <= 0) send(false);
  else if (!timer) timer = setTimeout(() => send(false), wait);
}

function segment(c, a, b) {
  c.strokeStyle = c.fillStyle = "#000";
  c.lineWidth = 2 * sizes[tool];
  c.lineCap = c.lineJoin = "round";
  c.beginPath();
  c.moveTo(a[0], a[1]);
  c.lineTo(b[0], b[1]);
  c.stroke();
}

const scratch = document.createElement("canvas");
scratch.width = scratch.height = SIDE;
const sctx = scratch.getContext("2d");

function stroke(a, b) {
  if (tool === "eraser" && photo) {    // the photo again where the eraser passes
    sctx.globalCompositeOperation = "source-over";
    sctx.clearRect(0, 0, SIDE, SIDE);
    segment(sctx, a, b);               // the eraser's footprint, soft edge included
    sctx.globalCompositeOperation = "source-in";
    sctx.drawImage(photo, 0, 0);       // the photo inside it
    ctx.globalCompositeOperation = "source-over";
    ctx.drawImage(scratch, 0, 0);
    return;
  }
  ctx.globalCompositeOperation = tool === "eraser" ? "destination-out" : "source-over";
  segment(ctx, a, b);
}

// Fill: the unpainted region around the tap becomes ink (4-connected, so a closed outline
// holds it). Fashion-MNIST pictures are filled silhouettes, not outlines.
function fill(p) {
  const img = ctx.getImageData(0, 0, SIDE, SIDE), d = img.data;
  const x0 = Math.floor(p[0]), y0 = Math.floor(p[1]);
  if (x0 < 0 || y0 < 0 || x0 >= SIDE || y0 >= SIDE || d[(y0 * SIDE + x0) * 4 + 3] >= 128) return false;
  const stack = [y0 * SIDE + x0], seen = new Uint8Array(SIDE * SIDE);
  seen[stack[0]] = 1;
  while (stack.length) {
    const i = stack.pop(), x = i % SIDE;
    d[i * 4] = d[i * 4 + 1] = d[i * 4 + 2] = 0;
    d[i * 4 + 3] = 255;
    for (const j of [x > 0 ? i - 1 : -1, x < SIDE - 1 ? i + 1 : -1, i - SIDE, i + SIDE]) {
      if (j < 0 || j >= SIDE * SIDE || seen[j]) continue;
      seen[j] = 1;
      if (d[j * 4 + 3] < 128) stack.push(j);
      else d[j * 4 + 3] = 255;      // the outline's soft inner edge: solid, or a faint seam stays
    }
  }
  ctx.putImageData(img, 0, 0);
  return true;
}

canvas.addEventListener("pointerdown", e => {
  if (e.button > 0 || tool === "scroll") return;     // Scroll: the page moves, nothing is drawn
  e.preventDefault();
  const p = point(e);
  canvas.focus({preventScroll: true});   // so that Ctrl+Z reaches the canvas after drawing
  example = null;
  remember();
  if (tool === "fill") { if (fill(p)) send(true); else undo.pop(); return; }
  canvas.setPointerCapture(e.pointerId);
  down = true;
  last = p;
  stroke(p, p);
  soon();
});
canvas.addEventListener("pointermove", e => {
  if (!down) return;
  e.preventDefault();
  for (const ev of (e.getCoalescedEvents ? e.getCoalescedEvents() : []).concat([e])) {
    const p = point(ev);
    stroke(last, p);
    last = p;
  }
  soon();
});
const lift = () => { if (down) { down = false; send(true); } };
canvas.addEventListener("pointerup", lift);
canvas.addEventListener("pointercancel", lift);

pad.addEventListener("click", e => {
  const b = e.target.closest("button");
  if (!b) return;
  if (b.dataset.tool) select(b.dataset.tool);
  else if (b.dataset.act === "undo" && undo.length) { example = null; restore(); send(true); }
  else if (b.dataset.act === "clear") { example = null; remember(); photo = null; ctx.clearRect(0, 0, SIDE, SIDE); send(true); }
});
pad.addEventListener("keydown", e => {
  if ((e.ctrlKey || e.metaKey) && e.key === "z" && undo.length) {
    e.preventDefault();
    example = null;
    restore();
    send(true);
  }
});

// A picture from the server (an example): black on white becomes ink on the canvas; a colour
// model's example ({colour: true}) is put on as it is, to draw over.
watch("value", () => {
  const v = props.value;
  if (!v || typeof v !== "object" || !("load" in v)) return;
  if (v.reset) { undo.length = 0; photo = null; }    // another model's example: a fresh start
  else remember();
  ctx.clearRect(0, 0, SIDE, SIDE);
  photo = null;
  example = v.load ? String(v.name || "") : null;
  window.vitInPage?.loaded?.();          // what the screen says is the last picture's till answered
  if (!v.load) { send(true); return; }
  const im = new Image();
  im.onload = () => {
    const off = document.createElement("canvas");
    off.width = off.height = SIDE;
    const o = off.getContext("2d", {willReadFrequently: true});
    o.fillStyle = "#fff";
    o.fillRect(0, 0, SIDE, SIDE);
    o.drawImage(im, 0, 0, SIDE, SIDE);
    if (v.colour) {                    // a photo for a colour model: as it is, opaque
      ctx.drawImage(off, 0, 0);
      photo = off;
      shown();
      return;
    }
    const src = o.getImageData(0, 0, SIDE, SIDE), d = src.data;
    for (let i = 0; i < d.length; i += 4) {
      d[i + 3] = 255 - Math.round(0.299 * d[i] + 0.587 * d[i + 1] + 0.114 * d[i + 2]);
      d[i] = d[i + 1] = d[i + 2] = 0;
    }
    ctx.putImageData(src, 0, 0);
    shown();
  };
  im.src = v.load;
});
// The loaded picture: the page's own model answers it at once where it can (inpage.js; the
// strip had stood empty for ~0.5 s while the server checked it), and the server, as at a lift.
function shown() {
  window.vitInPage?.frame?.(canvas, "loaded");
  send(true);
}

// Phones pin the answer to the bottom of the screen (page.css). Away from the canvas (scrolled
// down to the panels, or on another tab) only its headline stays pinned: the panels get the room.
// The class goes on the page's top row (#top, around the canvas and the answer): Gradio scopes
// page.css to elements inside its container, so a class on <body> would match nothing.
if ("IntersectionObserver" in window) {
  new IntersectionObserver(([e]) => {
    const top = document.getElementById("top");
    if (top) top.classList.toggle("canvas-away", !e.isIntersecting);
  }).observe(canvas);
}
// The same while the whole pinned answer would lie over the canvas's lower part (a phone's short
// screen scrolled back to the page's top: a trial's stroke vanished under it): the canvas is for
// drawing, the headline still answers. Judged by the answer's full height, measured whenever it
// is shown whole, so that folding it never unfolds it again.
let sheetFull = 0;
function canvasUnder() {
  const top = document.getElementById("top"), sheet = document.getElementById("result-col");
  if (!top || !sheet) return;
  if (getComputedStyle(sheet).position !== "fixed") { top.classList.remove("canvas-under"); return; }
  if (!top.classList.contains("canvas-under") && !top.classList.contains("canvas-away"))
    sheet.dataset.full = sheetFull = sheet.getBoundingClientRect().height;     // page.js reads it
  const c = canvas.getBoundingClientRect();
  top.classList.toggle("canvas-under", c.top < innerHeight && c.bottom > innerHeight - sheetFull + 4);
}
addEventListener("scroll", canvasUnder, {passive: true});
addEventListener("resize", canvasUnder);
// Once the answer's column is on the page: watched for size, and its "▴ steps" button added.
const sheetSeen = setInterval(() => {
  const sheet = document.getElementById("result-col"), status = sheet?.querySelector("#status");
  if (!status) return;
  clearInterval(sheetSeen);
  if ("ResizeObserver" in window) {
    const watch = new ResizeObserver(canvasUnder);
    watch.observe(sheet); watch.observe(canvas);
  }
  canvasUnder();
  status.after(sheetToggle());
}, 300);

// The folded answer opens when its headline or its "▴ steps" button is tapped (a trial tapped
// the headline, and nothing opened), over the canvas if need be; the next touch of the canvas
// folds it again, for drawing. The button is what a keyboard reaches (the headline is a live
// region, not a control); page.css shows it only where the answer folds.
function sheetOpen(open) {
  const top = document.getElementById("top");
  if (!top) return;
  top.classList.toggle("sheet-open", open);
  document.getElementById("sheet-toggle")?.setAttribute("aria-expanded", String(open));
}
document.addEventListener("click", e => {
  const top = document.getElementById("top");
  if (!top || !e.target.closest?.("#result-col #status, #sheet-toggle")) return;
  const folded = ["canvas-under", "canvas-away"].some(c => top.classList.contains(c));
  if (folded || top.classList.contains("sheet-open")) sheetOpen(!top.classList.contains("sheet-open"));
});
canvas.addEventListener("pointerdown", () => sheetOpen(false));
// Clear, too: the canvas is for drawing again (a sixth trial: the opened answer, emptied by
// Clear, stayed over half the cleared canvas until the next stroke).
element.addEventListener("click", e => { if (e.target.closest?.("[data-act=clear]")) sheetOpen(false); });
function sheetToggle() {
  const b = document.createElement("button");
  b.id = "sheet-toggle"; b.type = "button";
  b.setAttribute("aria-expanded", "false"); b.setAttribute("aria-controls", "pipeline");
  b.innerHTML = '<span aria-hidden="true" class="up">▴</span><span aria-hidden="true" ' +
                'class="down">▾</span> steps';
  return b;
}

select("brush");
element.dataset.ready = "1";
