//! `[route.inbox]`: handler failures acknowledged to the sender and
//! redelivered by idemgate itself.
//!
//! Some senders give up early or retry on a schedule the handler cannot
//! keep up with. With an inbox, a delivery whose handler fails in one of
//! the listed ways (`on`) is answered with the route's acknowledgement
//! (`ack_*`) and queued; idemgate then redelivers it with exponential
//! backoff until the handler accepts it or `max_attempts` is spent. This
//! module only parses and checks the table; the runtime lives elsewhere.
//!
//! The checks that compare this table with the rest of the route (the
//! visibility timeout against the upstream timeout, the statuses against
//! `cache_status`, shadow mode) are `cross.rs`'s. The retention is not
//! checked against the redelivery schedule: a delivery in the inbox is
//! kept until it is resolved, and its retention starts then
//! (`crate::record::Stage::kept_for`).

use std::time::Duration;

use bytes::Bytes;

use serde::{Deserialize, Serialize};

use super::duration::{ConfigDuration, format_duration};
use super::problems::Problems;
use super::status::CacheStatus;

/// Default `on`: server errors, rate limiting and a handler that is down
/// are worth another try; other 4xx answers will not change on a retry.
const DEFAULT_INBOX_ON: [&str; 3] = ["5xx", "429", "refused"];
/// Default `delivered_status`: a handler that took a redelivery says so
/// with 2xx; a 4xx (a refused signature, an address allow-list, a missing
/// route) means it did not, whatever `cache_status` stores for live
/// attempts.
const DEFAULT_DELIVERED_STATUS: [&str; 1] = ["2xx"];
/// Default `max_queued`: far above a normal backlog (a day of a busy
/// route's failures), small enough that the store's memory stays bounded.
const DEFAULT_MAX_QUEUED: u64 = 100_000;
/// Default `ack_status`: every sender reads 200 as delivered.
const DEFAULT_ACK_STATUS: u16 = 200;
/// Default `ack_content_type`: the acknowledgement bodies senders expect
/// (`success`, `OK`) are plain text.
const DEFAULT_ACK_CONTENT_TYPE: &str = "text/plain";
/// Default `max_attempts`: with the default backoff about a day and a half
/// of redeliveries, longer than most handler outages.
const DEFAULT_MAX_ATTEMPTS: u32 = 12;
/// Default `backoff`: long enough for a restarting handler to come back.
const DEFAULT_BACKOFF: ConfigDuration = ConfigDuration::secs(30);
/// Default `max_backoff`: an hour keeps a long outage from being retried
/// too rarely once it ends.
const DEFAULT_MAX_BACKOFF: ConfigDuration = ConfigDuration::secs(3600);
/// Default `concurrency`: a recovering handler is not flooded with its
/// backlog.
const DEFAULT_CONCURRENCY: usize = 4;
/// Default `visibility_timeout`: above the default upstream timeout (30 s).
const DEFAULT_VISIBILITY_TIMEOUT: ConfigDuration = ConfigDuration::secs(60);
/// Default `repair_every`: a delivery whose index entry a failover lost is
/// found again within a minute, for one pass a minute per instance and
/// scope (16,384 small reads on a Cluster, one on a single Redis).
const DEFAULT_REPAIR_EVERY: ConfigDuration = ConfigDuration::secs(60);

/// `[route.inbox]`.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawInbox {
    /// Whether the table takes effect (default true when it is present).
    pub enabled: Option<bool>,
    /// Failures queued: status classes, codes, `"refused"`, `"timeout"`.
    pub on: Option<Vec<String>>,
    /// Status the sender is told when its delivery is queued.
    pub ack_status: Option<u16>,
    /// Body the sender is told when its delivery is queued.
    pub ack_body: Option<String>,
    /// `Content-Type` of that body.
    pub ack_content_type: Option<String>,
    /// Redeliveries before a delivery is dead.
    pub max_attempts: Option<u32>,
    /// First redelivery delay, doubled each attempt.
    pub backoff: Option<ConfigDuration>,
    /// Cap on the delay.
    pub max_backoff: Option<ConfigDuration>,
    /// Redeliveries in flight per instance.
    pub concurrency: Option<usize>,
    /// How long a taken delivery stays invisible to other workers.
    pub visibility_timeout: Option<ConfigDuration>,
    /// Handler statuses that mean a redelivery was taken.
    pub delivered_status: Option<Vec<String>>,
    /// Deliveries owed (queued or held) in the route's scope at most.
    pub max_queued: Option<u64>,
    /// How often the scope's indexes are checked against its owed set.
    pub repair_every: Option<ConfigDuration>,
}

