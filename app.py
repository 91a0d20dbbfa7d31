"""ViT Explorer: draw or upload a digit, see what a Vision Transformer predicts and where it looks.

The entry point that Hugging Face Spaces and `python app.py` run; the page itself is built by
`vit.ui.create_app`. `python app.py --checkpoints DIR` is VIT_CHECKPOINTS=DIR (a sweep's folder,
say). Environment (each bound and its default: vit/ui/limits.py and docs/hosting.md):
- where to serve: GRADIO_SERVER_NAME, GRADIO_SERVER_PORT;
- what to serve: VIT_CHECKPOINTS (a folder of checkpoint folders), VIT_HUB_MODELS (Hub models
  beside them), VIT_DATA_DIR (test sets; MNIST's and Fashion-MNIST's fetched there when missing, from
  VIT_DATA_URL if set), VIT_DEVICE (auto, cpu, cuda…), VIT_THREADS (torch
  threads per request, set here for the whole process), VIT_MCP (0: no MCP tools), VIT_WARM
  (0: nothing computed before the first visitor);
- bounds for a public host: VIT_SESSIONS, VIT_QUEUE_SIZE, VIT_CONNECTIONS,
  VIT_UPLOADS_PER_MINUTE, VIT_UPLOADS_IN_FLIGHT, VIT_UPLOAD_CACHE_MB, VIT_TRUSTED_PROXIES,
  VIT_UNLIMITED_LOCAL, VIT_MONITORING;
- SPACE_ID: set by a Hugging Face Space (one proxy in front is then trusted: vit/ui/identity.py);
  SPACES_ZERO_GPU: set by a ZeroGPU Space.
"""
from __future__ import annotations

import os
import sys

# On a Hugging Face ZeroGPU Space the `spaces` package must be imported before torch: it lends a
# GPU to the model passes marked with vit.device.gpu_task (see docs/hosting.md).
if os.environ.get("SPACES_ZERO_GPU", "").lower() in ("1", "t", "true"):
    import spaces  # noqa: F401

from vit.ui import StartupError, create_app, launch  # noqa: E402


def main(argv=None) -> int:
    """`python app.py [--checkpoints DIR]`: build the page and serve it; a setting or folder that
    stops start-up is one line on stderr and exit status 1."""
    import argparse

    import torch

    from vit.ui.limits import threads_from_env
    parser = argparse.ArgumentParser(prog="python app.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoints", default=None,
                        help="a folder of checkpoint folders (default: $VIT_CHECKPOINTS, else the "
                             "bundled checkpoints)")
    args = parser.parse_args(argv)
    try:
        torch.set_num_threads(threads_from_env())          # the process's, so set here
        demo = create_app(checkpoints=args.checkpoints)
    except StartupError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    launch(demo)
    return 0


if __name__ == "__main__":
    sys.exit(main())
