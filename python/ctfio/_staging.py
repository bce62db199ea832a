"""Double buffering of host arrays to a device, shared by ``ctfio.torch`` and the providers
(``ctfio.paddle``): batch k is copied while batch k - 1 is in use.

``Staging(device, copy_on_cpu)``; ``start(arrays)`` with ``{key: NumPy array or CPU tensor}``
begins the transfer and returns a handle; ``finish(handle)`` returns ``{key: tensor on the
device}``, safe to use on the caller's current stream.

CUDA: two host staging buffers per key, in pinned memory, used alternately. Batch k is copied
into side k mod 2 and sent with a non-blocking copy on a side stream, with an event recorded
after it; ``finish`` makes the caller's current stream wait for that event and
``record_stream``-s every device tensor on it (so the caching allocator does not hand its memory
out while work queued there still reads it); side k mod 2 is reused for batch k + 2 only once
its copy has finished.

CPU: with ``copy_on_cpu`` the same two-sided staging runs with the device copy a no-op (the
providers' documented behaviour: the batch is the staging buffer, valid until the next one; and
the path this project's tests can run without a GPU); without it the arrays become tensors
without a copy (ctfio.torch: the tensors are the reader's memory). Without PyTorch only the CPU
works, with NumPy staging buffers.
"""

from typing import Any

__all__ = ["Staging"]


def _np():
    import numpy

    return numpy


class Staging:
    """Host -> device transfer with double buffering (see the module docstring)."""

    device: Any  # a torch.device; "cpu" without PyTorch

    def __init__(self, device, copy_on_cpu=False):
        try:
            import torch
        except ImportError:
            torch = None
        if torch is None:
            if str(device) != "cpu":
                raise ValueError("device %r needs PyTorch; without it only 'cpu' works" % (device,))
            self.device, self.cuda = "cpu", False
        else:
            self.device = torch.device(device)
            self.cuda = self.device.type == "cuda"
        self.torch = torch
        self.copy_on_cpu = bool(copy_on_cpu)
        self.host = ({}, {})  # per side: key -> flat host buffer (grown as needed)
        self.events = [None, None]  # per side: the CUDA event of the last copy out of it
        self.turn = 0  # batches staged so far
        self.stream = torch.cuda.Stream(self.device) if self.cuda else None

    def start(self, arrays):
        """Begins moving ``{key: array}`` to the device; returns the handle for ``finish``."""
        torch = self.torch
        if not self.cuda and not self.copy_on_cpu:
            if torch is None:
                return dict(arrays), None
            out = {
                k: a if isinstance(a, torch.Tensor) else torch.from_numpy(a)
                for k, a in arrays.items()
            }
            if self.device.type != "cpu":
                out = {k: t.to(self.device) for k, t in out.items()}
            return out, None
        side = self.turn % 2
        self.turn += 1
        if self.events[side] is not None:
            self.events[side].synchronize()  # the copy of batch turn - 2 has left this side
        out = {}
        for key, a in arrays.items():
            host = self._host(side, key, a)
            out[key] = host if torch is None else self._to_device(host)
        ready = None
        if self.cuda:
            ready = torch.cuda.Event()
            ready.record(self.stream)
            self.events[side] = ready
        return out, ready

    def finish(self, handle):
        """The arrays of ``start``, ready for the caller's current stream."""
        out, ready = handle
        if ready is not None:
            current = self.torch.cuda.current_stream(self.device)
            current.wait_event(ready)
            for t in out.values():
                t.record_stream(current)  # the allocator must not reuse it before `current` ends
        return out

    def _host(self, side, key, arr):
        """A copy of ``arr`` in side ``side``'s buffer for ``key`` (pinned for CUDA)."""
        buf = self.host[side].get(key)
        torch = self.torch
        if torch is None:
            n = arr.size
            if buf is None or buf.dtype != arr.dtype or buf.size < n:
                buf = _np().empty(max(n, int(1.5 * (0 if buf is None else buf.size)), 1), arr.dtype)
                self.host[side][key] = buf
            view = buf[:n].reshape(arr.shape)
            _np().copyto(view, arr)
            return view
        src = arr if isinstance(arr, torch.Tensor) else torch.from_numpy(arr)
        n = src.numel()
        if buf is None or buf.dtype != src.dtype or buf.numel() < n:
            cap = max(n, int(1.5 * (0 if buf is None else buf.numel())), 1)
            buf = torch.empty(cap, dtype=src.dtype, pin_memory=self.cuda)
            self.host[side][key] = buf
        view = buf[:n].view(tuple(src.shape))
        view.copy_(src)
        return view

    def _to_device(self, host):
        if not self.cuda:
            return host.to(self.device)  # the CPU: no copy
        with self.torch.cuda.stream(self.stream):
            return host.to(self.device, non_blocking=True)
