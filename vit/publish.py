"""Publish a checkpoint on the Hugging Face Hub: `python -m vit.publish card FOLDER` (re)writes
its model card from its config.json; `python -m vit.publish push FOLDER user/repo` uploads its
config, weights and card (a token from `hf auth login` or HF_TOKEN). See vit/hub.py."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from vit.checkpoint import CheckpointError, read_config
from vit.hub import CARD, model_card, push_to_hub
from vit.storage import save_text


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m vit.publish", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    card = sub.add_parser("card", help="write FOLDER/README.md from FOLDER/config.json")
    card.add_argument("folder")
    push = sub.add_parser("push", help="upload FOLDER's config, weights and card to a Hub repo")
    push.add_argument("folder")
    push.add_argument("repo_id", help="user/repo or hf://user/repo (made if it does not exist)")
    push.add_argument("--private", action="store_true")
    args = p.parse_args(argv)
    try:
        config = read_config(args.folder)
        save_text(Path(args.folder) / CARD, model_card(config.to_dict()))
        if args.command == "push":
            print(push_to_hub(args.folder, args.repo_id.removeprefix("hf://"),
                              private=args.private or None))
        else:
            print(f"wrote {Path(args.folder) / CARD}")
    except (CheckpointError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except Exception as e:          # huggingface_hub's errors (no token, no network): one line
        why = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        print(f"error: could not push to the Hub: {why}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
