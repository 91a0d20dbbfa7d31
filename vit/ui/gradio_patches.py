"""Everything this app changes about Gradio 6.31, in one place, each with the reason and the
condition for removing it ("Remove when"). Each is a behaviour of gradio 6.31.0 read in its
source and met here. Searched for upstream in the stored issue index (2026-11-26, again
2026-11-27): two have a related issue, named at the patch (3, 11); none was found for the rest.
Each names the test that fails while Gradio still needs it. The routes Gradio
opens that this app does not offer, and the shapes of request Gradio answered with HTTP 500, are
refused before Gradio sees them: vit/ui/routes.py.

1. `save_pil_to_cache` rewrites hash-named output files in place: two visitors who get the same
   picture race, and a download is cut off ("Too little data for declared Content-Length";
   bench/load.py: 4 of 500 before). Written once, atomically, instead — and inside the cache
   folder's cap (VIT_UPLOAD_CACHE_MB, vit/ui/uploads.py `ROOM`): Gradio caps nothing, and each
   answered drawing wrote ~107 KB of pictures.
   Remove when Gradio writes cached files atomically and caps its cache (bench/load.py shows no
   cut-off download; tests/test_boundary.py `test_pictures_stay_inside_the_cap…` passes without).
2. `gr.Image` decodes uploads with PIL before the app sees them: an empty file, random bytes,
   HEIC, a PNG text-chunk bomb, a >179-megapixel image or a `data:` URL (a 214 KB request cost
   ~2 GB) then fails or swells inside Gradio. `SafeImage` (and `ImageFile`) hand the app the
   uploaded file's path untouched — and only a file this server received by upload
   (vit/ui/uploads.py `received_file`: a FileData without Gradio's `meta` marker used to reach
   the handler with any server path) —; vit.preprocessing checks size and pixel count before
   decoding anything, and answers in one line. (The drawing canvas is our own,
   vit/ui/canvas.py: it sends a PNG that vit.preprocessing opens with the same checks.)
   Remove when gr.Image can hand over a received upload undecoded (tests/test_attacks.py's
   server-file and data: URL tests pass with a plain gr.Image(type="filepath")).
3. Sliders and dropdowns check a value against the range and choices they were built with, and
   refuse it with a traceback in the log: a model with more layers than the first one could not
   be explored past the first model's depth. `FreeSlider` and `FreeDropdown` pass values on; the
   app's handlers clamp or refuse them (vit/ui/views.py `clamp`, vit/ui/models.py).
   Remove when a component's choices and range follow gr.update() per session. Upstream,
   related: gradio-app/gradio#12246 (open: a valid update of a Dropdown's choices and value is
   refused as "not in the list of choices").
4. A client that names a file it did not upload is refused with a message that spells out the
   server's working directory ("Cannot move /srv/app/x to the gradio cache dir…"), and a file
   object in a click's event data was refused with its path and a traceback in the log;
   `hide_server_paths` keeps both refusals and drops the paths (one line in the log).
   Remove when Gradio's refusals name no path (tests/test_attacks.py
   `test_a_server_file_is_never_read…`, `test_a_file_object_in_a_click…`).
5. `gr.Label` always names the most probable class as its label (a value of the form
   {"label": …, "confidences": […]} is not read as such). `VerdictLabel` shows
   {"label": "not a digit", "confidences": [{"label": "3", "confidence": 0.41}, …]} as it is:
   the verdict on top, every class's calibrated probability below (vit.inference.Predictor.label).
   Remove when gr.Label takes a label of its own beside the confidences.
6. The API page shows a `gr.File` input with a PDF as its sample and, without a label, as
   "parameter_49". `ImageFile` is a `gr.File` (the app reads the untouched file itself, see 2)
   whose sample is a PNG.
   Remove when gr.File's API sample can be set.
7. (A setting, in vit/ui/app.py `launch`.) Gradio's run history copies every event's inputs and
   outputs into the browser's localStorage: ~250 ms of main-thread work per event here, so the
   page stuttered while drawing, and every drawing stayed in the browser. `run_history=False`.
   Keep: the app never wants drawings kept in the browser.
8. Every session (any `session_hash` a client makes up) got a copy of the whole page's config
   (~170 KB) and kept every value a client sent in it (a 4 MB "drawing", a 100 KB model name),
   for deep links, which this app does not offer. `small_sessions` keeps neither; what a session
   holds is its gr.State value (vit/ui/record.py) and the components a handler updated, without
   the deep-link config Gradio rebuilt for each of them at every event (docs/benchmarks.md).
   Remove when deep links can be switched off (tests/test_attacks.py
   `test_a_session_keeps_no_copy_of_the_page…`).
9. `show_error=True` sends `str(exception)` to the client: a validation error echoed a 100 KB
   bad value back, and an unexpected error could show internals; a value of the wrong type (a
   list where a file belongs) was logged as a crash with its traceback. `short_errors` sends the
   first line, at most 300 characters, and answers a value Gradio's data model refuses (or a
   request with too few values) with one line naming what was wrong (never the value), logged
   as a bad request, not a crash. A component's own check (a value outside a Dropdown's
   choices) is refused in one line without the value, and logged as one line.
   Remove when Gradio's error messages are bounded and never echo a value
   (tests/test_attacks.py `test_a_huge_bad_value_is_not_echoed_back`).
10. uvicorn keeps a connection that never sends a request open for ever (~1,100 of them ran
   the process out of file descriptors) and takes any number of connections. `bounded_connections`
   closes one that sends no complete request within a few seconds and answers 503 beyond a
   number of open connections (vit/ui/limits.py). It also turns uvicorn's `proxy_headers` off:
   for a loopback peer uvicorn put X-Forwarded-For's address in the request's `client`, so a
   forged header escaped every per-visitor limit (vit/ui/identity.py decides who a visitor is).
   Remove when Gradio passes uvicorn's limit_concurrency, a header timeout and proxy_headers
   through launch() (tests/test_fourth_attack.py
   `test_a_fresh_forged_address_per_join_does_not_escape_the_share`).
11. Gradio's MCP server (`launch(mcp_server=True)`) offers every public endpoint as a tool,
   and fetches any URL an agent gives for a file parameter, on the server. `mcp_tools` offers the
   agents' tools alone (vit/ui/tools.py), which take pictures as base64 and fetch nothing, and
   its refusals are one line (the MCP library quoted a refused argument back whole). (The
   tools are unqueued, so Gradio calls them directly, not back over HTTP.)
   Remove when gr.Blocks can name the endpoints its MCP server offers (tests/test_mcp.py).
   Upstream: gradio-app/gradio#11463 (asked for exactly this; closed, with `show_api` — now
   `api_visibility` — as the answer, which also takes an endpoint off the public API this app
   keeps for its clients).
12. `gr.SelectData` read a click's `index` and `value` from whatever a client sent, before any
   handler: a missing key or a list was a KeyError or TypeError with a traceback.
   `tolerant_clicks` makes them None (a click at no place: one line, vit/ui/boundary.py).
   Remove when gr.SelectData reads its fields with defaults (tests/test_attacks.py
   `test_a_click_of_any_shape_is_one_line`).
13. An output a handler leaves as it is (`gr.skip()`, or one a dict return does not name, as
   every handler here returns) is rebuilt by Gradio as if it were updated: a new component from
   its constructor arguments, for every such output of every event (a lift's events name ~30
   outputs and change a few). `skips_cost_nothing` sends those as they are, unbuilt.
   Remove when Gradio passes a skip through untouched (tests/test_gradio_patches.py
   `test_an_output_left_as_it_is_is_not_rebuilt`).
Patches 13 and 14 only save time and memory: `apply(speedups=False)` (VIT_GRADIO_SPEEDUPS=0)
leaves them out, to tell whether a fault is theirs. The rest close holes and stay. `apply` refuses
to patch a Gradio other than the one they were read in (WRITTEN_FOR): each copies or replaces a
private part of it, and on another release could fail quietly.

14. The queue summarises every event's timings into a pandas table of up to 10,000 events after
   each event, for the monitoring dashboard, which this app serves only with VIT_MONITORING=1.
   `no_summaries` computes it only then.
   Remove when Gradio summarises only for an open dashboard (same test file,
   `test_the_queue_keeps_no_summary_nobody_reads`).
"""
from __future__ import annotations

