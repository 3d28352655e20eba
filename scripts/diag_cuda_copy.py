"""Where the torch adapter's CUDA path departs from the CPU path (first seen on the H100, 2026-11-24).

Each loader's images are compared with the numpy loader's, normalised on the host: for every
image that differs, by how much and which reference image it is nearest (its own: a deviation;
another one: a race). The 2026-11-24 run named no engine, so "auto" chose DALI for cuda:
the deviation it showed was DALI's decoder, not the copy path. Run from the repository root.
"""
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, "tests")
import iofeed  # noqa: E402
from helpers.images import make_colour_tree  # noqa: E402
from iofeed.adapters.normalize import IMAGENET_MEAN, IMAGENET_STD  # noqa: E402
from iofeed.prepare.run import preprocess  # noqa: E402

root = make_colour_tree(Path("/tmp/diag/tree"), per_class=10)
ds = preprocess(root, Path("/tmp/diag/ds.iof"), progress=False, overwrite=True).out
with iofeed.loader(ds, batch_size=4, workers=1, seed=2) as ld:
    ref = [x.copy() for x, _ in ld]
mean = np.array(IMAGENET_MEAN, np.float32).reshape(1, 3, 1, 1)
std = np.array(IMAGENET_STD, np.float32).reshape(1, 3, 1, 1)
refn = [((r.transpose(0, 3, 1, 2).astype(np.float32) / 255) - mean) / std for r in ref]
flat = np.concatenate(refn)


def run(name, device, sleep, engine="workers"):
    got = []
    with iofeed.loader(ds, batch_size=4, workers=1, seed=2, framework="torch",
                       placement=iofeed.Placement(device=device),
                       engine=engine) as ld:
        for x, _ in ld:
            if sleep:
                torch.cuda._sleep(50_000_000)
            got.append(x.clone())
        if device == "cuda":
            torch.cuda.synchronize()
    bad = []
    for b, (x, r) in enumerate(zip(got, refn)):
        x = x.cpu().numpy()
        for i in range(len(x)):
            d = np.abs(x[i] - r[i]).max()
            if d > 1e-4:
                best = int(np.argmin(np.abs(flat - x[i]).reshape(len(flat), -1).mean(1)))
                bad.append((b, i, round(float(d), 4), "matches ref image", divmod(best, 4)))
    print(name, "batches", len(got), "mismatched images", len(bad), bad[:8], flush=True)


run("cpu", None, False)
run("cuda-nosleep", "cuda", False)
run("cuda-sleep", "cuda", True)
run("cuda-sleep-again", "cuda", True)
run("cuda-dali (auto's choice with DALI installed; its decoder differs by design)", "cuda", False, "dali")
