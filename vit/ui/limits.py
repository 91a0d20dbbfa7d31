"""Every bound a host can rely on, in one place: set from vit/settings.py's `Settings` (read once
at start-up; a bad value stops the app with one line; their table: docs/hosting.md "Settings")
and applied by `launch`.

Fixed: an upload request says its size and carries at most 50 MB (`MAX_FILE_BYTES`, one
file's worth); any other request's body at most `MAX_REQUEST_BYTES`; a body must keep arriving
(vit/ui/uploads.py `paced`); a connection that sends no complete request within
`FIRST_REQUEST_SECONDS` is closed; uploads and pictures are deleted an hour after they were made
(checked every half hour); a session id is at most 64 characters of [A-Za-z0-9_-]; a session
leaves at most `MAX_WAITING` answers unread; a visitor holds at most `PER_VISITOR_WAITING` of
VIT_QUEUE_SIZE's waiting places (at most half); an event names one of the page's events.
Decoding: vit/preprocessing/`open_image`. Values inside a request: vit/ui/boundary.py.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass

from starlette.requests import ClientDisconnect

from vit.preprocessing.decode import MAX_FILE_BYTES
from vit.settings import Settings
from vit.ui import routes
from vit.ui.identity import Identity
from vit.ui.uploads import UploadLimits, paced, plain

MAX_REQUEST_BYTES = 2_000_000       # a drawing's PNG is a few KB; a photo on the canvas ~0.5 MB
FIRST_REQUEST_SECONDS = 10
PER_VISITOR_WAITING = 8            # events one visitor may have waiting (a page sends ≤ 3 at once)
CACHE_LIFETIME = (1800, 3600)       # Gradio's delete_cache: (every, older than), in seconds
SESSION_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")


@dataclass(frozen=True)
class Limits:
    """The bounds `launch` applies, as vit/settings.py read them (defaults there: `Settings`)."""
    sessions: int
    queue_size: int
    connections: int
    uploads_per_minute: int
    uploads_in_flight: int
    upload_cache_mb: int
    trusted_proxies: int
    unlimited_local: bool
    monitoring: bool                  # Gradio's monitoring routes served (VIT_MONITORING=1)

    @property
    def identity(self) -> Identity:
        return Identity(self.trusted_proxies, self.unlimited_local)

    @classmethod
    def from_settings(cls, s: Settings) -> "Limits":
        return cls(sessions=s.sessions, queue_size=s.queue_size, connections=s.connections,
                   uploads_per_minute=s.uploads_per_minute, uploads_in_flight=s.uploads_in_flight,
                   upload_cache_mb=s.upload_cache_mb, trusted_proxies=s.proxies,
                   unlimited_local=s.unlimited_local, monitoring=s.monitoring)

    def middleware(self) -> list:
        """For `launch(app_kwargs={"middleware": …})`: outermost first."""
        from starlette.middleware import Middleware
        # One visitor may hold a few of the queue's waiting places, never all of them.
        per_visitor = min(PER_VISITOR_WAITING, max(2, self.queue_size // 2))
        return [Middleware(RequestLimits, per_visitor=per_visitor, identity=self.identity,
                           monitoring=self.monitoring),
                Middleware(UploadLimits, per_visitor=self.uploads_per_minute,
                           identity=self.identity,
                           in_flight=self.uploads_in_flight,
                           cache_bytes=self.upload_cache_mb * 1_000_000,
                           max_file_bytes=MAX_FILE_BYTES)]


MAX_WAITING = 32      # events of one session whose answers it has not read yet


def too_many_waiting(scope, sid) -> bool:
    """Whether session `sid` already has MAX_WAITING events undelivered: Gradio keeps each
    answer until the session reads its stream, and a client that never does piled up answers
    without end (~12 KB each)."""
    try:
        queue = scope["app"].get_blocks()._queue
    except (AttributeError, KeyError):
        return False
    return isinstance(sid, str) and len(queue.pending_event_ids_session.get(sid, ())) >= MAX_WAITING


def held_by(scope, who: str, identity: Identity) -> int:
    """How many events from visitor `who` (`identity.visitor`) the queue holds: waiting, and
    running (counting the waiting alone let 12 of one visitor's joins in against a share of 8:
    the share freed as each event started)."""
    try:
        queue = scope["app"].get_blocks()._queue
        events = [e for q in list(queue.event_queue_per_concurrency_id.values())
                  for e in list(q.queue)]
        events += [e for job in list(getattr(queue, "active_jobs", None) or ()) if job
                   for e in job]
    except (AttributeError, KeyError):
        return 0
    return sum(1 for e in events
               if getattr(e, "request", None) is not None and identity.visitor(e.request.scope) == who)


class NotJSON(ValueError):
    """NaN or Infinity, which Python's json reads and JSON does not allow."""


