"""Which of Gradio's routes a request may reach, and in what shape: checked by the app's
middleware (vit/ui/limits.py `RequestLimits`) before Gradio reads the request, so that a request
Gradio would answer with HTTP 500 and a traceback (an unknown endpoint, event or session; a
JavaScript-only event; several byte ranges) gets one line instead, and routes this app does not
offer answer 404.

Gradio 6.31's routes, as a client meets them: `POST …/queue/join` and `POST …/call/<api>` push an
event into the queue; `GET …/queue/data?session_hash=` and `GET …/call/<api>/<event id>` stream
its answers; `POST …/run/<api>` runs an event without the queue (refused for queued events: the
app launches with `api_open=False`); `…/file=<path>` serves a file of the cache.
"""
from __future__ import annotations

import re
from urllib.parse import parse_qs, unquote

# Gradio's routes this app does not offer: its monitoring dashboard and summary (function names
# and counts, without login) unless VIT_MONITORING=1; deep links (which tell whether a session
# exists); the development reload stream (an endless poll per connection); the component
# server (no component here has server functions).
NOT_OFFERED = re.compile(r"^(/gradio_api)?(/monitoring(/.*)?|/deep_link/?|/dev/reload/?"
                         r"|/component_server/?)$")
QUEUE_JOIN = re.compile(r"/queue/join/?$")
CALL = re.compile(r"/call/(v2/)?(?P<api>[^/]+)/?$")              # POST: an event into the queue
CALL_STREAM = re.compile(r"/call/(?P<api>[^/]+)/(?P<event>[^/]+)/?$")      # GET: its answers
RUN = re.compile(r"/run/(?P<api>[^/]+)/?$")
QUEUE_DATA = re.compile(r"/queue/data/?$")
FILE = re.compile(r"/file=")


def not_offered(path: str, monitoring: bool = False) -> bool:
    """Whether `path` is a route of Gradio's this app does not offer (`monitoring`: Gradio's
    monitoring dashboard is served, VIT_MONITORING=1)."""
    if monitoring and "/monitoring" in path:
        return False
    return bool(NOT_OFFERED.match(path))


def pushes_event(path: str) -> bool:
    """Whether a POST to `path` puts an event in the queue (what the per-visitor share counts)."""
    return bool(QUEUE_JOIN.search(path) or CALL.search(path))


def _blocks(scope):
    try:
        return scope["app"].get_blocks()
    except (AttributeError, KeyError):
        return None


def _backend_fns(blocks) -> dict:
    """{event id: block function} of the events with a Python function behind them (a
    JavaScript-only event has none: Gradio raised IndexError for it)."""
    return {i: f for i, f in getattr(blocks, "fns", {}).items() if getattr(f, "fn", None) is not None}


def _api_names(blocks) -> set[str]:
    return {f.api_name for f in _backend_fns(blocks).values() if getattr(f, "api_name", None)}


def post_problem(scope, obj) -> tuple[int, str] | None:
    """Why a POST with JSON `obj` is refused, or None."""
    blocks = _blocks(scope)
    if blocks is None:
        return None
    path = scope["path"]
    if QUEUE_JOIN.search(path) or path.rstrip("/").endswith("/run/predict"):
        if isinstance(obj, dict) and "fn_index" in obj:
            fn = obj["fn_index"]
            if isinstance(fn, bool) or not isinstance(fn, int) or fn not in _backend_fns(blocks):
                return 422, "fn_index must be the number of one of this page's events (see /config)."
        return None
    match = CALL.search(path) or RUN.search(path)
    if match and unquote(match["api"]) != "predict" and \
            unquote(match["api"]).lstrip("/") not in _api_names(blocks):
        return 404, "No such endpoint here; see /gradio_api/info for the ones there are."
    return None


def get_problem(scope) -> tuple[int, str] | None:
    """Why a GET is refused, or None: a stream of answers for a session or event the queue does
    not know (Gradio raised inside a started response: two tracebacks a request)."""
    path = scope["path"]
    if FILE.search(path) and len(path) > 2048:       # a 403 echoed all 60,000 characters
        return 414, "That file's name is longer than any this server hands out."
    queue = getattr(_blocks(scope), "_queue", None)
    if queue is None:
        return None
    if QUEUE_DATA.search(path):
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        sid = (query.get("session_hash") or [""])[0]
        if sid not in queue.pending_messages_per_session:
            return 404, "No answers are waiting for that session."
    elif (match := CALL_STREAM.search(path)) and match["api"] != "v2":
        event = match["event"]
        known = event in queue.event_ids_to_events or event in queue.pending_messages_per_session \
            or any(event in ids for ids in list(queue.pending_event_ids_session.values()))
        if not known:
            return 404, "No such event is waiting for its answer."
    return None


def without_ranges(scope) -> dict:
    """A file request without its Range header: Gradio's ranged answer failed on several ranges
    (HTTP 500) and copied every request header into the response. The page's pictures are
    small; they come whole."""
    if scope.get("method") == "GET" and FILE.search(scope["path"]) and \
            any(k == b"range" for k, _ in scope.get("headers", ())):
        return {**scope, "headers": [(k, v) for k, v in scope["headers"] if k != b"range"]}
    return scope
