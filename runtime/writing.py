"""Writing sequences: register, append (one token or many, one sequence or a decoding batch),
attach a leased prefix, free.

Token and page arithmetic (C = page size)::

    tokens     0 .......... C-1 | C ......... 2C-1 | 2C ..... frontier-1 |
    blocks     [    page 0     ][     page 1      ][  page 2 (filling)  ]
    append     fires open at a page boundary, append per token, seal on the page's last token;
               a sealed page is hashed into the index, then compressed, indexed and admitted
               (each proposed, the spec decides), and pages W tokens behind slide out
"""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Sequence as Seq

from . import binding as B
from .core import Sequence
from .errors import BadInputError, DuplicateSequenceError, MorphcacheError
from .index import chain_hash
from .lease import Lease
from .lookups import MAX_TOKEN, LookupOps, check_tokens


class WritingOps(LookupOps):
    """Sequences and their pages being written."""

    # -- sequences ----------------------------------------------------------------------------------
    def register(self, seq_id: str, tokens: Seq[int] = ()) -> int:
        """Create an empty sequence (then append ``tokens``); returns its frontier."""
        if not isinstance(seq_id, str) or not seq_id:
            raise BadInputError(f"sequence id must be a non-empty str, got {seq_id!r}")
        toks = check_tokens(tokens)
        with self.lock:
            if seq_id in self.core.seqs:
                raise DuplicateSequenceError(f"sequence {seq_id!r} is already registered")
            seq = self.core.new_sequence(seq_id)
            if toks:
                self._append(seq, toks)
            return seq.frontier

    def append(self, seq_id: str, tokens: Seq[int]) -> int:
        """Write ``tokens`` at the sequence's frontier (opening, filling and sealing pages); returns the
        new frontier.  Tokens accepted before a refusal stay written."""
        toks = check_tokens(tokens)
        with self.lock:
            seq = self._seq(seq_id)
            self._append(seq, toks)
            return seq.frontier

    def append_batch(self, items: Mapping[str, Seq[int]]) -> None:
        """``append`` for many sequences under one lock acquisition (one decoding step).

        Sequences are independent: a refusal for one does not stop the others; the first refusal is
        raised once every sequence was processed.
        """
        if not isinstance(items, Mapping):
            raise BadInputError(f"items must map sequence ids to tokens, got {type(items).__name__}")
        checked: list[tuple[str, Seq[int]]] = []
        for sid, toks in items.items():
            if toks.__class__ is list and len(toks) == 1 and toks[0].__class__ is int and 0 <= toks[0] <= MAX_TOKEN:
                checked.append((sid, toks))  # the decode step's one token, already valid
            else:
                checked.append((self._seq_id(sid), check_tokens(toks)))
        with self.lock:
            seqs = [self._seq(sid) for sid, _ in checked]
            simple: list[tuple[Sequence, int, int]] = []
            rest: list[tuple[Sequence, Seq[int]]] = []
            info = self.pages.info
            last = self.C - 1
            limit = self.config.max_sequence_tokens
            for seq, (_, toks) in zip(seqs, checked, strict=True):
                block = seq.block
                if len(toks) == 1 and block and len(info[block[-1]].tokens) < last and seq.frontier < limit:
                    simple.append((seq, block[-1], toks[0]))
                else:
                    rest.append((seq, toks))
            done = self.core.fast.fire_own_many("append", [s[1] for s in simple], [s[0] for s in simple]) \
                if self._fire_own == self.core.fast.fire_own else 0
            write = self.store.write_tokens
            for _seq, pid, token in simple[:done]:
                page = info[pid]
                page.tokens.append(token)
                write(page.gpu_slot, page.depth, len(page.tokens) - 1, (token,))
            rest += [(seq, [token]) for seq, _, token in simple[done:]]
            errors: list[MorphcacheError] = []
            for seq, toks in rest:
                try:
                    self._append(seq, toks)
                except MorphcacheError as exc:
                    errors.append(exc)
            if errors:
                raise errors[0]

    @staticmethod
    def _seq_id(sid: object) -> str:
        if not isinstance(sid, str):
            raise BadInputError(f"sequence id must be a str, got {sid!r}")
        return sid

    def attach(self, seq_id: str, lease: Lease) -> int:
        """Start an empty sequence with a leased prefix: its whole pages are shared, the partial page is
        copied into a fresh page of the sequence.  The lease stays held.  Returns the frontier."""
        with self.lock:
            seq = self._seq(seq_id)
            lease = self._own(lease)
            if seq.block:
                raise BadInputError(f"attach needs an empty sequence; {seq_id!r} has {seq.frontier} tokens")
            block = seq.block
            for pid in lease.pages:
                block.append(pid)
                self.pages.info[pid].seqs[seq_id] = seq
                self._refs_changed(pid)
            names = seq.view.names
            names["pages"] = len(block)
            names[B.FRONTIER] = len(block) * self.C
            part = lease.partial
            if part is not None and part.tokens:
                self._open(seq)
                pid = block[-1]
                info = self.pages.info[pid]
                for t in part.tokens:
                    self._fire("seal" if len(info.tokens) == self.C - 1 else "append", pid, seq)
                    info.tokens.append(t)
                self.store.write_prefix(info.gpu_slot, len(part.tokens), part.payload)
            return seq.frontier

    def free(self, seq_id: str) -> None:
        """End a sequence: its pages are released to the pool (admitted when the spec allows) and pages
        nothing else holds are dropped."""
        with self.lock:
            seq = self._seq(seq_id)
            del self.core.seqs[seq_id]
            for pid in seq.block:
                self.pages.info[pid].seqs.pop(seq_id, None)
                self._refs_changed(pid)
            if self.config.auto_admit:
                for pid in seq.block:
                    if pid not in self.pages.info:  # evicted to make room for an earlier block
                        continue
                    sealed = self.cols[B.TAIL][pid] in ("sealed", "released")
                    if sealed and self.cols[B.POOL][pid] != "pooled":
                        self._admit(pid)
            for pid in reversed(seq.block):
                self._collect(pid)

    def frontier(self, seq_id: str) -> int:
        """Tokens written to the sequence."""
        with self.lock:
            return self._seq(seq_id).frontier

    def sequence_pages(self, seq_id: str) -> tuple[int, ...]:
        """The sequence's page ids in block order."""
        with self.lock:
            return tuple(self._seq(seq_id).block)

    def cached_pages(self) -> tuple[int, ...]:
        """Pages in the reuse pool, least recently used first."""
        with self.lock:
            return tuple(self.pooled)

    def sequences(self) -> tuple[str, ...]:
        """Ids of the live sequences."""
        with self.lock:
            return tuple(self.core.seqs)

    # -- internal: writing --------------------------------------------------------------------------
    def _append_one(self, seq: Sequence, token: int) -> None:
        """``_append`` of one token (the decode step)."""
        block = seq.block
        info = self.pages.info[block[-1]] if block else None
        if info is None or len(info.tokens) == self.C:
            self._open(seq)
            info = self.pages.info[block[-1]]
        toks = info.tokens
        pid = block[-1]
        self._fire_own("seal" if len(toks) == self.C - 1 else "append", pid, seq)
        toks.append(token)
        self.store.write_tokens(info.gpu_slot, info.depth, len(toks) - 1, (token,))
        if len(toks) == self.C:
            self._touch(pid)
            self._sealed(seq, pid)

    def _append(self, seq: Sequence, tokens: Seq[int]) -> None:
        if len(tokens) == 1 and seq.frontier < self.config.max_sequence_tokens:
            self._append_one(seq, tokens[0])
            return
        if seq.frontier + len(tokens) > self.config.max_sequence_tokens:
            raise BadInputError(f"sequence {seq.sid!r}: {seq.frontier} + {len(tokens)} tokens exceeds "
                                f"max_sequence_tokens {self.config.max_sequence_tokens}")
        c = self.C
        fire = self._fire_own
        block = seq.block
        i, n = 0, len(tokens)
        while i < n:
            if not block or len(self.pages.info[block[-1]].tokens) == c:
                self._open(seq)
            pid = block[-1]
            info = self.pages.info[pid]
            toks = info.tokens
            start = len(toks)
            take = min(c - start, n - i)
            try:
                for j in range(i, i + take):
                    fire("seal" if len(toks) == c - 1 else "append", pid, seq)
                    toks.append(tokens[j])
            finally:
                if len(toks) > start:
                    self.store.write_tokens(info.gpu_slot, info.depth, start, tokens[i:i + len(toks) - start])
            i += take
            self._touch(pid)
            if len(toks) == c:
                self._sealed(seq, pid)

    def _open(self, seq: Sequence) -> None:
        block = seq.block
        parent = block[-1] if block else -1
        ph = self._parent_hash(block)
        pid = self.pages.alloc(len(block), parent, ph)
        info = self.pages.info[pid]
        try:  # the sequence's own pages stay: their KV may not be written yet, and its reads need them
            slot = self._take_slot(pid, {pid, *block})
        except BaseException:
            self.pages.release(pid)
            raise
        info.seqs[seq.sid] = seq
        self._place(pid, slot)
        block.append(pid)
        seq.view.names["pages"] = len(block)
        if parent >= 0:
            self.pages.info[parent].children += 1
        try:
            self._fire("open", pid, seq)
        except BaseException:
            block.pop()
            seq.view.names["pages"] = len(block)
            if parent >= 0:
                self.pages.info[parent].children -= 1
            self._unplace(pid)
            self.pages.release(pid)
            raise
        self.index.add_child(ph, pid, info.tokens)

    def _sealed(self, seq: Sequence, pid: int) -> None:
        info = self.pages.info[pid]
        info.hash = chain_hash(info.parent_hash, info.tokens)
        self.index.add_sealed(info.hash, pid)
        if self.config.auto_compress:
            self._maintain(pid)
        elif self.config.auto_admit:
            self._admit(pid)
        if self.config.auto_slide:
            self._auto_slide(seq)

    def _auto_slide(self, seq: Sequence) -> int:
        """Propose ``slide`` for the oldest live windows of the sequence until the spec refuses one."""
        block = seq.block
        slid = 0
        while seq.slide_next < len(block) - 1:
            pid = block[seq.slide_next]
            if self.cols[B.WINDOW][pid] == "live":
                if not self._try("slide", pid, seq, likely=False):
                    break
                slid += 1
            seq.slide_next += 1
        return slid
