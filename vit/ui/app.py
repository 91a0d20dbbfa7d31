"""`create_app(...)`: the whole page, built from arguments. Nothing happens at import.

The page: a model selector, Draw / Upload / Test set tabs, the answer, then the analysis panels
(vit/ui/views.py, why_panel.py, mechanism_panel.py). One gr.State per visitor holds its page's
record (vit/ui/record.py); the handlers (vit/ui/page.py) return {component name: value}, which
one wrapper (vit/ui/boundary.py `parsed`, from `Wiring.on`) turns into Gradio's {component:
value} after parsing what the client sent. docs/app.md draws the event flow.
"""
from __future__ import annotations

import atexit
import functools
import inspect
import shutil
import tempfile
import threading
from pathlib import Path
from types import SimpleNamespace

import gradio as gr

from vit.data.examples import write_examples
from vit.device import pick_device
from vit.preprocessing.decode import MAX_FILE_BYTES
from vit.preprocessing.styles import STYLES
from vit.settings import SettingError, Settings
from vit.storage import BUNDLED
from vit.testset import data_dir_for_app
from vit.ui import (
    boundary,
    draw_tab,
    gradio_patches,
    mechanism_panel,
    testset_tab,
    upload_tab,
    views,
)
from vit.ui.gradio_patches import (
    FreeDropdown,
    ImageFile,
    VerdictLabel,
    bounded_connections,
    mcp_tools,
    raise_file_limit,
)
from vit.ui.inpage import InPage
from vit.ui.limits import CACHE_LIFETIME, FIRST_REQUEST_SECONDS, Limits
from vit.ui.memory import keep_trimming, trim
from vit.ui.models import Models, StartupError
from vit.ui.page import TESTSET, Page
from vit.ui.panels import PANELS
from vit.ui.pipeline import PipelineStrip
from vit.ui.render import AFTER_ANALYSIS, ANALYSIS, EVERY, QUICK, rest_message
from vit.ui.tools import NAMES as TOOL_NAMES
from vit.ui.tools import Tools
from vit.ui.uploads import ROOM, pin
from vit.ui.words import alt, glossary_markdown

CSS = (Path(__file__).parent / "page.css").read_text()
JS = (Path(__file__).parent / "page.js").read_text()       # the first-visit tour
# A burst of requests must not make the next visitor wait for answers nobody will read: the
# queue holds a few per worker; beyond that a client is told at once that the server is busy.
CONCURRENCY = 2
# After a test image is chosen, bring its result into view (it appears above the tab).
SCROLL_TO_RESULT = "() => document.querySelector('#status')?.scrollIntoView({block: 'start'})"


def create_app(checkpoints=None, data_dir=None, device=None, examples_dir=None,
               models: Models | None = None, settings: Settings | None = None) -> gr.Blocks:
    """Build the page. `settings`: every setting (default: read from the environment now,
    vit/settings.py); `checkpoints`, `data_dir` and `device` override its VIT_CHECKPOINTS (else
    the bundled checkpoints/), VIT_DATA_DIR (else data/) and VIT_DEVICE. Process-wide settings
    (torch's CPU threads: VIT_THREADS) are the caller's: app.py sets them. Raises StartupError."""
    try:
        settings = settings or Settings.from_env()
        gradio_patches.apply(settings.gradio_speedups, settings.monitoring)
    except (SettingError, gradio_patches.WrongGradio) as e:
        raise StartupError(str(e)) from None
    mcp_tools(TOOL_NAMES)
    limits = Limits.from_settings(settings)
    try:
        device = pick_device(device or settings.device)
    except ValueError as e:
        raise StartupError(f"VIT_DEVICE: {e}") from None
    models = models or Models(checkpoints or settings.checkpoints or BUNDLED, device,
                              hub=list(settings.hub_models))
    data_dir = Path(data_dir) if data_dir else data_dir_for_app(settings)
    # A fresh private folder (0700) per process, removed at exit: a fixed /tmp path could be
    # another user's.
    if examples_dir is None:
        examples_dir = tempfile.mkdtemp(prefix="vit-explorer-examples-")
        atexit.register(shutil.rmtree, examples_dir, ignore_errors=True)
    examples = {style: write_examples(Path(examples_dir) / style, style) for style in STYLES}
    pin(p for paths in examples.values() for p in paths)      # never deleted to make room
    page = Page(models, data_dir, examples)
    # The model in the visitor's browser while the pen moves (vit/ui/inpage.py); VIT_INPAGE=0:
    # every update from the server, as before.
    inpage = InPage(models, disabled=not settings.inpage)
    with gr.Blocks(title="ViT Explorer", delete_cache=CACHE_LIFETIME) as demo:
        ui = layout(page, models, data_dir, settings.on_space)
        wire = Wiring(page, models, ui)
        wire.inputs()
        wire.panels()
        wire.model_and_test_set()
        tools(page, limits)
        # At load the example goes on the canvas, which sends it back like a drawing.
        demo.load(boundary.parsed(page.first_view, models.names), ui.model, ui.pad,
                  **Wiring.QUIET)
    # api_open=False: an event of the queue never runs past it by POST …/run/<api> (Gradio
    # opens those routes wherever it is not on a Space: no queue size, no per-visitor share).
    demo.queue(max_size=limits.queue_size, default_concurrency_limit=CONCURRENCY,
               api_open=False)
    demo.limits = limits
    demo.settings = settings
    demo.inpage = inpage
    demo.page = page                    # for tests and notebooks: the handlers over these models
    return demo