def _no_constants(name: str):
    raise NotJSON(name)


def parsed_json(body: bytes):
    """A body's JSON as Gradio will read it (json.loads of the bytes: UTF-8, -16 or -32, a
    byte-order mark allowed — a check that looked for "{" first let a BOM-led body past every
    check below), or None for an empty body. Raises RecursionError for JSON nested too deeply to
    parse, NotJSON for a NaN or an Infinity (Gradio read a bare `NaN` body, then failed on it:
    HTTP 500 and two tracebacks), ValueError for a body that is no JSON (invalid UTF-8, an
    integer of more than 4,300 digits: the MCP route answered both with HTTP 500)."""
    if not body.strip():
        return None
    return json.loads(body, parse_constant=_no_constants)


LONGEST_PATH = 1024        # characters of a file's path as this server hands them out (~100)


def path_problem(obj, budget: int = 1_000_000) -> str | None:
    """Why a file's path in a request is refused before Gradio reads it, or None: a path of more
    than LONGEST_PATH characters or a name in it of more than 255 (Gradio's own check raised
    "File name too long" with a traceback as long as the path, for each request), or a NUL."""
    todo = [obj]
    while todo and budget > 0:
        budget -= 1
        x = todo.pop()
        if isinstance(x, dict):
            path = x.get("path")
            if isinstance(path, str) and (len(path) > LONGEST_PATH or "\0" in path or
                                          max(map(len, path.split("/"))) > 255):
                return (f"A file's path here is one this server handed out: at most "
                        f"{LONGEST_PATH} characters, 255 a name, no NUL.")
            todo.extend(x.values())
        elif isinstance(x, list):
            todo.extend(x)
    return None


def nosniff(send):
    """`send` adding `X-Content-Type-Options: nosniff` to every answer: a browser never reads an
    upload named x.png that holds HTML as anything but the type it is served as."""
    async def wrapped(message):
        if message["type"] == "http.response.start":
            headers = list(message.get("headers") or ())
            if not any(k.lower() == b"x-content-type-options" for k, _ in headers):
                headers.append((b"x-content-type-options", b"nosniff"))
            message = {**message, "headers": headers}
        return await send(message)
    return wrapped


REFUSED_VALUES = 1000      # characters of a 422's detail sent back: never the client's own value


def short_refusals(send):
    """`send` for Gradio's answer to a POST: a 422 (values of the wrong shape) comes back as what
    was wrong and where, without the refused value itself (1.9 MB of it was echoed whole); a
    400 of several lines or over 300 characters (the MCP route's validation of a JSON-RPC
    batch: 1.2 KB repeating the input) as one line."""
    held, status = None, 422

    async def wrapped(message):
        nonlocal held, status
        if message["type"] == "http.response.start" and message.get("status") in (400, 422):
            held, status = [], message["status"]
            return None
        if held is None:
            return await send(message)
        held.append(message.get("body", b""))
        if message.get("more_body"):
            return None
        if status == 400:
            text = b"".join(held)
            if len(text) > 300 or b"\n" in text.strip():
                text = json.dumps({"detail": "The request is not one this endpoint takes."}).encode()
            await send({"type": "http.response.start", "status": 400,
                        "headers": [(b"content-type", b"application/json"),
                                    (b"content-length", str(len(text)).encode())]})
            return await send({"type": "http.response.body", "body": text})
        try:
            detail = json.loads(b"".join(held)).get("detail")
        except (ValueError, AttributeError):
            detail = None
        if isinstance(detail, list):
            detail = [{k: v for k, v in d.items() if k in ("loc", "msg", "type")}
                      if isinstance(d, dict) else d for d in detail]
        text = json.dumps({"detail": detail if detail is not None else
                           "The request's values are not what this endpoint takes."})
        if len(text) > REFUSED_VALUES:
            text = json.dumps({"detail": "The request's values are not what this endpoint "
                                         "takes (see /gradio_api/info)."})
        body = text.encode()
        await send({"type": "http.response.start", "status": 422,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(body)).encode())]})
        return await send({"type": "http.response.body", "body": body})

    return wrapped