import datetime
import logging
import os
import tempfile
import types
from pathlib import Path

import gradio as gr

from vit.ui.uploads import NOT_UPLOADED, ROOM, received_file

_patched: set[str] = set()
_patched_config: dict = {}          # what a patch was last configured with (uvicorn's Config, monitoring)
WRITTEN_FOR = "6.31.0"              # the gradio release these patches were read in and tested on


class WrongGradio(RuntimeError):
    """The installed Gradio is not the one the patches were written for (one line)."""


def check_version(version: str | None = None) -> None:
    """Raise WrongGradio unless `version` (default: the installed one) is WRITTEN_FOR."""
    version = gr.__version__ if version is None else version
    if version != WRITTEN_FOR:
        raise WrongGradio(f"this app patches gradio {WRITTEN_FOR} and found {version[:40]}: "
                          f"pip install -r requirements.txt (gradio=={WRITTEN_FOR})")


def apply(speedups: bool = True, monitoring: bool = False) -> None:
    """Every patch the page needs, after checking the Gradio they were written for: those that
    close a hole always, the two that only save time and memory (13, 14) unless `speedups` is
    False (`monitoring`: the dashboard is served, so 14 keeps Gradio's summaries). Idempotent.
    Raises WrongGradio."""
    check_version()
    fixes = (never_rewrite_cached_images, hide_server_paths, small_sessions, short_errors,
             tolerant_clicks)
    for patch in fixes:
        patch()
    if speedups:
        skips_cost_nothing()
        no_summaries(monitoring)
