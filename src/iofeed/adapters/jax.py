"""JAX adapter: NHWC `jax.Array` batches sharded over the batch axis of the process's devices."""
from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from ..augment.transforms import BatchTransform
from ..engines.base import Batch
from ..errors import OptionError
from ..options.loader_options import LoaderOptions
from .host_float import HostNormaliser
from .normalize import HOST, IMAGENET_AFFINE, Affine, options_affine, record_normalise_on
from .numpy import to_numpy

DTYPES = {"uint8": jnp.uint8, "float32": jnp.float32, "bfloat16": jnp.bfloat16}
BATCH_AXIS = "batch"


class JaxAdapter:
    """uint8 NHWC host batches → (images, labels) global `jax.Array`s.

    Images are `dtype`: float32 (default) or bfloat16 normalised with ImageNet mean/std, or
    uint8 as stored; labels int32 (JAX's default integer). Both are laid out by `sharding`
    (default: a `NamedSharding` over a 1-D mesh of every device, `PartitionSpec("batch")`),
    so each device holds its slice of the batch. With several processes (`jax.distributed`),
    each loads `batch_size` samples of its own share of the epoch and they form one global batch
    of `batch_size * process_count` rows (`jax.make_array_from_process_local_data`).

    On CPU devices the host batch is normalised with numpy (one image at a time, one thread)
    into 64-byte aligned arrays that XLA uses without a copy; they are reused once JAX lets go.
    On accelerators the uint8 batch is copied (4x fewer bytes than float32) and normalised there.
    A GPU engine's batch (DALI's) stays on the GPU: taken by DLPack and normalised there.
    """

    def __init__(self, dtype: Any = None, sharding: Any = None, affine: Affine = IMAGENET_AFFINE,
                 batch_transform: Any = None) -> None:
        self.dtype = _dtype(dtype)
        self._batch_transform = None if batch_transform is None else BatchTransform(batch_transform)
        self.sharding = sharding if sharding is not None else default_sharding()
        if not isinstance(self.sharding, jax.sharding.Sharding):
            raise OptionError(f"sharding must be a jax.sharding.Sharding (e.g. NamedSharding(mesh, "
                              f"PartitionSpec('batch'))), got {sharding!r}")
        self._label_sharding = _for_rank(self.sharding, 1)
        devices: set[jax.Device] = self.sharding.device_set  # jax's stubs name a Device the checker cannot find
        on_host = all(d.platform == "cpu" for d in devices)
        self._host = HostNormaliser(self.dtype, affine) if on_host and self.dtype != jnp.uint8 else None
        self._device_normalise = (None if on_host or self.dtype == jnp.uint8
                                  else _device_normaliser(self.dtype, affine))
        # a GPU engine's batches (DLPack, already on a device) are normalised where they are, whatever the devices
        self._normalise_there = None if self.dtype == jnp.uint8 else _device_normaliser(self.dtype, affine)
        platforms = ",".join(sorted({d.platform for d in devices}))  # "gpu", "tpu"
        self.normalise_on = None if self.dtype == jnp.uint8 else HOST if on_host else platforms

    @classmethod
    def from_options(cls, options: LoaderOptions) -> JaxAdapter:
        """The adapter for `options`: its dtype, sharding and the recipe's mean/std (uint8 when the
        recipe has normalize=False)."""
        affine = options_affine(options)
        dtype = options.output.dtype if affine is not None else "uint8"
        return cls(dtype, options.placement.sharding, affine or IMAGENET_AFFINE, options.batch_transform)

    def wrap(self, loader: Any) -> Any:
        """The loader itself, once every batch size its epochs hold (a whole batch, and the last
        one of an epoch without `drop_last`) is known to fit the sharding: the error came at the
        end of the first evaluation pass before. A sample transform returning floats is handed
        over as it returns them (its scale), only cast to `dtype`, as the torch and tf adapters do."""
        output = loader.engine.sample_output
        if output is not None and output.dtype != np.uint8:  # they were normalised as if 0-255 pixels
            self._host = self._device_normalise = self._normalise_there = None
            self.normalise_on = None
        record_normalise_on(loader, self.normalise_on)
        order = loader.order
        sizes = {order.batch_size, 0 if order.drop_last else order.per_rank % order.batch_size} - {0}
        for rows in sorted(sizes):
            self._check_rows(rows, loader.image_size, last=rows != order.batch_size)
        return loader

    def _check_rows(self, rows: int, size: int, last: bool) -> None:
        try:
            self.sharding.shard_shape((rows * jax.process_count(), size, size, 3))
        except ValueError as exc:
            which = " (an epoch's last batch)" if last else ""
            raise OptionError(f"a batch of {rows} rows{which} cannot be laid out by {self.sharding}: make batch_size "
                              "and the split's size per rank multiples of the devices on the batch axis, or pass "
                              f"drop_last=True ({exc})") from None

    def __call__(self, batch: Batch) -> tuple[jax.Array, jax.Array]:
        if not isinstance(batch.images, np.ndarray):  # a GPU engine's batch: on its device, by DLPack
            images, labels = self._from_device(batch)
        else:
            images, labels = self._from_host(batch)
        if self._batch_transform is not None:
            return self._batch_transform(images, labels, batch.key)
        return images, labels

    def _from_device(self, batch: Batch) -> tuple[jax.Array, jax.Array]:
        """A GPU engine's uint8 batch taken over by DLPack where it lies (no copy through the host,
        as DALI's batches took before), laid out by the sharding there and normalised there."""
        images = jax.dlpack.from_dlpack(batch.images)
        if jax.process_count() == 1:
            images = jax.device_put(images, self.sharding)  # no copy when the sharding is that one device
        else:
            images = self._global(images, self.sharding)
        labels = self._global(np.array(batch.labels, np.int32), self._label_sharding)
        return (images if self._normalise_there is None else self._normalise_there(images)), labels

    def _from_host(self, batch: Batch) -> tuple[jax.Array, jax.Array]:
        """A host batch (numpy, maybe in engine memory) as a global array, normalised on the host
        (CPU devices) or on the devices."""
        pixels, host_labels = to_numpy(batch)
        if pixels.dtype != np.uint8:  # a sample transform's floats, out of the slot in `dtype` (uint8: float32)
            pixels = np.array(pixels, np.float32 if self.dtype == jnp.uint8 else self.dtype)
            batch.release()
        elif self._host is not None:
            pixels = self._host(pixels)
            batch.release()  # normalised into arrays of its own; uint8 batches alias the engine's memory
        images = self._global(pixels, self.sharding)
        labels = self._global(np.array(host_labels, np.int32), self._label_sharding)  # a copy: the array is reused
        if self._device_normalise is not None:
            images = self._device_normalise(images)
        return images, labels

    def _global(self, local: Any, sharding: Any) -> jax.Array:
        """This process's rows as its part of the global batch laid out by `sharding`."""
        shape = (len(local) * jax.process_count(), *local.shape[1:])
        try:
            made: jax.Array = jax.make_array_from_process_local_data(  # type: ignore[no-untyped-call]  # unannotated
                sharding, local, shape)
            return made
        except ValueError as exc:
            raise OptionError(f"a batch of {len(local)} rows cannot be laid out by {sharding}: make batch_size a "
                              f"multiple of the devices on the batch axis, or pass drop_last=True ({exc})") from None


