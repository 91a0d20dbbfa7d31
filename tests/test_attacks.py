"""The public page as an attacker meets it: raw HTTP against `python app.py`, and the pure
functions behind each defence.

- Only files this server received by upload are read; a server path (with or without Gradio's
  `meta` marker), an output picture or a link placed in the upload folder is refused in one line
  that does not tell whether the path exists; `data:` URLs are never decoded by Gradio.
- Uploads: a per-visitor rate, a cap on uploads in flight, and the upload folder kept under its
  size by deleting the oldest uploads (vit/ui/uploads.py).
"""
import json
import os
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from PIL import Image

from vit.ui import uploads

NOT_UPLOADED = "not uploaded to this server"


def call(base: str, api: str, data: list, timeout: float = 60) -> str:
    """POST /gradio_api/call/API, then read its event stream, as a script would."""
    url = f"{base}gradio_api/call/{api}"
    req = urllib.request.Request(url, json.dumps({"data": data}).encode(),
                                 {"Content-Type": "application/json"})
    event = json.loads(urllib.request.urlopen(req, timeout=30).read())["event_id"]
    return urllib.request.urlopen(f"{url}/{event}", timeout=timeout).read().decode()


@pytest.fixture(scope="module")
def secret(tmp_path_factory) -> Path:
    """An image on the server's disk that nobody uploaded."""
    path = tmp_path_factory.mktemp("server") / "secret.png"
    Image.new("L", (64, 64), 255).save(path)
    return path


@pytest.mark.parametrize("meta", [False, True])
@pytest.mark.parametrize("api", ["analyse_upload", "classify"])
def test_a_server_file_is_never_read_and_its_existence_never_told(app_server, secret, api, meta):
    """The file exists and a missing one does not: both get the same refusal, no picture."""
    answers = []
    for path in (str(secret), str(secret.with_name("missing.png"))):
        payload = {"path": path, **({"meta": {"_type": "gradio.FileData"}} if meta else {})}
        rest = ["mnist", False, 1, 1, None] if api == "analyse_upload" else []
        stream = call(app_server[1], api, [payload, *rest])
        # /classify's gr.File refuses a FileData without `meta` itself (patch 9: in one line).
        refusal = NOT_UPLOADED if api == "analyse_upload" or meta else "not of the expected kind"
        assert "event: error" in stream and refusal in stream, stream[:300]
        assert path not in stream and "No such file" not in stream
        answers.append(stream.split("data:", 1)[1].split('"duration"')[0])
    assert answers[0] == answers[1]
    assert app_server[0].poll() is None


def test_a_data_url_is_refused_before_anything_decodes_it(app_server):
    """Gradio decoded these itself: 214 KB of request cost ~2 GB of memory."""
    payload = {"path": "x.png", "url": "data:image/png;base64," + "A" * 1000}
    stream = call(app_server[1], "analyse_upload", [payload, "mnist", False, 1, 1, None])
    assert "event: error" in stream and "not as a data: URL" in stream


class FakeBlocks:
    def __init__(self, received):
        self.upload_file_set = set(received)


def received(path, blocks) -> str:
    from gradio.context import LocalContext
    from gradio.data_classes import FileData
    token = LocalContext.blocks.set(blocks)
    try:
        return uploads.received_file(FileData(path=str(path)))
    finally:
        LocalContext.blocks.reset(token)


def test_only_a_received_regular_file_in_the_upload_folder_is_handed_on(tmp_path, monkeypatch,
                                                                        secret):
    import gradio as gr
    folder = tmp_path / "uploads"
    monkeypatch.setattr(uploads, "upload_folder", lambda: folder.resolve())
    good = folder / ("a" * 64) / "seven.png"
    good.parent.mkdir(parents=True)
    good.write_bytes(secret.read_bytes())
    link = folder / ("b" * 64) / "link.png"            # a link put in the folder afterwards
    link.parent.mkdir()
    link.symlink_to(secret)
    outside = secret                                    # "received" yet outside the folder
    blocks = FakeBlocks([str(good), str(link), str(outside)])
    assert received(good, blocks) == str(good)
    for bad in (link, outside, folder / ("c" * 64) / "never.png"):
        with pytest.raises(gr.Error, match=NOT_UPLOADED):
            received(bad, blocks)
    with pytest.raises(gr.Error, match=NOT_UPLOADED):
        received(good, None)                            # no server: nothing was received
    good.unlink()                                       # received, then deleted by the cache
    with pytest.raises(gr.Error, match="expired"):
        received(good, blocks)


def test_the_upload_folder_stays_under_its_cap_oldest_uploads_first(tmp_path):
    for i in range(5):
        sub = tmp_path / (str(i) * 64)
        sub.mkdir()
        (sub / "x.png").write_bytes(b"\0" * 1000)
        os.utime(sub / "x.png", (time.time() - 100 + i, time.time() - 100 + i))
    (tmp_path / "deep_links").mkdir()                   # not an upload: never touched
    total = uploads.make_room(tmp_path, cache_bytes=3500, incoming=1000)
    assert total == 2000
    assert sorted(p.name[0] for p in tmp_path.iterdir() if p.name != "deep_links") == ["3", "4"]
    assert (tmp_path / "deep_links").is_dir()


def test_uploads_are_limited_per_visitor_and_in_flight(tmp_path):
    import asyncio

    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    limits = uploads.UploadLimits(app, per_visitor=3, cache_bytes=10**9, max_file_bytes=10,
                                  folder=tmp_path)

    def post(ip):
        sent = []

        async def send(message):
            sent.append(message)
        scope = {"type": "http", "method": "POST", "path": "/gradio_api/upload",
                 "client": (ip, 1), "headers": []}
        asyncio.run(limits(scope, None, send))
        return sent[0]["status"], sent[-1].get("body", b"").decode()

    assert [post("1.2.3.4")[0] for _ in range(4)] == [200, 200, 200, 429]
    assert "uploads a minute" in post("1.2.3.4")[1]
    assert post("5.6.7.8")[0] == 200                    # another visitor is not held up
    limits._busy = limits.in_flight
    assert post("9.9.9.9")[0] == 503


def test_a_real_upload_passes_the_limits(app_server):
    """Raw multipart, as a script would upload: the limits let a picture through."""
    import io
    buf = io.BytesIO()
    Image.new("L", (32, 32), 0).save(buf, "PNG")
    boundary = "xxBOUNDARYxx"
    body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"files\"; filename=\"a.png\""
            f"\r\nContent-Type: image/png\r\n\r\n").encode() + buf.getvalue() + \
        f"\r\n--{boundary}--\r\n".encode()
    req = urllib.request.Request(app_server[1] + "gradio_api/upload", body,
                                 {"Content-Type": f"multipart/form-data; boundary={boundary}"})
    paths = json.loads(urllib.request.urlopen(req, timeout=30).read())
    assert len(paths) == 1 and Path(paths[0]).name == "a.png"