log = logging.getLogger("vit.ui")
MAX_PICTURE_SIDE = 16_383           # pixels: the most a WebP picture may have a side


def never_rewrite_cached_images() -> None:
    """Patch 1 (idempotent): a hash-named file is written once, under a temporary name, then
    renamed into place."""
    if "cache" in _patched:
        return
    from gradio import processing_utils as pu

    def save_pil_to_cache(img, cache_dir, name="image", format="webp"):
        if max(img.size) > MAX_PICTURE_SIDE:      # WebP's limit: a model of 256 layers drew
            img = img.copy()                       # a picture taller, and its answer failed
            img.thumbnail((MAX_PICTURE_SIDE, MAX_PICTURE_SIDE))
        data = pu.encode_pil_to_bytes(img, format)
        folder = Path(cache_dir) / pu.hash_bytes(data)
        path = (folder / f"{name}.{format}").resolve()
        if not path.exists():
            ROOM.reserve(Path(cache_dir), len(data))     # inside VIT_UPLOAD_CACHE_MB too
            folder.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{name}.")
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        return str(path)

    pu.save_pil_to_cache = save_pil_to_cache
    _patched.add("cache")


def hide_server_paths() -> None:
    """Patch 4 (idempotent)."""
    if "paths" in _patched:
        return
    from gradio import processing_utils as pu
    from gradio.exceptions import InvalidPathError
    check = pu._check_allowed

    class RefusedPath(InvalidPathError, gr.Error):
        """Still an InvalidPathError for Gradio's routes; a gr.Error so the queue shows the
        message without logging a traceback for what is only a bad request."""

        def __init__(self, message):
            gr.Error.__init__(self, message, print_exception=False)

    def _check_allowed(path, check_in_upload_folder):
        try:
            return check(path, check_in_upload_folder)
        except InvalidPathError:
            raise RefusedPath(NOT_UPLOADED) from None

    pu._check_allowed = _check_allowed
    # A file object in a click's event data (or in a component's properties) naming a file
    # outside the cache: refused the same way, not with the path and a traceback in the log.
    in_cache = pu.check_all_files_in_cache

    def check_all_files_in_cache(data):
        try:
            return in_cache(data)
        except gr.Error:
            log.warning("refused a request: it names a file this server did not make")
            raise RefusedPath(NOT_UPLOADED) from None

    pu.check_all_files_in_cache = check_all_files_in_cache
    _patched.add("paths")


