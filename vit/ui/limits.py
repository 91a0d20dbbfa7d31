"""Every bound a host can rely on, in one place: read once from the environment at start-up
(`Limits.from_env`, a bad value stops the app with one line) and applied by `launch`.

| setting                 | default | bounds                                                    |
|-------------------------|---------|-----------------------------------------------------------|
| VIT_SESSIONS            | 2000    | visitors' sessions kept in memory (oldest dropped first)  |
| VIT_QUEUE_SIZE          | 64      | events waiting for a worker; more are told "busy"         |
| VIT_CONNECTIONS         | 2000    | open HTTP connections; more get 503 at once (and never    |
|                         |         | more than the process's open-file limit allows)           |
| VIT_UPLOADS_PER_MINUTE  | 30      | uploads per visitor (address; not this machine) a minute  |
| VIT_UPLOADS_IN_FLIGHT   | 4       | uploads being received at once                            |
| VIT_UPLOAD_CACHE_MB     | 1000    | the folder of uploads and answer pictures (oldest first;  |
|                         |         | never the page's own files)                               |
| VIT_MONITORING          | 0       | 1: serve Gradio's monitoring routes (else 404)            |
| VIT_TRUSTED_PROXIES     | 1       | proxies in front that append to X-Forwarded-For (a Space: |
|                         |         | 1; 0: none, the socket's peer is the visitor)             |

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
import os
import re
from dataclasses import dataclass

from starlette.requests import ClientDisconnect

from vit.preprocessing.decode import MAX_FILE_BYTES
from vit.ui import routes, uploads
from vit.ui.models import StartupError
from vit.ui.uploads import UploadLimits, local, paced, plain, visitor_of

MAX_REQUEST_BYTES = 2_000_000       # a drawing's PNG is a few KB; a photo on the canvas ~0.5 MB
FIRST_REQUEST_SECONDS = 10
PER_VISITOR_WAITING = 8            # events one visitor may have waiting (a page sends ≤ 3 at once)
CACHE_LIFETIME = (1800, 3600)       # Gradio's delete_cache: (every, older than), in seconds
SESSION_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")


def env_int(name: str, default: int, lo: int, hi: int) -> int:
    """An integer setting from the environment, or StartupError with one line."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise StartupError(f"{name}={raw[:20]!r} is not a whole number") from None
    if not lo <= value <= hi:
        raise StartupError(f"{name} must be between {lo} and {hi}, not {value}")
    return value


def threads_from_env() -> int:
    """Torch CPU threads per request (VIT_THREADS, else 1: with two cores, two concurrent requests
    on one thread each beat one request whose two threads fight the other's)."""
    return env_int("VIT_THREADS", 1, 1, 4 * (os.cpu_count() or 1))


@dataclass(frozen=True)
class Limits:
    sessions: int = 2000
    # About a second of events on 2 cores: at 16 a crowd drawing at once was turned away while
    # each lift was still answered quickly (docs/benchmarks.md, "The model in the page").
    queue_size: int = 64
    connections: int = 2000
    uploads_per_minute: int = 30
    uploads_in_flight: int = 4
    upload_cache_mb: int = 1000
    trusted_proxies: int = 1

    @classmethod
    def from_env(cls) -> "Limits":
        return cls(sessions=env_int("VIT_SESSIONS", cls.sessions, 10, 1_000_000),
                   queue_size=env_int("VIT_QUEUE_SIZE", cls.queue_size, 1, 10_000),
                   connections=env_int("VIT_CONNECTIONS", cls.connections, 10, 100_000),
                   uploads_per_minute=env_int("VIT_UPLOADS_PER_MINUTE", cls.uploads_per_minute,
                                              1, 100_000),
                   uploads_in_flight=env_int("VIT_UPLOADS_IN_FLIGHT", cls.uploads_in_flight,
                                             1, 1000),
                   trusted_proxies=env_int("VIT_TRUSTED_PROXIES", cls.trusted_proxies, 0, 10),
                   upload_cache_mb=env_int("VIT_UPLOAD_CACHE_MB", cls.upload_cache_mb,
                                           2 * MAX_FILE_BYTES // 1_000_000, 10_000_000))

    def middleware(self) -> list:
        """For `launch(app_kwargs={"middleware": …})`: outermost first."""
        from starlette.middleware import Middleware
        uploads.TRUSTED_HOPS = self.trusted_proxies         # who a visitor is, process-wide
        # One visitor may hold a few of the queue's waiting places, never all of them.
        per_visitor = min(PER_VISITOR_WAITING, max(2, self.queue_size // 2))
        return [Middleware(RequestLimits, per_visitor=per_visitor),
                Middleware(UploadLimits, per_visitor=self.uploads_per_minute,
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


def waiting_from(scope, who: str) -> int:
    """How many events from visitor `who` (vit/ui/uploads.py `visitor_of`) wait in the queue,
    not yet started."""
    try:
        queues = list(scope["app"].get_blocks()._queue.event_queue_per_concurrency_id.values())
    except (AttributeError, KeyError):
        return 0
    return sum(1 for q in queues for e in list(q.queue)
               if getattr(e, "request", None) is not None and visitor_of(e.request.scope) == who)


def parsed_json(body: bytes):
    """A body's JSON as Gradio will read it (json.loads of the bytes: UTF-8, -16 or -32, a
    byte-order mark allowed — a check that looked for "{" first let a BOM-led body past every
    check below), or None where it is none (Gradio answers that itself, in one line). Raises
    RecursionError for JSON nested too deeply to parse."""
    if not body.strip():
        return None
    try:
        return json.loads(body)
    except ValueError:
        return None


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

    def __init__(self, app, max_bytes: int = MAX_REQUEST_BYTES, per_visitor: int = 8):
        self.app, self.max_bytes, self.per_visitor = app, max_bytes, per_visitor
        self._joining: dict[str, int] = {}      # visitor -> events being pushed right now

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        if routes.not_offered(scope["path"]):
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
        who = visitor_of(scope) if routes.pushes_event(scope["path"]) else None
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
            return await self.app(scope, replay, send)
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
        who = visitor_of(scope)
        if not local(scope) and \
                waiting_from(scope, who) + self._joining.get(who, 0) >= self.per_visitor:
            return 429, (f"You have {self.per_visitor} requests waiting already; wait for their "
                         f"answers.")
        return None
