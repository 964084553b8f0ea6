"""Text rendering of a SimSummary (a rich table)."""

from __future__ import annotations

from collections.abc import Mapping

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from morphcache.engine.summary import SimSummary


def _pct(x: float) -> str:
    return f"{100.0 * x:.1f}%"


def _bytes(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n} B"


def _pairs(m: Mapping[str, int], unit: str = "") -> str:
    items = [f"{k} {v}{unit}" for k, v in m.items() if v]
    return ", ".join(items) if items else "none"


def summary_table(s: SimSummary) -> Table:
    """The report as a two-column table."""
    t = Table(title=f"morphcache simulate: {s.workload}", show_header=False, title_justify="left")
    t.add_column("what", style="bold")
    t.add_column("value")
    t.add_row("model", f"{s.model}" + (f" ({s.linear_layers} linear layers)" if s.linear_layers else ""))
    t.add_row("mode", f"{s.mode}; ops {s.ops}")
    t.add_row("requests served", f"{s.requests} ({s.prompt_tokens} prompt tokens, {s.decoded_tokens} decoded, "
                                  f"{s.computed_tokens} computed by the cached forward)")
    if s.refused:
        t.add_row("requests refused", f"{len(s.refused)} (GPU pool too small): {s.refused[0]}")
    t.add_row("nominal hit rate", f"{_pct(s.nominal_hit_rate)} ({s.nominal_tokens} tokens)")
    t.add_row("effective hit rate", f"{_pct(s.effective_hit_rate)} ({s.effective_tokens} tokens readable at lookup)")
    t.add_row("reuse after recovery", f"{_pct(s.reuse_rate)} ({s.reused_tokens} tokens)")
    t.add_row("gap by missing object", f"{s.gap_tokens} tokens: {_pairs(s.gap_by_object, ' tok')}")
    rec = _pairs(s.recoveries_by_path)
    t.add_row("recoveries by path", f"{rec}; {s.rebuilt_pages} recomputed pages written back")
    t.add_row("tokens recomputed", f"{s.recomputed_tokens} (in a nominal hit, computed again)")
    t.add_row("bytes prefetched", f"{_bytes(s.prefetched_bytes)} ({s.prefetched_pages} pages landed, "
                                  f"{s.corrupt_pages} corrupt)")
    saved = s.reused_tokens / s.prompt_tokens if s.prompt_tokens else 0.0
    line = f"{s.reused_tokens} tokens ({_pct(saved)} of prompt tokens)"
    if s.linear_layers:
        total = s.prompt_tokens * s.n_layers
        line += (f"; {s.token_layers_saved} token-layers ({_pct(s.token_layers_saved / total if total else 0.0)} "
                 f"of the prompts' {total}: {s.reused_tokens} x {s.n_layers} layers less "
                 f"{s.rebuild_token_layers} rebuilding linear-layer state)")
    t.add_row("prefill saved vs no cache", line)
    t.add_row("eviction policy", _policy_line(s))
    if s.policy_stats:
        t.add_row("policy state", escape(", ".join(f"{k} {v:.3g}" for k, v in s.policy_stats.items())))
    t.add_row("tier events", _pairs(s.tier_events))
    t.add_row("bytes moved", ", ".join(f"{k} {_bytes(v)}" for k, v in s.bytes_moved.items()) or "none")
    pools = (f"GPU {s.pools['gpu_pages']} pages, host {s.pools['host_pages']}, disk "
             f"{s.pools['disk_pages']} ({_bytes(s.pools['page_bytes'])} per page)")
    if s.linear_layers:
        pools += (f"; recurrent state {_bytes(s.pools['state_bytes'])} per sequence, state pool "
                  f"{_bytes(s.pools['state_pool_bytes'])} (working slots + a checkpoint per page slot)")
    t.add_row("pools", pools)
    if s.linear_layers:
        t.add_row("linear-layer state", f"{_pairs(s.state_paths, ' req')}; exact rebuilds recomputed "
                                        f"{s.linear_tokens} tokens ({s.linear_token_layers} token-layers); "
                                        f"{s.checkpoint_tokens} tokens not rerun thanks to checkpoints")
    if s.max_abs_diff is None:
        diff = "no request sampled"
    else:
        verdict = "OK" if s.within_tolerance else f"DRIFT in {s.drifted} request(s)"
        diff = (f"{s.max_abs_diff:.3g} over {s.sampled} sampled requests (tolerance {s.tolerance:g}): "
                f"{verdict}")
    t.add_row("max |logit - golden|" + (", exact requests" if s.tail_replay is not None else ""), diff)
    if s.tail_replay is not None:
        t.add_row("approximate requests", _approximate_line(s))
    t.add_row("integrity checks", f"{s.integrity_checks} passed")
    rate = s.computed_tokens / s.wall_s if s.wall_s else 0.0
    t.add_row("wall time", f"{s.wall_s:.1f} s ({rate:.1f} computed tokens/s)")
    for note in s.notes:
        t.add_row("note", note)
    return t


def _policy_line(s: SimSummary) -> str:
    where = ", ".join(f"{DECISION_NAMES[d]} {n}" for d, n in s.evictions.items() if n) or "none"
    return f"{s.policy}: {s.evicted} evictions ({where}), {s.policy_refusals} proposals refused"


DECISION_NAMES = {"gpu": "GPU -> host/drop", "host": "host -> disk/drop", "disk": "disk -> drop",
                  "pool": "out of the reuse pool"}


def _approximate_line(s: SimSummary) -> str:
    a = s.approximate
    head = f"tail-replay budget {s.tail_replay:g}: "
    if not a:
        return head + "none (every request was served exactly)"
    worst = max(x.max_abs_diff for x in a)
    top1 = sum(x.top1_agreement for x in a) / len(a)
    rt = s.runtime_state
    counted = (f" (runtime: {int(rt['opt_ins'])} opted in, {int(rt['replays'])} replay_tail, approximate-effective "
               f"hit rate {100 * rt['approximate_effective_hit_rate']:.1f}%)" if rt else "")
    return (head + f"{len(a)} request(s), {s.approximate_reused_tokens} reused tokens, {s.replayed_tokens} "
            f"replayed{counted}; max |logit - golden| {worst:.3g}, top-1 agreement {100 * top1:.1f}% (mean), "
            f"{100 * min(x.top1_agreement for x in a):.1f}% (min); never counted as exact")


def approximate_table(s: SimSummary) -> Table:
    """One row per request served on an approximate state, with its measured divergence."""
    t = Table(title="approximate requests (tail-replay; not exact, their pages withdrawn from the cache)",
              title_justify="left")
    for col in ("request", "hit", "replayed (R)", "budget", "max |logit - golden|", "top-1 agreement",
                "pages withdrawn"):
        t.add_column(col, justify="left" if col == "request" else "right")
    for a in s.approximate:
        t.add_row(a.request_id, str(a.hit), str(a.replayed), f"{a.budget:g}", f"{a.max_abs_diff:.3g}",
                  f"{100 * a.top1_agreement:.1f}%", str(a.withdrawn_pages))
    return t


def print_summary(s: SimSummary, console: Console | None = None) -> None:
    """Print the report table, and the approximate requests' table if there are any (110 columns wide
    when stdout is not a terminal)."""
    if console is None:
        console = Console()
        if not console.is_terminal:
            console = Console(width=110)
    console.print(summary_table(s))
    if s.approximate:
        console.print(approximate_table(s))
