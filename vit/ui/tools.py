"""The explorer as tools for agents (the Model Context Protocol: `python app.py` serves them at
/gradio_api/mcp/, Gradio's MCP server, on unless VIT_MCP=0). Each tool's docstring and type hints
are what an agent reads. A picture comes as base64 text, never as a URL or a path: the server
fetches nothing and reads no file an agent names; its size is checked before it is decoded, as
on every other path (vit/preprocessing/decode.py).

The tools run outside Gradio's queue (`queue=False`), through a `Gate` of their own: Gradio's MCP
server reached a queued tool by an HTTP client calling back into this server — a thread pool per
burst (the server's threads went 14 -> 110 after one) and errors naming that internal address.
Unqueued, a tool call is a function call; the gate bounds how many run and wait, and how many of
those one visitor (vit/ui/identity.py) holds."""
from __future__ import annotations

import base64
import binascii
import json
import re
from collections import Counter

import gradio as gr
import numpy as np

from vit.inference import Predictor
from vit.preprocessing.decode import PreprocessError
from vit.ui import why_panel
from vit.ui.identity import Identity
from vit.ui.limits import MAX_REQUEST_BYTES

NAMES = ("classify_image", "explain_image", "list_models")     # the MCP tools, and only these
# A picture's base64 must fit in one request's body, with room for the rest of the request.
MAX_BASE64_CHARS = MAX_REQUEST_BYTES - 64_000
DATA_URL = re.compile(r"^data:image/[\w.+-]+;base64,", re.IGNORECASE)


class Gate:
    """At most `running` tool calls at once and `waiting` more waiting for their turn (beyond,
    "busy" at once), one visitor holding at most `per_visitor` of them. Waiting takes no thread:
    a call gets one (from a pool of `running`) when its turn comes."""

    def __init__(self, identity: Identity, running: int = 1, waiting: int = 8,
                 per_visitor: int = 4):
        import anyio
        self.identity, self.capacity, self.per_visitor = identity, running + waiting, per_visitor
        self.limiter = anyio.CapacityLimiter(running)
        self.held: Counter[str] = Counter()

    async def run(self, request, fn, *args):
        import anyio
        scope = getattr(getattr(request, "request", None), "scope", None) or {}
        who = self.identity.visitor(scope)
        unlimited = self.identity.unlimited(scope)
        # Checked and counted with no await between: calls arriving at once each see the others.
        if sum(self.held.values()) >= self.capacity:
            raise gr.Error("The server is busy with other agents' calls; try again in a moment.",
                           print_exception=False)
        if self.held[who] >= self.per_visitor and not unlimited:
            raise gr.Error(f"You have {self.per_visitor} calls under way already; wait for their "
                           f"answers.", print_exception=False)
        self.held[who] += 1
        try:
            return await anyio.to_thread.run_sync(fn, *args, limiter=self.limiter)
        finally:
            self.held[who] -= 1
            if not self.held[who]:
                del self.held[who]


