//! The one trait every store backend implements, so [`super::AnyStore`]
//! holds any of them the same way and matches on none.
//!
//! A backend is the sum of the store's subjects, each a trait of its own
//! with its contract suite under `tests/suite/`:
//!
//! | trait | what it keeps | proved by |
//! |---|---|---|
//! | [`super::Store`] | records: claim, complete, release, renew, lookup, purge; entity state judged with the claim | `store_contract.rs`, `entity_store.rs`, `entity_model.rs` |
//! | [`InboxOps`] | the inbox in its own verbs: swap, take, hold, place, take due, page, backlog, owed, books | `inbox_store.rs` |
//! | [`ProbeOps`] | probe plans kept with unknown outcomes | `probe/model.rs` |
//! | [`AuditOps`] | the operators' audit trail | `admin/audit.rs` |
//! | [`Listing`] | pages of records and of held entities | `admin/listing.rs` |
//!
//! What only one backend has stays with it and is reached through the two
//! accessors below: Redis's settings watchers and its tracking client (the
//! replay cache's invalidations), the embedded store's sweeper. A new
//! backend (`docs/development.md`, "A new store backend") implements the
//! five traits, answers `None` to both accessors, gets one arm where a
//! store is connected (`store/connect.rs`) and one `[store] kind`, and
//! joins the contract suites' `for_every_backend!` list.

use super::Dispatch;
use super::audit::AuditOps;
use super::embedded::EmbeddedStore;
use super::inbox::InboxOps;
use super::listing::Listing;
use super::probe::ProbeOps;
use super::redis::RedisStore;

/// Everything [`super::AnyStore`] asks of the store it holds.
pub(super) trait Backend: Dispatch + InboxOps + ProbeOps + AuditOps + Listing {
    /// The Redis store, for the work only Redis needs (settings watchers,
    /// the tracking client); `None` on every other backend.
    fn redis(&self) -> Option<&RedisStore> {
        None
    }

    /// [`Backend::redis`], to turn its tracking client on.
    fn redis_mut(&mut self) -> Option<&mut RedisStore> {
        None
    }

    /// The embedded store, for its sweeper; `None` on every other backend.
    fn embedded(&self) -> Option<&EmbeddedStore> {
        None
    }
}

impl Backend for RedisStore {
    fn redis(&self) -> Option<&RedisStore> {
        Some(self)
    }

    fn redis_mut(&mut self) -> Option<&mut RedisStore> {
        Some(self)
    }
}

impl Backend for EmbeddedStore {
    fn embedded(&self) -> Option<&EmbeddedStore> {
        Some(self)
    }
}

/// A scripted [`Store`] of the unit tests, as a backend: its records are
/// the script's, and every other subject answers that it has none.
#[cfg(test)]
#[derive(Debug)]
pub(super) struct Scripted<S>(pub(super) std::sync::Arc<S>);

#[cfg(test)]
mod scripted {
    use std::time::Duration;

    use super::super::audit::{AuditId, AuditOps};
    use super::super::entity::{EntityEffect, EntityStep, HoldVerdict, KeptBack};
    use super::super::inbox::{
        Backlog, BookLine, Books, InboxKeys, InboxOps, Index, IndexPosition, Place, Swapped,
    };
    use super::super::listing::{Cursor, EntityPage, Filter, Listing, Page};
    use super::super::probe::ProbeOps;
    use super::super::{Call, Store, StoreError, StoreKey};
    use super::{Backend, Scripted};
    use crate::record::{OwnerToken, Record};

