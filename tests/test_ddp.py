"""Distributed sharding in real processes: 2 DDP ranks over gloo (rank and world size taken from
torch.distributed), and 2 "nodes" x 2 processes told only by RANK / WORLD_SIZE."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import iofeed
from helpers.gloo import report, reports

pytestmark = pytest.mark.slow  # ~5 s each: processes started, torch imported

SIZE = 32
DIST_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT")


def _check_shards(per_rank: list[dict], total: int) -> None:
    """Equal batch counts, same sample count per rank, disjoint apart from padding, covering."""
    world = len(per_rank)
    assert len({r["batches"] for r in per_rank}) == 1, [r["batches"] for r in per_rank]
    samples = [[i for batch in r["indices"] for i in batch] for r in per_rank]
    assert len({len(s) for s in samples}) == 1
    everything = [i for s in samples for i in s]
    assert set(everything) == set(range(total)), "the ranks together cover the split"
    padding = len(everything) - total
    assert 0 <= padding < world
    assert len(everything) - len(set(everything)) == padding, "only the padding repeats a sample"


def _ddp_worker(rank: int, world: int, init: str, source: str, out: str) -> None:
    """One DDP rank: read an epoch with the rank taken from the process group, train a few steps."""
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    try:
        _ddp_epoch(rank, world, source, out)
    finally:
        dist.destroy_process_group()  # DDP keeps the group's threads alive to the exit: see helpers/gloo.py


def _ddp_epoch(rank: int, world: int, source: str, out: str) -> None:
    """The rank's epoch and training steps; the results gathered on rank 0 into `out`."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    torch.manual_seed(0)  # DDP also broadcasts rank 0's parameters
    model = DistributedDataParallel(torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
        torch.nn.Linear(8, 4),
    ))
    optimiser = torch.optim.SGD(model.parameters(), lr=0.1)
    indices, losses, labels_ok = [], [], True
    with iofeed.loader(source, batch_size=4, image_size=SIZE, framework="torch", workers=1,
                       drop_last=False) as ld:
        settings = {k: ld.stats.settings[k] for k in ("rank", "world_size")}
        for images, labels in ld:
            indices.append(ld.last_indices.tolist())
            labels_ok &= labels.tolist() == ld.source.label[ld.last_indices].tolist()
            optimiser.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(images), labels)
            loss.backward()  # DDP all-reduces the gradients here
            optimiser.step()
            losses.append(loss.item())
        batches = len(indices)
        assert batches == len(ld)
    checksum = float(sum(p.detach().double().sum() for p in model.parameters()))
    mine = {"rank": rank, "settings": settings, "indices": indices, "batches": batches, "losses": losses,
            "labels_ok": labels_ok, "checksum": checksum}
    report(out, rank, mine)
    dist.barrier()


@pytest.mark.torch
def test_ddp_two_ranks_shard_from_the_process_group(colour_dataset, tmp_path, monkeypatch):
    import torch
    import torch.multiprocessing as tmp

    if not torch.distributed.is_available():
        pytest.skip("torch.distributed is not available")
    for name in DIST_ENV:  # the ranks must come from torch.distributed, not from these
        monkeypatch.delenv(name, raising=False)
    out = tmp_path / "ranks.json"
    init = f"file://{tmp_path / 'rendezvous'}"
    tmp.spawn(_ddp_worker, args=(2, init, str(colour_dataset), str(out)), nprocs=2, join=True)

    per_rank = reports(out, 2)
    assert [r["rank"] for r in per_rank] == [0, 1]
    assert [r["settings"] for r in per_rank] == [{"rank": r, "world_size": 2} for r in range(2)]
    total = len(iofeed.loader(colour_dataset, batch_size=4, workers=1).source)
    _check_shards(per_rank, total)
    assert per_rank[0]["batches"] == 4  # 32 train samples / 2 ranks / batch 4
    assert all(r["labels_ok"] for r in per_rank)
    assert all(np.isfinite(r["losses"]).all() and len(r["losses"]) == r["batches"] for r in per_rank)
    assert per_rank[0]["losses"] != per_rank[1]["losses"], "each rank trained on its own samples"
    assert per_rank[0]["checksum"] == pytest.approx(per_rank[1]["checksum"], rel=1e-9), \
        "DDP kept the replicas identical"


