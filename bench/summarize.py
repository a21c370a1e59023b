#!/usr/bin/env python3
"""bench/summarize.py WORKDIR RESULTS.md — the report of one bench/run.

Reads WORKDIR/rounds.tsv (one row per wrk round), meta.env, monitor.tsv and
the optional perf / info-round files that bench/run leaves there; prints the
table of medians with the targets, and rewrites RESULTS.md, keeping (and
appending one line to) its "## History" section.

Two references: the nginx pass-through (bench/passthrough.conf) and the
nginx+Lua gate (bench/lua_gate.conf: idemgate's design in OpenResty style,
without signature verification). Every idemgate row gets a ratio against
both: against nginx round i, and against nginx+Lua round i of the same
kind (first deliveries against nginx+Lua first deliveries, replays against
nginx+Lua replays). Ratios and p99 differences are paired per round index
(run back to back) and the median of those is reported, so a slow drift of
the shared machine's load cancels out.

The embedded-store rows (emb_first, emb_replay: a second idemgate on a redb
file) are also paired with idemgate's Redis rows of the same round index:
the "Embedded store against Redis" section and one target.

The peer rows (peer_first, peer_replay: idempotent-proxy-server, from
bench/setup) are paired with idemgate's Redis rows; bench/peer_report.py
writes their targets and the burst section.
"""

import os
import statistics
import sys

import peer_report
from rounds import MIB, Round, fmt, load_env, load_tsv, parse_commands, read_optional


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


# Sections of RESULTS.md written by hand and carried over by every run.
KEPT_SECTIONS = ("## Optimisations", "## Stage micro-benchmarks", "## HTTP/2 body flood",
                 "## Embedded store, before and after group commit", "## Peak RSS per store",
                 "## Redis memory per completed key", "## Entity state check",
                 "## Entity rules (held notices, events, unresolved changes)",
                 "## A probe plan kept with every claim (`[route.probe]`)",
                 "## Durability: the cost of fsync and WAITAOF per first delivery",
                 "## Scripts that declare the pending change (`bench/ab --entity`)",
                 "## Scale curve (`bench/scale`)",
                 "## What the features cost, and what was won back (`bench/ab --legacy-a`)")