def layout(page: Page, models: Models, data_dir: Path, on_space: bool = False) -> SimpleNamespace:
    """The page's components, laid out: the header, the first screen (the input's tabs beside
    the answer, the strip and what the answer rests on), then the folded panels. Returns them
    by name (`comps`: every component a handler may name) and the panels' own records."""
    p = models.get(models.default)
    with gr.Row(equal_height=True, elem_id="header"):
        with gr.Column(scale=3, min_width=300):
            gr.Markdown("# ViT Explorer\nDraw, and follow a small Vision Transformer "
                        "reading it, left to right: patches, tokens, attention, the "
                        "answer.\n\n<button type=\"button\" id=\"tour-start\">Take the "
                        "tour</button> <a href=\"#glossary\">Glossary</a>", elem_id="intro")
        model = FreeDropdown(models.choices(), value=models.default, label="Model",
                             info="what it was trained to recognise", elem_id="model",
                             visible=len(models.names) > 1, scale=0, min_width=360)
    visit = gr.State(page.visit())           # the visitor's page: vit/ui/record.py
    with gr.Row(equal_height=False, elem_id="top"):
        with gr.Column(scale=4, min_width=300, elem_id="input-col"):
            with gr.Tabs():
                with gr.Tab("Draw", id="draw") as draw_el:
                    draw = draw_tab.build(p.config.noun, p.config.style.name, page.gallery(p))
                with gr.Tab("Upload", id="upload") as upload_el:
                    upload = upload_tab.build()
                # On a Space the tab appears only when the data is there or can be fetched.
                tst = testset_tab.build(models, data_dir, visible=not on_space
                                        or testset_tab.data_available(models, data_dir))
        with gr.Column(scale=6, min_width=300, elem_id="result-col"):
            first = first_screen(p)
    # Depth, folded: each opens in place when a step of the strip asks for it.
    gr.Markdown("## Go deeper", elem_id="deeper")
    ctx = SimpleNamespace(p=p, models=models)
    panels = {panel: panel.place(ctx) for panel in PANELS}     # vit/ui/panels.py, in page order
    with gr.Accordion("About this model", open=False, elem_id="about-model"):
        card = gr.Markdown(p.card())
    with gr.Accordion("Glossary", open=False, elem_id="glossary"):
        gr.Markdown(glossary_markdown())
    comps = dict(
        **first, model=model, card=card,
        answered=draw.answered, pad=draw.pad, hint=draw.hint, examples=draw.examples,
        testset_status=tst.status, confusion=tst.confusion, reliability=tst.reliability,
        gallery=tst.gallery, testset_body=tst.body, kind=tst.kind, true=tst.true,
        pred=tst.pred)
    for panel, built in panels.items():
        comps.update(panel.components(built))
    return SimpleNamespace(comps=comps, visit=visit, model=model, pad=draw.pad, draw=draw,
                           draw_el=draw_el, upload_el=upload_el, upload=upload, tst=tst,
                           panels=panels, strip=first["pipeline"])


