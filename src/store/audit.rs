//! The audit trail the store keeps of operator actions (`admin::audit`
//! writes it, `GET /admin/audit` reads it): kept in the store rather than
//! only in log lines, so every instance and a restarted one show the same
//! history, and a deleted log file does not erase who purged what.
//!
//! | operation | does |
//! |---|---|
//! | append | adds one entry under a new [`AuditId`] (time, then a sequence within the millisecond), later than every id before it; drops entries older than the retention, and the oldest beyond [`MAX_ENTRIES`] |
//! | page | up to `limit` entries, newest first, older than a given id and not older than the retention |
//!
//! On Redis the trail is one stream, `{prefix}:audit` (`XADD`, trimmed by
//! `MAXLEN ~` and `MINID ~`; the server assigns the id). In the embedded
//! store it is the table `audit` (`(ms, seq)` → entry), written in its own
//! durable transaction. An entry whose time has passed the retention is
//! never listed, even before an append trims it.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{AnyStore, Call, StoreError};

/// The most entries a trail keeps, whatever the retention: an operator's
/// day is dozens of actions, so this bound is only ever reached by a
/// script gone wrong, which must not grow the store without end.
pub const MAX_ENTRIES: usize = 100_000;

/// Where an entry sits in the trail: the time it was appended (unix ms)
/// and a sequence number among entries of the same millisecond. Written
/// `{ms}-{seq}`, as Redis names stream entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct AuditId {
    /// When the entry was appended (unix ms).
    pub ms: u64,
    /// Its place among entries of the same millisecond.
    pub seq: u64,
}

impl fmt::Display for AuditId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.ms, self.seq)
    }
}

impl std::str::FromStr for AuditId {
    type Err = StoreError;

    fn from_str(text: &str) -> Result<Self, StoreError> {
        let bad = || StoreError::Backend(format!("unreadable audit entry id {text:?}"));
        let (ms, seq) = text.split_once('-').ok_or_else(bad)?;
        let digits = |part: &str| {
            (!part.is_empty() && part.bytes().all(|b| b.is_ascii_digit()))
                .then(|| part.parse().ok())
                .flatten()
        };
        Ok(Self {
            ms: digits(ms).ok_or_else(bad)?,
            seq: digits(seq).ok_or_else(bad)?,
        })
    }
}

/// One operator action as the trail keeps it. The admin API fills it in
/// (`admin::audit`); the store keeps its JSON text and gives it back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditEntry {
    /// The name of the token that asked (`admin` for `[admin] token`).
    pub token: String,
    /// `purge`, `retry`, `drop`, `entity_set` or `entity_clear`.
    pub action: String,
    /// The route named in the request.
    pub route: String,
    /// The record's key hash or the entity's hash, when the request named
    /// one the API could read.
    pub target: Option<String>,
    /// The state the operator said they saw (`expect_state=`).
    pub expected: Option<String>,
    /// The state the action found, when it got that far.
    pub before: Option<String>,
    /// The state it left: `before` again when it was refused.
    pub after: Option<String>,
    /// `done`, or the reason word of the refusal (contract §3).
    pub outcome: String,
    /// The HTTP status of the answer.
    pub status: u16,
}

/// The trail operations of the module docs, implemented by both backends.
/// Entries travel as JSON text: the store neither reads nor checks them.
pub trait AuditOps: Send + Sync + std::fmt::Debug {
    /// Appends `entry` to the trail of `prefix` (the store's key prefix),
    /// dropping entries older than `retention`; returns its id.
    fn audit_append<'a>(
        &'a self,
        prefix: &'a str,
        entry: String,
        retention: Duration,
    ) -> Call<'a, AuditId>;
    /// Up to `limit` entries older than `before` (all when `None`) and
    /// appended at or after `since_ms`, newest first.
    fn audit_page<'a>(
        &'a self,
        prefix: &'a str,
        before: Option<AuditId>,
        since_ms: u64,
        limit: usize,
    ) -> Call<'a, Vec<(AuditId, String)>>;
}

impl AnyStore {
    fn audits(&self) -> &dyn AuditOps {
        &*self.backend
    }

    /// Keeps `entry` in the trail for `retention` (module docs).
    pub async fn append_audit(
        &self,
        prefix: &str,
        entry: &AuditEntry,
        retention: Duration,
    ) -> Result<AuditId, StoreError> {
        let text = serde_json::to_string(entry)
            .map_err(|e| StoreError::Backend(format!("audit entry: {e}")))?;
        self.audits().audit_append(prefix, text, retention).await
    }

    /// One page of the trail, newest first: up to `limit` entries older
    /// than `before`, none older than `retention`. An entry the store can
    /// no longer read is an error, not a silent gap.
    pub async fn audit_page(
        &self,
        prefix: &str,
        before: Option<AuditId>,
        retention: Duration,
        limit: usize,
    ) -> Result<Vec<(AuditId, AuditEntry)>, StoreError> {
        let since = crate::time::now_ms().saturating_sub(crate::time::millis(retention));
        // A cursor at or before the retention's start has nothing after
        // it (and `(0-0` is no range end Redis accepts).
        if before.is_some_and(|id| id <= AuditId { ms: since, seq: 0 }) {
            return Ok(Vec::new());
        }
        let page = self
            .audits()
            .audit_page(prefix, before, since, limit)
            .await?;
        page.into_iter()
            .map(|(id, text)| {
                serde_json::from_str(&text)
                    .map(|entry| (id, entry))
                    .map_err(|e| StoreError::Backend(format!("audit entry {id}: {e}")))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_reads_back_as_written_and_orders_by_time_then_sequence() {
        let id = AuditId {
            ms: 1_765_000_000_123,
            seq: 7,
        };
        assert_eq!(id.to_string(), "1765000000123-7");
        assert_eq!("1765000000123-7".parse::<AuditId>().unwrap(), id);
        assert!(AuditId { ms: 5, seq: 9 } < AuditId { ms: 6, seq: 0 });
        assert!(AuditId { ms: 5, seq: 1 } < AuditId { ms: 5, seq: 2 });
        for bad in [
            "",
            "5",
            "5-",
            "-5",
            "a-1",
            "1-b",
            "+1-2",
            "1-2-3",
            "99999999999999999999-0",
        ] {
            assert!(bad.parse::<AuditId>().is_err(), "{bad}");
        }
    }
}