_ENV_SCRIPT = """
import json, sys
import numpy as np
import iofeed
from helpers.images import label_from_pixels
with iofeed.loader(sys.argv[1], batch_size=4, image_size=32, workers=1, drop_last=False) as ld:
    indices, labels_ok = [], True
    for images, labels in ld:
        indices.append(ld.last_indices.tolist())
        labels_ok &= all(label_from_pixels(image) == label for image, label in zip(np.asarray(images), labels))
    print(json.dumps({"indices": indices, "batches": len(indices), "len": len(ld), "labels_ok": labels_ok,
                      "images": ld.stats.images, "torch": "torch" in sys.modules,
                      "settings": {k: ld.stats.settings[k] for k in ("rank", "world_size")}}))
"""


def test_two_nodes_two_processes_from_env_only(colour_dataset):
    """torchrun-style RANK / WORLD_SIZE, no process group: each of 4 processes reads only its share."""
    world, per_node = 4, 2
    tests = str(Path(__file__).parent)
    procs = []
    for rank in range(world):
        env = {k: v for k, v in os.environ.items() if k not in DIST_ENV}
        env.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank % per_node),
                   LOCAL_WORLD_SIZE=str(per_node), GROUP_RANK=str(rank // per_node),
                   PYTHONPATH=os.pathsep.join([tests, env.get("PYTHONPATH", "")]))
        procs.append(subprocess.Popen([sys.executable, "-c", textwrap.dedent(_ENV_SCRIPT), str(colour_dataset)],
                                      env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    per_rank = []
    for rank, proc in enumerate(procs):
        stdout, stderr = proc.communicate(timeout=300)
        assert proc.returncode == 0, f"rank {rank}: {stderr[-2000:]}"
        per_rank.append(json.loads(stdout.strip().splitlines()[-1]))

    assert [r["settings"] for r in per_rank] == [{"rank": r, "world_size": world} for r in range(world)]
    assert not any(r["torch"] for r in per_rank), "RANK / WORLD_SIZE work without torch"
    total = len(iofeed.loader(colour_dataset, batch_size=4, workers=1).source)
    _check_shards(per_rank, total)
    assert all(r["batches"] == r["len"] == 2 for r in per_rank)  # 32 / 4 ranks / batch 4
    assert all(r["images"] == total // world for r in per_rank), "each process decoded only its own share"
    assert all(r["labels_ok"] for r in per_rank)


_TORCHRUN_SCRIPT = """
import json, os, sys
import torch
import iofeed
from iofeed.errors import OptionError

source, engine, out = sys.argv[1], sys.argv[2], sys.argv[3]
local = int(os.environ["LOCAL_RANK"])
result = {"local_rank": local}
try:  # built before torch.cuda.set_device, as many training scripts do
    ld = iofeed.loader(source, batch_size=4, image_size=32, framework="torch",
                       placement=iofeed.Placement(device="cuda"), engine=engine, workers=1, drop_last=False)
except OptionError as exc:
    result["error"] = str(exc)
else:
    torch.cuda.set_device(local)
    model = torch.nn.Conv2d(3, 4, 3).cuda()  # on the current device: the rank's GPU
    with ld:
        devices = set()
        for images, labels in ld:
            model(images).sum().item()  # fails across devices
            devices |= {str(images.device), str(labels.device)}
    result["devices"] = sorted(devices)
with open(os.path.join(out, f"rank{local}.json"), "w") as f:
    json.dump(result, f)
"""


@pytest.mark.gpu
@pytest.mark.parametrize("engine", ["workers", pytest.param("dali", marks=pytest.mark.dali)])
def test_loader_built_before_set_device_under_torchrun(colour_dataset, tmp_path, engine):
    """2 ranks by torchrun: each decodes and copies on its LOCAL_RANK's GPU. On a one-GPU machine
    rank 1 has no GPU of its own: it gets the one-line error naming LOCAL_RANK (no silent sharing)."""
    import torch

    if engine == "dali":
        pytest.importorskip("nvidia.dali")
    env = {k: v for k, v in os.environ.items() if k not in DIST_ENV}
    tests = str(Path(__file__).parent)
    env["PYTHONPATH"] = os.pathsep.join([tests, env.get("PYTHONPATH", "")])
    script = tmp_path / "train.py"
    script.write_text(_TORCHRUN_SCRIPT)
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
                           str(script), str(colour_dataset), engine, str(tmp_path)],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    count = torch.cuda.device_count()
    for rank in (0, 1):
        result = json.loads((tmp_path / f"rank{rank}.json").read_text())
        if rank < count:
            assert result["devices"] == [f"cuda:{rank}"], result
        else:
            assert "LOCAL_RANK=1" in result["error"] and "set_device" in result["error"], result


_ONE_GPU_SCRIPT = """
import json, os, sys
import numpy as np
import torch
import torch.distributed as dist
import iofeed
from helpers.images import label_from_pixels

source, out = sys.argv[1], sys.argv[2]
local = int(os.environ["LOCAL_RANK"])
dist.init_process_group("gloo")  # NCCL refuses two ranks on one GPU; gloo reduces CUDA tensors too
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Conv2d(3, 4, 3).to("cuda:0"), device_ids=[0])
result = {"indices": [], "devices": [], "labels_ok": True, "steps": 0}
with iofeed.loader(source, batch_size=4, image_size=32, framework="torch", placement=iofeed.Placement(device="cuda:0"),
                   workers=1, augment="uint8", seed=5) as ld:
    for images, labels in ld:
        model(images.float()).mean().backward()  # gradients all-reduced between the two ranks
        pixels = images.permute(0, 2, 3, 1).cpu().numpy()
        result["labels_ok"] &= [label_from_pixels(p) for p in pixels] == labels.cpu().tolist()
        result["indices"] += ld.last_indices.tolist()
        result["devices"] = sorted(set(result["devices"]) | {str(images.device), str(labels.device)})
        result["steps"] += 1
    result["settings"] = {k: ld.stats.settings[k] for k in ("rank", "world_size")}
dist.destroy_process_group()
with open(os.path.join(out, f"rank{local}.json"), "w") as f:
    json.dump(result, f)
"""


@pytest.mark.gpu
def test_two_ranks_share_one_gpu_under_torchrun(colour_dataset, tmp_path):
    """torchrun --nproc-per-node=2 on a one-GPU host, both ranks on cuda:0 with DDP over gloo: each
    pins its own shared memory on that GPU, reads its own half, and they step together."""
    env = {k: v for k, v in os.environ.items() if k not in DIST_ENV}
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).parent), env.get("PYTHONPATH", "")])
    script = tmp_path / "train.py"
    script.write_text(_ONE_GPU_SCRIPT)
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
                           str(script), str(colour_dataset), str(tmp_path)],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [r["settings"] for r in ranks] == [{"rank": 0, "world_size": 2}, {"rank": 1, "world_size": 2}]
    assert all(r["devices"] == ["cuda:0"] and r["labels_ok"] for r in ranks), ranks
    first, second = (set(r["indices"]) for r in ranks)
    assert ranks[0]["steps"] == ranks[1]["steps"] > 0 and first and not first & second


