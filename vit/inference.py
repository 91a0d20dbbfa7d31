"""From an input image to everything the app shows, for one loaded checkpoint.

`Predictor` wraps a `Checkpoint`: it lays any picture out the way the checkpoint's training data
was made (its data set's preprocessing style, at its image size), runs the model once with
attention, and hands back an `Analysis`: calibrated probabilities (the checkpoint's temperature),
attention, and the verdict of `vit.explain.ood.judge` — one of the model's classes, or "not a digit" and
why. The app calls it; so do `vit.predict` and notebooks, so all three agree.
"""
from __future__ import annotations

import contextlib
import hashlib
import logging
import math
import os
import threading
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
import torch

from vit.checkpoint import Checkpoint, CheckpointError, open_checkpoint
from vit.device import gpu_task
from vit.explain import attribution, ood
from vit.explain.attention import Explanation, explain
from vit.explain.logit_lens import LogitLens, logit_lens
from vit.explain.over_training import frames as over_training_frames
from vit.explain.scoreboard import Scoreboard, score
from vit.preprocessing import model_input, normalize_image
from vit.preprocessing.decode import PreprocessError, decode, open_image
from vit.preprocessing.layout import to_model_image
from vit.text import code, confidence, md, percent, short_paths

log = logging.getLogger("vit")

BIG_MODEL = 5_000_000      # parameters past which occlusion blanks coarser squares (see below)
# Per model, the attention of the inputs seen last is kept, so that a slider, a patch click, a
# panel or a switch back to this model reuses their one forward pass: at most this many bytes of
# maps (one ViT-B/16 input holds 22 MB; one MNIST-sized model's, 0.24 MB), and always the newest.
EXPLAINED_BYTES = 128 << 20
# While the pen moves, every ~120 ms frame's maps (for the pipeline strip) are kept apart, in a
# small store: a Fashion-MNIST drawing's ~27 frames (3.7 MB each) would otherwise push every
# visitor's finished inputs out of the one above. The lift's pass is taken from here when the
# last frame was the finished drawing.
LIVE_BYTES = 16 << 20


@torch.no_grad()
def _logits(model, x: torch.Tensor) -> tuple[torch.Tensor, np.ndarray]:
    """The fused path's logits of one input and its [CLS] token, on the CPU."""
    tokens, _ = model.forward_features(x.to(next(model.parameters()).device))
    return model.forward_head(tokens).float()[0].cpu(), tokens[0, 0].float().cpu().numpy()


# Every pass of a model the app makes, marked for a ZeroGPU Space (vit/device.py `gpu_task`;
# unchanged anywhere else).
_explain = gpu_task(explain)
_glance = gpu_task(_logits)
_relevance = gpu_task(attribution.relevance)
_occlusion_maps = gpu_task(attribution.occlusion_maps)
_deletion_curve = gpu_task(attribution.deletion_curve)
_ablate = gpu_task(attribution.ablate)
_lens = gpu_task(logit_lens)
_score = gpu_task(score)
_frames = gpu_task(over_training_frames)
# And the class-specific maps of those inputs (relevance, occlusion: a few KB each), so that a tab
# switch or a panel re-rendering the same input and class does not compute them again.
ATTRIBUTED_BYTES = 16 << 20
LENS_BYTES = 16 << 20
FRAMES_BYTES = 2 << 20


@dataclass
class Analysis:
    image: np.ndarray             # (S, S) or (S, S, 3) in [0, 1]: what the model sees
    probs: np.ndarray             # calibrated class probabilities (softmax of logits / temperature)
    verdict: ood.Verdict = ood.ACCEPT     # is it one of the model's classes at all?
    # Every head's attention (vit/explain/attention.py); None from the quick path while the pen
    # moves (`Predictor.glance`), which computes the probabilities alone.
    explanation: Explanation | None = None

    @property
    def is_class(self) -> bool:
        return self.verdict.is_class


