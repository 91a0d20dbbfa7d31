"""The registered panels, in page order. Each is a module with:

- `VIEWS`: {names of the views it draws together: how, from a record seen through
  vit/ui/render.py's `Seen`} — `render` draws them, and what each read decides when it is drawn again;
- `OPEN`: the record field that says it is open (drawn only then), or None;
- `place(ctx)`: its components, laid out where the page puts them (ctx: the first model `p`
  and `models`), returned as the panel's own record;
- `components(c)`: that record's components by the names its views and events use;
- `wire(w, c)`: its own events over those components (w: vit/ui/app.py's `Wiring`).

A new panel is a module with these five and a line here: nothing else lists its views."""
from __future__ import annotations

from vit.ui import compare_panel, lens_panel, mechanism_panel, training_panel, views, why_panel

PANELS = (why_panel, views, mechanism_panel, lens_panel, training_panel, compare_panel)