# The component below stays a plain gr.Image object (a subclass would make Gradio look for a
# custom front end and the page would not render); only the one method that decodes is replaced
# on the instance. (gr.HTML is the exception: Gradio renders subclasses of it — vit/ui/canvas.py.)

def _image_preprocess(self, payload):
    if payload is None:
        return None
    return received_file(payload)


def SafeImage(**kwargs) -> gr.Image:
    """gr.Image(type="filepath") that passes the uploaded file on without opening it."""
    component = gr.Image(**kwargs)
    component.preprocess = types.MethodType(_image_preprocess, component)
    return component


class VerdictLabel(gr.Label):
    """Patch 5: gr.Label that also shows a verdict above the classes' probabilities.

    A class, not a patched instance (as SafeImage is): after a handler returns gr.update() for an
    output, Gradio keeps a fresh `block.__class__(**args)` for that session — a patched plain
    gr.Label then lost the patch and every later "not a digit" answer failed with an internal
    error. `is_template`: rendered by the front end as the Label it is."""
    is_template = True

    def postprocess(self, value):
        if isinstance(value, dict) and isinstance(value.get("confidences"), list) and "label" in value:
            from gradio.components.label import LabelConfidence, LabelData
            rows = sorted(value["confidences"], key=lambda c: -float(c["confidence"]))
            if self.num_top_classes is not None:
                rows = rows[:self.num_top_classes]
            return LabelData(label=str(value["label"]),
                             confidences=[LabelConfidence(label=str(c["label"]),
                                                          confidence=float(c["confidence"]))
                                          for c in rows])
        return super().postprocess(value)


class FreeSlider(gr.Slider):
    """Patch 3: a slider that hands any value to the handlers, which clamp it themselves (a class,
    like VerdictLabel, so that the session copy Gradio makes after gr.update() keeps it)."""
    is_template = True

    def preprocess(self, payload):
        return payload


class FreeDropdown(gr.Dropdown):
    """Patch 3 for the model selector: the handlers refuse unknown names in one line."""
    is_template = True

    def preprocess(self, payload):
        return payload


class ImageFile(gr.File):
    """Patches 2 and 6: a file input for the API whose documented sample is an image (a PNG), not
    a PDF, and that reads only a file this server received. (A bare {"path": …} without Gradio's
    `meta` marker is refused earlier, by gr.File's data model: patch 9 makes that one line.)"""
    SAMPLE = "https://raw.githubusercontent.com/gradio-app/gradio/main/test/test_files/bus.png"

    def example_payload(self):
        from gradio_client import handle_file
        return handle_file(self.SAMPLE)

    def example_value(self):
        return self.SAMPLE

    def preprocess(self, payload):
        return None if payload is None else received_file(payload)


def tolerant_clicks() -> None:
    """Patch 12 (idempotent): gr.SelectData read `event_data["index"]` and `["value"]` of whatever
    a client sent, before any handler: a missing key or a list raised KeyError or TypeError
    with a traceback. Anything else is a click at no place, which vit/ui/boundary.py refuses
    in one line."""
    if "clicks" in _patched:
        return
    from gradio.events import SelectData
    init = SelectData.__init__

    def __init__(self, target, data):
        data = data if isinstance(data, dict) else {}
        init(self, target, {"index": None, "value": None, **data})

    SelectData.__init__ = __init__
    _patched.add("clicks")


