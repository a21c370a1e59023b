//! Listing one scope's records by state, a page at a time: how the admin
//! listing (`GET /admin/records/{route}?state=…`) finds the records that
//! need a person without a key copied out of a log line.
//!
//! Both backends walk the scope's key space in an order they can resume:
//!
//! * **Redis** — `SCAN … MATCH {prefix}:{scope}:*` on every primary in
//!   turn (the one primary of a standalone or Sentinel deployment; each
//!   Cluster primary from fred's cached cluster state, in its sorted
//!   order), each key read through the `lookup` script. A page never cuts
//!   a `SCAN` batch: the cursor moves past each batch when it is fetched,
//!   and the batch's keys the page had no room for travel in the cursor
//!   (`pending`) to be read first by the next page. Repeating a `SCAN`
//!   call and skipping what was shown would, after the table grew or
//!   shrank in between, repeat or skip keys of neighbouring buckets.
//! * **Embedded** — a range read of the `records` table after the last
//!   key examined, in one read transaction per page: a keyset walk.
//!
//! Either way a page examines at most [`Filter::examined`] keys — for
//! Redis, the `COUNT` its `SCAN` calls ask the server to examine, whatever
//! keys those are (another route's records, entity and inbox keys) — so a
//! scope of a million completed records, or a Redis shared with others,
//! costs each request a bounded amount of work: a page may hold fewer than
//! `limit` records (even none) while `next` says more follow. Every key
//! present for the whole walk is listed (`SCAN`'s guarantee, kept by never
//! cutting a batch), once while the table only grows; when it shrinks
//! during the walk Redis may return a key twice, which clients drop by key
//! hash. A key created or deleted meanwhile may or may not be listed, and
//! so may one moved by a Cluster resharded between pages.

use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

use super::entity::EntityState;
use super::{AnyStore, Call, Existing, Observed, StoreError};

/// Which records a listing keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wanted {
    /// Observed unknown: an unknown outcome, or an in-flight claim whose
    /// owner stopped renewing it (contract §4 rule 4).
    Unknown,
    /// In flight within the lease: an owner is working on it.
    InFlight,
}

/// What a listing looks for and how much work one page may do.
#[derive(Debug, Clone, Copy)]
pub struct Filter {
    /// The state wanted.
    pub wanted: Wanted,
    /// The route's `unknown_hold`, which decides when an in-flight record
    /// has lost its owner.
    pub unknown_hold: Duration,
    /// The most records a page holds.
    pub limit: usize,
}

impl Filter {
    /// Whether `existing` is a record this listing shows.
    pub fn keeps(&self, existing: &Existing) -> bool {
        matches!(
            (self.wanted, existing.observe(self.unknown_hold)),
            (Wanted::Unknown, Observed::Unknown { .. }) | (Wanted::InFlight, Observed::InFlight)
        )
    }

    /// The most keys one page examines: ten per record asked for.
    pub fn examined(&self) -> usize {
        self.limit.saturating_mul(10)
    }
}

/// Where a listing resumes. Opaque to clients (see [`Cursor::encode`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cursor {
    /// The primary being walked (index into the sorted primaries; always
    /// 0 for one node and for the embedded store).
    pub node: u32,
    /// The `SCAN` cursor of the batch to read next (0: from the start;
    /// unused by the embedded store).
    pub scan: u64,
    /// The last key suffix (after `{prefix}:{scope}:`) already examined in
    /// the table (embedded); empty: none.
    pub after: String,
    /// Key suffixes of the last `SCAN` batch that the previous page had no
    /// room for (Redis): read before the next batch. At most
    /// [`MAX_PENDING`].
    pub pending: Vec<String>,
}

/// The most pending keys a cursor carries: far more than the last bucket
/// of a batch holds, few enough to keep a cursor a short URL parameter.
pub const MAX_PENDING: usize = 64;

/// A `cursor=` value that is not one a previous page of this listing
/// gave.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("cursor must be the next_cursor of a previous page of this listing")]
pub struct BadCursor;

/// The version tag of the cursor text, so a later layout can refuse an
/// older cursor cleanly.
const CURSOR_TAG: &str = "c3";