def first_screen(p) -> dict:
    """The lesson, on the first screen beside the input: the answer (said once, in a live
    region), the strip that walks the visitor's own input through every step, and what the
    answer rests on, by the map measured most faithful for this model."""
    gr.Markdown("## The answer, step by step", elem_classes="vit-sr-only")
    status = gr.Markdown(rest_message(p), elem_id="status", label="headline")
    strip = PipelineStrip(elem_id="pipeline", label="pipeline strip")
    with gr.Row(equal_height=False, elem_id="why-row"):
        glance = gr.Image(label="What the answer rests on", show_label=False, interactive=False,
                          elem_id="glance", height=200, buttons=[], scale=2, min_width=160,
                          alt_text=alt("glance"))
        glance_text = gr.Markdown(elem_id="glance-text")
    # The probabilities for API clients (the strip's answer step shows them).
    label = VerdictLabel(num_top_classes=10, label="Probability per class",
                         elem_id="prediction", visible=False)
    return dict(status=status, pipeline=strip, glance=glance, glance_text=glance_text,
                label=label)


def tools(page: Page, limits: Limits) -> None:
    """The tools for agents (vit/ui/tools.py): API endpoints on components the page never shows,
    which Gradio's MCP server offers (and only these: gradio_patches.mcp_tools). Unqueued: their
    own gate bounds them (a queued tool was called back over HTTP by the MCP server)."""
    with gr.Column(visible=False):
        t_image, t_model = gr.Textbox(label="image"), gr.Textbox("", label="model")
        # JSON as text: an agent reads JSON, and Gradio's MCP server passes an unqueued tool's
        # gr.JSON output on as "root={...}" (its pydantic model, printed).
        t_answer, t_models = gr.Textbox(label="answer"), gr.Textbox(label="models")
        t_relevance, t_occlusion = gr.Image(label="relevance"), gr.Image(label="occlusion")
        t_go = gr.Button()
    t = Tools(page, limits.identity)
    t_go.click(t.classify_image, [t_image, t_model], t_answer, api_name="classify_image",
               queue=False)
    t_go.click(t.explain_image, [t_image, t_model], [t_answer, t_relevance, t_occlusion],
               api_name="explain_image", queue=False)
    t_go.click(t.list_models, None, t_models, api_name="list_models", queue=False)