@dataclass(frozen=True)
class Explained:
    """The explanation maps of one analysed input, computed before any view draws them (their
    backward passes and occlusion's forward passes: 70-350 ms on the bundled models), so that
    drawing a view computes nothing: for class `target`, its relevance and occlusion maps, and
    for the model's answer `answer`, the four maps the lead map is chosen among."""
    target: int
    relevance: np.ndarray
    occlusion: dict[str, np.ndarray]       # "probability" and "log-odds" drops, per patch
    answer: int
    maps: dict[str, np.ndarray]            # the answer's rollout, relevance, occlusion, raw attention
    answer_occlusion: dict[str, np.ndarray]


class Recent:
    """The newest values by key, at most `budget` bytes of them (the newest always kept); safe to
    share between a server's threads. Values are shared, so callers must not change them."""

    def __init__(self, budget: int):
        self.budget, self._items, self._bytes = budget, OrderedDict(), 0
        self._lock = threading.Lock()

    def get(self, key):
        with self._lock:
            if key not in self._items:
                return None
            self._items.move_to_end(key)
            return self._items[key][0]

    def put(self, key, value, size: int) -> None:
        with self._lock:
            if key in self._items:
                self._bytes -= self._items.pop(key)[1]
            self._items[key] = (value, size)
            self._bytes += size
            while self._bytes > self.budget and len(self._items) > 1:
                self._bytes -= self._items.popitem(last=False)[1][1]

    def __len__(self) -> int:
        return len(self._items)


def array_key(image: np.ndarray) -> bytes:
    """The identity of an array (a prepared input, say): its bytes, shape and type."""
    a = np.ascontiguousarray(image)
    h = hashlib.blake2b(f"{a.dtype}{a.shape}".encode(), digest_size=16)
    h.update(memoryview(a).cast("B"))
    return h.digest()


class NonFiniteAnswer(PreprocessError):
    """The model's probabilities are NaN or infinite for this input (broken weights). A
    PreprocessError, so that every handler shows its one line as it shows a bad input's."""


