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
//! The checks that span sections live here too, so `route.rs` calls one
//! function: the visibility timeout against the upstream timeout, the
//! retention against the redelivery schedule, the statuses against
//! `cache_status`, and shadow mode.

use std::time::Duration;

use bytes::Bytes;

use super::Upstream;
use super::raw::{
    self, DEFAULT_ACK_CONTENT_TYPE, DEFAULT_ACK_STATUS, DEFAULT_BACKOFF, DEFAULT_CONCURRENCY,
    DEFAULT_INBOX_ON, DEFAULT_MAX_ATTEMPTS, DEFAULT_MAX_BACKOFF, DEFAULT_VISIBILITY_TIMEOUT,
    RawInbox,
};
use super::route::{CacheStatus, Idempotency, Mode};
use super::validate::Problems;

/// Most redeliveries one delivery may get: more is a typo, not a policy.
const MAX_ATTEMPTS: u32 = 1000;
/// Most redeliveries in flight per instance for one route.
const MAX_CONCURRENCY: usize = 256;
/// Shortest first delay: a tighter loop would hammer a failing handler.
const MIN_BACKOFF: Duration = Duration::from_millis(100);

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

/// Validates `raw` (the route's `[route.inbox]`, if any) against the rest
/// of the route; `route_key` is e.g. `route[0]`. `None` when the table is
/// absent or disabled. An enabled inbox takes the statuses it queues out
/// of a default (not written) `cache_status`; a written one must not
/// overlap them.
pub(super) fn inbox(
    problems: &mut Problems,
    route_key: &str,
    raw: Option<&RawInbox>,
    cache_status_written: bool,
    upstream: &Upstream,
    idempotency: &mut Idempotency,
) -> Option<Inbox> {
    let raw = raw?;
    if !raw.enabled.unwrap_or(true) {
        return None;
    }
    let key = format!("{route_key}.inbox");
    let on = triggers(problems, &key, raw.on.as_deref());
    if cache_status_written {
        check_overlap(problems, &key, &on.statuses, &idempotency.cache_status);
    } else {
        // The default ["2xx", "4xx"] was not chosen with the inbox in
        // mind (it would clash with the default "429"): what is queued is
        // simply not stored.
        subtract(&mut idempotency.cache_status, &on.statuses);
    }
    let ack = ack(problems, &key, raw);
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
    let backoff = problems.duration(
        &format!("{key}.backoff"),
        raw.backoff.as_deref(),
        DEFAULT_BACKOFF,
    );
    if backoff < MIN_BACKOFF {
        problems.push(&format!("{key}.backoff"), "must be at least 100ms");
    }
    let max_backoff = problems.duration(
        &format!("{key}.max_backoff"),
        raw.max_backoff.as_deref(),
        DEFAULT_MAX_BACKOFF,
    );
    if max_backoff < backoff {
        problems.push_derived(
            &format!("{key}.max_backoff"),
            &[&format!("{key}.backoff")],
            format!(
                "must be at least backoff ({})",
                raw::format_duration(backoff)
            ),
        );
    }
    let visibility_timeout = problems.duration(
        &format!("{key}.visibility_timeout"),
        raw.visibility_timeout.as_deref(),
        DEFAULT_VISIBILITY_TIMEOUT,
    );
    if visibility_timeout <= upstream.timeout {
        problems.push_derived(
            &format!("{key}.visibility_timeout"),
            &["upstream.timeout"],
            format!(
                "must exceed the upstream timeout ({}), or a worker still waiting for the handler would see its delivery taken by another and delivered twice",
                raw::format_duration(upstream.timeout)
            ),
        );
    }
    let schedule = max_backoff.saturating_add(visibility_timeout);
    if idempotency.retention <= schedule {
        problems.push_derived(
            &format!("{route_key}.idempotency.retention"),
            &[
                &format!("{key}.max_backoff"),
                &format!("{key}.visibility_timeout"),
            ],
            format!(
                "must exceed inbox.max_backoff + inbox.visibility_timeout ({}): a queued record is rewritten at each attempt and must not expire between two",
                raw::format_duration(schedule)
            ),
        );
    }
    if idempotency.mode == Mode::Shadow {
        problems.push(
            &format!("{route_key}.idempotency.mode"),
            "\"shadow\" claims nothing, so nothing can be queued: disable the inbox (enabled = false) or use \"enforce\"",
        );
    }
    Some(Inbox {
        on,
        ack,
        max_attempts,
        backoff,
        max_backoff,
        concurrency,
        visibility_timeout,
    })
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

/// An answer can not be both stored (and replayed) and queued (and
/// redelivered): every overlap between `on` and `cache_status` is a problem.
fn check_overlap(problems: &mut Problems, key: &str, on: &CacheStatus, cached: &CacheStatus) {
    // Both lists are as written (classes and single codes), so each range
    // names itself.
    let name = |&(low, high): &(u16, u16)| {
        if low == high {
            low.to_string()
        } else {
            format!("{}xx", low / 100)
        }
    };
    for queued in &on.ranges {
        let stored = cached
            .ranges
            .iter()
            .find(|(low, high)| queued.0 <= *high && *low <= queued.1);
        if let Some(stored) = stored {
            let (name, other) = (name(queued), name(stored));
            problems.push(
                &format!("{key}.on"),
                format!(
                    "{name:?} overlaps idempotency.cache_status {other:?}: an answer can not be both stored and queued"
                ),
            );
        }
    }
}

/// Takes every status `queued` covers out of `cached`.
fn subtract(cached: &mut CacheStatus, queued: &CacheStatus) {
    for &(q_low, q_high) in &queued.ranges {
        cached.ranges = cached
            .ranges
            .iter()
            .flat_map(|&(low, high)| {
                let below = (low < q_low).then(|| (low, high.min(q_low - 1)));
                let above = (high > q_high).then(|| (low.max(q_high + 1), high));
                [below, above]
            })
            .flatten()
            .filter(|(low, high)| low <= high)
            .collect();
    }
}

fn ack(problems: &mut Problems, key: &str, raw: &RawInbox) -> Ack {
    let status = raw.ack_status.unwrap_or(DEFAULT_ACK_STATUS);
    let body = raw.ack_body.clone().unwrap_or_default();
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
    let content_type = raw
        .ack_content_type
        .as_deref()
        .unwrap_or(DEFAULT_ACK_CONTENT_TYPE);
    if http::HeaderValue::from_str(content_type).is_err() {
        problems.push(
            &format!("{key}.ack_content_type"),
            format!("{content_type:?} is not a valid header value"),
        );
    }
    Ack {
        status,
        content_type: (!body.is_empty()).then(|| content_type.to_owned()),
        body: Bytes::from(body),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::config::Config;
    use crate::config::tests::MINIMAL;

    use super::*;

    /// The minimal config with `[route.inbox]` holding `inbox`, and
    /// `idempotency` appended to its `[route.idempotency]`.
    fn with_inbox(idempotency: &str, inbox: &str) -> Result<Config, String> {
        let text = format!("{MINIMAL}\n{idempotency}\n[route.inbox]\n{inbox}\n");
        Config::parse(&text).map_err(|e| e.0.join("\n"))
    }

    fn parsed(idempotency: &str, inbox: &str) -> Inbox {
        let config = with_inbox(idempotency, inbox).unwrap();
        config.routes[0].inbox.clone().expect("an inbox")
    }

    fn problems(idempotency: &str, inbox: &str) -> String {
        with_inbox(idempotency, inbox).unwrap_err()
    }

    #[test]
    fn absent_or_disabled_tables_give_no_inbox() {
        let config = Config::parse(MINIMAL).unwrap();
        assert!(config.routes[0].inbox.is_none());
        let disabled = with_inbox("", "enabled = false\nconcurrency = 0").unwrap();
        assert!(disabled.routes[0].inbox.is_none());
    }

    #[test]
    fn defaults() {
        let inbox = parsed("", "");
        assert_eq!(inbox.on.names(), ["5xx", "429", "refused"]);
        assert!(inbox.on.refused && !inbox.on.timeout);
        assert_eq!(inbox.ack.status, 200);
        assert!(inbox.ack.body.is_empty());
        assert_eq!(inbox.ack.content_type, None, "no type without a body");
        assert_eq!(inbox.max_attempts, 12);
        assert_eq!(inbox.backoff, Duration::from_secs(30));
        assert_eq!(inbox.max_backoff, Duration::from_secs(3600));
        assert_eq!(inbox.concurrency, 4);
        assert_eq!(inbox.visibility_timeout, Duration::from_secs(60));
        let explicit = parsed("", "enabled = true\nack_body = \"success\"");
        assert_eq!(&explicit.ack.body[..], b"success");
        assert_eq!(explicit.ack.content_type.as_deref(), Some("text/plain"));
    }

    #[test]
    fn triggers_match_statuses_refusals_and_timeouts() {
        let inbox = parsed("", "on = [\"5xx\", \"429\", \"timeout\", \"1xx\"]");
        for queued in [500, 503, 599, 429, 100] {
            assert!(inbox.on.status(queued), "{queued}");
        }
        for not in [200, 404, 428, 430, 499, 600] {
            assert!(!inbox.on.status(not), "{not}");
        }
        assert!(inbox.on.timeout && !inbox.on.refused);
        let refused = parsed("", "on = [\"refused\"]");
        assert!(refused.on.refused && !refused.on.timeout && !refused.on.status(500));
    }

    #[test]
    fn names_round_trip() {
        for on in [
            "[\"5xx\", \"429\", \"refused\"]",
            "[\"503\", \"timeout\"]",
            "[\"refused\", \"timeout\"]",
            "[\"1xx\", \"5xx\", \"408\", \"refused\", \"timeout\"]",
        ] {
            let first = parsed("", &format!("on = {on}")).on.names();
            let quoted: Vec<String> = first.iter().map(|n| format!("{n:?}")).collect();
            let again = parsed("", &format!("on = [{}]", quoted.join(", ")));
            assert_eq!(again.on.names(), first, "{on}");
        }
    }

    #[test]
    fn on_must_name_known_failures() {
        let empty = problems("", "on = []");
        assert!(
            empty.contains("route[0].inbox.on: must list at least one failure"),
            "{empty}"
        );
        for bad in ["6xx", "600", "99", "5XX", "reset", ""] {
            let err = problems("", &format!("on = [\"429\", {bad:?}]"));
            assert!(
                err.contains(&format!("route[0].inbox.on[1]: {bad:?} is not valid; expected a status class \"1xx\"…\"5xx\", a code 100-599, \"refused\" or \"timeout\"")),
                "{err}"
            );
        }
    }

    #[test]
    fn a_status_is_either_stored_or_queued() {
        let err = problems(
            "cache_status = [\"2xx\", \"4xx\"]",
            "on = [\"5xx\", \"429\"]",
        );
        assert!(
            err.contains("route[0].inbox.on: \"429\" overlaps idempotency.cache_status \"4xx\": an answer can not be both stored and queued"),
            "{err}"
        );
        let err = problems("cache_status = [\"2xx\", \"503\"]", "on = [\"5xx\"]");
        assert!(
            err.contains("\"5xx\" overlaps idempotency.cache_status \"503\""),
            "{err}"
        );
        let fine = with_inbox(
            "cache_status = [\"2xx\", \"404\"]",
            "on = [\"5xx\", \"429\"]",
        );
        assert!(fine.is_ok(), "{fine:?}");
    }

    #[test]
    fn a_default_cache_status_leaves_out_what_is_queued() {
        let config = with_inbox("", "").unwrap();
        let cached = &config.routes[0].idempotency.cache_status;
        for stored in [200, 299, 400, 428, 430, 499] {
            assert!(cached.contains(stored), "{stored}");
        }
        assert!(!cached.contains(429) && !cached.contains(500));
        let names = cached.names();
        assert_eq!(names.len(), 1 + 99, "{names:?}");
        assert_eq!(names[..3], ["2xx", "400", "401"]);
        // The effective view lists the codes, and loads back to itself.
        let printed = config.to_toml();
        let again = Config::parse(
            &printed.replace("literal:<redacted>", "literal:k-secret-0123456789abcdef"),
        )
        .unwrap();
        assert_eq!(again.to_toml(), printed);
        // Without an inbox the default is untouched.
        let plain = Config::parse(MINIMAL).unwrap();
        assert_eq!(
            plain.routes[0].idempotency.cache_status.names(),
            ["2xx", "4xx"]
        );
    }

    #[test]
    fn acks_are_2xx_with_a_body_only_where_one_is_allowed() {
        let err = problems("", "ack_status = 500");
        assert!(
            err.contains("route[0].inbox.ack_status: 500 must be 200-299: a sender retries any other status anyway"),
            "{err}"
        );
        for status in [204, 304] {
            let err = problems(
                "",
                &format!("ack_status = {status}\nack_body = \"success\""),
            );
            assert!(
                err.contains(&format!(
                    "route[0].inbox.ack_body: must be empty with ack_status = {status}"
                )),
                "{err}"
            );
        }
        let wechat = parsed("", "ack_status = 204");
        assert_eq!((wechat.ack.status, wechat.ack.content_type), (204, None));
        let err = problems("", "ack_content_type = \"text/plain\\n\"");
        assert!(
            err.contains(
                "route[0].inbox.ack_content_type: \"text/plain\\n\" is not a valid header value"
            ),
            "{err}"
        );
        let json = parsed(
            "",
            "ack_body = '{\"code\":\"SUCCESS\"}'\nack_content_type = \"application/json\"",
        );
        assert_eq!(json.ack.content_type.as_deref(), Some("application/json"));
    }

    #[test]
    fn schedule_limits() {
        for (setting, expected) in [
            (
                "max_attempts = 0",
                "route[0].inbox.max_attempts: must be 1-1000",
            ),
            (
                "max_attempts = 1001",
                "route[0].inbox.max_attempts: must be 1-1000",
            ),
            (
                "concurrency = 0",
                "route[0].inbox.concurrency: must be 1-256",
            ),
            (
                "concurrency = 257",
                "route[0].inbox.concurrency: must be 1-256",
            ),
            (
                "backoff = \"99ms\"",
                "route[0].inbox.backoff: must be at least 100ms",
            ),
            (
                "backoff = \"soon\"",
                "route[0].inbox.backoff: \"soon\" is not a duration",
            ),
            (
                "backoff = \"2m\"\nmax_backoff = \"1m\"",
                "route[0].inbox.max_backoff: must be at least backoff (2m)",
            ),
        ] {
            let err = problems("", setting);
            assert!(err.contains(expected), "{setting}: {err}");
        }
        let edges = parsed(
            "",
            "max_attempts = 1000\nconcurrency = 256\nbackoff = \"100ms\"\nmax_backoff = \"100ms\"",
        );
        assert_eq!((edges.max_attempts, edges.concurrency), (1000, 256));
        assert_eq!(parsed("", "max_attempts = 1").max_attempts, 1);
    }

    #[test]
    fn visibility_timeout_exceeds_the_upstream_timeout() {
        let err = problems("", "visibility_timeout = \"30s\"");
        assert!(
            err.contains("route[0].inbox.visibility_timeout: must exceed the upstream timeout (30s), or a worker still waiting for the handler would see its delivery taken by another"),
            "{err}"
        );
        let slow = MINIMAL.replace("[upstream]", "[upstream]\ntimeout = \"2m\"");
        let err = Config::parse(&format!("{slow}\n[route.inbox]\n")).unwrap_err();
        assert!(err.0.join("\n").contains("upstream timeout (2m)"), "{err}");
        assert!(with_inbox("", "visibility_timeout = \"31s\"").is_ok());
    }

    #[test]
    fn retention_outlasts_the_schedule() {
        let err = problems("retention = \"1h\"", "");
        assert!(
            err.contains("route[0].idempotency.retention: must exceed inbox.max_backoff + inbox.visibility_timeout (1h1m): a queued record is rewritten at each attempt"),
            "{err}"
        );
        assert!(with_inbox("retention = \"1h1m1s\"", "").is_ok());
        assert!(with_inbox("retention = \"1h\"", "max_backoff = \"10m\"").is_ok());
    }

    #[test]
    fn shadow_mode_queues_nothing() {
        let err = problems("mode = \"shadow\"", "");
        assert!(
            err.contains(
                "route[0].idempotency.mode: \"shadow\" claims nothing, so nothing can be queued"
            ),
            "{err}"
        );
        let off = with_inbox("mode = \"shadow\"", "enabled = false").unwrap();
        assert!(off.routes[0].inbox.is_none());
    }

    #[test]
    fn a_good_table_has_no_problems_and_unknown_keys_are_errors() {
        let good = parsed(
            "",
            "on = [\"5xx\", \"429\", \"refused\", \"timeout\"]\nack_status = 200\nack_body = \"success\"\n\
             ack_content_type = \"text/plain\"\nmax_attempts = 12\nbackoff = \"30s\"\nmax_backoff = \"1h\"\n\
             concurrency = 4\nvisibility_timeout = \"60s\"",
        );
        assert!(good.on.timeout && good.on.refused);
        let err = problems("", "retries = 3");
        assert!(err.contains("retries"), "{err}");
    }
}