class Wiring:
    """The page's events, each wired once: `on(event, handler, inputs, names)` passes the
    visitor's record after the inputs, parses every client value at the boundary
    (vit/ui/boundary.py) and sends back only the components `names` lists (the handler returns
    {name: value}; docs/app.md draws the flow)."""
    QUIET = dict(show_progress="hidden", api_visibility="private")
    # One lane for the slow panels, apart from the answer's: they never hold up the next
    # drawing's answer. After every analysis (the answer first): "What drove it", then the
    # panels drawn only while open (the step-by-step walk: ~40 ms per change).
    # always_last: a "why" asked for while one is still running runs after it (Gradio's default,
    # "once", dropped it: Clear clicked just after a lift left the cleared 7's headline and
    # maps, drawn by the 7's lane, on the page; a trial, 3 tries of 8).
    LATER = dict(QUIET, concurrency_limit=1, concurrency_id="why", trigger_mode="always_last")
    MODEL_VIEWS = mechanism_panel.MODEL_VIEWS
    # The views an event may send, each only if its drawing read a field the event changed
    # (vit/ui/render.py): on the quick lane every view but the "why" maps; on the "why" lane all.
    QUICK, EVERY = QUICK, EVERY

    def __init__(self, page: Page, models: Models, ui: SimpleNamespace):
        self.page, self.models, self.ui = page, models, ui
        # Sliders follow the chosen model's depth and heads (FreeSlider, vit/ui/views.py); the
        # handlers clamp what arrives.
        explorer = ui.panels[views]
        self.settings = [explorer.shared, explorer.layer, explorer.head]
        # The API's own endpoint, defined first so that it heads the "Use via API" page.
        api_file = ImageFile(visible=False, type="filepath", label="image")
        api_label = VerdictLabel(visible=False, label="prediction")
        api_file.upload(page.classify, api_file, api_label, api_name="classify")

    def on(self, event, fn, inputs, names, **kwargs):
        """`event(fn)` with the visitor's record after the other inputs and `names`'
        components as outputs: `fn` returns {name: value} (Gradio's dict return, keyed by
        component: an output not named stays as it is)."""
        comps = self.ui.comps

        def keyed(out: dict):
            # Nothing to change: Gradio takes an empty dict for one value, gr.skip() as none.
            return {comps[k]: v for k, v in out.items()} or gr.skip()
        # One wrapper: every value parsed by its annotation, the record after the client's
        # values, the views' names turned into components.
        keyed = boundary.parsed(fn, self.models.names, order=visit_last(fn), out=keyed)
        return event(keyed, [*inputs, self.ui.visit], [comps[n] for n in names], **kwargs)

    def opens(self, field, accordion, names=None, **kwargs):
        """`accordion`'s expand and collapse ("open_lens", "close_lens" for field "lens_open")
        set its panel's OPEN `field` in the record and send the views among `names` (default
        the quick lane's) that read it; `kwargs`: the event's lane (default QUIET). Returns the
        expand's dependency, for a panel that then loads more."""
        names, panel = names or self.QUICK, field.removesuffix("_open")
        deps = [self.on(event, functools.partial(self.page.open_panel, field=field,
                                                 opened=opened, names=names),
                        [], names, **(kwargs or self.QUIET), api_name=f"{verb}_{panel}")
                for event, opened, verb in ((accordion.expand, True, "open"),
                                            (accordion.collapse, False, "close"))]
        return deps[0]

    def explained(self, dep):
        """After an analysis, one event: what the answer rests on (and "What drove it" when
        open), then the other open panels. (One event, not two: each costs the server ~20 ms
        of CPU whatever it draws, most often nothing.)"""
        return self.on(dep.then, self.page.why, [], AFTER_ANALYSIS, **self.LATER)

    def inputs(self) -> None:
        """The canvas, the strip, the examples, the upload and the tabs."""
        page, models, on, explained, settings = (self.page, self.models, self.on, self.explained,
                                                 self.settings)
        quiet, ui = self.QUIET, self.ui
        pad, model, strip, draw, upload = ui.pad, ui.model, ui.strip, ui.draw, ui.upload
        draw_el, upload_el, tst, visit = ui.draw_el, ui.upload_el, ui.tst, ui.visit
        # The canvas sends its PNG while the pen moves ("live": the answer alone) and when it
        # lifts ("lift": everything); always_last: a request waiting behind a running one is
        # replaced by the newest, never queued up.
        on(pad.live, page.follow_drawing, [pad, model], ("status", "label", "answered", "pipeline"),
           trigger_mode="always_last", **quiet)
        on(strip.pick, page.pick_strip_patch, [strip],
           self.QUICK, **quiet)
        on(strip.pickhead, page.pick_strip_head, [strip],
           (*self.QUICK, "layer", "head"), **quiet)
        explained(on(pad.lift, page.analyse_drawing, [pad, model, *settings], ANALYSIS,
                     trigger_mode="always_last", show_progress="hidden",
                     api_name="analyse_drawing"))
        draw.examples.select(boundary.parsed(page.load_example, models.names), [model], pad,
                             **quiet)
        explained(on(upload.change, page.upload_changed, [upload, model, *settings], ANALYSIS,
                     show_progress="hidden", api_name="analyse_upload"))
        # A tab's answer follows its input: back on Draw, the canvas's drawing is answered again.
        for el, name in ((draw_el, "draw"), (upload_el, "upload"), (tst.tab, "test")):
            el.select(functools.partial(page.note_tab, tab=name), visit, None, queue=False,
                      api_visibility="private")
        explained(on(draw_el.select, page.to_draw_tab, [pad, model, *settings], ANALYSIS,
                     **quiet))
        explained(on(upload_el.select, page.to_upload_tab, [upload, model, *settings], ANALYSIS,
                     **quiet))

    def panels(self) -> None:
        """Each registered panel wires its own controls (vit/ui/panels.py)."""
        for panel, built in self.ui.panels.items():
            panel.wire(self, built)

    def model_and_test_set(self) -> None:
        """A model switch (everything follows), and the Test set tab."""
        page, on, explained, quiet, ui = self.page, self.on, self.explained, self.QUIET, self.ui
        model, tst, settings, model_views = ui.model, ui.tst, self.settings, self.MODEL_VIEWS
        # The test set's first pass shows its progress over the confusion matrix's box alone,
        # not over the status line and filters (where it overprinted the text).
        tst_progress = dict(api_visibility="private", show_progress_on=tst.confusion)
        # "minimal": a switch's running time in the corner, not a grey veil over the menu and
        # the canvas (the menu read as a spinner and the canvas as disabled while a visitor drew
        # on it); inpage.js says on the page that the chosen model is reading the input.
        switched = on(model.change, page.choose_model, [model],
                      ("model", "card", "layer", "head", "target", "heads_off", "hint",
                       "examples", "pad", "learned_panel"), api_visibility="private",
                      show_progress="minimal")
        switched = on(switched.then, page.clear_testset, [], TESTSET[:4], **quiet)
        switched = explained(on(switched.then, page.reanalyse, [], ANALYSIS, **quiet))
        switched = on(switched.then, functools.partial(mechanism_panel.mechanism_model, page), [],
                      model_views, **quiet)
        on(switched.then, page.refresh_testset, [tst.kind], (*TESTSET, "true", "pred", "status"),
           **tst_progress)
        opened = on(tst.tab.select, page.open_testset, [tst.kind, tst.true, tst.pred], TESTSET,
                    **tst_progress)
        explained(on(opened.then, page.to_test_tab, [], ANALYSIS, **quiet))
        # always_last: quick clicks on the filters are never dropped; the last one wins.
        for f in (tst.kind, tst.true, tst.pred):
            on(f.input, page.testset_view, [tst.kind, tst.true, tst.pred], TESTSET,
               trigger_mode="always_last", **tst_progress)
        on(tst.confusion.select, page.pick_cell, [], ("kind", "true", "pred", *TESTSET),
           **tst_progress)
        shown = on(tst.gallery.select, page.show_test_image, settings, ANALYSIS, **quiet)
        explained(shown.then(None, js=SCROLL_TO_RESULT))


