"""The Gradio page: `create_app(...)` builds it, `launch(demo)` serves it (see app.py).

Nothing is imported here until asked for: the panels import their siblings through this package
(`from vit.ui import why_panel`), and an eager `from vit.ui.app import ...` here made every such
import a circle through the whole page."""
__all__ = ["create_app", "launch", "NoModelsError", "StartupError"]


def __getattr__(name: str):
    if name in ("create_app", "launch"):
        from vit.ui import app
        return getattr(app, name)
    if name in ("NoModelsError", "StartupError"):
        from vit.ui import models
        return getattr(models, name)
    raise AttributeError(f"module 'vit.ui' has no attribute {name!r}")