def main():
    work, results_path = sys.argv[1], sys.argv[2]
    meta = load_env(os.path.join(work, "meta.env"))
    clk_tck = int(meta.get("clk_tck", "100"))
    rounds = [Round(row, clk_tck) for row in load_tsv(os.path.join(work, "rounds.tsv"))]
    by_kind = {}
    for r in rounds:
        by_kind.setdefault(r.kind, []).append(r)
    # The references: the nginx pass-through, and the nginx+Lua gate of the
    # same kind (first deliveries / replays), paired by round index.
    def index_of(kind):
        return {r.index: r for r in by_kind.get(kind, [])}

    refs = {
        "nginx": {"by_index": index_of("nginx"),
                  "peak": (by_kind.get("nginx_peak") or [None])[0],
                  "rounds": by_kind.get("nginx", [])},
        "lua_first": {"by_index": index_of("lua_first"),
                      "peak": (by_kind.get("lua_first_peak") or [None])[0],
                      "rounds": by_kind.get("lua_first", [])},
        "lua_replay": {"by_index": index_of("lua_replay"),
                       "peak": None,
                       "rounds": by_kind.get("lua_replay", [])},
        # idemgate on Redis, the reference of the embedded-store rows.
        "first": {"by_index": index_of("first"), "peak": None, "rounds": by_kind.get("first", [])},
        "replay": {"by_index": index_of("replay"), "peak": None, "rounds": by_kind.get("replay", [])},
        # idemgate on a Redis that fsyncs every write: the embedded store's
        # durability.
        "alw_first": {"by_index": index_of("alw_first"), "peak": None,
                      "rounds": by_kind.get("alw_first", [])},
        "alw_replay": {"by_index": index_of("alw_replay"), "peak": None,
                       "rounds": by_kind.get("alw_replay", [])},
        # The peer proxy, idemgate on Redis compared with it.
        "peer_first": {"by_index": index_of("peer_first"), "peak": None,
                       "rounds": by_kind.get("peer_first", [])},
        "peer_replay": {"by_index": index_of("peer_replay"), "peak": None,
                        "rounds": by_kind.get("peer_replay", [])},
    }

    def lua_ref(kind):
        """The nginx+Lua kind an idemgate kind is compared with, or None."""
        if kind.startswith(("first", "emb_first", "alw_first")):
            return "lua_first"
        if kind.startswith(("replay", "emb_replay", "alw_replay")):
            return "lua_replay"
        return None

    def paired(rs, attr, op, ref_kind):
        if ref_kind is None or not refs[ref_kind]["rounds"]:
            return None
        ref = refs[ref_kind]
        fallback = median([getattr(r, attr) for r in ref["rounds"]])
        out = []
        for r in rs:
            base = ref["peak"] if r.kind.endswith("_peak") else ref["by_index"].get(r.index)
            if base is None:
                # Extra single rounds: against the median reference round.
                out.append(op(getattr(r, attr), fallback) if fallback else None)
            else:
                out.append(op(getattr(r, attr), getattr(base, attr)))
        return median(out)

    scenarios = [
        ("direct", "direct backend (nginx `return 200`)"),
        ("nginx", "nginx pass-through"),
        ("lua_first", "nginx+Lua first deliveries"),
        ("lua_replay", "nginx+Lua replays"),
        ("first", "idemgate first deliveries"),
        ("replay", "idemgate replays"),
        ("emb_first", "idemgate first deliveries, embedded store"),
        ("emb_replay", "idemgate replays, embedded store"),
        ("alw_first", "idemgate first deliveries, Redis appendfsync always"),
        ("alw_replay", "idemgate replays, Redis appendfsync always"),
        ("peer_first", "idempotent-proxy-server first deliveries"),
        ("peer_replay", "idempotent-proxy-server replays"),
        ("nginx_peak", "nginx pass-through"),
        ("lua_first_peak", "nginx+Lua first deliveries"),
        ("first_peak", "idemgate first deliveries"),
        ("first_info", "idemgate first, RUST_LOG=info"),
        ("first_perf", "idemgate first, under perf"),
        ("replay_perf", "idemgate replays, under perf"),
    ]
    summary = {}
    table = [
        "| scenario | conns | rounds | req/s | × nginx | × nginx+Lua | p50 ms | p99 ms | Δp99 vs nginx ms "
        "| Δp99 vs nginx+Lua ms | server CPU µs/req | Redis CPU µs/req | Redis calls/req | EVALSHA/req "
        "| non-2xx | VmHWM |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    ratio = lambda a, b: a / b  # noqa: E731
    diff = lambda a, b: a - b  # noqa: E731
    for kind, name in scenarios:
        rs = by_kind.get(kind)
        if not rs:
            continue
        vs_nginx = "nginx" if kind not in ("nginx", "nginx_peak") else None
        vs_lua = lua_ref(kind) if rs[0].is_gate else None
        s = {
            "rps": median([r.rps for r in rs]),
            "p50": median([r.p50 for r in rs]),
            "p99": median([r.p99 for r in rs]),
            "ratio": paired(rs, "rps", ratio, vs_nginx),
            "dp99": paired(rs, "p99", diff, vs_nginx),
            "ratio_lua": paired(rs, "rps", ratio, vs_lua),
            "dp99_lua": paired(rs, "p99", diff, vs_lua),
            "cpu": median([r.cpu_us for r in rs]),
            "redis_cpu": median([r.redis_cpu_us for r in rs]) if rs[0].uses_redis else None,
            "calls": median([r.redis_calls for r in rs]) if rs[0].uses_redis and not rs[0].own_redis else None,
            "evalsha": median([r.evalsha for r in rs]) if rs[0].uses_redis and not rs[0].own_redis else None,
            "non2xx": sum(r.non2xx for r in rs),
            "socket_errors": sum(r.socket_errors for r in rs),
            "hwm": max(r.hwm_kb for r in rs) if rs[0].uses_redis or rs[0].is_emb else None,
            # Embedded-store rows against idemgate on Redis, same round index.
            "ratio_redis": paired(rs, "rps", ratio, kind[4:]) if rs[0].is_emb else None,
            "dp99_redis": paired(rs, "p99", diff, kind[4:]) if rs[0].is_emb else None,
            # ... and against idemgate on the appendfsync-always Redis.
            "ratio_always": paired(rs, "rps", ratio, "alw_" + kind[4:]) if rs[0].is_emb else None,
            "dp99_always": paired(rs, "p99", diff, "alw_" + kind[4:]) if rs[0].is_emb else None,
            # idemgate on Redis against the peer proxy, same round index.
            "ratio_peer": paired(rs, "rps", ratio, "peer_" + kind) if kind in ("first", "replay") else None,
            "cpu_peer": paired(rs, "cpu_us", ratio, "peer_" + kind) if kind in ("first", "replay") else None,
            "dp99_peer": paired(rs, "p99", diff, "peer_" + kind) if kind in ("first", "replay") else None,
            "conns": rs[0].conns,
            "rounds": len(rs),
        }
        summary[kind] = s
        dp99_text = "—" if s["dp99"] is None else f"{s['dp99']:+.2f}"
        dp99_lua_text = "—" if s["dp99_lua"] is None else f"{s['dp99_lua']:+.2f}"
        hwm_who = " (Lua worker)" if rs[0].is_lua and s["hwm"] else ""
        table.append(
            f"| {name} | {s['conns']} | {s['rounds']} | {fmt(s['rps'], 0)} | {fmt(s['ratio'], 2, '×')} "
            f"| {fmt(s['ratio_lua'], 2, '×')} | {fmt(s['p50'], 2)} | {fmt(s['p99'], 2)} | {dp99_text} | {dp99_lua_text} "
            f"| {fmt(s['cpu'], 1)} | {fmt(s['redis_cpu'], 1)} | {fmt(s['calls'], 3)} | {fmt(s['evalsha'], 4)} "
            f"| {s['non2xx']}{' (+' + str(s['socket_errors']) + ' socket errors)' if s['socket_errors'] else ''} "
            f"| {fmt(s['hwm'] / MIB if s['hwm'] else None, 1, ' MiB')}{hwm_who} |"
        )

    # Redis commands per request, by command (median over rounds).
    breakdown = []
    for kind in ("first", "replay", "lua_first", "lua_replay", "first_peak"):
        rs = by_kind.get(kind)
        if not rs:
            continue
        names = sorted({n for r in rs for n in r.commands})
        per = {n: median([r.commands.get(n, 0) / max(r.served, 1) for r in rs]) for n in names}
        summary.setdefault(kind, {})["per_command"] = per
        breakdown.append(
            f"| {kind} | " + ", ".join(f"{n} {v:.3f}" for n, v in sorted(per.items(), key=lambda kv: -kv[1])) + " |"
        )

    # MONITOR sample: what idemgate sends vs what its scripts run.
    monitor_rows = []
    monitor = {}
    text = read_optional(os.path.join(work, "monitor.tsv")) or ""
    for line in text.splitlines():
        parts = line.split("\t")
        if len(parts) < 4:
            continue
        label, n = parts[0], max(int(parts[1]), 1)
        client, lua = parse_commands(parts[2]), parse_commands(parts[3])
        monitor[label] = {"n": int(parts[1]), "client": {k: v / n for k, v in client.items()},
                          "lua": {k: v / n for k, v in lua.items()}}
        monitor_rows.append(
            f"| {label.replace('monitor-', '')} | {parts[1]} | "
            + (", ".join(f"{k} {v / n:.3f}" for k, v in sorted(client.items())) or "none")
            + " | "
            + (", ".join(f"{k} {v / n:.3f}" for k, v in sorted(lua.items())) or "none")
            + " |"
        )

    # Performance targets (docs/performance.md): replays, first
    # deliveries and peak RSS, each against its reference.
    def target(ok, text):
        return ("PASS" if ok else "FAIL") if ok is not None else "n/a", text

    first, replay = summary.get("first", {}), summary.get("replay", {})
    emb_first, emb_replay = summary.get("emb_first", {}), summary.get("emb_replay", {})
    lua_first, lua_replay = summary.get("lua_first", {}), summary.get("lua_replay", {})
    peak = summary.get("first_peak", {})
    mf, mr = monitor.get("monitor-first"), monitor.get("monitor-replay")

    def monitor_text(m):
        if not m:
            return "—"
        return ", ".join(f"{k} {v:.3f}" for k, v in sorted(m["client"].items())) or "none"

    # Replays: as fast as the pass-through, and no Redis round trip per
    # replay after the first (served from idemgate's replay cache).
    replay_ok = None
    if replay.get("ratio") is not None and replay.get("evalsha") is not None:
        replay_ok = replay["ratio"] >= 1.0 and replay["evalsha"] < 0.001
    # First deliveries: 1.25× the nginx+Lua gate's req/s, p99 no worse.
    first_ok = None
    if first.get("ratio_lua") is not None and first.get("dp99_lua") is not None:
        first_ok = first["ratio_lua"] >= 1.25 and first["dp99_lua"] <= 0.0
    # The embedded store: first deliveries at least as fast as on a Redis
    # of the same durability (appendfsync always), p99 no worse, and at
    # least 0.8x a Redis that keeps nothing on disk.
    alw_first = summary.get("alw_first", {})
    emb_ok = None
    if None not in (emb_first.get("ratio_always"), emb_first.get("dp99_always"), emb_first.get("ratio_redis")):
        emb_ok = (emb_first["ratio_always"] >= 1.0 and emb_first["dp99_always"] <= 0.0
                  and emb_first["ratio_redis"] >= 0.8)
    cache_bytes = int(meta.get("cache_bytes") or 33554432)
    cache_on = meta.get("cache_on", "0") == "1"
    rss_limit_kb = 64 * MIB + cache_bytes / 1024
    peak_ok = peak.get("hwm") is not None and peak["hwm"] <= rss_limit_kb if peak else None
    fill_first = (by_kind.get("fill_first") or [None])[0]
    fill_replay = (by_kind.get("fill_replay") or [None])[0]
    fill_text = (
        f"before it, the cache fill over {meta.get('fill_keys')} keys: pass 1 {fill_first.gate_forwarded} forwarded, "
        f"pass 2 {fill_replay.gate_replayed} replayed (+{fill_replay.gate_forwarded} forwarded that pass 1 "
        f"had not reached)"
        if fill_first and fill_replay else "no cache fill before the round (BENCH_FILL=0)"
    )
    targets = [
        ("replays (one repeated key): ≥ 1.0× nginx pass-through req/s, 0 Redis round trips per replay "
         "after the first (EVALSHA per replay < 0.001)",
         *target(replay_ok,
                 f"{fmt(replay.get('ratio'), 2, '×')} nginx; EVALSHA/replay {fmt(replay.get('evalsha'), 4)} "
                 f"(commandstats); sent by idemgate per replay (MONITOR): {monitor_text(mr)}")),
        ("first deliveries: ≥ 1.25× nginx+Lua req/s; p99 ≤ nginx+Lua p99 (paired)",
         *target(first_ok,
                 f"{fmt(first.get('ratio_lua'), 2, '×')} nginx+Lua; p99 {fmt(first.get('p99'), 2)} ms vs "
                 f"{fmt(lua_first.get('p99'), 2)} ms (paired Δ "
                 f"{'—' if first.get('dp99_lua') is None else format(first['dp99_lua'], '+.2f')} ms)")),
        ("embedded store, first deliveries: ≥ 1.0× idemgate on Redis appendfsync always and ≥ 0.8× on "
         "Redis in memory (req/s); p99 ≤ the appendfsync-always p99 (paired)",
         *target(emb_ok,
                 f"{fmt(emb_first.get('ratio_always'), 3, '×')} Redis always, "
                 f"{fmt(emb_first.get('ratio_redis'), 3, '×')} Redis in memory; p99 {fmt(emb_first.get('p99'), 2)} ms "
                 f"vs {fmt(alw_first.get('p99'), 2)} ms always (paired Δ "
                 f"{'—' if emb_first.get('dp99_always') is None else format(emb_first['dp99_always'], '+.2f')} ms)")),
        ("first deliveries, CPU per request",
         "n/a", "see bench/ab (paired A/B of two builds; not measured by bench/run)"),
        (f"peak RSS at {meta.get('peak_conns', '256')} connections with a full replay cache: "
         f"≤ 64 MiB + replay_cache_bytes",
         *target(peak_ok,
                 f"VmHWM {fmt(peak.get('hwm', 0) / MIB if peak else None, 1, ' MiB')} ≤ "
                 f"{rss_limit_kb / MIB:.1f} MiB (replay_cache_bytes = {cache_bytes}, "
                 f"{'set in the config' if cache_on else 'the binary default, line commented'}); {fill_text}")),
    ]
    targets += peer_report.targets(first, replay, target)
    measurable = sum(1 for _, verdict, _ in targets if verdict != "n/a")
    passed = sum(1 for _, verdict, _ in targets if verdict == "PASS")

    # Kept from the earlier targets, as information (no verdict counted).
    def client_ok(m, want):
        if not m or m["n"] == 0:
            return None
        # PING (the client's connection health check) and INFO (idemgate's
        # periodic Redis stats) are background traffic, not per request.
        others = sum(v for k, v in m["client"].items() if k not in ("evalsha", "ping", "info"))
        return abs(m["client"].get("evalsha", 0) - want) < 0.01 and others < 0.001

    first_evalsha_ok = None
    if first.get("evalsha") is not None:
        first_evalsha_ok = abs(first["evalsha"] - 2) < 0.005
        if client_ok(mf, 2) is not None:
            first_evalsha_ok = first_evalsha_ok and client_ok(mf, 2)

    def info_verdict(ok):
        return "n/a" if ok is None else ("as expected" if ok else "differs")

    infos = [
        ("idemgate: 2 EVALSHA per first delivery (claim + settle), nothing else sent (background PING / INFO aside)",
         info_verdict(first_evalsha_ok),
         f"EVALSHA/req {fmt(first.get('evalsha'), 4)}; sent by idemgate (MONITOR): {monitor_text(mf)}"),
        ("nginx+Lua: 2 EVALSHA per first delivery (claim + store), 1 per replay",
         info_verdict(None if lua_first.get("evalsha") is None or lua_replay.get("evalsha") is None else
                      abs(lua_first["evalsha"] - 2) < 0.01 and abs(lua_replay["evalsha"] - 1) < 0.01),
         f"EVALSHA/req {fmt(lua_first.get('evalsha'), 4)} / {fmt(lua_replay.get('evalsha'), 4)}"),
        ("idemgate first deliveries against the nginx pass-through",
         "info",
         f"{fmt(first.get('ratio'), 2, '×')} req/s, paired Δp99 "
         f"{'—' if first.get('dp99') is None else format(first['dp99'], '+.2f')} ms"),
        ("nginx+Lua against the nginx pass-through (first / replay)",
         "info",
         f"{fmt(lua_first.get('ratio'), 2, '×')} / {fmt(lua_replay.get('ratio'), 2, '×')} req/s"),
    ]

    # The embedded store against Redis, paired per round index.
    emb_rows = []
    for kind, ref, name, suffix in (
        ("emb_first", "first", "first deliveries", "redis"),
        ("emb_replay", "replay", "replays", "redis"),
        ("emb_first", "alw_first", "first deliveries vs appendfsync always", "always"),
        ("emb_replay", "alw_replay", "replays vs appendfsync always", "always"),
    ):
        e, b = summary.get(kind), summary.get(ref)
        if not e or not b:
            continue
        dp = "—" if e.get("dp99_" + suffix) is None else f"{e['dp99_' + suffix]:+.2f}"
        emb_rows.append(
            f"| {name} | {fmt(e['rps'], 0)} | {fmt(b['rps'], 0)} | {fmt(e.get('ratio_' + suffix), 3, '×')} "
            f"| {fmt(e['p50'], 2)} / {fmt(b['p50'], 2)} | {fmt(e['p99'], 2)} / {fmt(b['p99'], 2)} | {dp} "
            f"| {fmt(e['cpu'], 1)} / {fmt(b['cpu'], 1)} |"
        )

    # Per-round raw numbers.
    raw = [
        "| round | conns | req/s | p50 ms | p90 ms | p99 ms | non-2xx | server CPU µs/req | backend CPU µs/req | Redis CPU µs/req | idemgate outcomes (fwd/replayed/rejected) | Redis calls | EVALSHA of uncounted requests | VmHWM MiB (idemgate / Lua worker) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---:|---:|",
    ]
    for r in rounds:
        outcomes = f"{r.gate_forwarded}/{r.gate_replayed}/{r.gate_rejected}" if r.is_gate else "—"
        calls = ", ".join(f"{k}:{v}" for k, v in sorted(r.commands.items())) or "—"
        raw.append(
            f"| {r.label} | {r.conns} | {r.rps:,.0f} | {r.p50:.2f} | {r.p90:.2f} | {r.p99:.2f} | {r.non2xx} "
            f"| {r.cpu_us:.1f} | {r.backend_cpu_us:.1f} | {r.redis_cpu_us:.1f} | {outcomes} | {calls} "
            f"| {r.uncounted if r.is_gate else '—'} | {r.hwm_kb / MIB:.1f} |" if r.uses_redis else
            f"| {r.label} | {r.conns} | {r.rps:,.0f} | {r.p50:.2f} | {r.p90:.2f} | {r.p99:.2f} | {r.non2xx} "
            f"| {r.cpu_us:.1f} | {r.backend_cpu_us:.1f} | {r.redis_cpu_us:.1f} | {outcomes} | {calls} | — | — |"
        )

    info = summary.get("first_info")
    info_lines = []
    if info and first.get("rps"):
        log_bytes = read_optional(os.path.join(work, "info-log-bytes"))
        info_rs = by_kind["first_info"][0]
        per_req = int(log_bytes) / max(info_rs.served, 1) if log_bytes else None
        info_lines = [
            f"One first-delivery round with `RUST_LOG=info` (idemgate restarted, its stdout to a file): "
            f"{fmt(info['rps'], 0)} req/s = {info['rps'] / first['rps']:.2f}× the median RUST_LOG=warn first "
            f"round, CPU {fmt(info['cpu'], 1)} vs {fmt(first['cpu'], 1)} µs/req, "
            f"p99 {fmt(info['p99'], 2)} vs {fmt(first['p99'], 2)} ms; "
            f"{fmt(per_req, 0)} log bytes per request. A single round on a shared machine: "
            f"read it as a rough cost, not a measurement.",
        ]
        sample = read_optional(os.path.join(work, "info-log-sample"))
        if sample:
            info_lines += ["", "```", sample.strip()[:400], "```"]

    perf_lines = []
    for kind in ("first", "replay"):
        dso = read_optional(os.path.join(work, f"perf-{kind}.dso.txt"))
        sym = read_optional(os.path.join(work, f"perf-{kind}.sym.txt"))
        if dso or sym:
            perf_lines += [f"perf ({kind} deliveries, idemgate process only, flat, `--no-children`):", "", "```"]
            perf_lines += [(dso or "").rstrip(), "", (sym or "").rstrip(), "```", ""]

    # History: keep the old section, add this run.
    history = []
    old = read_optional(results_path) or ""
    # Hand-written sections (the before/after record of each optimisation,
    # the criterion stage timings) are kept verbatim, heading to next heading.
    kept = []
    for heading in KEPT_SECTIONS:
        if heading in old:
            section = old.split(heading, 1)[1].split("\n## ", 1)[0]
            kept += [heading, "", *section.strip("\n").splitlines(), ""]
    if "## History" in old:
        history = [line for line in old.split("## History", 1)[1].split("\n## ", 1)[0].splitlines()
                   if line.startswith("- ")]
    history.append(
        f"- {meta.get('date')} `{meta.get('commit')}`{' (src modified)' if meta.get('dirty', '0') != '0' else ''}: "
        f"first {fmt(first.get('ratio'), 2, '×')} nginx / {fmt(first.get('ratio_lua'), 2, '×')} nginx+Lua, "
        f"replay {fmt(replay.get('ratio'), 2, '×')} nginx / {fmt(replay.get('ratio_lua'), 2, '×')} nginx+Lua, "
        f"Δp99 first vs nginx+Lua {first.get('dp99_lua') or 0:+.2f} ms, "
        f"embedded store first/replay {fmt(emb_first.get('ratio_redis'), 2, '×')}/"
        f"{fmt(emb_replay.get('ratio_redis'), 2, '×')} Redis, first {fmt(emb_first.get('ratio_always'), 2, '×')} "
        f"Redis appendfsync always (p99 first {fmt(emb_first.get('p99'), 1)} ms), "
        f"idemgate CPU {fmt(first.get('cpu'), 1)}/{fmt(replay.get('cpu'), 1)} µs/req, EVALSHA/req {fmt(first.get('evalsha'), 3)}/{fmt(replay.get('evalsha'), 4)}, "
        f"VmHWM@{meta.get('peak_conns')} {fmt(peak.get('hwm', 0) / MIB if peak else None, 1, ' MiB')} "
        f"(replay_cache_bytes {cache_bytes}{'' if cache_on else ', default'}), "
        f"targets {passed}/{measurable} ({meta.get('rounds')}×{meta.get('seconds')}s rounds, "
        f"worker_threads {meta.get('workers', '1')})"
    )

    probe_exists = int(meta.get("probe_exists", "0"))
    probe_total = int(meta.get("probe_total", "0"))
    probe_text = (
        f"Redis {meta.get('redis')} counts commands run inside Lua scripts: one `EVAL` running two `EXISTS` "
        f"raised `cmdstat_exists` by {probe_exists} and `total_commands_processed` by {probe_total} "
        f"(EVAL + 2 EXISTS + the INFO that read it). So \"Redis calls/req\" below includes the scripts' "
        f"inner SET/GET/PTTL; \"EVALSHA/req\" is the number of round trips idemgate makes, and the MONITOR "
        f"sample (which labels script commands `[0 lua]`) shows what idemgate itself sends."
        if probe_exists == 2 else
        f"Redis {meta.get('redis')} does not count commands run inside Lua scripts in commandstats "
        f"(probe: `cmdstat_exists` +{probe_exists} for two inner EXISTS, total_commands_processed +{probe_total})."
    )

    out = [
        "# idemgate benchmark results",
        "",
        "Written by `bench/run` (overwritten on every run; the hand-kept sections, from Optimisations to the Scale curve, and History are kept). "
        "The 2-core machine is shared and noisy: compare ratios against the two references measured in the same run "
        "(the nginx pass-through and the nginx+Lua gate), not absolute numbers across runs.",
        "",
        f"- date: {meta.get('date')}",
        f"- commit: `{meta.get('commit')}`"
        + (" — src/, Cargo.toml or lua/ had uncommitted changes when the binary was built" if meta.get("dirty", "0") != "0" else ""),
        *([f"- binary: `{meta['binary']}`" + (" (BENCH_BIN: not necessarily built from this commit)"
                                              if meta.get("bench_bin") else " (built from this commit)")]
          if meta.get("binary") else []),
        f"- machine: {meta.get('nproc')} CPUs ({meta.get('cpu')}), kernel {meta.get('kernel')}, load average at the end {meta.get('loadavg')}",
        f"- tools: nginx {meta.get('nginx')}, Redis {meta.get('redis')}, wrk {meta.get('wrk')}, "
        f"libnginx-mod-http-lua {meta.get('lua_module')}, lua-nginx-redis {meta.get('lua_redis')}",
        "- nginx+Lua reference (`bench/lua_gate.conf`, `bench/lua_gate/gate.lua`, 1 worker): idemgate's design "
        "without signature verification or request fingerprint: key = `X-GitHub-Delivery`; a Lua claim script in "
        "Redis (EVALSHA: GET, else SET owner-record NX PX 30 s) over lua-resty-redis's keepalive pool; a fresh "
        "claim forwarded once (ngx.location.capture → proxy_pass, upstream keepalive) and its status + body "
        "stored by an owner-fenced script (PX 1h); completed records replayed from Redis (1 EVALSHA), claims in "
        "flight answered 409",
        f"- idemgate: `[limits] worker_threads = {meta.get('workers', '1')}`"
        + (" (tokio current-thread scheduler, one Redis connection)" if meta.get("workers", "1") == "1"
           else " (tokio multi-thread scheduler, one Redis connection per thread)"),
        f"- load: `wrk -t{meta.get('threads')} -c{meta.get('conns')} -d{meta.get('seconds')}s --latency`, "
        f"{meta.get('rounds')} alternating rounds of each kind (direct, nginx, first, replay, emb_first, "
        f"emb_replay, alw_first, alw_replay, lua_first, lua_replay), then "
        + (f"a replay-cache fill ({meta.get('fill_keys')} distinct keys delivered, then duplicated; "
           f"2 passes of ≤ {meta.get('fill_seconds')} s), " if meta.get("fill", "1") == "1" else "")
        + f"one nginx, one nginx+Lua and one idemgate-first round at -c{meta.get('peak_conns')}",
        "- request: `POST /hook`, a 1024-byte JSON body, `X-Hub-Signature-256: sha256=<hex>` computed once with "
        "openssl, `X-GitHub-Delivery` unique per request (first) or one primed id (replay); the direct and nginx "
        "rounds send the very same request (those servers ignore the headers)",
        "",
        "## Targets",
        "",
        "| target | result | measured |",
        "|---|---|---|",
        *[f"| {name} | **{verdict}** | {text} |" for name, verdict, text in targets],
        "",
        f"{passed} of {measurable} measurable targets pass ({len(targets) - measurable} not measured here).",
        "",
        "Information (kept from the earlier targets; no verdict):",
        "",
        "| check | result | measured |",
        "|---|---|---|",
        *[f"| {name} | {verdict} | {text} |" for name, verdict, text in infos],
        "",
        "## Summary (medians over rounds)",
        "",
        *table,
        "",
        "- × nginx and Δp99 vs nginx: median over rounds of (round i) against (nginx pass-through round i), run "
        "in the same alternating cycle; × nginx+Lua and Δp99 vs nginx+Lua: idemgate first deliveries against "
        "nginx+Lua first deliveries of round i, replays against nginx+Lua replays of round i. The -c256 rows "
        "against the -c256 reference rounds; the single extra rounds (info, perf) against the reference's median.",
        "- server CPU: utime+stime of the measured server from /proc/PID/stat (nginx, nginx+Lua: master + worker; "
        "idemgate: the process, all threads) per request; the load generator shares the same 2 cores.",
        "- per-request figures of idemgate rounds divide by idemgate's own `idemgate_requests_total` delta "
        "(includes the requests still in flight when wrk stopped); the others by wrk's count.",
        "- non-2xx: wrk's `Non-2xx or 3xx responses` (status ≥ 400).",
        "- VmHWM: idemgate's peak resident set since start (it has served every earlier round by then, and at "
        "-c256 the replay-cache fill); in nginx+Lua rows the Lua worker's.",
        "",
        *([
            "## Embedded store against Redis",
            "",
            "A second idemgate with the same configuration on the embedded store (`kind = \"embedded\"`, a "
            "redb file in the bench's temp dir on the machine's disk: every claim and answer a durable commit), "
            "measured in the same alternating cycle as the Redis rows, and a third on a Redis of its own with "
            "`--appendonly yes --appendfsync always` and `durability = \"fsync\"` (every claim and answer fsynced "
            "before Redis replies: the embedded store's durability; the rows \"vs appendfsync always\"); the "
            "other rows compare with the Redis that keeps nothing on disk. × Redis and Δp99: median over rounds "
            "of embedded round i against Redis round i.",
            "",
            "| kind | embedded req/s | Redis req/s | × Redis (paired) | p50 ms emb / Redis | p99 ms emb / Redis "
            "| Δp99 ms (paired) | idemgate CPU µs/req emb / Redis |",
            "|---|---:|---:|---:|---:|---:|---:|---:|",
            *emb_rows,
            "",
        ] if emb_rows else []),
        "## Redis commands",
        "",
        probe_text,
        "",
        "Per request, by command (INFO commandstats deltas, median over rounds; `info` from the harness excluded):",
        "",
        "| rounds | calls per request |",
        "|---|---|",
        *breakdown,
        "",
        "EVALSHA/req is a little above 2 (or 1) because wrk closes its connections at the end of a round: a "
        "request whose claim had already reached Redis is then cancelled before idemgate counts it (column "
        "\"EVALSHA of uncounted requests\" below). In a first-delivery round each such claim stays *in flight* "
        "in Redis although the backend never saw the request, so that delivery's retries get 409 `in_flight` and "
        "then `outcome_unknown` until lease + unknown_hold have passed.",
        "",
        "MONITOR sample (`wrk -t1 -c4 -d2s`, outside the measured rounds), per request:",
        "",
        "| kind | requests | sent by idemgate | run inside its Lua scripts |",
        "|---|---:|---|---|",
        *monitor_rows,
        "",
    ]
    out += peer_report.section(meta, summary, read_optional(os.path.join(work, "burst.tsv")))
    if info_lines:
        out += ["## Per-request log line", "", *info_lines, ""]
    if perf_lines:
        out += ["## Profile", "", *perf_lines]
    out += kept
    out += [
        "## Every round",
        "",
        *raw,
        "",
        "## History",
        "",
        *history,
        "",
    ]
    text = "\n".join(out)
    with open(results_path, "w") as f:
        f.write(text)

    print()
    print("\n".join(table))
    print()
    for name, verdict, measured in targets:
        print(f"  {verdict:4}  {name}: {measured}")
    for name, verdict, measured in infos:
        print(f"  info  {name}: {verdict}; {measured}")
    print()
    print("  Redis calls per request: " + "; ".join(b.strip("| ").replace(" | ", ": ") for b in breakdown))
    for row in monitor_rows:
        print("  MONITOR " + row.strip("| ").replace(" | ", " | "))
    print(f"\n  wrote {results_path}")


if __name__ == "__main__":
    main()
