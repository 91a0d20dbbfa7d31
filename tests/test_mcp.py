"""The explorer's tools for agents (vit/ui/tools.py) over the Model Context Protocol, called as an
agent calls them: the `mcp` client library against `python app.py` on loopback. Exactly three
tools — classify_image, explain_image, list_models — each with a description and a described,
typed parameter for everything it takes (the page's handlers and its file-taking /classify are no
tools); classify_image reads a drawn digit right; explain_image gives the answer and two
pictures; a URL, a path, bad base64 and an oversized picture are refused in one line before
anything is fetched or decoded; VIT_MCP=0 serves no MCP."""
import asyncio
import base64
import io
import json
import os
import subprocess
import sys
import urllib.error
import urllib.request

import pytest
from conftest import ROOT, free_port

from vit.data.examples import render_digit

pytestmark = pytest.mark.server

mcp = pytest.importorskip("mcp")


def call(url: str, steps):
    """Run `steps(session)` in an MCP session with the app at `url`."""
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    async def run():
        async with streamable_http_client(url + "gradio_api/mcp/") as (read, write, _):
            async with ClientSession(read, write) as session:
                await session.initialize()
                return await steps(session)
    return asyncio.run(run())


def png(digit: str) -> str:
    buf = io.BytesIO()
    render_digit(digit).save(buf, "PNG")
    return base64.b64encode(buf.getvalue()).decode()


def test_three_tools_each_described_for_an_agent(app_server):
    tools = call(app_server[1], lambda s: s.list_tools()).tools
    assert sorted(t.name for t in tools) == ["classify_image", "explain_image", "list_models"]
    for t in tools:
        assert len(t.description) > 80, t.name
        for name, schema in t.inputSchema.get("properties").items():
            assert schema["type"] == "string" and len(schema.get("description", "")) > 20, name
    classify = next(t for t in tools if t.name == "classify_image")
    assert classify.inputSchema.get("required") == ["image"]          # the model is optional


def test_classify_and_explain_a_drawn_digit(app_server):
    async def steps(s):
        return (await s.call_tool("classify_image", {"image": png("7")}),
                await s.call_tool("explain_image", {"image": "data:image/png;base64," + png("3"),
                                                    "model": "mnist"}),
                await s.call_tool("list_models"))
    classified, explained, models = call(app_server[1], steps)
    assert not classified.isError
    answer = json.loads(classified.content[0].text)                  # a dict, as Gradio prints it
    assert answer["answer"] == "7" and answer["is_class"] and answer["model"] == "mnist"
    assert abs(sum(answer["probabilities"].values()) - 1) < 1e-3
    kinds = [c.type for c in explained.content]
    assert not explained.isError and kinds.count("image") == 2, kinds
    assert json.loads(explained.content[0].text)["answer"] == "3"
    listed = json.loads(models.content[0].text)
    assert [m["name"] for m in listed][0] == "mnist" and listed[0]["classes"][7] == "7"


@pytest.mark.parametrize("image, message", [
    ("http://169.254.169.254/latest/meta-data", "fetches no URL"),
    ("file:///etc/passwd", "fetches no URL"),
    ("/etc/passwd", "reads no file"),
    ("not base64 at all!", "not valid base64"),
    ("A" * 3_000_000, None),                     # past the request's size limit: refused whole
    (base64.b64encode(b"GIF89a" + b"\0" * 100).decode(), "not an image"),
], ids=["metadata-url", "file-url", "path", "bad-base64", "3-MB", "broken-gif"])
def test_what_an_agent_must_not_get_is_one_line(app_server, image, message):
    if message is None:
        req = urllib.request.Request(app_server[1] + "gradio_api/mcp/", json.dumps(
            {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
                "name": "classify_image", "arguments": {"image": image}}}).encode(),
            {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"})
        # Refused before it is read whole: HTTP 413, or the connection closed mid-body.
        with pytest.raises((urllib.error.HTTPError, ConnectionError, urllib.error.URLError)) as e:
            urllib.request.urlopen(req, timeout=30)
        assert getattr(e.value, "code", 413) == 413
        return
    result = call(app_server[1], lambda s: s.call_tool("classify_image", {"image": image}))
    text = " ".join(c.text for c in result.content if c.type == "text")
    assert result.isError and message in text and "\n" not in text.strip(), text
    assert "Traceback" not in text and "/tmp" not in text


@pytest.mark.server
def test_vit_mcp_0_serves_no_mcp():
    port = free_port()
    env = {"GRADIO_SERVER_PORT": str(port), "GRADIO_SERVER_NAME": "127.0.0.1", "VIT_MCP": "0",
           "GRADIO_ANALYTICS_ENABLED": "False"}
    proc = subprocess.Popen([sys.executable, "app.py"], cwd=ROOT, env={**os.environ, **env},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        import time
        for _ in range(120):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2)
                break
            except OSError:
                time.sleep(0.5)
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/gradio_api/mcp/schema", timeout=10)
        assert e.value.code == 404
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def test_a_jpeg_is_read_not_refused_as_a_path(app_server):
    """Issue 36, finding 6: base64 of a JPEG starts with "/9j/" and was refused as a server path."""
    buf = io.BytesIO()
    render_digit("4").convert("RGB").save(buf, "JPEG", quality=90)
    text = base64.b64encode(buf.getvalue()).decode()
    assert text.startswith("/9j/")

    async def steps(s):
        return await s.call_tool("classify_image", {"image": text})
    got = call(app_server[1], steps)
    assert not got.isError, got.content[0].text
    assert json.loads(got.content[0].text)["answer"] == "4"


def test_an_argument_of_the_wrong_type_is_not_quoted_back(app_server):
    """Issue 36, second attack: 1.5 MB sent as `image` came back as 1.5 MB of error message."""
    async def steps(s):
        return await s.call_tool("classify_image", {"image": [0] * 300_000})
    got = call(app_server[1], steps)
    assert got.isError and len(got.content[0].text) <= 300


def test_a_burst_of_calls_is_bounded_in_one_line_without_internal_addresses(app_server):
    """Issue 46, finding 12: Gradio's MCP server called a queued tool back over HTTP: refusals
    named the internal URL (http://127.0.0.1:PORT/gradio_api/queue/join) and the server's threads
    went 14 -> 110 after a burst. The tools run unqueued behind their own gate: one agent holds
    a few calls at once, the rest are told so in one line."""
    proc, base = app_server

    async def one():
        async def steps(s):
            return await s.call_tool("explain_image", {"image": png("2")})
        from mcp import ClientSession
        from mcp.client.streamable_http import streamable_http_client
        async with streamable_http_client(base + "gradio_api/mcp/") as (read, write, _):
            async with ClientSession(read, write) as session:
                await session.initialize()
                return await steps(session)

    async def burst():
        return await asyncio.gather(*[one() for _ in range(24)])
    results = asyncio.run(burst())
    refused = [r.content[0].text for r in results if r.isError]
    assert refused and len(refused) < len(results), refused
    for text in refused:
        assert "under way" in text and "\n" not in text.strip(), text
        assert "http" not in text and "127.0.0.1" not in text, text
    threads = len(os.listdir(f"/proc/{proc.pid}/task"))
    assert threads <= 64, f"{threads} threads after a burst of 24 calls"
