"""The analysis panels' controls: the layer and head sliders, a patch or a head picked on a
picture or in the strip, and the "why" lane after each analysis. Mixed into `Page`
(vit/ui/page.py), whose `predictor`, `_commit` and `view` they use."""
from __future__ import annotations

import math
from dataclasses import replace

from vit.pictures.attention_maps import patch_at
from vit.ui import pipeline, views
from vit.ui.boundary import Click, Head, Layer, StripChoice
from vit.ui.record import Visit
from vit.ui.render import AFTER_ANALYSIS, QUICK


class PanelControls:
    def explore(self, visit: Visit, layer: Layer, head: Head):
        """The layer and head sliders: the one-patch explorer (and a big model's attention
        picture, which shows the chosen layer's heads), and the sliders back in range if a typed
        value was out of it."""
        base = visit.record
        p = self.predictor(base.model)
        out = self._commit(visit, base, replace(base, layer=layer, head=head), QUICK)
        return {**out, **dict(zip(("layer", "head"), views.snapped(p, layer, head)))}

    def pick_patch(self, visit: Visit, evt: Click):
        base = visit.record
        p = self.predictor(base.model)
        try:
            x, y = (float(v) for v in evt.index[:2])
        except (TypeError, ValueError):
            x = y = float("nan")
        if not (math.isfinite(x) and math.isfinite(y)):        # a click can't be at NaN or inf
            return {}
        return self._choose_patch(visit, patch_at(x, y, views.PICK_SIZE, p.grid))

    def pick_strip_patch(self, visit: Visit, strip: StripChoice):
        """A tap on a patch in the pipeline strip (its value: {"pick": n}, 0-based)."""
        patch = pipeline.picked(strip)
        if patch is None or patch >= self.predictor(visit.record.model).grid ** 2:
            return {}
        return self._choose_patch(visit, patch)

    def pick_strip_head(self, visit: Visit, strip: StripChoice):
        """The strip's "one head" menus (its value: {"layer": l, "head": h}, 1-based): the page's
        layer and head, as the sliders set them — and the sliders follow."""
        chosen = pipeline.picked_head(strip)
        if chosen is None:
            return {}
        layer, head = (v + 1 for v in views.clamp(self.predictor(visit.record.model), *chosen,
                                                  None)[:2])
        return {**self.explore(visit, layer, head), "layer": layer, "head": head}

    def _choose_patch(self, visit: Visit, patch: int):
        """The chosen patch, which the strip, the explorer, the step-by-step panel and "How it
        learned" follow."""
        base = visit.record
        return self._commit(visit, base, replace(base, patch=patch), QUICK)

    def pick_head(self, visit: Visit, evt: Click):
        """A click on a map of the layers x heads picture opens that layer and head below (the
        sliders then move, and their change event redraws)."""
        p = self.predictor(visit.record.model)
        try:
            x, y = (float(v) for v in evt.index[:2])
        except (TypeError, ValueError):
            return {}
        hit = views.grid_hit(p, x, y) if math.isfinite(x) and math.isfinite(y) else None
        if hit is None:
            return {}
        return {k: v + 1 for k, v in zip(("layer", "head"), hit) if v is not None}

    def why(self, visit: Visit):
        """After each analysis, for the input on screen: the lead map beside the answer, the
        strip with that map's patch, "What drove the answer" — and the panels drawn only while
        open (the step-by-step walk, the logit lens, how it learned, the second model; render
        skips a closed panel's views)."""
        return self.view(visit.record, AFTER_ANALYSIS, visit=visit)
