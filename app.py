"""ViT Explorer: draw or upload a digit, see what a Vision Transformer predicts and where it looks.

The entry point that Hugging Face Spaces and `python app.py` run; the page itself is built by
`vit.ui.create_app`. Environment: GRADIO_SERVER_NAME / GRADIO_SERVER_PORT (where to serve),
VIT_CHECKPOINTS (a folder of checkpoint folders), VIT_DATA_DIR (test sets), VIT_DEVICE, VIT_THREADS.
`python app.py --checkpoints DIR` is VIT_CHECKPOINTS=DIR (a sweep's folder, say).
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
    import argparse
    parser = argparse.ArgumentParser(prog="python app.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoints", default=None,
                        help="a folder of checkpoint folders (default: $VIT_CHECKPOINTS, else checkpoints/)")
    args = parser.parse_args()
    try:
        demo = create_app(checkpoints=args.checkpoints)
    except StartupError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)
    launch(demo)
