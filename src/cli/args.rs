//! The `idemgate admin` command line as clap types: `main.rs` nests
//! [`AdminArgs`] under its `admin` subcommand and hands it to
//! [`super::run`]. Every subcommand is one admin API request (or, with
//! `--all`, one per page).

use std::path::PathBuf;

use clap::{Args, Subcommand, ValueEnum};

/// The end of `idemgate admin --help`: where the address and token come
/// from, the exit codes, and one example per subcommand, so the runbooks'
/// one-liners can be written from the binary alone.
const AFTER_HELP: &str = "\
Where the admin listener is (first found wins):
  --addr HOST:PORT, then IDEMGATE_ADMIN_ADDR, then -c FILE's [listen] admin,
  then the default 127.0.0.1:8790. Plain HTTP: run it on the host (or through
  a port-forward) of a private admin listener, never across a network.

The token (first found wins):
  --token-file FILE, then IDEMGATE_ADMIN_TOKEN, then -c FILE's [admin] token
  (env:NAME, file:PATH or literal:VALUE, resolved as idemgate resolves it).
  There is no --token flag: a value on the command line shows in `ps` and
  in shell history.

Output: aligned tables for people; --json prints the API's JSON unchanged
(with --all, one page per line). `config` prints the TOML document either way.

Exit codes:
  0  done
  1  the API refused: its title, detail and reason are printed on stderr
  2  usage error, or the admin listener could not be reached

Examples:
  idemgate admin -c /etc/idemgate/idemgate.toml info
  idemgate admin config
  idemgate admin records list pay --state unknown --all
  idemgate admin records get pay --key evt_1Nx
  idemgate admin records get pay --hash 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08
  idemgate admin records purge pay --key evt_1Nx --state unknown
  idemgate admin inbox list pay --state dead
  idemgate admin inbox show pay --key evt_1Nx
  idemgate admin inbox retry pay --key evt_1Nx --state dead
  idemgate admin inbox drop pay --hash 9f86d0… --state dead
  idemgate admin entity pay order-1
  idemgate admin hot-keys --route pay
  idemgate admin audit --all
  IDEMGATE_ADMIN_ADDR=127.0.0.1:8790 idemgate admin --token-file /run/secrets/admin --json info

Reference: docs/cli.md.";

/// `idemgate admin …`: the operator's jobs over the admin API.
#[derive(Debug, Args)]
#[command(after_help = AFTER_HELP)]
pub struct AdminArgs {
    /// The admin listener, HOST:PORT [env: IDEMGATE_ADMIN_ADDR] (default: the
    /// config file's [listen] admin, else 127.0.0.1:8790).
    #[arg(long, global = true, value_name = "HOST:PORT")]
    pub addr: Option<String>,
    /// A file holding the admin token (trailing newlines ignored). No flag
    /// takes the token itself: it would show in `ps`. Else
    /// IDEMGATE_ADMIN_TOKEN, else the config file's [admin] token.
    #[arg(long, global = true, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// Print the API's JSON unchanged instead of tables (for scripts).
    #[arg(long, global = true)]
    pub json: bool,
    /// What to do.
    #[command(subcommand)]
    pub command: AdminCommand,
}

/// The admin subcommands.
#[derive(Debug, Subcommand)]
pub enum AdminCommand {
    /// Records: show one, list those that need a person, purge one.
    #[command(subcommand)]
    Records(RecordsCommand),
    /// The durable inbox: list queued or dead deliveries, show, retry, drop.
    #[command(subcommand)]
    Inbox(InboxCommand),
    /// One entity of a route with [route.entity]: its state, pending
    /// change, held notices, counters and last transitions with their
    /// deliveries; with --set or --clear, an operator's correction of it.
    #[command(
        after_help = "Examples:\n  idemgate admin entity pay order-1\n  idemgate admin entity pay --hash 0f1e…\n  idemgate admin entity pay order-1 --set success --expect-state none --expect-pending 9a…{0f1e…} --operator ana\n  idemgate admin entity pay order-1 --clear --expect-state refunded --expect-pending none"
    )]
    Entity {
        /// The route's name.
        route: String,
        /// The entity id value (single-part).
        #[arg(required_unless_present = "hash", conflicts_with = "hash")]
        id: Option<String>,
        /// The entity hash instead (32 hex digits).
        #[arg(long, value_name = "HEX")]
        hash: Option<String>,
        /// What to change, if anything.
        #[command(flatten)]
        correction: EntityCorrection,
    },
    /// The entities of a route with [route.entity] that something holds:
    /// a change pending (in flight, unknown, owed by the inbox,
    /// unresolved) or notices waiting behind it.
    #[command(after_help = "Example:\n  idemgate admin held pay --all")]
    Held {
        /// The route's name.
        route: String,
        /// Paging.
        #[command(flatten)]
        page: Page,
    },
    /// The audit trail: operator actions (purge, retry, drop, entity
    /// set/clear) asked for by an admin token, done or refused, newest
    /// first, with the token, the target and the state found and left.
    #[command(after_help = "Example:\n  idemgate admin audit --limit 20")]
    Audit {
        /// Paging.
        #[command(flatten)]
        page: Page,
    },
    /// The keys delivered most in the hot-key window, per route.
    HotKeys {
        /// Only this route.
        #[arg(long, value_name = "ROUTE")]
        route: Option<String>,
    },
    /// The running instance's effective configuration (secrets redacted),
    /// as `check-config` prints it.
    Config,
    /// Version, revision, uptime, the store and its readiness, the routes.
    Info,
}

