"""JAX runs in processes of their own (device count and jax.distributed are fixed at start-up):
`python -m helpers.jax_runs train SOURCE OUT`, `layout SOURCE OUT` or `host SOURCE OUT PROCESS_ID
PORT`; results as JSON."""
from __future__ import annotations

import json
import sys

SIZE = 32


def train(source: str, out: str) -> None:
    """One epoch of a plain JAX + optax training step on `framework="jax"` batches."""
    import jax
    import jax.numpy as jnp
    import optax

    import iofeed

    def loss_fn(params, images, labels):
        features = images.mean(axis=(1, 2))  # (N, 3) per-channel means
        logits = features @ params["w"] + params["b"]
        return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()

    optimiser = optax.adam(0.1)

    @jax.jit
    def step(params, state, images, labels):
        loss, grads = jax.value_and_grad(loss_fn)(params, images, labels)
        updates, state = optimiser.update(grads, state, params)
        return optax.apply_updates(params, updates), state, loss

    params = {"w": jnp.zeros((3, 4)), "b": jnp.zeros(4)}
    state = optimiser.init(params)
    result: dict = {"devices": jax.device_count(), "losses": [], "shards": []}
    with iofeed.loader(source, framework="jax", batch_size=8, image_size=SIZE, workers=1, seed=1) as ld:
        for _ in range(2):
            for images, labels in ld:
                params, state, loss = step(params, state, images, labels)
                result["losses"].append(float(loss))
                result["shards"].append(sorted((s.device.id, s.data.shape[0]) for s in images.addressable_shards))
            result.setdefault("batches", []).append(len(result["losses"]))
        result["len"] = len(ld)
    with open(out, "w") as f:
        json.dump(result, f)


def host(source: str, out: str, process_id: int, port: int) -> None:
    """One of two "hosts" under jax.distributed: rank and world size from JAX, global batches."""
    import jax
    import numpy as np

    jax.distributed.initialize(f"127.0.0.1:{port}", num_processes=2, process_id=process_id,
                               local_device_ids=[0], initialization_timeout=300)
    import iofeed

    result: dict = {"indices": [], "shapes": [], "local": []}
    with iofeed.loader(source, framework="jax", batch_size=4, image_size=SIZE, workers=1, seed=2) as ld:
        result["settings"] = {k: ld.stats.settings[k] for k in ("rank", "world_size")}
        for images, labels in ld:
            result["indices"].append(ld.last_indices.tolist())
            result["shapes"].append(list(images.shape))
            local = [np.asarray(s.data) for s in labels.addressable_shards]
            result["local"].append(np.concatenate(local).tolist())
        result["batches"] = len(result["indices"])
    with open(out, "w") as f:
        json.dump(result, f)
    jax.distributed.shutdown()


def layout(source: str, out: str) -> None:
    """A val loader (8 samples) in batches of 6 over 3 devices: whole batches fit, the last (2 rows)
    does not. Where the error comes: when the loader is made, or after how many batches."""
    import iofeed
    from iofeed.errors import OptionError

    result: dict = {"made": False, "batches": 0, "error": None}
    try:
        with iofeed.loader(source, split="val", framework="jax", batch_size=6, image_size=SIZE, workers=1) as ld:
            result["made"] = True
            for _ in ld:
                result["batches"] += 1
    except OptionError as exc:
        result["error"] = str(exc)
    with open(out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    command, *args = sys.argv[1:]
    if command == "train":
        train(*args)
    elif command == "layout":
        layout(*args)
    else:
        host(args[0], args[1], int(args[2]), int(args[3]))
