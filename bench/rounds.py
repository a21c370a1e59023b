"""bench/rounds.py — bench/run's raw files, read: rounds.tsv rows as Round
objects (per-request figures derived once), meta.env, command counts; and
how a figure is written in the report (fmt).

Used by bench/summarize.py, which pairs and reports them.
"""

MIB = 1024


def load_tsv(path):
    with open(path) as f:
        lines = [line.rstrip("\n").split("\t") for line in f if line.strip()]
    header, rows = lines[0], lines[1:]
    return [dict(zip(header, row)) for row in rows]


def load_env(path):
    meta = {}
    with open(path) as f:
        for line in f:
            if "=" in line:
                key, value = line.rstrip("\n").split("=", 1)
                meta[key] = value
    return meta


def parse_commands(text):
    counts = {}
    if text and text != "-":
        for item in text.split(","):
            name, value = item.rsplit(":", 1)
            counts[name] = counts.get(name, 0) + int(value)
    return counts


def read_optional(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


class Round:
    def __init__(self, row, clk_tck):
        self.kind = row["kind"]
        self.label = row["label"]
        self.index = self.label.rsplit("-", 1)[-1]
        self.conns = int(row["conns"])
        self.requests = int(row["requests"])
        self.rps = float(row["rps"])
        self.p50 = float(row["p50_us"]) / 1000
        self.p90 = float(row["p90_us"]) / 1000
        self.p99 = float(row["p99_us"]) / 1000
        self.non2xx = int(row["non2xx"])
        self.socket_errors = int(row["socket_errors"])
        self.gate_total = int(row["gate_total"])
        self.gate_forwarded = int(row["gate_forwarded"])
        self.gate_replayed = int(row["gate_replayed"])
        self.gate_rejected = int(row["gate_rejected"])
        # idemgate rounds (the cache fill passes and the embedded-store
        # instance included), nginx+Lua rounds.
        self.is_emb = self.kind.startswith("emb_")
        self.is_gate = self.kind.startswith(("first", "replay", "fill_", "emb_", "alw_"))
        self.is_lua = self.kind.startswith("lua_")
        # The peer proxy (bench/setup): the same Redis, no metrics of its own.
        self.is_peer = self.kind.startswith("peer_")
        self.uses_redis = (self.is_gate and not self.is_emb) or self.is_lua or self.is_peer
        # The alw rows run on a Redis of their own, whose commandstats the
        # harness does not read (its CPU, though, is that server's).
        self.own_redis = self.kind.startswith("alw_")
        # idemgate's own count also covers requests still in flight when wrk
        # stopped (they are served and settled); wrk's count does not.
        self.served = self.gate_total if self.is_gate and self.gate_total > 0 else self.requests
        tick_us = 1e6 / clk_tck
        self.cpu_us = int(row["server_ticks"]) * tick_us / max(self.served, 1)
        self.backend_cpu_us = int(row["backend_ticks"]) * tick_us / max(self.served, 1)
        self.redis_cpu_us = int(row["redis_ticks"]) * tick_us / max(self.served, 1)
        self.commands = parse_commands(row["commands"])
        self.redis_calls = sum(self.commands.values()) / max(self.served, 1)
        self.evalsha = self.commands.get("evalsha", 0) / max(self.served, 1)
        # EVALSHAs beyond 2 per forwarded / 1 per replayed request: requests
        # whose claim reached Redis but which wrk's stop cancelled (the
        # connection closed) before idemgate counted them.
        expected = 2 * self.gate_forwarded + self.gate_replayed
        self.uncounted = self.commands.get("evalsha", 0) - expected if self.is_gate else 0
        self.hwm_kb = int(row["hwm_kb"] or 0)
        self.rss_kb = int(row["rss_kb"] or 0)


def fmt(value, digits=1, suffix=""):
    """A figure for the report: "—" when it was not measured."""
    if value is None:
        return "—"
    return f"{value:,.{digits}f}{suffix}"