class Predictor:
    def __init__(self, checkpoint: Checkpoint | str, device=None):
        self.checkpoint = (checkpoint if isinstance(checkpoint, Checkpoint)
                           else open_checkpoint(checkpoint, device))
        self.model = self.checkpoint.model
        self.config = self.checkpoint.config                 # validated CheckpointConfig
        self.class_names: list[str] = self.checkpoint.class_names
        self.grid = self.model.cfg.grid
        self.size = self.model.cfg.image_size
        self._parameters = self.model.num_parameters()
        self._digits: Predictor | None | bool = None         # the digit check's model, once loaded
        self._explained = Recent(EXPLAINED_BYTES)
        self._live = Recent(LIVE_BYTES)
        self._attributed = Recent(ATTRIBUTED_BYTES)
        # Apart from those: one ViT-B/16 input's lens at 1,000 classes is ~9 MB, and would push
        # every relevance and occlusion map out. The training frames are small (a model's few).
        self._lenses = Recent(LENS_BYTES)
        self._over_training = Recent(FRAMES_BYTES)

    @property
    def device(self):
        return self.checkpoint.device

    def prepare(self, image) -> np.ndarray:
        """Any image the preprocessor accepts -> this model's input in [0, 1]: (S, S) for grey
        models, (S, S, 3) for colour ones. Raises PreprocessError."""
        return model_input(image, self.config.style, self.size)

    @property
    def reads_ink(self) -> bool:
        """Whether inputs get vit.explain.ood's ink checks: grey models of digit-style data sets."""
        return self.model.cfg.channels == 1 and self.config.style.drawn

    def read(self, image) -> tuple[np.ndarray, np.ndarray | None]:
        """Any image -> (this model's input, as `prepare` gives it; its ink map for the checks
        of vit.explain.ood, or None when this model has none or the input is a photo). The input is
        decoded once for both. Raises PreprocessError."""
        if not self.reads_ink:
            return self.prepare(image), None
        with _opened(image) as im:
            return to_model_image(im, self.config.style, self.size), ood.ink_map(im)

    def ink(self, image) -> np.ndarray | None:
        """The ink map of an input (None when this model does not check ink, or for a photo).
        Raises PreprocessError."""
        if not self.reads_ink:
            return None
        with _opened(image) as im:
            return ood.ink_map(im)

    def fits(self, image: np.ndarray) -> bool:
        """Whether `image` is already this model's input shape (a test-set image, say)."""
        want = (self.size, self.size) + ((3,) if self.model.cfg.channels == 3 else ())
        return image.shape == want

    def analyse(self, image) -> Analysis:
        """Any image -> Analysis. Raises PreprocessError."""
        return self.analyse_input(*self.read(image), source=image)

    def analyse_input(self, image: np.ndarray, ink: np.ndarray | None = None,
                      live: bool = False, source=None) -> Analysis:
        """An already prepared input (see `prepare`) -> Analysis. `ink`: the original input's
        ink map (`read`, `ink`), for the checks that need the drawing before it was shrunk;
        without it (a test-set image) only the calibrated probability can refuse. `live`: a
        frame while the pen moves (kept apart: `explanation`). `source`: the picture it was laid
        out from, for the checkpoint's digit check (`checked`); without it, none."""
        e = self.explanation(image, live)
        probs = _finite(e.probs)
        return Analysis(image, probs, self.checked(self.judge(ink, probs, e.features), probs,
                                                   source), e)

    def judge(self, ink: np.ndarray | None, probs: np.ndarray, features: np.ndarray | None):
        """vit.explain.ood's verdict, with the [CLS] token's distance from the training images
        where the checkpoint has them (vit/explain/typical.py)."""
        typical = self.checkpoint.typical
        far = None if typical is None or features is None else typical.distance(features)
        return ood.judge(ink, probs, self.config, far)

    def explanation(self, image: np.ndarray, live: bool = False) -> Explanation:
        """The forward pass with every head's attention for a prepared input: computed once per
        input, then reused from `Recent` (its arrays are shared: read-only). `live`: a frame
        while the pen moves, kept in the small store of frames (LIVE_BYTES), from which a
        finished input's pass moves to the main one."""
        key = array_key(image)
        e = self._explained.get(key)
        if e is not None:
            return e
        e = self._live.get(key)
        if e is None:
            e = _explain(self.model, self.tensor(image), self.config.temperature)
            for v in (e.probs, e.attn, e.logits, e.features):
                v.setflags(write=False)
        (self._live if live else self._explained).put(key, e, e.attn.nbytes)
        return e

    def glance(self, image: np.ndarray, ink: np.ndarray | None = None) -> Analysis:
        """The answer alone, while the pen still moves: the fused attention path (no maps kept),
        a fraction of `analyse_input`'s time on a big model. Same probabilities, up to rounding."""
        logits, features = _glance(self.model, self.tensor(image))
        probs = _finite(torch.softmax(logits / self.config.temperature, -1).numpy())
        return Analysis(image, probs, self.judge(ink, probs, features))

    # --- a second opinion: pictures of digits are not clothing ----------------------------------
    def checked(self, verdict: ood.Verdict, probs: np.ndarray, source) -> ood.Verdict:
        """`verdict`, with the checkpoint's digit check (vit/digit_check.py): a picture this model
        is unsure of (best class below `own_below`) that its digit model reads as a digit at
        `digit_at_least` or more, by all that model's own rules, is "not one of these" — the
        clothing model took six in ten of other writers' digits for garments, with a garment's
        confidence. `source`: the picture as sent, laid out again as the digit model lays it out."""
        check = self.config.digit_check
        if (not verdict or source is None or check is None
                or float(probs.max()) >= check["own_below"]):
            return verdict
        digits = self.digit_model()
        if digits is None:
            return verdict
        try:
            seen = digits.glance(*digits.read(source))
        except PreprocessError:
            return verdict
        best = int(seen.probs.argmax())
        if not seen.is_class or seen.probs[best] < check["digit_at_least"]:
            return verdict
        return ood.Verdict(False, f"The digit model reads this as {digits.class_names[best]} "
                                  f"({confidence(seen.probs[best])}): a digit, "
                                  f"{ood.not_label(self.config)}.", "digit")

    def digit_model(self) -> Predictor | None:
        """The digit check's model, loaded on first use (a few MB; the answer alone is ever
        computed with it, so its stores stay empty), or None where the checkpoint has no check or
        its digit model is missing or not a digit model (said once in the log)."""
        check = self.config.digit_check
        if check is None or self._digits is False:
            return None
        if self._digits is None:
            folder = self.checkpoint.folder.parent / check["model"]
            try:
                digits = Predictor(open_checkpoint(folder, self.device))
            except CheckpointError as e:
                log.warning("the digit check is off: %s", e)
                self._digits = False
                return None
            if digits.class_names != [str(d) for d in range(10)]:
                log.warning("the digit check is off: %s is not a digit model", folder.name)
                self._digits = False
                return None
            self._digits = digits
        return self._digits

    # --- what drove the answer (vit/explain/attribution.py) --------------------------------------------
    def tensor(self, image: np.ndarray) -> torch.Tensor:
        """A prepared input (S, S) or (S, S, 3) in [0, 1] -> the normalised (1, C, S, S) batch."""
        return normalize_image(image, self.config.mean, self.config.std)

    @property
    def background(self) -> torch.Tensor:
        """(C,): a blanked patch, normalised. Grey models read ink on black, so empty is 0; for
        colour models the data set's mean colour carries the least information."""
        C = self.model.cfg.channels
        if C != 1:
            return torch.zeros(C)
        return self.tensor(np.zeros((1, 1), np.float32)).reshape(1)          # an empty pixel

    def _attribution(self, kind: str, image: np.ndarray, target: int, compute):
        """`compute()` once per (kind, input, class); later calls share its (read-only) result."""
        key = (kind, array_key(image), int(target))
        got = self._attributed.get(key)
        if got is None:
            got = compute()
            arrays = list(got.values()) if isinstance(got, dict) else [got]
            for a in arrays:
                a.setflags(write=False)
            self._attributed.put(key, got, sum(a.nbytes for a in arrays))
        return got

    def relevance(self, image: np.ndarray, target: int) -> np.ndarray:
        return self._attribution("relevance", image, target, lambda: _relevance(
            self.model, self.tensor(image), target))

    @property
    def occlusion_block(self) -> int:
        """Patches per side of what occlusion blanks at once: 1, or 2 on grids finer than 8x8
        (a 14x14 grid then costs 49 images rather than 196); for a big model (> 5 M parameters,
        e.g. ViT-B/16 at 86 M) squares that cut the grid into at most 4x4, so 16 images: on a
        2-core CPU ViT-B/16's 49 took 11 s, a panel that long reads as broken."""
        if self._parameters > BIG_MODEL:
            return math.ceil(self.grid / 4)
        # At most 16 x 16 squares: a 64 x 64 grid blanked 2 x 2 took 1,025 passes (minutes).
        return max(2 if self.grid > 8 else 1, math.ceil(self.grid / 16))

    def occlusion_maps(self, image: np.ndarray, target: int) -> dict[str, np.ndarray]:
        return self._attribution("occlusion", image, target, lambda: _occlusion_maps(
            self.model, self.tensor(image), target, self.background, self.config.temperature,
            self.occlusion_block))

    def occlusion(self, image: np.ndarray, target: int, measure: str = "probability") -> np.ndarray:
        return self.occlusion_maps(image, target)[measure]

    def deletion_auc(self, image: np.ndarray, target: int, importance: np.ndarray,
                     steps: int | None = None) -> float:
        return attribution.deletion_auc(*_deletion_curve(
            self.model, self.tensor(image), target, importance, self.background,
            self.config.temperature, steps))

    def lens(self, image: np.ndarray) -> LogitLens:
        """The patch logit lens of an input (vit/explain/logit_lens.py), computed once per input."""
        def compute():
            got = _lens(self.model, self.tensor(image), self.config.temperature)
            for a in (got.cls, got.patches):
                a.setflags(write=False)             # shared by every request for this input
            return {"cls": got.cls, "patches": got.patches}
        key = array_key(image)
        got = self._lenses.get(key)
        if got is None:
            got = compute()
            self._lenses.put(key, got, got["cls"].nbytes + got["patches"].nbytes)
        return LogitLens(got["cls"], got["patches"])

    def over_training(self, image: np.ndarray, patch: int) -> list:
        """The input through this checkpoint's training snapshots and the finished model
        (vit/explain/over_training.py): one Frame each, in training order; computed once per
        input and patch (a slider moving over them reads them again)."""
        key = (array_key(image), int(patch))
        got = self._over_training.get(key)
        if got is None:
            got = tuple(_frames(self.model, self.checkpoint.folder, self.tensor(image), patch,
                                self.config.temperature))
            self._over_training.put(key, got, sum(f.probs.nbytes + f.rollout.nbytes +
                                                  f.position.nbytes for f in got))
        return list(got)

    def ablate(self, image: np.ndarray, off) -> np.ndarray:
        return _ablate(self.model, self.tensor(image), off, self.config.temperature)

    def maps(self, a: Analysis, t: int) -> dict[str, np.ndarray]:
        """The four maps the scoreboard tests, for class `t` of an analysed input, from what this
        Predictor keeps (its attention pass, relevance and occlusion): nothing computed twice.
        Occlusion by log-odds ranks as P does, and still ranks the patches of an answer so sure
        that blanking one leaves P at 1.00."""
        return {"rollout": a.explanation.rollout_map, "relevance": self.relevance(a.image, t),
                "occlusion": self.occlusion(a.image, t, "log-odds"),
                "raw attention": a.explanation.cls_maps[-1].mean(0)}

    def explain(self, a: Analysis, target: int, kept_only: bool = False) -> Explained | None:
        """The maps the "why" views show for class `target` of an analysed input, and the answer's
        (each computed once per input and class, and kept: vit/inference.py's Recent).
        `kept_only`: None unless all are kept already — for a view on a quick lane, which must
        never wait for them (occlusion alone is 70-350 ms on the bundled models)."""
        t, best = int(target), int(a.probs.argmax())
        key = array_key(a.image)
        if kept_only and any(self._attributed.get((kind, key, c)) is None
                             for kind in ("relevance", "occlusion") for c in {t, best}):
            return None
        return Explained(t, self.relevance(a.image, t), self.occlusion_maps(a.image, t), best,
                         self.maps(a, best), self.occlusion_maps(a.image, best))

    def faithfulness(self, a: Analysis, steps: int = 16, random_orders: int = 3) -> dict[str, float]:
        """The deletion test of rollout, relevance and occlusion on an analysed input, for the
        model's answer (for a class the model gives ~0 there is nothing left to fall):
        {"rollout", "relevance", "occlusion", "random order" (the mean of `random_orders` fixed
        random orders)} -> the mean probability of the answer as patches are blanked, most
        important first (lower = the map found what the answer rests on)."""
        t = int(a.probs.argmax())
        maps = self.maps(a, t)
        aucs = {k: self.deletion_auc(a.image, t, maps[k], steps)
                for k in ("rollout", "relevance", "occlusion")}
        rng = np.random.default_rng(0)
        aucs["random order"] = float(np.mean([
            self.deletion_auc(a.image, t, rng.random(self.grid ** 2), steps)
            for _ in range(random_orders)]))
        return aucs

    def scoreboard(self, a: Analysis, steps: int = 16, random_orders: int = 3) -> Scoreboard:
        """Deletion, insertion and the model-randomisation check of the four maps, for the
        model's answer on an analysed input (vit/explain/scoreboard.py). The trained model's maps
        are the ones the page already drew; only the randomised model's are computed."""
        t = int(a.probs.argmax())
        return _score(self.model, self.tensor(a.image), t, self.background,
                      self.config.temperature, self.occlusion_block, steps, random_orders,
                      maps=self.maps(a, t))

    @property
    def not_label(self) -> str:
        """"not a digit" (or "not one of these N classes" for a model of an unknown data set)."""
        return ood.not_label(self.config)

    def label(self, probs: np.ndarray, verdict: ood.Verdict | None = None) -> dict:
        """gr.Label's value: class name -> probability; for an input refused by `verdict`,
        {"label": "not a digit", "confidences": [{"label": class, "confidence": p}, …]}, which
        the app's Label shows (vit/ui/gradio_patches.py) with the classes still listed."""
        if verdict is None or verdict.is_class:
            return {name: float(p) for name, p in zip(self.class_names, probs)}
        order = np.argsort(probs)[::-1]
        return {"label": self.not_label,
                "confidences": [{"label": self.class_names[i], "confidence": float(probs[i])}
                                for i in order]}

    def card(self) -> str:
        """Markdown: what this model is and how it was made."""
        c, prov, m = self.config, self.config.provenance, self.model.cfg
        acc = c.test_accuracy
        layers = m.stem_layers
        stem = (f"{layers} × 3×3 conv stem ({m.stem_channels} channels: each token also sees a "
                f"{layers}-px rim around its patch), " if m.stem_channels else "")
        wall = prov.get("wall_time_seconds")
        # Every cell is Markdown: strings from the checkpoint's files escaped (vit/text.py).
        rows = [
            ("Data set", md(c.title)),
            # (the page's one format, as the Test set tab writes the same figure)
            ("Test accuracy", percent(acc) if acc is not None else "not recorded"),
            ("Parameters", f"{self.model.num_parameters():,}"),
            ("Architecture", f"{m.depth} layers × {m.heads} heads, width {m.dim}, MLP {m.mlp_dim}, "
                             f"{stem}{m.image_size}×{m.image_size} input in {m.patch_size}-px patches "
                             f"({self.grid}×{self.grid} grid + [CLS] = {self.grid ** 2 + 1} tokens)"),
            ("Trained with", code(short_paths(prov.get('command', '?')))
                             + " (folders cut to their last name; the whole command is in "
                             "config.json)"),
            ("Commit", code(prov.get('commit', '?'))),
            ("Trained on", f"{md(prov.get('date', '?'))}, {_epochs(prov.get('epochs', '?'))}, "
                           + (_minutes(wall) if isinstance(wall, (int, float)) else "? min")
                           + f" on {md(prov.get('device', '?'))}" + _from(c.training.get("init"))),
            ("Confidence", self._calibration_line()),
            ("Running on", str(self.device)),
        ]
        # (a header row that says something: an empty one read as a blank first row)
        return "\n".join(["| About | this model |", "|---|---|"] + [f"| **{k}** | {v} |"
                                                                   for k, v in rows])

    def _calibration_line(self) -> str:
        c = self.config
        if not c.calibration:
            return "not calibrated: the raw softmax"
        text = f"calibrated: logits divided by a temperature of {c.temperature:.3g}"
        if c.reject_below is not None:
            text += (f"; \"{self.not_label}\" below {100 * c.reject_below:.0f} % for the top "
                     f"class")
        fitted_on = c.calibration.get("fitted_on")
        return text + (f" (fitted on the {md(fitted_on, 160)})" if isinstance(fitted_on, str) else "")