impl Cursor {
    /// The cursor as clients see it: base64url (no padding) of
    /// `c3:{listing}:{node}:{scan}:{after}|{pending, comma-separated}`
    /// (no key suffix holds `|` or `,`), where `listing` names the walk
    /// it resumes (what is listed, the scope, the state; no `:`): a cursor
    /// of another listing positions the walk in a keyspace it does not
    /// cover, and would skip records, so [`Cursor::decode`] refuses it.
    pub fn encode(&self, listing: &str) -> String {
        let text = format!(
            "{CURSOR_TAG}:{listing}:{}:{}:{}|{}",
            self.node,
            self.scan,
            self.after,
            self.pending.join(",")
        );
        URL_SAFE_NO_PAD.encode(text)
    }

    /// Reads what [`Cursor::encode`] wrote for the same `listing`.
    pub fn decode(text: &str, listing: &str) -> Result<Self, BadCursor> {
        let raw = URL_SAFE_NO_PAD.decode(text).map_err(|_| BadCursor)?;
        let raw = String::from_utf8(raw).map_err(|_| BadCursor)?;
        let mut fields = raw.splitn(5, ':');
        if fields.next() != Some(CURSOR_TAG) || fields.next() != Some(listing) {
            return Err(BadCursor);
        }
        let node = fields
            .next()
            .and_then(|n| n.parse().ok())
            .ok_or(BadCursor)?;
        let scan = fields
            .next()
            .and_then(|n| n.parse().ok())
            .ok_or(BadCursor)?;
        let (after, pending) = fields
            .next()
            .and_then(|rest| rest.rsplit_once('|'))
            .ok_or(BadCursor)?;
        let pending: Vec<String> = pending
            .split(',')
            .filter(|suffix| !suffix.is_empty())
            .map(str::to_owned)
            .collect();
        if pending.len() > MAX_PENDING {
            return Err(BadCursor);
        }
        Ok(Self {
            node,
            scan,
            after: after.to_owned(),
            pending,
        })
    }
}

/// Pages of records and of held entities, as a backend walks its keys
/// (module docs).
pub(super) trait Listing {
    /// One page of the records under `namespace` (`{prefix}:{scope}`)
    /// that `filter` keeps, from `cursor`.
    fn list<'a>(&'a self, namespace: &'a str, filter: Filter, cursor: Cursor) -> Call<'a, Page>;
    /// One page of the held entities under `namespace`, from `cursor`.
    fn list_held<'a>(
        &'a self,
        namespace: &'a str,
        limit: usize,
        cursor: Cursor,
    ) -> Call<'a, EntityPage>;
}

/// Both backends list with inherent methods of the same names, which
/// each backend's `listing.rs` hands to [`Listing`] with this macro.
macro_rules! listing_by_inherent_methods {
    ($backend:ty) => {
        impl $crate::store::listing::Listing for $backend {
            fn list<'a>(
                &'a self,
                namespace: &'a str,
                filter: $crate::store::listing::Filter,
                cursor: $crate::store::listing::Cursor,
            ) -> $crate::store::Call<'a, $crate::store::listing::Page> {
                Box::pin(<$backend>::list(self, namespace, filter, cursor))
            }
            fn list_held<'a>(
                &'a self,
                namespace: &'a str,
                limit: usize,
                cursor: $crate::store::listing::Cursor,
            ) -> $crate::store::Call<'a, $crate::store::listing::EntityPage> {
                Box::pin(<$backend>::list_held(self, namespace, limit, cursor))
            }
        }
    };
}
pub(super) use listing_by_inherent_methods;

/// One page of a listing.
#[derive(Debug)]
pub struct Page {
    /// The records kept, as (key hash, record), in walk order.
    pub records: Vec<(String, Existing)>,
    /// Where the next page starts; `None` after the last.
    pub next: Option<Cursor>,
}

impl AnyStore {
    /// One page of the entities of `scope` that are held: a change pending
    /// (in flight, unknown, owed by the inbox, unresolved) or notices
    /// waiting behind it. Walked like the records (module docs), at most
    /// ten keys examined per entity asked for. Not metered.
    pub async fn list_held_entities(
        &self,
        key_prefix: &str,
        scope: &str,
        limit: usize,
        cursor: Cursor,
    ) -> Result<EntityPage, StoreError> {
        let namespace = format!("{key_prefix}:{scope}");
        self.backend.list_held(&namespace, limit, cursor).await
    }

    /// One page of the records of `scope` (under `key_prefix`) that
    /// `filter` keeps, from `cursor` (the module docs say how each backend
    /// walks). Not metered: the `op` label set covers the request path.
    pub async fn list_records(
        &self,
        key_prefix: &str,
        scope: &str,
        filter: Filter,
        cursor: Cursor,
    ) -> Result<Page, StoreError> {
        // The namespace `StoreKey::new` puts every record of the scope in.
        let namespace = format!("{key_prefix}:{scope}");
        self.backend.list(&namespace, filter, cursor).await
    }
}