/// `idemgate admin entity … --set|--clear`: an operator's correction,
/// refused if the entity is no longer as the operator saw it.
#[derive(Debug, Args)]
pub struct EntityCorrection {
    /// Set the entity's state (one the route's machine declares).
    #[arg(long, value_name = "STATE", conflicts_with = "clear", requires_all = ["expect_state", "expect_pending"])]
    pub set: Option<String>,
    /// Clear the entity's state: the next notice is judged as a first one.
    #[arg(long, requires_all = ["expect_state", "expect_pending"])]
    pub clear: bool,
    /// The state you saw (`none`: no state).
    #[arg(long, value_name = "STATE")]
    pub expect_state: Option<String>,
    /// The pending delivery you saw (`none`: no change pending).
    #[arg(long, value_name = "HASH")]
    pub expect_pending: Option<String>,
    /// Who you are, kept in the entity's history (default: admin).
    #[arg(long, value_name = "NAME")]
    pub operator: Option<String>,
}

/// `idemgate admin records …`.
#[derive(Debug, Subcommand)]
pub enum RecordsCommand {
    /// Show one record: state, age, time to live, stored status.
    #[command(after_help = "Example:\n  idemgate admin records get pay --key evt_1Nx")]
    Get {
        /// The route's name.
        route: String,
        /// Which record.
        #[command(flatten)]
        target: Target,
    },
    /// List the records in one state: unknown outcomes, or deliveries in
    /// flight (those past their lease are marked).
    #[command(after_help = "Example:\n  idemgate admin records list pay --state unknown --all")]
    List {
        /// The route's name.
        route: String,
        /// Which records.
        #[arg(long, value_enum)]
        state: RecordListing,
        /// Paging.
        #[command(flatten)]
        page: Page,
    },
    /// Purge one record, so the next delivery of its key is forwarded
    /// (after checking the backend, to resolve an unknown outcome).
    #[command(
        after_help = "Example:\n  idemgate admin records purge pay --key evt_1Nx --state unknown"
    )]
    Purge {
        /// The route's name.
        route: String,
        /// Which record.
        #[command(flatten)]
        target: Target,
        /// The state `records get` showed: the purge is refused if the
        /// record is in another state now.
        #[arg(long, value_enum)]
        state: SeenState,
    },
}

/// `idemgate admin inbox …`.
#[derive(Debug, Subcommand)]
pub enum InboxCommand {
    /// List queued (oldest first) or dead deliveries.
    #[command(after_help = "Example:\n  idemgate admin inbox list pay --state dead")]
    List {
        /// The route's name.
        route: String,
        /// Which deliveries.
        #[arg(long, value_enum)]
        state: InboxListing,
        /// Paging.
        #[command(flatten)]
        page: Page,
    },
    /// Show one delivery: stage, attempts, next due, last error, last answer.
    #[command(after_help = "Example:\n  idemgate admin inbox show pay --key evt_1Nx")]
    Show {
        /// The route's name.
        route: String,
        /// Which delivery.
        #[command(flatten)]
        target: Target,
    },
    /// Queue a dead (or unknown) delivery for one attempt now.
    #[command(after_help = "Example:\n  idemgate admin inbox retry pay --key evt_1Nx --state dead")]
    Retry {
        /// The route's name.
        route: String,
        /// Which delivery.
        #[command(flatten)]
        target: Target,
        /// The state `inbox show` showed: refused if it changed since.
        #[arg(long, value_enum)]
        state: DeliveryState,
    },
    /// Resolve a delivery without sending it; copies still get the ack.
    #[command(after_help = "Example:\n  idemgate admin inbox drop pay --hash 9f86d0… --state dead")]
    Drop {
        /// The route's name.
        route: String,
        /// Which delivery.
        #[command(flatten)]
        target: Target,
        /// The state `inbox show` showed: refused if it changed since.
        #[arg(long, value_enum)]
        state: DeliveryState,
    },
}

