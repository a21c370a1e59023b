//! Noticing that the store lost data: a generation marker that survives
//! only if the data does.
//!
//! A Redis that restarts without persistence, restores an older snapshot,
//! is flushed, or fails over to a replica that never had the marker comes
//! back without what idemgate acknowledged — and without the inbox's books,
//! which live beside the records, so they balance anyway. Nothing in a
//! claim can tell. So each Redis holds a marker written with the data
//! (`{key_prefix}:generation`; on a Cluster one per slot range, named with
//! the range's first slot's tag so it moves with the slots), and every
//! instance remembers each marker's value the first time it reads it. A
//! marker that later reads absent or different means the data under it
//! was lost since: at once an ERROR line naming the marker, one count of
//! `idemgate_store_data_lost_total`, and — at any durability but `memory`,
//! where losing data on a restart is the stated deal — `/readyz` 503 with
//! the reason until the process restarts (a rolling restart is the
//! operator's acknowledgement). The marker is written anew, so every other
//! instance notices too.
//!
//! What it can not see: a loss before this process first read the marker
//! (a new instance learns the new generation as the first), and a loss that
//! spares the marker's own key (an evicting Redis: `store::eviction`).

use std::collections::HashMap;
use std::sync::Mutex;

use metrics::counter;

use super::metrics::STORE_DATA_LOST_TOTAL;

/// What one reading of a marker found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Marker {
    /// The marker's value.
    Present(String),
    /// No marker under that key.
    Absent,
}

/// The markers this process has seen, and whether one was lost.
#[derive(Debug)]
pub(crate) struct GenerationWatch {
    /// Whether a loss keeps `/readyz` at 503 (every level but `memory`).
    fail_readiness: bool,
    /// Marker key → the value first read (or written) there.
    seen: Mutex<HashMap<String, String>>,
    /// The first loss found, for `/readyz`.
    lost: Mutex<Option<String>>,
}

impl GenerationWatch {
    /// A watch that has seen no marker; `fail_readiness` is whether a
    /// loss takes the instance out of service.
    pub(crate) fn new(fail_readiness: bool) -> Self {
        counter!(STORE_DATA_LOST_TOTAL.name).absolute(0);
        Self {
            fail_readiness,
            seen: Mutex::new(HashMap::new()),
            lost: Mutex::new(None),
        }
    }

    /// Judges one reading of `key` against what was seen before: a marker
    /// never seen is simply learned; one seen before that is now absent or
    /// different is a loss, reported here. The caller then remembers what
    /// the key holds now.
    pub(crate) fn judge(&self, key: &str, marker: &Marker) {
        let seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        let Some(known) = seen.get(key) else {
            return;
        };
        let now = match marker {
            Marker::Present(value) if value == known => return,
            Marker::Present(value) => format!("replaced by generation {value}"),
            Marker::Absent => "gone".to_owned(),
        };
        let what = format!("store marker {key} (generation {known}) is {now}");
        drop(seen);
        self.report(&what);
    }

    /// Remembers `value` as `key`'s generation.
    pub(crate) fn remember(&self, key: &str, value: String) {
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        seen.insert(key.to_owned(), value);
    }

    fn report(&self, what: &str) {
        counter!(STORE_DATA_LOST_TOTAL.name).increment(1);
        let consequence = if self.fail_readiness {
            "readyz answers 503 until idemgate restarts"
        } else {
            "durability is memory, so readyz stays 200"
        };
        tracing::error!(
            "the store lost data: {what}; records, claims and inbox deliveries (and the \
             inbox's books) written before may be gone, so copies of deliveries already \
             answered may run again; {consequence}"
        );
        if self.fail_readiness {
            let mut lost = self.lost.lock().unwrap_or_else(|e| e.into_inner());
            lost.get_or_insert_with(|| {
                format!("the store lost data: {what} (restart idemgate once handled)")
            });
        }
    }

    /// Why `/readyz` must fail: a loss was found (module docs).
    pub(crate) fn not_ready(&self) -> Option<String> {
        self.lost.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// A new generation: random, and when it began.
pub(crate) fn fresh_value() -> String {
    let mut bytes = [0u8; 8];
    getrandom::fill(&mut bytes).unwrap_or_default();
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("{hex}@{}", crate::time::now_ms())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_marker_is_learned_then_its_loss_is_reported_until_restart() {
        let watch = GenerationWatch::new(true);
        watch.judge("m", &Marker::Absent);
        assert_eq!(watch.not_ready(), None, "absent at the first look: new");
        let first = fresh_value();
        watch.remember("m", first.clone());
        watch.judge("m", &Marker::Present(first.clone()));
        assert_eq!(watch.not_ready(), None);

        watch.judge("m", &Marker::Absent);
        let why = watch.not_ready().unwrap();
        assert!(
            why.contains("store marker m") && why.contains("is gone"),
            "{why}"
        );
        let second = fresh_value();
        assert_ne!(second, first);
        watch.remember("m", second.clone());
        watch.judge("m", &Marker::Present(second));
        assert!(watch.not_ready().is_some(), "until the process restarts");

        watch.judge("other", &Marker::Present("g@1".into()));
        assert!(
            watch.not_ready().unwrap().contains("store marker m"),
            "a marker first seen present is learned, not a loss"
        );
    }

    #[test]
    fn a_replaced_marker_is_a_loss_and_memory_stays_ready() {
        let watch = GenerationWatch::new(false);
        watch.remember("m", "a@1".into());
        watch.judge("m", &Marker::Present("b@2".into()));
        assert_eq!(watch.not_ready(), None, "memory accepted losing data");
        let strict = GenerationWatch::new(true);
        strict.remember("m", "a@1".into());
        strict.judge("m", &Marker::Present("b@2".into()));
        let why = strict.not_ready().unwrap();
        assert!(why.contains("replaced by generation b@2"), "{why}");
    }
}
