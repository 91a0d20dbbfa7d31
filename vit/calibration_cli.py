"""What the three commands that write a calibration into a checkpoint's config.json share
(`vit.fit_typical`, `vit.fit_faithfulness`, `vit.digit_check`): the command line they record,
and a failure said in one line with exit status 2 instead of a traceback."""
from __future__ import annotations

import shlex
import sys
from typing import Callable

from vit.checkpoint import CheckpointError
from vit.data.loading import DataError


def command_line(module: str, argv: list[str]) -> str:
    """The command as config.json records it: what a reader types to make the same record."""
    return shlex.join(["python", "-m", module, *argv])


def run_in_one_line(job: Callable[[], object]) -> int:
    """Run `job`; a bad checkpoint, data set or value is one line on stderr and status 2."""
    try:
        job()
    except (CheckpointError, DataError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0