def default_sharding() -> NamedSharding:
    """The batch axis split over every device (of every process), in device order."""
    return NamedSharding(Mesh(np.array(jax.devices()), (BATCH_AXIS,)), _spec(BATCH_AXIS))


def _spec(*axes: Any) -> PartitionSpec:
    """A `PartitionSpec` of `axes` (one per array axis: a mesh axis name, a tuple of them, or None)."""
    return PartitionSpec(*axes)  # type: ignore[no-untyped-call]  # unannotated in jax


def _for_rank(sharding: Any, ndim: int) -> Any:
    """`sharding` for an array of `ndim` axes: a NamedSharding keeps only its first axis' spec."""
    if isinstance(sharding, NamedSharding):
        return NamedSharding(sharding.mesh, _spec(*tuple(sharding.spec)[:ndim]))
    return sharding


def _dtype(dtype: Any) -> Any:
    """The output dtype named by `dtype` (None → float32), or OptionError."""
    if dtype is None:
        return jnp.float32
    try:
        name = np.dtype(dtype).name
    except TypeError:
        name = str(dtype)
    if name not in DTYPES:
        raise OptionError(f"Output.dtype={dtype!r} is not one of {', '.join(DTYPES)} for framework='jax'")
    return DTYPES[name]


def _device_normaliser(dtype: Any, affine: Affine) -> Any:
    """A jitted uint8 NHWC → normalised `dtype`, computed in float32, keeping the input's sharding."""
    scale, shift = (jnp.asarray(v, jnp.float32) for v in affine)

    @jax.jit
    def normalise(images: jax.Array) -> jax.Array:
        return (images.astype(jnp.float32) * scale + shift).astype(dtype)

    return normalise