# What Gradio fills in itself: a handler's parameters it finds by name and default or annotation.
SPECIAL = {"request", "evt", "progress"}


def visit_last(fn) -> inspect.Signature:
    """A handler's signature (`visit` first) with `visit` after the values a client sends: the
    record is the page's own (a gr.State), and a raw HTTP client sends the public endpoints'
    values by position — the state's place comes after them, where it always was."""
    sig = inspect.signature(fn)
    visit, *rest = sig.parameters.values()
    sent = [p for p in rest if p.default is p.empty and p.name not in SPECIAL]
    return sig.replace(parameters=[*sent, visit, *(p for p in rest if p not in sent)])


def launch(demo: gr.Blocks, **kwargs):
    """Serve the page with its script, style and limits (vit/ui/limits.py; GRADIO_SERVER_NAME /
    GRADIO_SERVER_PORT honoured)."""
    settings = getattr(demo, "settings", None) or Settings()
    limits = getattr(demo, "limits", None) or Limits.from_settings(settings)
    if getattr(demo, "page", None) is not None and settings.warm:
        # The panels' per-model pictures and test-set answers, in the background: a visitor who
        # opens them later finds them ready (one who comes first waits on the same work).
        threading.Thread(target=_warm, args=(demo.page,), name="vit-warm", daemon=True).start()
    # The answers' pictures share the uploads' folder and its cap.
    ROOM.configure(limits.upload_cache_mb * 1_000_000)
    keep_trimming()                  # freed memory back to the system (vit/ui/memory.py)
    files = raise_file_limit()
    # Idle sockets count as connections: a low cap would let a few hundred of them shut visitors
    # out, so it is high, and below the open-file limit (sockets are files), which it protects.
    bounded_connections(min(limits.connections, max(64, files - 64)), FIRST_REQUEST_SECONDS)
    # run_history=False: Gradio 6.31 otherwise copies every event's inputs and outputs (each
    # drawing's PNG, every picture) into the browser's localStorage, ~250 ms of the page's main
    # thread per event here — the page stuttered while drawing — and keeps drawings there.
    # The Model Context Protocol beside the page (vit/ui/tools.py), unless VIT_MCP=0.
    kwargs.setdefault("mcp_server", settings.mcp)
    return demo.launch(css=CSS, js=JS, show_error=True, max_file_size=MAX_FILE_BYTES, run_history=False,
                       state_session_capacity=limits.sessions,
                       app_kwargs={"middleware": _inpage(demo) + limits.middleware()}, **kwargs)


def _warm(page) -> None:
    try:
        page.warm()
    except Exception as e:      # noqa: BLE001 (one line in the log, never a dead thread's traceback)
        print(f"* Warm: stopped early ({type(e).__name__}); visitors' requests do the rest.",
              flush=True)
        return
    finally:
        trim()                    # scoring the test sets freed hundreds of MB
    # Said, for whoever waits on it (the tests' server waits before its first visitor).
    print("* Warm: every model's step-by-step pictures and test-set answers are ready.", flush=True)


def _inpage(demo) -> list:
    """The in-page model's files (vit/ui/inpage.py), answered before anything else."""
    from starlette.middleware import Middleware
    inpage = getattr(demo, "inpage", None)
    return [Middleware(inpage.middleware())] if inpage is not None else []
