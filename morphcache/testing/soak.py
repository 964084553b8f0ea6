"""The soak: a seeded, randomized run of one CacheManager under faults, checked by an oracle.

::

    request threads (N, or one loop)          chaos (its own thread, or interleaved)
      lookup prompt + question  -> Ready: check, register + attach, append the rest
                                -> NeedsRecovery: recover, look up again
                                -> Miss: register
      decode (append, append_batch)             offload / prefetch / drop / evict / admit pages
      acquire, check a held lease               damage a page file (bit flip, truncate, delete)
      release, abort (free, leases kept)        unwritable directory / full disk, on and off
      capture / uncapture a batch               check_integrity (also with copies in flight)

Requests share a handful of system prompts, so most sequences share their first pages with others.
Every read is compared with the tokens its lookup promised (``soak_oracle``); every fault a read met
must have been detected (``soak_faults``); a failed move must leave its page where it was.  This
module is longer than most: it is the workload and the run loop together, one short method per op.
"""

from __future__ import annotations

import os
import random
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import Future
from dataclasses import asdict, dataclass
from typing import Any

from morphcache.runtime import CacheManager, Lease, NeedsRecovery, Ready, RuntimeConfig
from morphcache.runtime import kernel_lease as _kernel_lease  # noqa: F401  (torch loaded before RSS is measured)

from .soak_faults import FaultInjector, stray_records
from .soak_oracle import Refused, Tally, check_integrity, check_lease, guarded

FAILURES = ("wrong_reads", "undocumented", "integrity_failures", "undetected_faults", "false_detections",
            "lost_by_failed_move", "frontier_mismatches", "uncounted_files", "crashed")


@dataclass(frozen=True)
class SoakConfig:
    """``seconds`` of work (and at least ``min_steps`` steps per request thread); ``threads`` request
    threads plus a chaos thread, or 0 for one loop doing both; the runtime's shape; ``spec``, a spec
    file other than the shipped one (to show what the soak catches on a weakened design)."""

    seconds: float = 10.0
    seed: int = 0
    threads: int = 0
    min_steps: int = 0
    page_size: int = 4
    window: int = 24
    gpu_pages: int = 48
    host_pages: int = 10
    disk_pages: int = 10
    pool_capacity: int = 24
    prompts: int = 6
    spec: str | None = None  # a spec file (default: the shipped one)
    options: tuple[tuple[str, Any], ...] = ()  # further RuntimeConfig fields (policy, prefetch_workers, ...)


@dataclass(frozen=True)
class SoakResult:
    """What one run counted (``counts``: every counter, refusals by call and error included)."""

    seconds: float
    calls: int
    calls_per_s: float
    reads_checked: int
    reads_stale: int
    faults_injected: dict[str, int]
    faults_reached: int
    faults_detected: int
    writes_refused: int
    integrity_checks: int
    integrity_checks_in_flight: int
    rss_start_mb: float
    rss_end_mb: float
    failures: dict[str, int]
    problems: tuple[str, ...]
    counts: dict[str, int]

    @property
    def ok(self) -> bool:
        """No failure of any kind."""
        return not any(self.failures.values())

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _rss_mb() -> float:
    with open("/proc/self/statm", encoding="ascii") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


