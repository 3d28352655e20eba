"""The loops JAX scripts write: a jitted step over `loader.repeat()` counted in steps, resumed
exactly; `batch_transform=` applied; a batch the sharding cannot lay out refused when the loader
is made (it came at the end of the first evaluation pass)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import iofeed

pytestmark = pytest.mark.jax

SIZE = 16
TESTS = Path(__file__).resolve().parent
OPTIONS = {"framework": "jax", "batch_size": 4, "image_size": SIZE, "workers": 1, "seed": 7}


def _train(ld, params, steps: int) -> tuple[object, list[int]]:
    """`steps` jitted SGD steps over `ld.repeat()`; the parameters and the samples seen."""
    import jax
    import jax.numpy as jnp

    @jax.jit
    def step(params, images, labels):
        def loss(params):
            logits = images.mean(axis=(1, 2)) @ params
            return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), labels[:, None], axis=1))
        return params - 0.5 * jax.grad(loss)(params)

    seen = []
    for _, (images, labels) in zip(range(steps), ld.repeat()):  # range first: no batch taken past `steps`
        seen += ld.last_indices.tolist()
        params = step(params, images, labels)
    return params, seen


def test_a_jitted_loop_over_repeat_resumes_exactly(colour_dataset):
    import jax.numpy as jnp

    steps, stop = 19, 11  # 8 batches per epoch: the run crosses two epoch boundaries, the stop one
    with iofeed.loader(colour_dataset, **OPTIONS) as ld:
        whole, seen = _train(ld, jnp.zeros((3, 4)), steps)
        assert ld.epoch == 2 and ld.stats.batches == steps, "no batch taken past the last step"
    with iofeed.loader(colour_dataset, **OPTIONS) as ld:
        params, first = _train(ld, jnp.zeros((3, 4)), stop)
        state = ld.state_dict()
    with iofeed.loader(colour_dataset, **OPTIONS) as ld:
        ld.load_state_dict(state)
        params, rest = _train(ld, params, steps - stop)
    assert first + rest == seen and sorted(seen[:32]) == sorted(seen[32:64]) == list(range(32))
    np.testing.assert_allclose(np.asarray(params), np.asarray(whole), rtol=1e-6)


def test_repeat_is_a_stream_continued_by_the_next_repeat(colour_dataset):
    """Step loops often make `repeat()` once per chunk of steps: the chunks follow on, where a new
    `iter()` would begin a pass left early again."""
    import jax.numpy as jnp

    with iofeed.loader(colour_dataset, **OPTIONS) as ld:
        _, whole = _train(ld, jnp.zeros((3, 4)), 12)
    with iofeed.loader(colour_dataset, **OPTIONS) as ld:
        chunks = [_train(ld, jnp.zeros((3, 4)), 5)[1] for _ in range(2)] + [_train(ld, jnp.zeros((3, 4)), 2)[1]]
    assert sum(chunks, []) == whole


def _zeroed(images, labels):
    return images * 0, labels


def _failing(images, labels):
    raise RuntimeError("batch transform ran and failed")


def test_batch_transform_runs_on_jax_batches(colour_dataset):
    with iofeed.loader(colour_dataset, batch_transform=_zeroed, **OPTIONS) as ld:
        images, labels = next(iter(ld))
        assert float(abs(images).max()) == 0.0 and labels.shape == (4,)
    with iofeed.loader(colour_dataset, batch_transform=_failing, **OPTIONS) as ld, \
            pytest.raises(RuntimeError, match="ran and failed"):
        next(iter(ld))


@pytest.mark.slow
def test_a_last_batch_the_devices_cannot_share_is_refused_when_the_loader_is_made(colour_dataset, tmp_path):
    out = tmp_path / "layout.json"
    path = os.pathsep.join([str(TESTS.parent / "src"), str(TESTS), os.environ.get("PYTHONPATH", "")])
    devices = "--xla_force_host_platform_device_count=3"
    run = subprocess.run([sys.executable, "-m", "helpers.jax_runs", "layout", str(colour_dataset), str(out)],
                         capture_output=True, text=True, timeout=240,
                         env={**os.environ, "PYTHONPATH": path, "XLA_FLAGS": devices})
    assert run.returncode == 0, run.stderr[-3000:]
    got = json.loads(out.read_text())
    assert not got["made"] and got["batches"] == 0, got
    assert "batch of 2 rows (an epoch's last batch)" in got["error"] and "drop_last=True" in got["error"]
    assert "\n" not in got["error"]