/// One page of held entities ([`AnyStore::list_held_entities`]).
#[derive(Debug)]
pub struct EntityPage {
    /// The entities kept, as (key suffix `entity:{hash}`, state).
    pub entities: Vec<(String, EntityState)>,
    /// Where the next page starts; `None` after the last.
    pub next: Option<Cursor>,
}

/// The suffix of an entity key (`entity:{<32 hex>}`), if `suffix` is one.
pub(super) fn entity_hash(suffix: &str) -> Option<&str> {
    let tag = suffix.strip_prefix("entity:{")?.strip_suffix('}')?;
    (tag.len() == super::ENTITY_HASH_LEN && tag.bytes().all(|b| b.is_ascii_hexdigit()))
        .then_some(suffix)
}

/// The key hash a key suffix names, if it is a record key: exactly 64 hex
/// digits. The scope's other keys (`inbox:…`) and a longer scope that
/// starts with this one (`pay:eu:…` under `pay`) are not.
pub(super) fn record_hash(suffix: &str) -> Option<&str> {
    super::lease::is_record_hash(suffix).then_some(suffix)
}

/// `text` with the `SCAN MATCH` glob's special characters escaped, so a
/// prefix or scope containing `*`, `?`, `[` or `\` matches only itself.
pub(super) fn glob_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_refuse_forgeries() {
        const LISTING: &str = "records/pay/unknown";
        for cursor in [
            Cursor::default(),
            Cursor {
                node: 2,
                scan: 17_179_869_184,
                after: "ab".repeat(32),
                pending: Vec::new(),
            },
            Cursor {
                node: 1,
                scan: 7,
                after: String::new(),
                pending: vec!["cd".repeat(32), "entity:{ab}".into()],
            },
        ] {
            let text = cursor.encode(LISTING);
            assert!(
                text.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            );
            assert_eq!(Cursor::decode(&text, LISTING), Ok(cursor));
        }
        for bad in [
            "",
            "!!",
            "YWJj",
            &URL_SAFE_NO_PAD.encode("c2:records/pay/unknown:x:0:"),
            &URL_SAFE_NO_PAD.encode("c1:0:0:"),
            &URL_SAFE_NO_PAD.encode("c2:0:0:"),
            &URL_SAFE_NO_PAD.encode("c2:records/pay/unknown:1:5:"),
            &URL_SAFE_NO_PAD.encode("c3:records/pay/unknown:1:5:"),
            &URL_SAFE_NO_PAD.encode(format!(
                "c3:records/pay/unknown:1:5:|{}",
                vec!["ab"; MAX_PENDING + 1].join(",")
            )),
        ] {
            assert_eq!(Cursor::decode(bad, LISTING), Err(BadCursor), "{bad}");
        }
        assert_eq!(
            Cursor::decode(
                &URL_SAFE_NO_PAD.encode("c3:records/pay/unknown:1:5:|"),
                LISTING
            ),
            Ok(Cursor {
                node: 1,
                scan: 5,
                ..Cursor::default()
            })
        );
    }

    /// A cursor resumes the walk it came from: another scope's, or the
    /// same scope's in another state, would skip records, so it is refused.
    #[test]
    fn a_cursor_of_another_listing_is_refused() {
        let cursor = Cursor {
            node: 0,
            scan: 42,
            after: "c".repeat(64),
            pending: vec!["d".repeat(64)],
        };
        let text = cursor.encode("records/refunds/unknown");
        assert_eq!(Cursor::decode(&text, "records/pay/unknown"), Err(BadCursor));
        assert_eq!(
            Cursor::decode(&text, "records/refunds/in_flight"),
            Err(BadCursor)
        );
        assert_eq!(Cursor::decode(&text, "records/refunds/unknown"), Ok(cursor));
    }

    #[test]
    fn only_64_hex_suffixes_are_records() {
        assert!(record_hash(&"a".repeat(64)).is_some());
        assert!(record_hash("inbox:owed").is_none());
        assert!(record_hash(&format!("eu:{}", "a".repeat(64))).is_none());
        assert!(record_hash(&"g".repeat(64)).is_none());
    }

    #[test]
    fn glob_characters_are_escaped() {
        assert_eq!(glob_escape("idem:pay"), "idem:pay");
        assert_eq!(glob_escape("a*b?[c]\\"), "a\\*b\\?\\[c\\]\\\\");
    }
}
