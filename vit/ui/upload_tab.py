"""The Upload tab: a picture from disk or the clipboard (examples are on the Draw tab); and
`UploadHandlers`, the page's handlers of it (mixed into `Page`, vit/ui/page.py)."""
from __future__ import annotations

import time
from dataclasses import replace

import gradio as gr

from vit.ui.boundary import Head, Layer, ModelName, SharedScale, UploadPath
from vit.ui.gradio_patches import SafeImage
from vit.ui.record import Visit


def build():
    # The note above the box, not in its label: a long label ran under the box's buttons.
    gr.Markdown("PNG, JPEG, WebP, GIF, BMP or TIFF. For digits, a photo of one written on paper "
                "works too.", elem_id="upload-hint")
    return SafeImage(type="filepath", image_mode=None, sources=["upload", "clipboard"],
                     label="Upload or paste a picture", elem_id="upload", height=420)


class UploadHandlers:
    """A picture uploaded, replaced or removed, and the Upload tab chosen. Uses `Page`'s
    `predictor`, `_read`, `_commit` and `_show_tab`."""
    def upload_changed(self, visit: Visit, path: UploadPath, name: ModelName,
                       shared: SharedScale, layer: Layer, head: Head):
        """The upload's change event. When one picture replaces another, Gradio fires it twice
        with the same file within milliseconds: the second changes nothing (its answer and its
        warning would only repeat the first's)."""
        now = time.monotonic()
        last, visit.upload_at = visit.upload_at, (path, name, now)
        if path is not None and last[:2] == (path, name) and now - last[2] < 2.0:
            return {}
        return self.analyse_upload(visit, path, name, shared, layer, head)

    def analyse_upload(self, visit: Visit, path: UploadPath, name: ModelName,
                       shared: SharedScale, layer: Layer, head: Head):
        base, p = visit.record, self.predictor(name)
        if path is None:                           # removed: the Upload tab asks for a picture
            mine = replace(base, upload=None,
                           on_screen=None if base.on_screen == "upload" else base.on_screen)
            item = a = None
        else:
            item, a = self._read("upload", path, p, name)
            mine = base.showing(item, "upload")
        mine = replace(mine, model=name, shared=shared, layer=layer, head=head)
        return self._commit(visit, base, mine, known=(item, a))

    def to_upload_tab(self, visit: Visit, path: UploadPath, name: ModelName,
                      shared: SharedScale, layer: Layer, head: Head):
        """On the Upload tab: its picture's answer; with none yet, a headline asking for one that
        says what the answer below still belongs to."""
        base, kept = visit.record, visit.record.upload
        if path is None:
            mine, item, a = replace(base, tab="upload"), None, None
        else:
            if kept is not None and kept.source == path and kept.model == name:
                item, a = kept, None
            else:
                item, a = self._read("upload", path, self.predictor(name), name)
            mine = replace(base.showing(item, "upload"), tab="upload")
        mine = replace(mine, model=name, shared=shared, layer=layer, head=head)
        return self._show_tab(visit, base, mine, (item, a))
