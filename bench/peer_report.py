"""bench/peer_report.py — the peer proxy's part of bench/run's report.

Used by bench/summarize.py. The peer is `idempotent-proxy-server` (crates.io,
installed by bench/setup): its rows share the Redis, the backend and the wrk
scripts with idemgate's, so idemgate's Redis rows are paired with them by
round index (summarize.py computes the paired ratios; this module words the
targets). The burst (bench/burst, one line per proxy in burst.tsv) shows
what each does with many copies of one new delivery at the same instant.
"""

from rounds import fmt

# idemgate against the peer: the bars of docs/performance.md.
FIRST_BAR = 2.0
REPLAY_BAR = 3.0


def ratio(value):
    return fmt(value, 2, "×")


def targets(first, replay, target):
    """Two target rows (name, verdict, measured), or none when the peer did
    not run (BENCH_PEER=0)."""
    if first.get("ratio_peer") is None and replay.get("ratio_peer") is None:
        return []
    first_ok = None if first.get("ratio_peer") is None else first["ratio_peer"] >= FIRST_BAR
    replay_ok = None if replay.get("ratio_peer") is None else replay["ratio_peer"] >= REPLAY_BAR
    return [
        (f"against idempotent-proxy-server (same Redis, backend and load; paired): first deliveries "
         f"≥ {FIRST_BAR:g}× its req/s",
         *target(first_ok, f"{ratio(first.get('ratio_peer'))} its req/s; idemgate CPU per request "
                           f"{ratio(first.get('cpu_peer'))} its CPU; paired Δp99 "
                           f"{'—' if first.get('dp99_peer') is None else format(first['dp99_peer'], '+.2f')} ms")),
        (f"against idempotent-proxy-server: replays ≥ {REPLAY_BAR:g}× its req/s",
         *target(replay_ok, f"{ratio(replay.get('ratio_peer'))} its req/s; idemgate CPU per request "
                            f"{ratio(replay.get('cpu_peer'))} its CPU")),
    ]


def parse_burst(text):
    """burst.tsv: TARGET<TAB>key=value ...<TAB>backend=N, one line per proxy."""
    rows = []
    for line in (text or "").splitlines():
        target, _, rest = line.partition("\t")
        fields = dict(word.split("=", 1) for word in rest.split() if "=" in word)
        if target and fields:
            rows.append((target, fields))
    return rows


BURST_NAMES = {"idemgate": "idemgate (Redis)", "peer": "idempotent-proxy-server (its defaults)"}


def section(meta, summary, burst_text):
    """The report's section on the peer: its version and setup, and the
    burst table. Empty when neither the peer nor a burst ran."""
    rows = parse_burst(burst_text)
    peer_ran = meta.get("peer") == "1"
    if not rows and not peer_ran:
        return []
    out = ["## The peer proxy and a burst of copies", ""]
    if peer_ran:
        first, replay = summary.get("first", {}), summary.get("replay", {})
        out += [
            f"`idempotent-proxy-server` {meta.get('peer_version')} (crates.io; `bench/setup`: `cargo install "
            f"--locked --root bench/.peer`), on the same Redis, forwarding to the same nginx backend "
            f"(`URL_HOOK`, requests for `/URL_HOOK`), `TOKIO_WORKER_THREADS` = idemgate's worker_threads, "
            f"`REQUEST_TIMEOUT=60000` (its answer's lifetime in Redis is its request timeout, so a primed key "
            f"outlives a round); the key in `Idempotency-Key`. It verifies no signature. Paired by round: "
            f"idemgate first deliveries {ratio(first.get('ratio_peer'))} its req/s at "
            f"{ratio(first.get('cpu_peer'))} its CPU per request; replays {ratio(replay.get('ratio_peer'))} "
            f"at {ratio(replay.get('cpu_peer'))}.",
            "",
        ]
    if rows:
        out += [
            f"Burst (`bench/burst`): {meta.get('burst_copies')} copies of one new delivery, each on its own "
            f"connection, released at the same instant, in front of a handler that takes "
            f"{meta.get('burst_delay_ms')} ms per request (`bench/slow_backend`), so the copies arrive while "
            "the first is being handled; the time of each answer from the release, and how many copies reached "
            "the handler. idemgate: the bench configuration (`on_in_flight = \"wait\"`, `wait_timeout` 5 s, "
            "`max_waiting_per_key` 64: a copy waits for the first's answer, woken when it is stored, then "
            "replays it). The peer: a second instance with its shipped defaults (`REQUEST_TIMEOUT` 10 s: a copy "
            "that finds the key taken polls Redis every 100 ms for up to 10 s, holding one of its 10 pooled "
            "Redis connections while it does).",
            "",
            "| proxy | copies | answered | no answer in 20 s | statuses | replayed | first ms | median ms "
            "| last ms | reached the handler |",
            "|---|---:|---:|---:|---|---:|---:|---:|---:|---:|",
        ]
        for target, f in rows:
            out.append(
                f"| {BURST_NAMES.get(target, target)} | {f.get('copies')} | {f.get('answered')} | {f.get('timeouts')} "
                f"| {f.get('statuses')} | {f.get('replayed')} | {f.get('first_ms')} | {f.get('median_ms')} "
                f"| {f.get('last_ms')} | {f.get('backend')} |")
        out.append("")
    return out
