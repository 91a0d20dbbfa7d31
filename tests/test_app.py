"""The app as a client sees it: `python app.py` on a free port, called with gradio_client.

Drawings (the canvas's PNG values), an empty canvas, odd formats, EXIF, hostile and over-size
files, a file the client did not upload, out-of-range sliders and unknown models: an answer or
one line without a server path, and the server keeps serving, never printing a traceback. The API
page leads with /classify; two digits side by side are "not a digit", and the page says why."""
import io

import numpy as np
import pytest
from PIL import Image

from vit.data.examples import render_digit
from vit.ui.canvas import drawing_value

gradio_client = pytest.importorskip("gradio_client")
from gradio_client import Client, handle_file  # noqa: E402

pytestmark = pytest.mark.server


@pytest.fixture(scope="module")
def client(app_server):
    return Client(app_server[1], verbose=False)


def label_of(result) -> str:
    return result["label"]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("inputs")
    seven = Image.new("L", (600, 600), 255)
    seven.paste(render_digit("7", 260, 20), (300, 40))           # drawn-looking, off-centre
    seven.save(d / "seven.png")
    Image.new("RGB", (300, 300), "white").save(d / "blank.png")
    Image.new("L", (1, 1), 0).save(d / "one_pixel.png")
    Image.new("L", (12000, 12000), 255).save(d / "huge.png")
    buf = io.BytesIO()
    seven.save(buf, "PNG")
    (d / "truncated.png").write_bytes(buf.getvalue()[:300])
    (d / "notes.png").write_text("this is not an image")
    Image.new("RGBA", (200, 200), (0, 0, 0, 0)).save(d / "transparent.png")
    Image.fromarray((np.asarray(seven, np.uint16) * 257).astype("<u2")).save(d / "sixteen.png")
    seven.convert("CMYK").save(d / "cmyk.jpg")
    # Files as an attacker sends them (Gradio used to decode these itself and answer with a
    # multi-line message showing server paths).
    (d / "empty.png").write_bytes(b"")
    (d / "random.png").write_bytes(bytes(np.random.default_rng(1).integers(0, 256, 5000, dtype=np.uint8)))
    (d / "photo.heic").write_bytes(b"\0\0\0\x18ftypheic\0\0\0\0mif1heic" + b"\0" * 300)
    from test_preprocess import _png_header_only, _text_bomb
    (d / "bomb.png").write_bytes(_png_header_only(60_000, 60_000))     # 3.6 gigapixels
    (d / "text_bomb.png").write_bytes(_text_bomb())
    sideways = Image.new("RGB", (600, 600), "white")
    sideways.paste(render_digit("7", 400, 30).convert("RGB"), (100, 100))
    exif = Image.Exif()
    exif[0x0112] = 6                     # stored turned a quarter; EXIF says how to view it
    sideways.transpose(Image.Transpose.ROTATE_90).save(d / "sideways.jpg", exif=exif, quality=95)
    frames = [render_digit("3"), render_digit("8")]
    frames[0].save(d / "anim.gif", save_all=True, append_images=frames[1:], duration=100, loop=0)
    seven.convert("P").save(d / "palette.png")
    return d


def test_drawn_digit_is_classified(client, files):
    result = client.predict(handle_file(str(files / "seven.png")), api_name="/classify")
    assert label_of(result) == "7"
    confidences = {c["label"]: c["confidence"] for c in result["confidences"]}
    assert set(confidences) == {str(i) for i in range(10)}
    assert sum(confidences.values()) == pytest.approx(1, abs=1e-3)


@pytest.mark.parametrize("name, expected", [
    ("sixteen.png", "7"), ("cmyk.jpg", "7"), ("palette.png", "7"), ("anim.gif", "3"),
    ("sideways.jpg", "7"),
])
def test_unusual_formats_get_an_answer(client, files, name, expected):
    assert label_of(client.predict(handle_file(str(files / name)), api_name="/classify")) == expected


@pytest.mark.parametrize("name, message", [
    ("blank.png", "looks blank"), ("one_pixel.png", "looks blank"),
    ("huge.png", "the limit is"), ("truncated.png", "damaged or truncated"),
    ("notes.png", "not an image"), ("transparent.png", "looks blank"),
    ("empty.png", "empty"), ("random.png", "not an image"), ("photo.heic", "not an image"),
    ("bomb.png", "limit is 40 megapixels"), ("text_bomb.png", "damaged or truncated"),
])
def test_bad_files_get_a_clear_message_and_the_server_keeps_serving(app_server, client, files, name, message):
    with pytest.raises(Exception, match=message) as e:
        client.predict(handle_file(str(files / name)), api_name="/classify")
    assert "/tmp" not in str(e.value) and "\n" not in str(e.value).strip()   # no server paths
    assert app_server[0].poll() is None
    assert label_of(client.predict(handle_file(str(files / "seven.png")), api_name="/classify")) == "7"


def test_canvas_value_through_the_drawing_endpoint(client, tmp_path):
    """What the browser's canvas sends: a PNG data URL, black strokes on transparency."""
    ink = 255 - np.asarray(render_digit("4", 500, 34), np.uint8)
    layer = np.zeros((500, 500, 4), np.uint8)
    layer[..., 3] = ink
    Image.fromarray(layer, "RGBA").save(tmp_path / "layer.png")
    value = drawing_value(tmp_path / "layer.png")
    out = client.predict(value, "mnist", True, 6, 1, None, api_name="/analyse_drawing")
    status, label = out[0], out[1]
    assert "**4**" in status and label_of(label) == "4"
    for picture in out[2:8]:
        assert picture is not None