class Requests:
    """One request thread's sequences and leases (no other thread touches them)."""

    MAX_SEQS = 6
    MAX_LEASES = 6

    def __init__(self, m: CacheManager, tally: Tally, rng: random.Random, name: str,
                 prompts: list[list[int]]) -> None:
        self.m, self.tally, self.rng, self.name, self.prompts = m, tally, rng, name, prompts
        self.seqs: dict[str, list[int]] = {}
        self.captured: set[str] = set()
        self.held: list[tuple[Lease, tuple[int, ...]]] = []
        self.history: list[list[int]] = []
        self.n = 0

    def step(self) -> None:
        rng = self.rng
        op = rng.random()
        if len(self.seqs) > self.MAX_SEQS:
            self.abort(next(iter(self.seqs)))
        elif len(self.held) > self.MAX_LEASES:
            self.release(0)
        elif op < 0.25 or not self.seqs:
            self.request()
        elif op < 0.45:
            self.decode()
        elif op < 0.55:
            self.acquire()
        elif op < 0.7 and self.held:
            lease, promised = self.held[rng.randrange(len(self.held))]
            check_lease(self.m, self.tally, lease, promised)
        elif op < 0.8 and self.held:
            self.release(rng.randrange(len(self.held)))
        elif op < 0.85:
            self.abort(rng.choice(list(self.seqs)))
        elif op < 0.9:
            try:
                self._call("slide", self.m.slide, rng.choice(list(self.seqs)))
            except Refused:
                pass
        else:
            self.capture()
        self.tally.bump("steps")

    def _call(self, name: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        return guarded(self.tally, name, fn, *args, **kwargs)

    def request(self) -> None:
        """A new request: a shared system prompt (or an earlier request) and a question of its own."""
        rng = self.rng
        base = rng.choice(self.history) if self.history and rng.random() < 0.3 else rng.choice(self.prompts)
        tokens = base + [rng.randrange(50_000, 60_000) for _ in range(rng.randrange(1, 10))]
        self.history = (self.history + [tokens])[-8:]
        self.n += 1
        sid = f"{self.name}.{self.n}"
        rng = self.rng
        owner = rng.choice(list(self.seqs)) if self.seqs and rng.random() < 0.2 else None
        limit = rng.randrange(1, len(tokens) + 1) if rng.random() < 0.1 else None
        try:
            self._call("probe", self.m.probe, tokens)
            res = self._call("lookup", self.m.lookup, tokens, owner=owner, limit=limit)
            if isinstance(res, NeedsRecovery):
                self._call("recover", self.m.recover, res.plan, block=rng.random() < 0.8)
                res = self._call("lookup", self.m.lookup, tokens, owner=owner, limit=limit)
        except Refused:
            return
        if isinstance(res, Ready):
            lease = res.lease
            promised = tuple(tokens[: lease.tokens])
            check_lease(self.m, self.tally, lease, promised)
            self.tally.bump("hits")
            try:
                self._call("register", self.m.register, sid)
                self.seqs[sid] = []
                frontier = self._call("attach", self.m.attach, sid, lease)
                self.seqs[sid] = list(tokens[:frontier])
                self._append(sid, tokens[frontier:])
            except Refused:
                pass
            self.held.append((lease, promised))
            if rng.random() < 0.5:
                self.release(len(self.held) - 1)
            return
        try:
            self._call("register", self.m.register, sid, tokens)
            self.seqs[sid] = list(tokens)
        except Refused:
            pass
        self._frontier(sid)

    def _frontier(self, sid: str) -> None:
        """The runtime's frontier must be the tokens this thread wrote (calls are all or none)."""
        if sid not in self.seqs:
            return
        try:
            got = self._call("frontier", self.m.frontier, sid)
        except Refused:
            return
        if got != len(self.seqs[sid]):
            self.tally.problem("frontier_mismatches", f"{sid}: runtime {got}, written {len(self.seqs[sid])}")

    def _append(self, sid: str, tokens: list[int]) -> None:
        if not tokens:
            return
        try:
            self._call("append", self.m.append, sid, tokens)
            self.seqs[sid].extend(tokens)
        except Refused:
            pass
        self._frontier(sid)

    def decode(self) -> None:
        rng = self.rng
        live = [s for s in self.seqs if s not in self.captured] or list(self.seqs)
        if rng.random() < 0.5:
            sid = rng.choice(live)
            self._append(sid, [rng.randrange(60_000, 70_000) for _ in range(rng.randrange(1, 6))])
            return
        batch = {sid: [rng.randrange(60_000, 70_000)] for sid in live}
        try:
            self._call("append_batch", self.m.append_batch, batch)
        except Refused:
            pass
        for sid, toks in batch.items():  # independent: each landed or not; the frontier says which
            try:
                got = self._call("frontier", self.m.frontier, sid)
            except Refused:
                continue
            if got == len(self.seqs[sid]) + 1:
                self.seqs[sid].extend(toks)
            self._frontier(sid)

    def acquire(self) -> None:
        sid = self.rng.choice(list(self.seqs))
        try:
            lease = self._call("acquire", self.m.acquire, sid)
        except Refused:
            return
        tokens = self.seqs[sid]
        if lease.tokens != len(tokens):
            self.tally.problem("frontier_mismatches", f"{sid}: lease of {lease.tokens} tokens, written {len(tokens)}")
        promised = tuple(tokens[: lease.tokens])
        check_lease(self.m, self.tally, lease, promised)
        self.held.append((lease, promised))

    def release(self, i: int) -> None:
        lease, _ = self.held.pop(i)
        try:
            self._call("release", self.m.release, lease)
        except Refused:
            pass

    def abort(self, sid: str) -> None:
        """End a sequence whatever leases are held on its pages (they stay held, and stay checked)."""
        if sid in self.captured:
            self.uncapture()
        try:
            self._call("free", self.m.free, sid)
            del self.seqs[sid]
            self.tally.bump("aborts")
        except Refused:
            self._frontier(sid)

    def capture(self) -> None:
        if self.captured:
            self.uncapture()
            return
        ids = self.rng.sample(list(self.seqs), min(len(self.seqs), self.rng.randrange(1, 4)))
        try:
            self._call("capture", self.m.capture, ids)
            self.captured.update(ids)
        except Refused:
            pass

    def uncapture(self) -> None:
        try:
            self._call("uncapture", self.m.uncapture, sorted(self.captured))
            self.captured.clear()
        except Refused:
            pass

    def finish(self) -> None:
        """Check every held lease once more, then let everything go."""
        for lease, promised in self.held:
            check_lease(self.m, self.tally, lease, promised)
        while self.held:
            self.release(0)
        if self.captured:
            self.uncapture()
        for sid in list(self.seqs):
            self.abort(sid)


class Chaos:
    """Moves pages between tiers and injects disk faults."""

    def __init__(self, m: CacheManager, tally: Tally, rng: random.Random) -> None:
        self.m, self.tally, self.rng = m, tally, rng
        self.faults = FaultInjector(m, random.Random(rng.random()))
        self.futures: list[Future[None]] = []

    def step(self) -> None:
        op = self.rng.random()
        if self.faults.disk.write_fault is not None and op < 0.15:
            self.faults.toggle_writes()  # a write fault lasts a few steps
        elif op < 0.55:
            self.move()
        elif op < 0.8:
            self.faults.damage_file()
        elif op < 0.83:
            self.faults.toggle_writes()
        else:
            check_integrity(self.m, self.tally)
        self.reap()

    def move(self) -> None:
        """One move of a random page; a failed one must leave the page where it was."""
        m, rng = self.m, self.rng
        with m.lock:
            ids = m.page_ids()
            if not ids:
                return
            pid = rng.choice(ids)
            tier = m.page_state(pid)["tier"]
            roll = rng.random()
            args: tuple[Any, ...]
            if roll < 0.1:
                name, args = rng.choice([("evict", (pid,)), ("admit", (pid,)), ("drop", (pid,)), ("compress", (pid,)),
                                         ("recompress", (pid,)), ("build_index", (pid,)), ("release_tail", (pid,))])
            elif tier == "gpu":
                name, args = "offload", (pid, rng.choice(["host", "disk", "disk"]))
            elif tier in ("host", "disk"):
                name, args = ("prefetch", (pid,)) if roll < 0.9 else ("drop", (pid,))
            else:
                name, args = rng.choice([("evict", (pid,)), ("admit", (pid,))])
            try:
                out = guarded(self.tally, name, getattr(m, name), *args)
            except Refused:
                after = m.page_state(pid)["tier"] if pid in m.page_ids() else "forgotten"
                if after != tier:
                    self.tally.problem("lost_by_failed_move", f"{name}{args} failed and left page {pid} {after} "
                                       f"(was {tier})")
                return
            self.tally.bump(f"moves.{name}")
            if name == "prefetch":
                self.futures.append(out)
        if name == "prefetch" and rng.random() < 0.3:
            check_integrity(m, self.tally)  # the copy is (likely) still in flight

    def reap(self, wait: bool = False) -> None:
        """Collect finished copies; a copy that raised is an undocumented exception."""
        keep = []
        for fut in self.futures:
            if not (wait or fut.done()):
                keep.append(fut)
                continue
            exc = fut.exception()
            if exc is not None:
                self.tally.problem("undocumented", f"prefetch copy: {exc!r}")
        self.futures = keep


def prompts(rng: random.Random, n: int) -> list[list[int]]:
    """``n`` system prompts of 6 to 30 tokens, each its own token range."""
    return [[10_000 * (k + 1) + i for i in range(rng.randrange(6, 31))] for k in range(n)]


def run_soak(cfg: SoakConfig) -> SoakResult:
    """Run one soak and return its counts (the manager and its disk directory are discarded)."""
    rng = random.Random(cfg.seed)
    tally = Tally()
    with tempfile.TemporaryDirectory(prefix="morphcache-soak-") as tmp:
        rc = RuntimeConfig(page_size=cfg.page_size, window=cfg.window, gpu_pages=cfg.gpu_pages,
                           host_pages=cfg.host_pages, disk_pages=cfg.disk_pages, disk_dir=os.path.join(tmp, "disk"),
                           pool_capacity=cfg.pool_capacity, **dict(cfg.options))
        m = CacheManager(cfg.spec, config=rc)
        chaos = Chaos(m, tally, random.Random(rng.random()))
        shared = prompts(rng, cfg.prompts)
        workers = [Requests(m, tally, random.Random(rng.random()), f"t{i}", shared) for i in range(max(cfg.threads, 1))]
        rss0 = _rss_mb()
        start = time.perf_counter()
        if cfg.threads == 0:
            _single(cfg, workers[0], chaos, start)
        else:
            _threaded(cfg, workers, chaos, tally, start)
        elapsed = time.perf_counter() - start
        chaos.faults.heal()
        m.wait_prefetches()
        chaos.reap(wait=True)
        for w in workers:
            w.finish()
        check_integrity(m, tally)
        m.close()
        _files(m, chaos, tally)
        rss1 = _rss_mb()
    detected = sum(m.metrics().corrupt_pages.values())
    reached = chaos.faults.faults_reached
    if detected < reached:
        tally.problem("undetected_faults", f"{reached} reads met damage, {detected} detected")
    elif detected > reached:
        tally.problem("false_detections", f"{detected} pages found corrupt, {reached} reads met damage")
    c = tally.counts
    return SoakResult(
        seconds=round(elapsed, 2), calls=c["calls"], calls_per_s=round(c["calls"] / max(elapsed, 1e-9), 1),
        reads_checked=c["reads_checked"], reads_stale=c["reads_stale"],
        faults_injected=dict(chaos.faults.injected), faults_reached=reached, faults_detected=detected,
        writes_refused=chaos.faults.writes_refused, integrity_checks=c["integrity_checks"],
        integrity_checks_in_flight=c["integrity_checks_in_flight"],
        rss_start_mb=round(rss0, 1), rss_end_mb=round(rss1, 1), failures={k: c[k] for k in FAILURES},
        problems=tuple(tally.problems), counts=dict(sorted(c.items())))


def _single(cfg: SoakConfig, w: Requests, chaos: Chaos, start: float) -> None:
    steps = 0
    while time.perf_counter() - start < cfg.seconds or steps < cfg.min_steps:
        if w.rng.random() < 0.3:
            chaos.step()
        else:
            w.step()
        steps += 1
        if steps % 200 == 0:
            check_integrity(w.m, w.tally)


def _threaded(cfg: SoakConfig, workers: list[Requests], chaos: Chaos, tally: Tally, start: float) -> None:
    stop = threading.Event()
    done: Counter[str] = Counter()

    def loop(name: str, step: Any) -> None:
        try:
            while not stop.is_set():
                step()
                done[name] += 1
        except BaseException as exc:  # a dead thread fails the run
            tally.problem("crashed", f"{name}: {exc!r}")
            stop.set()

    threads = [threading.Thread(target=loop, args=(w.name, w.step), name=f"soak-{w.name}") for w in workers]
    threads.append(threading.Thread(target=loop, args=("chaos", chaos.step), name="soak-chaos"))
    for t in threads:
        t.start()
    while not stop.is_set():
        time.sleep(0.05)
        if time.perf_counter() - start >= cfg.seconds and min(done[w.name] for w in workers) >= cfg.min_steps:
            break
    stop.set()
    for t in threads:
        t.join()


def _files(m: CacheManager, chaos: Chaos, tally: Tally) -> None:
    """After close: the disk directory holds the slab and its lock only, and every record in the slab
    is a page's own, or a leftover the metrics count."""
    disk = chaos.faults.disk
    for name in os.listdir(disk.dir):
        if name not in (".lock", disk.slab.name):
            tally.problem("uncounted_files", f"{name} in the disk directory is not the tier's")
    for slot in stray_records(disk):
        tally.problem("uncounted_files", f"slot {slot} of the slab holds a record that is no page's and not counted")
    counted = m.metrics().extra.get("disk_leftover_files", 0)
    if counted != len(disk.leftovers):
        tally.problem("uncounted_files", f"{len(disk.leftovers)} leftover files, the metrics say {counted}")