def small_sessions() -> None:
    """Patch 8 (idempotent)."""
    if "sessions" in _patched:
        return
    from gradio.state_holder import SessionState
    init = SessionState.__init__

    def __init__(self, blocks):
        init(self, blocks)
        self.config_values = {}              # read only by deep links

    def __setitem__(self, key, value):       # Gradio's, without the config for deep links
        block = self.blocks_config.blocks.get(key)
        if isinstance(block, gr.State):
            self._state_ttl[key] = (block.time_to_live, datetime.datetime.now())
            self.state_data[key] = value
        else:
            self.blocks_config.blocks[key] = value

    SessionState.__init__ = __init__
    SessionState.__setitem__ = __setitem__
    SessionState._update_config = lambda self, key: None
    SessionState._update_value_in_config = lambda self, key, value: None
    _patched.add("sessions")


SKIP = {"__type__": "update"}               # gr.skip(), and what Gradio sends for it


def skips_cost_nothing() -> None:
    """Patch 13 (idempotent)."""
    if "skips" in _patched:
        return
    import copy

    from gradio.blocks import Block, convert_component_dict_to_list
    postprocess = gr.Blocks.postprocess_data

    def skipped(v) -> bool:
        return isinstance(v, dict) and v == SKIP

    async def postprocess_data(self, block_fn, predictions, state):
        outputs = list(block_fn.outputs)
        if (isinstance(predictions, dict) and predictions and len(outputs) > 1
                and all(isinstance(k, Block) and k in outputs for k in predictions)):
            predictions = convert_component_dict_to_list(outputs, predictions)
        if (block_fn.batch or block_fn.is_validator_function or len(outputs) < 2
                or not isinstance(predictions, list) or len(predictions) != len(outputs)
                or not any(map(skipped, predictions))):
            return await postprocess(self, block_fn, predictions, state)
        kept = [i for i, v in enumerate(predictions) if not skipped(v)]
        sent = []
        if kept:                        # Gradio's own work for the outputs that change
            fn = copy.copy(block_fn)
            fn.outputs = [outputs[i] for i in kept]
            values = [predictions[i] for i in kept]
            sent = await postprocess(self, fn, values if len(kept) > 1 else values[0], state)
        done = iter(sent)
        return [dict(SKIP) if skipped(v) else next(done) for v in predictions]

    gr.Blocks.postprocess_data = postprocess_data
    _patched.add("skips")


def no_summaries(monitoring: bool = False) -> None:
    """Patch 14 (patched once; the latest call's `monitoring` holds): unless Gradio's dashboard
    is served (`monitoring`: VIT_MONITORING=1) the summary stays empty."""
    _patched_config["monitoring"] = monitoring
    if "summaries" in _patched:
        return
    from gradio.queueing import Queue
    summarise = Queue.compute_analytics_summary

    def compute_analytics_summary(self, records):
        if _patched_config.get("monitoring"):
            return summarise(self, records)
        return self.cached_event_analytics_summary

    Queue.compute_analytics_summary = compute_analytics_summary
    _patched.add("summaries")


MAX_ERROR_CHARS = 300


def one_line(text: str) -> str:
    """The first non-empty line of `text`, at most MAX_ERROR_CHARS characters."""
    line = next((x.strip() for x in str(text).splitlines() if x.strip()), "")
    return line if len(line) <= MAX_ERROR_CHARS else line[:MAX_ERROR_CHARS - 1] + "…"