def session_problem(sid) -> str | None:
    """Why a session id is refused, or None: it is a key of Gradio's per-visitor store."""
    if sid is None or isinstance(sid, str) and SESSION_ID.fullmatch(sid):
        return None
    return "session_hash must be 1-64 letters, digits, '-' or '_'."


class RequestLimits:
    """ASGI middleware: a POST body (other than an upload: vit/ui/uploads.py) is at most
    MAX_REQUEST_BYTES, keeps arriving (`paced`) and is JSON Python can parse; an event names one
    of the page's events, its session id is well formed, that session has not left MAX_WAITING
    answers unread and its visitor (unless it is this machine) has at most `per_visitor` events
    waiting in the queue (one client sending drawings as fast as it can filled it for everyone)
    — before Gradio parses or keeps any. Gradio's routes this app does not offer answer 404."""

    def __init__(self, app, max_bytes: int = MAX_REQUEST_BYTES, per_visitor: int = 8,
                 identity: Identity = Identity(), monitoring: bool = False):
        self.app, self.max_bytes, self.per_visitor = app, max_bytes, per_visitor
        self.identity, self.monitoring = identity, monitoring
        self._joining: dict[str, int] = {}      # visitor -> events being pushed right now

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        send = nosniff(send)
        if routes.not_offered(scope["path"], self.monitoring):
            return await plain(send, 404, "Not offered by this app.")
        if scope["method"] == "GET":
            problem = routes.get_problem(scope)
            if problem:
                return await plain(send, *problem)
            return await self.app(routes.without_ranges(scope), receive, send)
        if scope["method"] != "POST" or scope["path"].rstrip("/").endswith("/upload"):
            return await self.app(scope, receive, send)
        too_big = (413, f"A request here is at most {self.max_bytes // 1_000_000} MB; upload "
                        f"pictures as files.")
        declared = dict(scope.get("headers", ())).get(b"content-length", b"0")
        if declared.isdigit() and int(declared) > self.max_bytes:
            return await plain(send, *too_big)
        chunks, size, receive_paced = [], 0, paced(receive)
        while True:
            try:
                message = await receive_paced()
            except ClientDisconnect:
                return await plain(send, 408, "The request's body came too slowly.")
            if message["type"] == "http.disconnect":
                return
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > self.max_bytes:
                return await plain(send, *too_big)
            if not message.get("more_body"):
                break
        body = b"".join(chunks)
        refusal = self._refusal(scope, body)
        if refusal is not None:
            return await plain(send, *refusal)
        # Counted until Gradio has put the event in its queue: twelve joins sent at once all
        # passed a count of the queue taken before any of them was in it.
        who = self.identity.visitor(scope) if routes.pushes_event(scope["path"]) else None
        if who is not None:
            self._joining[who] = self._joining.get(who, 0) + 1
        replayed = False

        async def replay():
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        try:
            return await self.app(scope, replay, short_refusals(send))
        except ClientDisconnect:          # the client left while Gradio read or answered
            return None
        finally:
            if who is not None:
                self._joining[who] -= 1
                if not self._joining[who]:
                    del self._joining[who]

    def _refusal(self, scope, body: bytes) -> tuple[int, str] | None:
        try:
            obj = parsed_json(body)
        except RecursionError:
            return 400, "The request's JSON is nested too deeply."
        except NotJSON:
            return 400, "The request's JSON holds NaN or Infinity, which JSON does not allow."
        except ValueError:
            return 400, "The request's body is not JSON."
        problem = path_problem(obj)
        if problem:
            return 400, problem
        sid = obj.get("session_hash") if isinstance(obj, dict) else None
        problem = session_problem(sid)
        if problem:
            return 400, problem
        problem = routes.post_problem(scope, obj)
        if problem:
            return problem
        if not routes.pushes_event(scope["path"]):
            return None
        if too_many_waiting(scope, sid):
            return 429, (f"More than {MAX_WAITING} answers are waiting for this session to read "
                         f"them; read them first.")
        who = self.identity.visitor(scope)
        if not self.identity.unlimited(scope) and \
                held_by(scope, who, self.identity) + self._joining.get(who, 0) >= self.per_visitor:
            return 429, (f"You have {self.per_visitor} requests waiting already; wait for their "
                         f"answers.")
        return None
