//! The inbox operations on the embedded store: the `InboxOps` calls of
//! `store::inbox`, each handed to the writer thread or read from a
//! snapshot by the embedded store's own methods (`held`, `index`, `owed`,
//! `books`).

use std::time::Duration;

use super::EmbeddedStore;
use crate::record::{OwnerToken, Record};
use crate::store::entity::{EntityEffect, EntityStep, HoldVerdict, KeptBack};
use crate::store::inbox::{
    BookLine, Books, BooksKey, InboxOps, IndexKey, IndexPosition, OwedKey, Swapped,
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

    fn index_add<'a>(&'a self, index: &'a IndexKey, member: &'a str, score: u64) -> Call<'a, ()> {
        Box::pin(Self::index_add(self, index.as_str(), member, score))
    }

    fn index_remove<'a>(&'a self, index: &'a IndexKey, member: &'a str) -> Call<'a, bool> {
        Box::pin(Self::index_remove(self, index.as_str(), member))
    }

    fn index_take<'a>(
        &'a self,
        index: &'a IndexKey,
        now: u64,
        limit: usize,
        push_to: u64,
    ) -> Call<'a, Vec<String>> {
        Box::pin(Self::index_take(self, index.as_str(), now, limit, push_to))
    }

    fn index_page<'a>(
        &'a self,
        index: &'a IndexKey,
        after: Option<&'a IndexPosition>,
        limit: usize,
    ) -> Call<'a, Vec<(String, u64)>> {
        Box::pin(Self::index_page(self, index.as_str(), after, limit))
    }

    fn index_stats<'a>(&'a self, index: &'a IndexKey) -> Call<'a, (u64, Option<u64>)> {
        Box::pin(Self::index_stats(self, index.as_str()))
    }

    fn index_prune<'a>(&'a self, index: &'a IndexKey, below: u64) -> Call<'a, u64> {
        Box::pin(Self::index_prune(self, index.as_str(), below))
    }

    fn owed<'a>(&'a self, set: &'a OwedKey) -> Call<'a, Vec<String>> {
        Box::pin(Self::owed(self, set.as_str()))
    }

    fn owed_prune<'a>(&'a self, key: &'a StoreKey, read: Option<OwnerToken>) -> Call<'a, bool> {
        Box::pin(Self::owed_prune(self, key, read))
    }

    fn books_add<'a>(&'a self, key: &'a BooksKey, line: BookLine) -> Call<'a, ()> {
        Box::pin(Self::books_add(self, key.as_str(), line))
    }

    fn books_read<'a>(&'a self, key: &'a BooksKey) -> Call<'a, Books> {
        Box::pin(Self::books_read(self, key.as_str()))
    }
}