def _epochs(n) -> str:
    """"1 epoch", "20 epochs" (a number from a file, escaped)."""
    return "1 epoch" if n == 1 else f"{md(n)} epochs"


def _from(init) -> str:
    """A fine-tune's start, said plainly (a trial read "1 epoch, under a minute" beside 99.45 %
    as all the training there was)."""
    if not isinstance(init, str) or not init:
        return ""
    return (f", fine-tuned from the trained checkpoint {code(short_paths(init))} (whose own "
            f"training is not counted here)")


def _minutes(seconds: float) -> str:
    """A run's wall time as the card says it: "under a minute", "18 min"."""
    return "under a minute" if seconds < 60 else f"{seconds / 60:.0f} min"


def _finite(probs: np.ndarray) -> np.ndarray:
    if not np.isfinite(probs).all():     # overflowing weights: never "9 (nan %)"
        raise NonFiniteAnswer("This model's answer for that input is not a number (its "
                              "weights overflow); try another model.")
    return probs


@contextlib.contextmanager
def _opened(image):
    """An input in the form its readers need not decode again: a file opened (and checked) once
    as a PIL image, a Sketchpad value's layer files read once, anything else as it is."""
    if isinstance(image, (str, os.PathLike, bytes, bytearray, memoryview)):
        with open_image(image) as im:
            yield im
    else:
        yield decode(image) if isinstance(image, dict) else image
