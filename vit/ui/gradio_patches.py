"""Everything this app changes about Gradio 6.31, in one place, each with the reason.

1. `save_pil_to_cache` rewrites hash-named output files in place: two visitors who get the same
   picture race, and a download is cut off ("Too little data for declared Content-Length";
   bench/load.py: 4 of 500 before). Written once, atomically, instead.
2. `gr.Image` decodes uploads with PIL before the app sees them: an empty file, random bytes,
   HEIC, a PNG text-chunk bomb or a >179-megapixel image then fails inside Gradio with a
   multi-line message showing server paths. `SafeImage` hands the app the uploaded file's path
   untouched; vit.preprocessing checks size and pixel count before decoding anything, and answers
   in one line. (The drawing canvas is our own, vit/ui/canvas.py: it sends a PNG that
   vit.preprocessing opens with the same checks.)
3. Sliders and dropdowns check a value against the range and choices they were built with, and
   refuse it with a traceback in the log: a model with more layers than the first one could not
   be explored past the first model's depth. `FreeSlider` and `FreeDropdown` pass values on; the
   app's handlers clamp or refuse them (vit/ui/views.py `clamp`, vit/ui/models.py).
4. A client that names a file it did not upload is refused with a message that spells out the
   server's working directory ("Cannot move /srv/app/x to the gradio cache dir…");
   `hide_server_paths` keeps the refusal and drops the paths.
5. `gr.Label` always names the most probable class as its label (a value of the form
   {"label": …, "confidences": […]} is not read as such). `VerdictLabel` shows
   {"label": "not a digit", "confidences": [{"label": "3", "confidence": 0.41}, …]} as it is:
   the verdict on top, every class's calibrated probability below (vit.inference.Predictor.label).
6. The API page shows a `gr.File` input with a PDF as its sample and, without a label, as
   "parameter_49". `ImageFile` is a `gr.File` (the app reads the untouched file itself, see 2)
   whose sample is a PNG.
7. (A setting, in vit/ui/app.py `launch`.) Gradio's run history copies every event's inputs and
   outputs into the browser's localStorage: ~250 ms of main-thread work per event here, so the
   page stuttered while drawing, and every drawing stayed in the browser. `run_history=False`.
"""
from __future__ import annotations

import os
import tempfile
import types
from pathlib import Path

import gradio as gr

_patched: set[str] = set()


def never_rewrite_cached_images() -> None:
    """Patch 1 (idempotent): a hash-named file is written once, under a temporary name, then
    renamed into place."""
    if "cache" in _patched:
        return
    from gradio import processing_utils as pu

    def save_pil_to_cache(img, cache_dir, name="image", format="webp"):
        data = pu.encode_pil_to_bytes(img, format)
        folder = Path(cache_dir) / pu.hash_bytes(data)
        path = (folder / f"{name}.{format}").resolve()
        if not path.exists():
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
            raise RefusedPath("That file was not uploaded to this server, so it can't be read; "
                              "send the file itself.") from None

    pu._check_allowed = _check_allowed
    _patched.add("paths")


# The component below stays a plain gr.Image object (a subclass would make Gradio look for a
# custom front end and the page would not render); only the one method that decodes is replaced
# on the instance. (gr.HTML is the exception: Gradio renders subclasses of it — vit/ui/canvas.py.)

def _image_preprocess(self, payload):
    if payload is None:
        return None
    if payload.path and not (payload.url or "").startswith("data:"):
        return str(payload.path)
    try:                                       # a pasted data: URL: Gradio decodes it
        return gr.Image.preprocess(self, payload)
    except Exception:
        raise gr.Error("That picture could not be read; try saving it as PNG or JPEG.",
                       print_exception=False) from None


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
    """Patch 6: a file input for the API whose documented sample is an image (a PNG), not a PDF."""
    SAMPLE = "https://raw.githubusercontent.com/gradio-app/gradio/main/test/test_files/bus.png"

    def example_payload(self):
        from gradio_client import handle_file
        return handle_file(self.SAMPLE)

    def example_value(self):
        return self.SAMPLE