def short_errors() -> None:
    """Patch 9 (idempotent)."""
    if "errors" in _patched:
        return
    from gradio import queueing, utils
    original = utils.error_payload

    def error_payload(error, show_error):
        content = original(error, show_error)
        if isinstance(content.get("error"), str):
            content["error"] = one_line(content["error"])
        return content

    utils.error_payload = queueing.error_payload = error_payload
    from pydantic import ValidationError
    preprocess = gr.Blocks.preprocess_data

    async def preprocess_data(self, *args, **kwargs):
        try:
            return await preprocess(self, *args, **kwargs)
        except ValidationError as e:
            what = one_line(e.errors()[0].get("msg", "")) if e.errors() else ""
            log.warning("refused a value: %s", what[:120])
            raise gr.Error(f"A value sent to this endpoint is not of the expected kind: {what}",
                           print_exception=False) from None
        except gr.Error as e:
            if not e.print_exception:     # the app's own refusals (a ValueError too) as they are
                raise
            # A component's own check (a value outside a Dropdown's, Radio's or CheckboxGroup's
            # choices): Gradio's message holds the whole value, and it logged a traceback.
            log.warning("refused a value: not one of a component's choices")
            raise gr.Error("A value sent to this endpoint is not one of its choices.",
                           print_exception=False) from None
        except ValueError as e:           # too few values, a value no component takes
            log.warning("refused a request: %s", one_line(str(e))[:120])
            raise gr.Error(one_line(str(e)), print_exception=False) from None

    gr.Blocks.preprocess_data = preprocess_data
    _patched.add("errors")


def bounded_connections(limit: int, first_request_s: float) -> None:
    """Patch 10: uvicorn's Config, as Gradio builds it, with `limit_concurrency`, an HTTP
    protocol that closes a connection whose first request is not complete in `first_request_s`,
    and the socket's peer left as it is: uvicorn's `proxy_headers` (on by default) replaced a
    request's client address by its X-Forwarded-For whenever the peer was loopback, so behind a
    local forwarder (or from this machine) a fresh forged address per request escaped every
    per-visitor limit. Who a visitor is, is decided in one place: vit/ui/identity.py.
    (Called again, the newest limits apply.)"""
    import uvicorn
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class FirstRequestDeadline(H11Protocol):
        def connection_made(self, transport):
            super().connection_made(transport)
            self._deadline = self.loop.call_later(first_request_s, self._no_request)

        def _no_request(self):
            if self.cycle is None and not self.transport.is_closing():
                self.transport.close()

        def connection_lost(self, exc):
            self._deadline.cancel()
            super().connection_lost(exc)

    base = _patched_config.get("base") or uvicorn.Config

    class BoundedConfig(base):
        def __init__(self, *args, **kwargs):
            kwargs.setdefault("limit_concurrency", limit)
            kwargs.setdefault("http", FirstRequestDeadline)
            kwargs["proxy_headers"] = False
            super().__init__(*args, **kwargs)

    _patched_config["base"] = base
    uvicorn.Config = BoundedConfig




def raise_file_limit() -> int:
    """The process's open-file limit raised to its hard limit (sockets are files): returns it."""
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        return hard
    return soft


def mcp_tools(names) -> None:
    """Patch 11 (idempotent). Gradio's MCP server offers every public endpoint as a tool: the
    page's own (/classify takes a file, which Gradio would fetch from any URL an agent names, on
    the server) as well as the tools written for agents. It offers `names` only."""
    if "mcp" in _patched:
        return
    try:
        from gradio.mcp import GradioMCPServer
    except ImportError:                 # without gradio[mcp] there is no MCP server to narrow
        return
    everything = GradioMCPServer.get_tool_to_endpoint
    allowed = set(names)

    def get_tool_to_endpoint(self) -> dict[str, str]:
        return {k: v for k, v in everything(self).items() if k in allowed}

    GradioMCPServer.get_tool_to_endpoint = get_tool_to_endpoint
    # The MCP library's refusal of an argument of the wrong type quoted the whole argument back
    # ("Input validation error: [0, 0, …" for 1.5 MB): one line of 300 characters, as here.
    from mcp.server.lowlevel.server import Server
    make_error = Server._make_error_result
    Server._make_error_result = lambda self, message: make_error(self, one_line(message))
    _patched.add("mcp")
