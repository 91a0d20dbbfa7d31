"""ViT Explorer: draw or upload a digit, see what a Vision Transformer predicts and where it looks.

The entry point that Hugging Face Spaces and `python app.py` run; the page itself is built by
`vit.ui.create_app`. Environment: GRADIO_SERVER_NAME / GRADIO_SERVER_PORT (where to serve),
VIT_CHECKPOINTS (a folder of checkpoint folders), VIT_DATA_DIR (test sets), VIT_DEVICE, VIT_THREADS.
"""
from __future__ import annotations

import os
import sys

# On a Hugging Face ZeroGPU Space the `spaces` package must be imported before torch: it lends a
# GPU to the model passes marked with vit.device.gpu_task (see docs/hosting.md).
if os.environ.get("SPACES_ZERO_GPU", "").lower() in ("1", "t", "true"):
    import spaces  # noqa: F401

from vit.ui import StartupError, create_app, launch  # noqa: E402

if __name__ == "__main__":
    try:
        demo = create_app()
    except StartupError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)
    launch(demo)