class Tools:
    def __init__(self, page, identity: Identity = Identity()):
        self.page = page
        self.gate = Gate(identity)

    def _predictor(self, model) -> Predictor:
        return self.page.predictor(model or self.page.models.default)

    def _read(self, image, model):
        """(predictor, analysis) of a base64 picture; gr.Error with one line if it can't be."""
        p = self._predictor(model)
        try:
            source = picture_bytes(image)
            picture, ink = p.read(source)
            return p, p.analyse_input(picture, ink, source=source)
        except PreprocessError as e:
            raise gr.Error(str(e), print_exception=False) from None

    async def classify_image(self, image: str, model: str = "", request: gr.Request = None
                             ) -> str:
        """Classify a picture with one of the explorer's small Vision Transformers. Digits
        (MNIST), clothing (Fashion-MNIST) or photos of animals and vehicles (CIFAR-10): call
        list_models for the names. Probabilities are calibrated; a picture that is none of the
        model's classes is answered "not a digit" (or "not one of these N classes") with the
        reason.

        Args:
            image: the picture file's bytes as base64 (or a data: URL): PNG, JPEG, WebP, GIF, BMP or TIFF, at most about 1.4 MB. For digits, dark ink on a light background.
            model: the model's name from list_models (for example "mnist", "fashion-mnist", "cifar10"); empty for the default, handwritten digits.

        Returns:
            JSON: {"model", "answer", "is_class", "reason", "probabilities": {class: probability}} with the probabilities in decreasing order.
        """
        return await self.gate.run(request, self._classify, image, model)

    def _classify(self, image, model) -> str:
        p, a = self._read(image, model)
        return json.dumps(answer(p, a, model or self.page.models.default))

    async def explain_image(self, image: str, model: str = "", request: gr.Request = None
                            ) -> tuple[str, np.ndarray, np.ndarray]:
        """Explain a Vision Transformer's answer for a picture: the answer (as classify_image
        gives it) and two maps over the picture of what drove it. Relevance (Chefer et al.
        2021) follows the attention that raised the answer's score back to the patches;
        occlusion shows how much blanking each patch lowers the answer's probability. Brighter
        = mattered more; each picture has its colour scale.

        Args:
            image: the picture file's bytes as base64 (or a data: URL): PNG, JPEG, WebP, GIF, BMP or TIFF, at most about 1.4 MB.
            model: the model's name from list_models; empty for the default, handwritten digits.

        Returns:
            the answer (JSON, as classify_image gives it), the relevance map and the occlusion map (pictures).
        """
        return await self.gate.run(request, self._explain, image, model)

    def _explain(self, image, model) -> tuple[str, np.ndarray, np.ndarray]:
        p, a = self._read(image, model)
        relevance, occlusion, *_ = why_panel.render(p, a, p.explain(a, int(a.probs.argmax())))
        return json.dumps(answer(p, a, model or self.page.models.default)), relevance, occlusion

    def list_models(self) -> str:
        """The models this explorer offers: for each, its name (what the other tools take as
        `model`), what its pictures show, its classes, its input size and its measured test
        accuracy.

        Returns:
            JSON: a list of {"name", "title", "classes", "input", "test_accuracy"}, the default first.
        """
        out = []
        for name in self.page.models.names:
            c = self.page.models.configs[name]
            out.append({"name": name, "title": c.friendly_title, "classes": list(c.class_names),
                        "input": f"{c.model.image_size}x{c.model.image_size} px, "
                                 f"{'colour' if c.model.channels == 3 else 'grey'}",
                        "test_accuracy": c.test_accuracy})
        return json.dumps(out)


def picture_bytes(image) -> bytes:
    """A tool's `image` -> the file's bytes. Raises PreprocessError with one line."""
    if not isinstance(image, str) or not image.strip():
        raise PreprocessError("Send the picture file's bytes as base64 text.")
    text = DATA_URL.sub("", image.strip(), count=1)
    if len(text) > MAX_BASE64_CHARS:
        raise PreprocessError(f"The picture is over {MAX_BASE64_CHARS * 3 / 4 / 1e6:.1f} MB; "
                              f"send a smaller one.")
    try:
        # Base64 first: a JPEG's starts with "/9j/", which is no path to this server (nothing
        # here reads a file an agent names; the check below only explains a refusal).
        return base64.b64decode("".join(text.split()), validate=True)
    except (binascii.Error, ValueError):
        if text.lower().startswith(("http:", "https:", "file:", "/", "data:", "~")):
            raise PreprocessError("Send the picture file's bytes as base64 text: this server "
                                  "fetches no URL and reads no file.") from None
        raise PreprocessError("That is not valid base64.") from None


def answer(p: Predictor, a, name: str) -> dict:
    order = np.argsort(a.probs)[::-1]
    best = p.class_names[int(order[0])]
    return {"model": name, "answer": best if a.is_class else p.not_label,
            "is_class": bool(a.is_class), "reason": "" if a.is_class else a.verdict.reason,
            "probabilities": {p.class_names[int(i)]: round(float(a.probs[i]), 4) for i in order}}
