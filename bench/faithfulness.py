"""Which explanation map to believe, over the test set: the deletion test of each map.

    python -m bench.faithfulness [--checkpoint checkpoints/mnist] [--data-dir ../shared/data]
                                 [--n 200] [--steps 16]

For each of the first --n test images: the model's answer, then four orders of blanking patches
(most important first by attention rollout, Chefer relevance, occlusion, and three fixed random
orders — `Predictor.faithfulness`; the page's button runs the whole scoreboard, below), and
the mean probability of the answer along each curve (deletion AUC, Petsiuk et al. 2018; lower =
the map found what the answer rests on). Prints the mean and median per map, how often each map
beats rollout on the same image, and the time per image. The page runs the same test on the
current input ("Which map to believe for the answer?").

    python -m bench.faithfulness --scoreboard [--checkpoint C --n 50]

instead runs the page's whole scoreboard per image (`Predictor.scoreboard`): deletion and
insertion for rollout, relevance, occlusion and raw attention, and the model-randomisation check
(Spearman's rho of each map against the same map with the upper half of the blocks, the norm and
the head re-initialised). Prints each map's mean of the three and how often rho >= 0.7.
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from vit.data.loading import load_split
from vit.inference import Predictor


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--checkpoint", default="checkpoints/mnist")
    ap.add_argument("--data-dir", default="../shared/data")
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--scoreboard", action="store_true", help="the page's whole scoreboard")
    args = ap.parse_args(argv)
    p = Predictor(args.checkpoint, "cpu")
    split = load_split(p.config.dataset, args.data_dir, train=False)
    if args.scoreboard:
        scoreboard(p, split, args)
        return
    aucs: dict[str, list[float]] = {}
    started = time.perf_counter()
    for img in split.images[:args.n].numpy():
        a = p.analyse_input(img.astype(np.float32) / 255.0)
        for name, v in p.faithfulness(a, args.steps).items():
            aucs.setdefault(name, []).append(v)
    seconds = time.perf_counter() - started
    print(f"{args.checkpoint}: {args.n} test images, {args.steps}-step deletion curves, "
          f"{1000 * seconds / args.n:.0f} ms per image (all the maps)")
    roll = np.array(aucs["rollout"])
    for name, v in aucs.items():
        v = np.array(v)
        print(f"  {name:12s} deletion AUC mean {v.mean():.3f}  median {statistics.median(v):.3f}"
              + ("" if name == "rollout" else f"  lower than rollout on {100 * (v < roll).mean():.0f} %"))


def scoreboard(p: Predictor, split, args) -> None:
    rows: dict[str, dict[str, list[float]]] = {}
    started = time.perf_counter()
    for img in split.images[:args.n].numpy():
        board = p.scoreboard(p.analyse_input(img.astype(np.float32) / 255.0), args.steps)
        for name in board.deletion:
            r = rows.setdefault(name, {"deletion": [], "insertion": [], "rho": []})
            r["deletion"].append(board.deletion[name])
            r["insertion"].append(board.insertion[name])
            if name in board.correlation:
                r["rho"].append(board.correlation[name])
    seconds = time.perf_counter() - started
    print(f"{args.checkpoint}: {args.n} test images, {args.steps}-step curves, "
          f"{1000 * seconds / args.n:.0f} ms per image (the whole scoreboard)")
    for name, r in rows.items():
        rho = np.array(r["rho"])
        tail = (f"  rank corr. after randomising mean {rho.mean():+.2f}, >= 0.7 on "
                f"{100 * (rho >= 0.7).mean():.0f} %" if len(rho) else "")
        print(f"  {name:14s} deletion {np.mean(r['deletion']):.3f}  insertion "
              f"{np.mean(r['insertion']):.3f}{tail}")


if __name__ == "__main__":
    main()