/// Most redeliveries one delivery may get: more is a typo, not a policy.
const MAX_ATTEMPTS: u32 = 1000;
/// Most redeliveries in flight per instance for one route.
const MAX_CONCURRENCY: usize = 256;
/// What a redelivery needs inside its visibility window besides the
/// handler's own timeout: the claiming write before the call and the
/// settling write after it, each a store round trip that may be retried.
pub(super) const VISIBILITY_MARGIN: Duration = Duration::from_secs(1);
/// Shortest first delay: a tighter loop would hammer a failing handler.
const MIN_BACKOFF: Duration = Duration::from_millis(100);
/// Shortest repair interval: a pass reads every owed entry of the scope
/// (and, on a Cluster, every slot's owed set).
const MIN_REPAIR_EVERY: Duration = Duration::from_secs(1);

/// What each item of `on = [...]` may be, for error messages.
const ON_FORMS: &str =
    "expected a status class \"1xx\"…\"5xx\", a code 100-599, \"refused\" or \"timeout\"";

/// `[route.inbox]`, validated: which failures are acknowledged and
/// queued, what the sender is told, and the redelivery schedule. A route
/// without the table (or with `enabled = false`) has none, and a failing
/// handler's answer reaches the sender as today.
#[derive(Debug, Clone)]
pub struct Inbox {
    /// Which handler failures are acknowledged and queued.
    pub on: InboxTriggers,
    /// What the sender is told when its delivery is queued.
    pub ack: Ack,
    /// Redeliveries (the live attempt not counted) before a delivery is dead.
    pub max_attempts: u32,
    /// First redelivery delay; doubled each attempt (jitter is applied by the runtime).
    pub backoff: Duration,
    /// Cap on the delay.
    pub max_backoff: Duration,
    /// Redeliveries in flight per instance.
    pub concurrency: usize,
    /// How long a taken delivery stays invisible to other workers.
    pub visibility_timeout: Duration,
    /// Handler statuses that mean a redelivery was taken (default 2xx).
    /// Any other answer is a failed attempt, even one `cache_status`
    /// would store for a live attempt.
    pub delivered: CacheStatus,
    /// Deliveries owed (queued, delivering, dead or unknown: not yet
    /// delivered or dropped) in the route's scope at most; beyond, a
    /// failing first delivery is not acknowledged: its sender gets the
    /// handler's failure and retries.
    pub max_queued: u64,
    /// How often each instance checks the scope's indexes against the
    /// deliveries the scope owes and puts back what is missing (the
    /// scope uses the shortest of its routes'): bounds how long a
    /// delivery whose index entry was lost (a Cluster failover with
    /// replication lag) waits to be found again.
    pub repair_every: Duration,
}

/// The handler failures that queue a delivery (`on = [...]`): a failure
/// not listed reaches the sender as today, so it retries by itself.
#[derive(Debug, Clone)]
pub struct InboxTriggers {
    /// Upstream answer statuses that are queued (never overlapping the
    /// route's `cache_status`: an answer is either stored or queued).
    pub statuses: CacheStatus,
    /// A connection refused before anything was sent (the handler is
    /// down; it certainly did not act).
    pub refused: bool,
    /// A timeout or connection cut after the request was sent (unknown
    /// outcome): acknowledged, then `on_upstream_timeout` decides whether
    /// it is held for the operator or queued for redelivery.
    pub timeout: bool,
}

impl InboxTriggers {
    /// Whether an upstream answer with this status is queued.
    pub fn status(&self, code: u16) -> bool {
        self.statuses.contains(code)
    }

    /// The items as written in `on = [...]` (for the effective-config view):
    /// statuses first, then `"refused"` and `"timeout"`.
    pub fn names(&self) -> Vec<String> {
        let mut names = self.statuses.names();
        names.extend(self.refused.then(|| "refused".to_owned()));
        names.extend(self.timeout.then(|| "timeout".to_owned()));
        names
    }
}