/// One record or delivery, named exactly one way (as the API names it):
/// `--hash`, or `--key` (with `--entity` on an entity route, whose
/// records' keys carry their entity's tag).
#[derive(Debug, Clone, Args)]
pub struct Target {
    /// The hash or the key value.
    #[command(flatten)]
    pub named: Named,
    /// On an entity route, with `--key`: the entity id the delivery was
    /// about (as `entity --id` takes it).
    #[arg(long, value_name = "ID", conflicts_with = "hash")]
    pub entity: Option<String>,
}

/// `--hash` or `--key`, exactly one.
#[derive(Debug, Clone, Args)]
#[group(required = true, multiple = false)]
pub struct Named {
    /// The key hash, as log lines, listings and hot keys print it
    /// (`key=<64 hex>`, with its `{entity tag}` on an entity route).
    #[arg(long, value_name = "HEX")]
    pub hash: Option<String>,
    /// The key value of a single-part key, as the sender sent it.
    #[arg(long, value_name = "VALUE")]
    pub key: Option<String>,
}

/// A listing's paging options.
#[derive(Debug, Clone, Args)]
pub struct Page {
    /// Items per page (the API's default when absent).
    #[arg(long, value_name = "N")]
    pub limit: Option<u32>,
    /// Start at this page (a previous page's next_cursor).
    #[arg(long, value_name = "CURSOR", conflicts_with = "all")]
    pub cursor: Option<String>,
    /// Follow next_cursor to the last page.
    #[arg(long)]
    pub all: bool,
}

/// The record states `records list` takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RecordListing {
    /// Outcomes idemgate could not learn: held for an operator.
    Unknown,
    /// Deliveries being forwarded now (or whose owner was lost). Spelled
    /// as the API spells it; `in-flight` is taken too.
    #[value(name = "in_flight", alias = "in-flight")]
    InFlight,
}

/// The record states a purge may say it saw (the record API's words).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SeenState {
    /// A live claim.
    #[value(name = "in_flight", alias = "in-flight")]
    InFlight,
    /// A claim whose owner stopped renewing it.
    #[value(name = "unknown_owner_lost", alias = "unknown-owner-lost")]
    UnknownOwnerLost,
    /// An outcome idemgate could not learn.
    Unknown,
    /// Answered: the handler did the work.
    Completed,
    /// An inbox delivery (only a delivered one may be purged).
    Inbox,
}

impl SeenState {
    /// The API's `expect_state=` word.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::InFlight => "in_flight",
            Self::UnknownOwnerLost => "unknown_owner_lost",
            Self::Unknown => "unknown",
            Self::Completed => "completed",
            Self::Inbox => "inbox",
        }
    }
}

/// The delivery states an inbox action may say it saw (the API's words;
/// retry takes dead and unknown ones, drop those and queued ones).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DeliveryState {
    /// Waiting for its next attempt.
    Queued,
    /// Out of attempts.
    Dead,
    /// A redelivery whose outcome is unknown.
    Unknown,
}

impl DeliveryState {
    /// The API's `expect_state=` word.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Queued => "queued",
            Self::Dead => "dead",
            Self::Unknown => "unknown",
        }
    }
}

/// The inbox listings `inbox list` takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum InboxListing {
    /// Waiting for their next attempt.
    Queued,
    /// Out of attempts, held for an operator.
    Dead,
}

impl RecordListing {
    /// The API's `state=` word.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Unknown => "unknown",
            Self::InFlight => "in_flight",
        }
    }
}

impl InboxListing {
    /// The API's `state=` word.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Queued => "queued",
            Self::Dead => "dead",
        }
    }
}