_TORCHRUN_CPU_SCRIPT = """
import json, os, sys, iofeed
ld = iofeed.loader(sys.argv[1], batch_size=4, image_size=32, seed=2)
indices = []
for _ in ld:
    indices += ld.last_indices.tolist()
settings = ld.stats.settings
ld.close()
result = {"indices": indices, "rank": settings["rank"], "world_size": settings["world_size"],
          "cores_because": settings["cores_because"], "memory_because": settings["memory_because"]}
with open(os.path.join(sys.argv[2], f"rank{os.environ['LOCAL_RANK']}.json"), "w") as f:
    json.dump(result, f)
"""


def test_torchrun_two_local_ranks_on_the_cpu(colour_dataset, tmp_path):
    """torchrun --nproc-per-node=2, a plain script (no main guard, no process group): each rank
    reads its own half of the epoch, and takes half the node's cores and memory."""
    pytest.importorskip("torch")
    env = {k: v for k, v in os.environ.items() if k not in DIST_ENV}
    script = tmp_path / "train.py"
    script.write_text(_TORCHRUN_CPU_SCRIPT)
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
                           str(script), str(colour_dataset), str(tmp_path)],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [(r["rank"], r["world_size"]) for r in ranks] == [(0, 2), (1, 2)]
    first, second = (set(r["indices"]) for r in ranks)
    assert first and len(first) == len(second) and not first & second
    assert all("local ranks 2" in r["cores_because"] and "local ranks 2" in r["memory_because"] for r in ranks)