def test_empty_canvas_is_a_friendly_state_not_an_error(client):
    out = client.predict({"png": None, "final": True, "seq": 3}, "mnist", True, 6, 1, None,
                         api_name="/analyse_drawing")
    assert "Draw a digit" in out[0] and not out[1]          # no prediction shown


@pytest.mark.parametrize("size, message", [
    (50_300_000, "(?i)exceeds the maximum file size of 50000000|413"),   # Gradio's max_file_size,
    (60_000_000, "(?i)exceeds the maximum file size of 50000000|413"),   # the app's own limit
])
def test_an_upload_over_the_size_limit_is_refused_and_the_server_keeps_serving(
        app_server, client, files, tmp_path, size, message):
    big = tmp_path / "big.png"
    with open(big, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n")
        f.truncate(size)
    with pytest.raises(Exception, match=message):
        client.predict(handle_file(str(big)), api_name="/classify")
    assert app_server[0].poll() is None
    assert label_of(client.predict(handle_file(str(files / "seven.png")), api_name="/classify")) == "7"


def test_out_of_range_sliders_and_unknown_models_from_a_client(client, tmp_path):
    """Sliders are clamped by the app (a deeper model's layers are past the first model's
    slider range); an unknown model is one line. The server log stays free of tracebacks
    (checked when the server stops)."""
    ink = 255 - np.asarray(render_digit("4", 500, 34), np.uint8)
    layer = np.zeros((500, 500, 4), np.uint8)
    layer[..., 3] = ink
    Image.fromarray(layer, "RGBA").save(tmp_path / "layer.png")
    value = drawing_value(tmp_path / "layer.png")
    out = client.predict(value, "mnist", True, 99, -5, None, api_name="/analyse_drawing")
    assert "**4**" in out[0]
    with pytest.raises(Exception, match="no such model") as e:
        client.predict(value, "../../etc", True, 6, 1, None, api_name="/analyse_drawing")
    assert "\n" not in str(e.value).strip()


def test_the_api_page_leads_with_classify_taking_a_named_image(client):
    """The "Use via API" page: /classify first, its input called "image" with a PNG sample."""
    api = client.view_api(print_info=False, return_format="dict")
    names = list(api["named_endpoints"])
    assert names[0] == "/classify", names
    (param,) = api["named_endpoints"]["/classify"]["parameters"]
    assert param["parameter_name"] == "image" and param["label"] == "image"
    assert str(param["example_input"]["path"]).endswith(".png")
    # Every output of the drawing endpoint has a name, not "value_33".
    returns = api["named_endpoints"]["/analyse_drawing"]["returns"]
    assert not [r["label"] for r in returns if str(r["label"]).startswith("value_")]


def test_a_file_the_client_did_not_upload_is_refused_without_server_paths(app_server):
    """Raw HTTP, as a script would call the API: a FileData naming a server file."""
    import json
    import os
    import urllib.request
    url = app_server[1] + "gradio_api/call/classify"
    body = json.dumps({"data": [{"path": "x", "url": "file:///etc/passwd",
                                 "meta": {"_type": "gradio.FileData"}}]}).encode()
    req = urllib.request.Request(url, body, {"Content-Type": "application/json"})
    event = json.loads(urllib.request.urlopen(req, timeout=30).read())["event_id"]
    stream = urllib.request.urlopen(f"{url}/{event}", timeout=60).read().decode()
    assert "error" in stream and "not uploaded to this server" in stream
    assert os.getcwd() not in stream and "/etc/passwd" not in stream
    assert app_server[0].poll() is None


def two_digits_drawing(path):
    """A 4 and a 7 side by side, a clear gap between them: a number, not a digit."""
    im = Image.new("L", (600, 400), 255)
    im.paste(render_digit("4", 240, 20), (40, 80))
    im.paste(Image.fromarray(np.minimum(np.asarray(im.crop((300, 80, 540, 320))),
                                        np.asarray(render_digit("7", 240, 20)))), (300, 80))
    im.save(path)
    return path


def test_two_digits_side_by_side_are_not_a_digit(client, tmp_path):
    """/classify answers "not a digit" and still lists every class's probability."""
    result = client.predict(handle_file(str(two_digits_drawing(tmp_path / "47.png"))),
                            api_name="/classify")
    assert label_of(result).startswith("not ") and label_of(result) == "not a digit"
    confidences = {c["label"]: c["confidence"] for c in result["confidences"]}
    assert set(confidences) == {str(i) for i in range(10)}
    assert sum(confidences.values()) == pytest.approx(1, abs=1e-3)


def test_the_page_says_why_it_is_not_a_digit(client, tmp_path):
    ink = 255 - np.asarray(Image.open(two_digits_drawing(tmp_path / "47.png")), np.uint8)
    layer = np.zeros(ink.shape + (4,), np.uint8)
    layer[..., 3] = ink
    Image.fromarray(layer, "RGBA").save(tmp_path / "layer.png")
    value = drawing_value(tmp_path / "layer.png")
    out = client.predict(value, "mnist", True, 6, 1, None, api_name="/analyse_drawing")
    status, label = out[0], out[1]
    assert "Not a digit" in status
    assert "Two separate marks side by side — this model reads one digit at a time." in status
    assert label_of(label) == "not a digit" and len(label["confidences"]) == 10
