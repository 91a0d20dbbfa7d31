"""The Gradio page: `create_app(...)` builds it, `launch(demo)` serves it (see app.py)."""
from vit.ui.app import create_app, launch
from vit.ui.models import NoModelsError, StartupError

__all__ = ["create_app", "launch", "NoModelsError", "StartupError"]
