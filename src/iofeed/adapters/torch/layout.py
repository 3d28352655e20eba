"""The torch adapter's output in the layout the model asks for, written in the pass that normalises
(or copies uint8): contiguous NCHW, or NCHW in channels_last memory. No layout costs a pass of
its own: the NCHW default used to be written channels_last and copied (issue 42;
docs/decisions/0081-the-layout-is-written-in-the-normalising-pass.md)."""
from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ..host_float import NCHW, NHWC, HostAffine, write_uint8
from ..normalize import IMAGENET_AFFINE, Affine
from ..output_pool import OutputPool

NUMPY_DTYPES = {torch.float32: np.float32, torch.float64: np.float64, torch.float16: np.float16}


class TorchLayout:
    """Output tensors of one layout on one device, and the one pass that fills them.

    On a device (CUDA) the pass is one kernel: `addcmul` reads the NHWC batch through an NCHW
    view and writes `out` in its own memory format, computing in float32 (float64 if asked) and
    rounding once to `dtype`. On the CPU the output's memory is lent from an `OutputPool` (reused
    once nothing refers to a batch) and written by `HostAffine` (OpenCV lookup tables, one thread
    beside the workers); dtypes numpy lacks (bfloat16) take the kernel path there too.
    """

    def __init__(self, device: Any, affine: Affine | None, channels_last: bool) -> None:
        self.device = torch.device(device)
        self.channels_last = channels_last
        self.normalising = affine is not None
        self._affine = affine or IMAGENET_AFFINE
        self._pool = OutputPool() if self.device.type == "cpu" else None
        self._host: dict[Any, HostAffine] = {}
        self._kernel: dict[Any, tuple[Any, Any]] = {}

    @property
    def order(self) -> str:
        """The order of an output's memory: NHWC for channels_last, NCHW for contiguous."""
        return NHWC if self.channels_last else NCHW

    def output(self, shape: tuple[int, int, int, int], dtype: Any) -> Any:
        """An NCHW tensor of `shape` to write into, in this layout's memory format."""
        if self._pool is None:
            memory_format = torch.channels_last if self.channels_last else torch.contiguous_format
            return torch.empty(shape, dtype=dtype, device=self.device, memory_format=memory_format)
        n, c, h, w = shape
        flat = torch.from_numpy(self._pool.take(n * c * h * w * dtype.itemsize)).view(dtype)
        return flat.view(n, h, w, c).permute(0, 3, 1, 2) if self.channels_last else flat.view(n, c, h, w)

    @property
    def pool(self) -> OutputPool | None:
        """Where CPU outputs come from (None on a device)."""
        return self._pool

    def write(self, out: Any, source: Any, as_is: bool = False) -> None:
        """`source` (N, H, W, C) into `out` (N, C, H, W), in one pass: uint8 pixels or 0-255 floats
        normalised (when normalising, and not `as_is`), else converted to `out`'s dtype (0-255
        floats rounded for uint8 output)."""
        if self.normalising and not as_is:
            host = self._host_affine(out, source)
            if host is not None:
                host.write(source.numpy(), self._memory(out), self.order)
                return
            shift, scale = self._kernel_affine(out.dtype)
            torch.addcmul(shift, source.permute(0, 3, 1, 2), scale, out=out)
            return
        if source.dtype == torch.uint8 and out.dtype == torch.uint8 and out.device.type == "cpu":
            write_uint8(source.numpy(), self._memory(out), self.order)
            return
        view = source.permute(0, 3, 1, 2)
        if source.is_floating_point() and out.dtype == torch.uint8:  # packed pixels: 0-255 floats
            view = view.round().clamp_(0, 255)
        out.copy_(view)

    def _memory(self, out: Any) -> np.ndarray:
        """`out`'s memory as a numpy array in its own order (NHWC for channels_last)."""
        memory: np.ndarray = (out.permute(0, 2, 3, 1) if self.channels_last else out).numpy()
        return memory

    def _host_affine(self, out: Any, source: Any) -> HostAffine | None:
        """The lookup-table writer for a CPU uint8 batch into an output numpy can hold, else None."""
        if out.device.type != "cpu" or source.dtype != torch.uint8 or out.dtype not in NUMPY_DTYPES:
            return None
        if out.dtype not in self._host:
            self._host[out.dtype] = HostAffine(self._affine, NUMPY_DTYPES[out.dtype])
        return self._host[out.dtype]

    def _kernel_affine(self, dtype: Any) -> tuple[Any, Any]:
        """Shift and scale as (1, C, 1, 1) tensors on the device, in float32 (float64 for float64 output)."""
        compute = torch.float64 if dtype == torch.float64 else torch.float32
        if compute not in self._kernel:
            scale, shift = (torch.tensor(v, dtype=compute, device=self.device).view(1, -1, 1, 1) for v in self._affine)
            self._kernel[compute] = (shift, scale)
        return self._kernel[compute]
