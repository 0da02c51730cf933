"""Preallocated, batched KV cache for the DiT's frame-causal temporal attention.

What the cache keeps (the contract the equivalence test checks)
-----------------------------------------------------------------
For every DiT block it stores the temporal-attention keys and values of *committed* frames only --
frames that finished denoising and whose keys/values were computed by a pass at noise level t = 0
(a separate commit pass, or -- what :class:`~neuralsim.world_model.model.WorldModel` does -- the first
denoising pass of the next frame, which carries the finished frame along: see
:meth:`~neuralsim.world_model.dit.CausalDiT.denoise_with_pending`).
Keys are stored **without** RoPE; RoPE is applied when they are read, at the key's position relative
to the frame being generated (query at position 0, a key ``d`` frames back at position ``-d``).  So the
stored tensors never depend on how long the episode has been running, and the attention scores equal
those of absolute positions exactly (RoPE depends only on position differences).

A frame being generated (frame ``n`` of its row) attends to itself plus at most ``window - 1``
committed frames:

* ``num_sink`` sink slots: frames ``0 .. num_sink-1`` of the episode, kept forever;
* ``R = window - 1 - num_sink`` ring slots: the most recent frames ``j >= num_sink`` with
  ``n - R <= j < n``.

Equivalently: the cached rollout equals running the full causal DiT over the whole history (every
committed frame clean at t = 0) with the banded mask of :func:`neuralsim.world_model.dit.temporal_mask`
(frame i sees j iff ``j == i`` or ``j < num_sink`` or ``0 < i - j <= R``).  Memory is
``O(window)`` for any episode length.  Each batch row has its own frame counter and can be reset alone.

Sink frames keep their true distance, which grows past the clip lengths seen in training, so the
default is ``num_sink = 0`` (pure sliding window).

Layout: per layer ``k, v`` of shape ``(B, N, H, C, Dh)`` with N tokens per frame, H heads, C = window-1
slots, Dh head dim; ``frame_index (B, C)`` holds the episode frame index stored in each slot (-1 = empty).
"""

from __future__ import annotations

import torch

RowIndex = torch.Tensor | None  # LongTensor of batch rows, or None for all rows


class KVCache:
    """Typed sliding-window KV cache; see the module docstring for exactly what it keeps."""

    def __init__(self, num_layers: int, batch_size: int, window: int, num_sink: int, tokens: int, heads: int,
                 head_dim: int, device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32):
        if window < 1 or not 0 <= num_sink < window:
            raise ValueError(f"need window >= 1 and 0 <= num_sink < window, got window={window}, num_sink={num_sink}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.batch_size = batch_size
        self.window = window
        self.num_sink = num_sink
        self.capacity = window - 1
        self.ring = self.capacity - num_sink
        self.device = torch.device(device)
        shape = (batch_size, tokens, heads, self.capacity, head_dim)  # (B, N, H, C, Dh)
        self.k = [torch.zeros(shape, device=self.device, dtype=dtype) for _ in range(num_layers)]
        self.v = [torch.zeros(shape, device=self.device, dtype=dtype) for _ in range(num_layers)]
        self.frame_index = torch.full((batch_size, self.capacity), -1, dtype=torch.long, device=self.device)
        # Host-side frame counters: slot arithmetic never syncs with the device.
        self.num_frames = torch.zeros(batch_size, dtype=torch.long)

    # ------------------------------------------------------------------ bookkeeping
    def _rows(self, rows: RowIndex) -> torch.Tensor:
        if rows is None:
            return torch.arange(self.batch_size)
        rows = torch.as_tensor(rows, dtype=torch.long).reshape(-1).cpu()
        if rows.numel() and (rows.min() < 0 or rows.max() >= self.batch_size):
            raise IndexError(f"rows {rows.tolist()} out of range for a cache of batch size {self.batch_size}")
        return rows

    def reset(self, env_ids: RowIndex = None) -> None:
        """Forget every committed frame of the given rows (all rows if None); in place, no reallocation."""
        rows = self._rows(env_ids)
        self.num_frames[rows] = 0
        self.frame_index[rows.to(self.device)] = -1

    def memory_bytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.k + self.v)

    # ------------------------------------------------------------------ reading
    def context(self, layer: int, rows: RowIndex) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Cached (k, v, valid, rel_pos) of ``layer`` for ``rows``.

        k, v: (b, N, H, C, Dh) un-rotated; valid: (b, C) bool; rel_pos: (b, C) float, the position of
        each slot's frame relative to the frame being generated (negative; garbage where not valid).
        """
        if rows is None:
            k, v, fi, n = self.k[layer], self.v[layer], self.frame_index, self.num_frames
        else:
            r = self._rows(rows)
            rd = r.to(self.device)
            k, v, fi, n = self.k[layer][rd], self.v[layer][rd], self.frame_index[rd], self.num_frames[r]
        valid = fi >= 0
        rel_pos = (fi - n.to(self.device)[:, None]).to(torch.float32)
        return k, v, valid, rel_pos

    # ------------------------------------------------------------------ writing
    def append(self, layer: int, rows: RowIndex, k_new: torch.Tensor, v_new: torch.Tensor) -> None:
        """Write the committed frame's (k, v) (b, N, H, Dh) of ``layer`` into each row's next slot.

        Call for every layer, then :meth:`advance` once.  Rows whose frame is not kept (only possible
        when the ring is empty and the sinks are full) are skipped.
        """
        r = self._rows(rows)
        slots, keep = self._slots(r)
        if not bool(keep.all()):
            r, slots, k_new, v_new = r[keep], slots[keep], k_new[keep.to(k_new.device)], v_new[keep.to(v_new.device)]
        if r.numel() == 0:
            return
        rd, sd = r.to(self.device), slots.to(self.device)
        self.k[layer][rd, :, :, sd] = k_new.to(self.k[layer].dtype)
        self.v[layer][rd, :, :, sd] = v_new.to(self.v[layer].dtype)

    def advance(self, rows: RowIndex) -> None:
        """Record the committed frame's index in its slot and count it; call after all :meth:`append`."""
        r = self._rows(rows)
        slots, keep = self._slots(r)
        if bool(keep.any()):
            self.frame_index[r[keep].to(self.device), slots[keep].to(self.device)] = self.num_frames[r[keep]].to(
                self.device)
        self.num_frames[r] += 1

    def next_slot(self, rows: RowIndex) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Where each row's next committed frame goes: (slot (b,), kept (b,), overwrites (b,)).

        ``kept`` is False when the frame will not be stored (the ring is empty and the sinks are full);
        ``overwrites`` is True when the slot now holds a frame that the commit evicts (the oldest ring
        frame once the ring is full).  All on the cache's device.
        """
        r = self._rows(rows)
        slots, keep = self._slots(r)
        slots, keep = slots.to(self.device), keep.to(self.device)
        if self.capacity == 0:
            return slots, keep, torch.zeros_like(keep)
        held = self.frame_index[r.to(self.device), slots.clamp_max(self.capacity - 1)] >= 0
        return slots, keep, keep & held

    def _slots(self, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Slot of each row's next committed frame, and whether that frame is kept at all."""
        n = self.num_frames[rows]
        is_sink = n < self.num_sink
        if self.ring > 0:
            ring_slot = self.num_sink + (n - self.num_sink).clamp_min(0) % self.ring
            keep = torch.ones_like(is_sink)
        else:
            ring_slot = torch.zeros_like(n)
            keep = is_sink.clone()
        return torch.where(is_sink, n, ring_slot), keep