/// The answer a sender gets when its delivery is queued (and, as for a
/// replay, when it sends a duplicate of a queued delivery): what its
/// protocol reads as "delivered", so it stops retrying.
#[derive(Debug, Clone)]
pub struct Ack {
    /// Status, 200-299.
    pub status: u16,
    /// Body bytes (e.g. `success` for Alipay; empty for WeChat Pay v3).
    pub body: Bytes,
    /// `Content-Type` of the body; `None` when the body is empty.
    pub content_type: Option<String>,
}

/// Validates `raw` (the route's `[route.inbox]`, if any); `route_key` is
/// e.g. `route[0]`. `None` when the table is absent or disabled.
pub(super) fn inbox(
    problems: &mut Problems,
    route_key: &str,
    raw: Option<&RawInbox>,
) -> Option<Inbox> {
    let raw = raw?;
    if !raw.enabled.unwrap_or(true) {
        return None;
    }
    let key = format!("{route_key}.inbox");
    let on = triggers(problems, &key, raw.on.as_deref());
    let ack = ack(problems, &key, raw);
    let schedule = Schedule::read(problems, &key, raw);
    let delivered = delivered(problems, &key, raw.delivered_status.as_deref(), &on);
    let max_queued = raw.max_queued.unwrap_or(DEFAULT_MAX_QUEUED);
    if max_queued == 0 {
        problems.push(
            &format!("{key}.max_queued"),
            "must be at least 1 (to queue nothing, disable the inbox: enabled = false)",
        );
    }
    let repair_every = raw.repair_every.unwrap_or(DEFAULT_REPAIR_EVERY).get();
    if repair_every < MIN_REPAIR_EVERY {
        problems.push(&format!("{key}.repair_every"), "must be at least 1s");
    }
    Some(Inbox {
        on,
        ack,
        max_attempts: schedule.max_attempts,
        backoff: schedule.backoff,
        max_backoff: schedule.max_backoff,
        concurrency: schedule.concurrency,
        visibility_timeout: schedule.visibility_timeout,
        delivered,
        max_queued,
        repair_every,
    })
}

/// The redelivery schedule: how often, how many at once, how long each.
struct Schedule {
    max_attempts: u32,
    concurrency: usize,
    backoff: Duration,
    max_backoff: Duration,
    visibility_timeout: Duration,
}

impl Schedule {
    fn read(problems: &mut Problems, key: &str, raw: &RawInbox) -> Self {
        let max_attempts = raw.max_attempts.unwrap_or(DEFAULT_MAX_ATTEMPTS);
        if !(1..=MAX_ATTEMPTS).contains(&max_attempts) {
            problems.push(
                &format!("{key}.max_attempts"),
                format!("must be 1-{MAX_ATTEMPTS}"),
            );
        }
        let concurrency = raw.concurrency.unwrap_or(DEFAULT_CONCURRENCY);
        if !(1..=MAX_CONCURRENCY).contains(&concurrency) {
            problems.push(
                &format!("{key}.concurrency"),
                format!("must be 1-{MAX_CONCURRENCY}"),
            );
        }
        let backoff = raw.backoff.unwrap_or(DEFAULT_BACKOFF).get();
        if backoff < MIN_BACKOFF {
            problems.push(&format!("{key}.backoff"), "must be at least 100ms");
        }
        let max_backoff = raw.max_backoff.unwrap_or(DEFAULT_MAX_BACKOFF).get();
        if max_backoff < backoff {
            problems.push_derived(
                &format!("{key}.max_backoff"),
                &[&format!("{key}.backoff")],
                format!("must be at least backoff ({})", format_duration(backoff)),
            );
        }
        let visibility_timeout = raw
            .visibility_timeout
            .unwrap_or(DEFAULT_VISIBILITY_TIMEOUT)
            .get();
        Self {
            max_attempts,
            concurrency,
            backoff,
            max_backoff,
            visibility_timeout,
        }
    }
}