    /// What the scripted store says of every subject but records.
    fn none<'a, T: Send + 'a>(subject: &str) -> Call<'a, T> {
        let error = StoreError::Backend(format!("the scripted test store has no {subject}"));
        Box::pin(async move { Err(error) })
    }

    impl<S: Store + std::fmt::Debug> Backend for Scripted<S> {}

    impl<S: Store + std::fmt::Debug> InboxOps for Scripted<S> {
        fn swap<'a>(
            &'a self,
            _: &'a StoreKey,
            _: OwnerToken,
            _: &'a Record,
            _: Duration,
            _: EntityEffect,
        ) -> Call<'a, Swapped> {
            none("inbox")
        }
        fn take<'a>(
            &'a self,
            _: &'a StoreKey,
            _: OwnerToken,
            _: &'a Record,
            _: Duration,
        ) -> Call<'a, Result<Swapped, KeptBack>> {
            none("inbox")
        }
        fn hold<'a>(
            &'a self,
            _: &'a StoreKey,
            _: &'a Record,
            _: &'a EntityStep,
            _: usize,
        ) -> Call<'a, HoldVerdict> {
            none("inbox")
        }
        fn place<'a>(&'a self, _: &'a InboxKeys, _: &'a str, _: Place) -> Call<'a, ()> {
            none("inbox")
        }
        fn take_due<'a>(
            &'a self,
            _: &'a InboxKeys,
            _: u64,
            _: usize,
            _: u64,
        ) -> Call<'a, Vec<String>> {
            none("inbox")
        }
        fn page<'a>(
            &'a self,
            _: &'a InboxKeys,
            _: Index,
            _: Option<&'a IndexPosition>,
            _: usize,
        ) -> Call<'a, Vec<(String, u64)>> {
            none("inbox")
        }
        fn backlog<'a>(&'a self, _: &'a InboxKeys) -> Call<'a, Backlog> {
            none("inbox")
        }
        fn owed<'a>(&'a self, _: &'a InboxKeys) -> Call<'a, Vec<String>> {
            none("inbox")
        }
        fn owed_prune<'a>(&'a self, _: &'a StoreKey, _: Option<OwnerToken>) -> Call<'a, bool> {
            none("inbox")
        }
        fn book<'a>(&'a self, _: &'a InboxKeys, _: BookLine) -> Call<'a, ()> {
            none("inbox")
        }
        fn books<'a>(&'a self, _: &'a InboxKeys) -> Call<'a, Books> {
            none("inbox")
        }
    }

    impl<S: Store + std::fmt::Debug> ProbeOps for Scripted<S> {
        fn probe_due<'a>(&'a self, _: &'a str, _: u64, _: usize) -> Call<'a, Vec<String>> {
            none("probe plans")
        }
        fn probe_take<'a>(
            &'a self,
            _: &'a StoreKey,
            _: OwnerToken,
            _: Duration,
        ) -> Call<'a, Option<(Record, Duration, String)>> {
            none("probe plans")
        }
        fn probe_note<'a>(
            &'a self,
            _: &'a StoreKey,
            _: OwnerToken,
            _: &'a str,
            _: Option<Duration>,
        ) -> Call<'a, bool> {
            none("probe plans")
        }
        fn probe_pending<'a>(&'a self, _: &'a StoreKey) -> Call<'a, Option<(String, u64)>> {
            none("probe plans")
        }
    }

    impl<S: Store + std::fmt::Debug> AuditOps for Scripted<S> {
        fn audit_append<'a>(&'a self, _: &'a str, _: String, _: Duration) -> Call<'a, AuditId> {
            none("audit trail")
        }
        fn audit_page<'a>(
            &'a self,
            _: &'a str,
            _: Option<AuditId>,
            _: u64,
            _: usize,
        ) -> Call<'a, Vec<(AuditId, String)>> {
            none("audit trail")
        }
    }

    impl<S: Store + std::fmt::Debug> Listing for Scripted<S> {
        fn list<'a>(&'a self, _: &'a str, _: Filter, _: Cursor) -> Call<'a, Page> {
            none("listing")
        }
        fn list_held<'a>(&'a self, _: &'a str, _: usize, _: Cursor) -> Call<'a, EntityPage> {
            none("listing")
        }
    }
}
