//! What the store makes of Redis's replies: fred errors sorted into the
//! store's (an outage, a full server, a moved slot, a bug) and a script's
//! `{record, pttl}` reply decoded, kept apart from the connection code so
//! the request path and the inbox read them the same way.

use std::time::Duration;

use fred::prelude::{Error as FredError, ErrorKind, Value};

use super::super::{Existing, StoreError};
use crate::record::Record;

/// Maps a fred error to the store's: connection trouble is `Unavailable`.
pub(in crate::store) fn classify(error: &FredError) -> StoreError {
    match error.kind() {
        ErrorKind::IO | ErrorKind::Timeout | ErrorKind::Canceled | ErrorKind::Backpressure => {
            StoreError::Unavailable(error.to_string())
        }
        // A node loading its data, a Cluster without a slot's owner, and
        // a slot on its way to another node (`migrating.rs`): each passes.
        _ if ["LOADING", "CLUSTERDOWN", "TRYAGAIN", "ASK ", "MOVED "]
            .iter()
            .any(|word| error.details().contains(word)) =>
        {
            StoreError::Unavailable(error.to_string())
        }
        // maxmemory reached under noeviction: reads still work.
        _ if error.details().contains("OOM ") => StoreError::Full(error.to_string()),
        _ => StoreError::Backend(error.to_string()),
    }
}

/// A `MOVED` redirection: the slot has a new owner (a failover, or a
/// resharding) that the routing has not seen yet.
pub(super) fn is_moved(error: &FredError) -> bool {
    error.kind() == &ErrorKind::Cluster && error.details().starts_with("MOVED")
}

/// Turns a `{record, pttl}` reply into an [`Existing`].
pub(super) fn existing_from(reply: Value) -> Result<Option<Existing>, StoreError> {
    if reply.is_null() {
        return Ok(None);
    }
    let mut parts = reply.into_array().into_iter();
    let Some(value) = parts.next() else {
        return Err(StoreError::Backend("unexpected script reply".into()));
    };
    // claim.lua leaves the TTL out for completed records.
    let pttl = parts.next().unwrap_or(Value::Null);
    let bytes = match value {
        Value::Bytes(bytes) => bytes,
        Value::String(text) => text.into_inner(),
        _ => return Err(StoreError::Backend("unexpected record type".into())),
    };
    let record = Record::decode(&bytes)?;
    let ttl = pttl
        .as_i64()
        .filter(|ms| *ms >= 0)
        .map(|ms| Duration::from_millis(ms as u64));
    Ok(Some(Existing { record, ttl }))
}

/// A TTL in whole milliseconds for `PX`, at least 1 (Redis refuses 0).
pub(super) fn millis(ttl: Duration) -> i64 {
    i64::try_from(crate::time::millis(ttl))
        .unwrap_or(i64::MAX)
        .max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(kind: ErrorKind, details: &str) -> FredError {
        FredError::new(kind, details.to_owned())
    }

    #[test]
    fn connection_trouble_and_a_loading_or_split_cluster_are_outages() {
        for e in [
            error(ErrorKind::IO, "broken pipe"),
            error(ErrorKind::Timeout, "timed out"),
            error(ErrorKind::Unknown, "LOADING Redis is loading the dataset"),
            error(ErrorKind::Cluster, "CLUSTERDOWN The cluster is down"),
        ] {
            assert!(matches!(classify(&e), StoreError::Unavailable(_)), "{e:?}");
        }
    }

    #[test]
    fn maxmemory_is_full_and_anything_else_a_backend_error() {
        let oom = error(
            ErrorKind::Unknown,
            "OOM command not allowed when used memory > 'maxmemory'.",
        );
        assert!(matches!(classify(&oom), StoreError::Full(_)));
        let wrong = error(ErrorKind::Unknown, "WRONGTYPE Operation against a key");
        assert!(matches!(classify(&wrong), StoreError::Backend(_)));
    }

    #[test]
    fn only_a_moved_redirection_sends_the_slot_map_to_be_read_again() {
        assert!(is_moved(&error(
            ErrorKind::Cluster,
            "MOVED 3999 127.0.0.1:6381"
        )));
        assert!(!is_moved(&error(
            ErrorKind::Cluster,
            "ASK 3999 127.0.0.1:6381"
        )));
        assert!(!is_moved(&error(ErrorKind::IO, "MOVED")));
    }

    #[test]
    fn a_missing_key_is_none_and_a_malformed_reply_an_error() {
        assert!(existing_from(Value::Null).unwrap().is_none());
        assert!(existing_from(Value::Array(vec![])).is_err());
        assert!(existing_from(Value::Array(vec![Value::Integer(3)])).is_err());
    }

    #[test]
    fn a_ttl_is_at_least_one_millisecond() {
        assert_eq!(millis(Duration::ZERO), 1);
        assert_eq!(millis(Duration::from_millis(1500)), 1500);
        assert_eq!(millis(Duration::MAX), i64::MAX);
    }
}
