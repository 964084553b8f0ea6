"""TensorPageStore: the runtime's ``PageStore`` over the paged tensor pools.

The runtime (control plane) decides *when* a slot's payload moves; this store does the moving with
the kernels' page copies, so a page that comes back from host or disk carries the very bytes it
left with, and the runtime's checksum compares real KV::

    offload   runtime: store.read(slot)  -> gather_pages per kind -> bytes -> host tier / disk file
    prefetch  runtime: store.write(slot, bytes) -> scatter_pages per kind      (worker thread)
              runtime: checksum(store.read(slot)) == checksum recorded at offload ?  land : corrupt
    attach    runtime: read_prefix(src, n) / write_prefix(dst, n, bytes)       (copy-on-write of the
              first n tokens' raw k/v of a partly matched page, all attention layers; ``store`` kernel)

The raw KV of new tokens is *not* written by ``write_tokens``: it depends on the whole prefix, so
the engine's cached forward computes it and stores it with the ``store`` kernel right after the
runtime has opened the pages.  ``compress`` runs the ``compress`` kernel on every compressing layer,
unless the forward already compressed the page since its raw KV last changed.

Every call takes the store's lock, and the engine's forward takes it too, so the prefetch worker
never launches a kernel while the forward does (the Triton interpreter is not thread-safe).  The
Engine makes it the runtime manager's own lock: the prefetch worker holds the manager's lock when it
reads a landed page back for its checksum, and the forward re-validates leases through the manager
while it holds the store's lock, so two locks would be taken in opposite orders.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np
import torch

from morphcache import kernels as K
from morphcache.engine.pools import PagePools
from morphcache.model import HybridModel


class TensorPageStore:
    """A ``morphcache.runtime.PageStore`` backed by ``PagePools`` (see the module docstring)."""

    def __init__(self, pools: PagePools, model: HybridModel) -> None:
        self.pools = pools
        self.model = model
        self.page_size = pools.config.page_size
        self.page_bytes = pools.page_bytes
        self.lock = threading.RLock()
        self.fresh: set[int] = set()  # slots whose compressed entries match their raw KV
        self.window_released: set[int] = set()  # slots whose window-layer raw KV was released
        self.tokens_written = 0
        self.bytes_read = 0
        self.bytes_written = 0
        self.compress_launches = 0

    # -- the PageStore protocol ---------------------------------------------------------------------
    def write_tokens(self, slot: int, depth: int, offset: int, tokens: Sequence[int]) -> None:
        """The runtime opened/filled ``slot`` at these offsets; the forward will store their KV.
        Invalidates the slot's compressed entries and window release."""
        with self.lock:
            self._dirty(slot)
            self.tokens_written += len(tokens)

    def compress(self, slot: int) -> None:
        """Build the compressed entries and indexer keys of the page in ``slot`` (every compressing
        layer, one ``compress`` launch each) unless they are already fresh."""
        with self.lock:
            if slot in self.fresh:
                return
            self.compress_slots([slot])

    def read(self, slot: int) -> bytes:
        """The page's payload: every kind's rows of ``slot``, gathered with ``gather_pages``."""
        with self.lock:
            parts = []
            for kind in self.pools.kinds:
                pool = self.pools.flat(kind)
                staged = K.gather_pages(pool, self.pools.rows(kind, [slot]))
                parts.append(staged.cpu().numpy().tobytes())
            data = b"".join(parts)
            self.bytes_read += len(data)
            return data

    def write(self, slot: int, data: bytes) -> None:
        """Put a payload into ``slot`` with ``scatter_pages`` (short data is zero-padded, as the
        runtime's contract says); the slot's compressed entries come with it but are not trusted."""
        with self.lock:
            body = bytes(data[: self.page_bytes]) + bytes(max(0, self.page_bytes - len(data)))
            values = torch.from_numpy(np.frombuffer(body, dtype=np.float32).copy())
            offset = 0
            for kind in self.pools.kinds:
                n = self.pools.page_elements(kind)
                pool = self.pools.flat(kind)
                staging = values[offset: offset + n].reshape(-1, *pool.shape[1:]).to(self.pools.device)
                K.scatter_pages(staging.contiguous(), pool, self.pools.rows(kind, [slot]))
                offset += n
            self._dirty(slot)
            self.bytes_written += len(body)

    def recompute(self, slot: int, depth: int, tokens: Sequence[int]) -> None:
        """A page's KV cannot be rebuilt from its own tokens (it depends on the whole prefix): the
        engine never proposes this path, it prefills from the last readable position instead.  Should
        the runtime call it anyway, the slot is zeroed so that nothing stale survives."""
        with self.lock:
            for kind in self.pools.kinds:
                self.pools.flat(kind)[self.pools.rows(kind, [slot])] = 0.0
            self._dirty(slot)

    def read_prefix(self, slot: int, count: int) -> bytes:
        """Raw k then raw v of the first ``count`` tokens of ``slot``, all attention layers: the
        copy-on-write source of a partly matched page."""
        with self.lock:
            parts = []
            for kind in ("raw_k", "raw_v"):
                staged = K.gather_pages(self.pools.flat(kind), self.pools.rows(kind, [slot]))
                parts.append(staged[:, :count].contiguous().cpu().numpy().tobytes())
            return b"".join(parts)

    def write_prefix(self, slot: int, count: int, data: bytes) -> None:
        """Store ``data`` (from ``read_prefix``) as the first ``count`` tokens of ``slot`` with one
        ``store`` launch over the flattened raw pools (row ``(l * P + slot) * C + i``)."""
        if count <= 0:
            return
        with self.lock:
            c = self.pools.config
            shape = (len(self.pools.attention) * count, c.n_kv_heads, c.head_dim)
            values = torch.from_numpy(np.frombuffer(bytes(data), dtype=np.float32).copy()).to(self.pools.device)
            half = values.numel() // 2
            k, v = values[:half].reshape(shape), values[half:].reshape(shape)
            rows = self.pools.rows("raw_k", [slot])  # one per layer
            slots = (rows[:, None] * self.page_size + torch.arange(count, device=rows.device)[None, :]).reshape(-1)
            K.store(k.contiguous(), v.contiguous(), slots, self.pools.flat("raw_k"), self.pools.flat("raw_v"))
            self._dirty(slot)

    def free(self, slot: int) -> None:
        """The slot holds no page any more (its tensors are left as they are)."""
        with self.lock:
            self._dirty(slot)

    def set_generation(self, slot: int, gen: int) -> None:
        """Publish the page generation the read kernels compare leases with (``gen_table[slot]``)."""
        with self.lock:
            self.pools.gen_table[slot] = gen

    # -- engine-side data plane operations --------------------------------------------------------
    def compress_slots(self, slots: Sequence[int], layers: Sequence[int] | None = None) -> None:
        """Run the ``compress`` kernel for ``slots`` on the given compressing layers (default all);
        the slots count as fresh once every compressing layer was done."""
        if not slots:
            return
        with self.lock:
            ids = torch.tensor(list(slots), dtype=torch.int32, device=self.pools.device)
            todo = self.pools.compressing if layers is None else layers
            for layer in todo:
                pools = self.pools.layers[layer]
                assert pools.comp_k is not None and pools.comp_v is not None and pools.idx_k is not None
                K.compress(ids, pools.raw_k, pools.raw_v, self.model.layers[layer].pool_bias,
                           pools.comp_k, pools.comp_v, pools.idx_k)
                self.compress_launches += 1
            if layers is None or set(todo) >= set(self.pools.compressing):
                self.fresh.update(slots)

    def mark_fresh(self, slots: Sequence[int]) -> None:
        """The forward compressed these slots on every compressing layer after storing their KV."""
        with self.lock:
            self.fresh.update(slots)

    def release_window(self, slot: int) -> bool:
        """Free the window layers' raw KV of a page that slid out of the window (zeroed, as memory
        handed back for reuse would be).  Returns False if it was already released."""
        with self.lock:
            if slot in self.window_released:
                return False
            for layer in self.pools.window_layers:
                self.pools.layers[layer].raw_k[slot].zero_()
                self.pools.layers[layer].raw_v[slot].zero_()
            self.window_released.add(slot)
            return True

    def copy_pages(self, src: Sequence[int], dst: Sequence[int]) -> None:
        """Copy whole pages (every kind, every layer) from slots ``src`` to slots ``dst``: gather all
        sources first, then scatter, so overlapping slot lists copy the old contents."""
        if not src:
            return
        with self.lock:
            kinds = self.pools.kinds
            staged = {kind: K.gather_pages(self.pools.flat(kind), self.pools.rows(kind, src)) for kind in kinds}
            for kind in kinds:
                K.scatter_pages(staged[kind], self.pools.flat(kind), self.pools.rows(kind, dst))
            for slot in dst:
                self._dirty(slot)
            self.fresh.update(dst)

    def _dirty(self, slot: int) -> None:
        self.fresh.discard(slot)
        self.window_released.discard(slot)