fn triggers(problems: &mut Problems, key: &str, items: Option<&[String]>) -> InboxTriggers {
    let defaults: Vec<String>;
    let items = match items {
        Some(items) => items,
        None => {
            defaults = DEFAULT_INBOX_ON.map(str::to_owned).to_vec();
            &defaults
        }
    };
    let key = format!("{key}.on");
    if items.is_empty() {
        problems.push(&key, format!("must list at least one failure; {ON_FORMS}"));
    }
    let mut on = InboxTriggers {
        statuses: CacheStatus { ranges: Vec::new() },
        refused: false,
        timeout: false,
    };
    for (i, item) in items.iter().enumerate() {
        match item.as_str() {
            "refused" => on.refused = true,
            "timeout" => on.timeout = true,
            _ => match CacheStatus::parse(std::slice::from_ref(item)) {
                Ok(status) => on.statuses.ranges.extend(status.ranges),
                Err(_) => problems.push(
                    &format!("{key}[{i}]"),
                    format!("{item:?} is not valid; {ON_FORMS}"),
                ),
            },
        }
    }
    on
}

/// `delivered_status`: the statuses that end a redelivery as delivered.
/// None of them may be one `on` queues, or a live failure would count as
/// a success on its redelivery.
fn delivered(
    problems: &mut Problems,
    key: &str,
    items: Option<&[String]>,
    on: &InboxTriggers,
) -> CacheStatus {
    let key = format!("{key}.delivered_status");
    let items: Vec<String> = match items {
        Some(items) => items.to_vec(),
        None => DEFAULT_DELIVERED_STATUS.map(str::to_owned).to_vec(),
    };
    if items.is_empty() {
        problems.push(&key, "must list at least one status (e.g. \"2xx\")");
    }
    let delivered = match CacheStatus::parse(&items) {
        Ok(statuses) => statuses,
        Err(error) => {
            problems.push(&key, error);
            return CacheStatus { ranges: Vec::new() };
        }
    };
    for code in 100..=599 {
        if delivered.contains(code) && on.status(code) {
            problems.push(
                &key,
                format!("{code} is also in inbox.on: an answer can not be both a failure to queue and a delivery"),
            );
            break;
        }
    }
    delivered
}

fn ack(problems: &mut Problems, key: &str, raw: &RawInbox) -> Ack {
    let written = (
        raw.ack_status,
        raw.ack_body.clone(),
        raw.ack_content_type.clone(),
    );
    ack_from(problems, key, written)
}

/// An acknowledgement from its three settings (`ack_status`, `ack_body`,
/// `ack_content_type` under table `key`), checked: the inbox's and the
/// entity table's are read alike.
pub(super) fn ack_from(
    problems: &mut Problems,
    key: &str,
    (status, body, content_type): (Option<u16>, Option<String>, Option<String>),
) -> Ack {
    let status = status.unwrap_or(DEFAULT_ACK_STATUS);
    let body = body.unwrap_or_default();
    if !(200..=299).contains(&status) {
        problems.push(
            &format!("{key}.ack_status"),
            format!("{status} must be 200-299: a sender retries any other status anyway"),
        );
    }
    if matches!(status, 204 | 304) && !body.is_empty() {
        problems.push(
            &format!("{key}.ack_body"),
            format!("must be empty with ack_status = {status}, which carries no body"),
        );
    }
    let content_type = content_type
        .as_deref()
        .unwrap_or(DEFAULT_ACK_CONTENT_TYPE)
        .to_owned();
    if http::HeaderValue::from_str(&content_type).is_err() {
        problems.push(
            &format!("{key}.ack_content_type"),
            format!("{content_type:?} is not a valid header value"),
        );
    }
    Ack {
        status,
        content_type: (!body.is_empty()).then_some(content_type),
        body: Bytes::from(body),
    }
}

impl Inbox {
    /// The table as `check-config` prints it.
    pub(super) fn to_raw(&self) -> RawInbox {
        RawInbox {
            enabled: Some(true),
            on: Some(self.on.names()),
            ack_status: Some(self.ack.status),
            ack_body: Some(String::from_utf8_lossy(&self.ack.body).into_owned()),
            ack_content_type: self.ack.content_type.clone(),
            max_attempts: Some(self.max_attempts),
            backoff: Some(self.backoff.into()),
            max_backoff: Some(self.max_backoff.into()),
            concurrency: Some(self.concurrency),
            visibility_timeout: Some(self.visibility_timeout.into()),
            delivered_status: Some(self.delivered.names()),
            max_queued: Some(self.max_queued),
            repair_every: Some(self.repair_every.into()),
        }
    }
}

#[cfg(test)]
mod tests;
