"""ViT Explorer: draw or upload a digit, see what a Vision Transformer predicts and where it looks.

The entry point that Hugging Face Spaces and `python app.py` run; the page itself is built by
`vit.ui.create_app`. `python app.py --checkpoints DIR` is VIT_CHECKPOINTS=DIR (a sweep's folder,
say). Where to serve: GRADIO_SERVER_NAME, GRADIO_SERVER_PORT. Every other setting, its default
and bounds: vit/settings.py, read once here and passed down; their table is docs/hosting.md.
"""
from __future__ import annotations

import os
import sys

# On a Hugging Face ZeroGPU Space the `spaces` package must be imported before torch: it lends a
# GPU to the model passes marked with vit.device.gpu_task (see docs/hosting.md). The one setting
# read outside vit/settings.py: importing it would import torch first.
if os.environ.get("SPACES_ZERO_GPU", "").lower() in ("1", "t", "true"):
    import spaces  # noqa: F401

from vit.ui import StartupError, create_app, launch  # noqa: E402


def main(argv=None) -> int:
    """`python app.py [--checkpoints DIR]`: build the page and serve it; a setting or folder that
    stops start-up is one line on stderr and exit status 1."""
    import argparse

    import torch

    from vit.settings import SettingError, Settings
    parser = argparse.ArgumentParser(prog="python app.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoints", default=None,
                        help="a folder of checkpoint folders (default: $VIT_CHECKPOINTS, else the "
                             "bundled checkpoints)")
    args = parser.parse_args(argv)
    try:
        settings = Settings.from_env()                      # read once, passed down
        torch.set_num_threads(settings.threads)             # the process's, so set here
        demo = create_app(checkpoints=args.checkpoints, settings=settings)
    except (StartupError, SettingError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    launch(demo)
    return 0


if __name__ == "__main__":
    sys.exit(main())
