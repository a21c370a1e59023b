//! The inbox operations on the embedded store: the `InboxOps` calls of
//! `store::inbox`, each handed to the writer thread or read from a
//! snapshot by the embedded store's own methods (`held`, `index`, `owed`,
//! `books`).

use std::time::Duration;

use super::EmbeddedStore;
use crate::record::{OwnerToken, Record};
use crate::store::entity::{EntityEffect, EntityStep, HoldVerdict, KeptBack};
use crate::store::inbox::{
    Backlog, BookLine, Books, InboxKeys, InboxOps, Index, IndexPosition, Place, Swapped,
};
use crate::store::{Call, StoreKey};

impl InboxOps for EmbeddedStore {
    fn swap<'a>(
        &'a self,
        key: &'a StoreKey,
        expected: OwnerToken,
        record: &'a Record,
        ttl: Duration,
        effect: EntityEffect,
    ) -> Call<'a, Swapped> {
        Box::pin(async move {
            let bytes = record.encode()?.to_vec();
            let owed = record.owed().unwrap_or(false);
            let written = Self::swap(self, key, expected, bytes, ttl, (owed, effect)).await?;
            Ok(if written {
                Swapped::Written
            } else {
                Swapped::Refused
            })
        })
    }

    fn take<'a>(
        &'a self,
        key: &'a StoreKey,
        expected: OwnerToken,
        record: &'a Record,
        ttl: Duration,
    ) -> Call<'a, Result<Swapped, KeptBack>> {
        Box::pin(async move {
            let bytes = record.encode()?.to_vec();
            let taken = Self::take(self, key, expected, bytes, ttl).await?;
            Ok(taken.map(|written| {
                if written {
                    Swapped::Written
                } else {
                    Swapped::Refused
                }
            }))
        })
    }

    fn hold<'a>(
        &'a self,
        key: &'a StoreKey,
        record: &'a Record,
        step: &'a EntityStep,
        max: usize,
    ) -> Call<'a, HoldVerdict> {
        Box::pin(async move {
            let bytes = record.encode()?.to_vec();
            Self::hold(self, key, bytes, step.clone(), max).await
        })
    }

    fn place<'a>(&'a self, keys: &'a InboxKeys, hash: &'a str, place: Place) -> Call<'a, ()> {
        Box::pin(Self::index_place(self, keys, hash, place))
    }

    fn take_due<'a>(
        &'a self,
        keys: &'a InboxKeys,
        now: u64,
        limit: usize,
        push_to: u64,
    ) -> Call<'a, Vec<String>> {
        let due = keys.of(Index::Due).as_str();
        Box::pin(Self::index_take(self, due, now, limit, push_to))
    }

    fn page<'a>(
        &'a self,
        keys: &'a InboxKeys,
        index: Index,
        after: Option<&'a IndexPosition>,
        limit: usize,
    ) -> Call<'a, Vec<(String, u64)>> {
        Box::pin(Self::index_page(
            self,
            keys.of(index).as_str(),
            after,
            limit,
        ))
    }

    fn backlog<'a>(&'a self, keys: &'a InboxKeys) -> Call<'a, Backlog> {
        Box::pin(async move {
            let (pending, oldest_ms) = self.index_stats(keys.of(Index::Since).as_str()).await?;
            let (held, _) = self.index_stats(keys.of(Index::Dead).as_str()).await?;
            Ok(Backlog {
                pending,
                oldest_ms,
                held,
            })
        })
    }

    fn owed<'a>(&'a self, keys: &'a InboxKeys) -> Call<'a, Vec<String>> {
        Box::pin(Self::owed(self, keys.owed().as_str()))
    }

    fn owed_prune<'a>(&'a self, key: &'a StoreKey, read: Option<OwnerToken>) -> Call<'a, bool> {
        Box::pin(Self::owed_prune(self, key, read))
    }

    fn book<'a>(&'a self, keys: &'a InboxKeys, line: BookLine) -> Call<'a, ()> {
        Box::pin(Self::books_add(self, keys.books().as_str(), line))
    }

    fn books<'a>(&'a self, keys: &'a InboxKeys) -> Call<'a, Books> {
        Box::pin(Self::books_read(self, keys.books().as_str()))
    }
}
