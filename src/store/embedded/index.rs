//! Sorted indexes of key hashes in the embedded store: what Redis sorted
//! sets give the durable inbox (due deliveries ordered by when they are due).
//!
//! Two tables hold every index, kept consistent by every operation:
//! `inbox_scores` maps `(index, member)` to its score (membership and the
//! old score a move must unindex), and `inbox_order` holds
//! `(index, score, member)` so the lowest scores of one index are a range
//! scan away. redb compares tuple keys element by element, so all entries
//! of one index are contiguous and ordered by `(score, member)`: a scan
//! starts at `(index, 0, "")` and stops at the first entry of another index,
//! never loading more of an index than it returns. Indexes never expire.
//! Each write goes through the store's writer like the record operations
//! (committed durably, maybe with others, before the call returns).

use std::ops::Bound;

use redb::{ReadableTable, Table, TableDefinition};

use super::{EmbeddedStore, backend};
use crate::store::StoreError;
use crate::store::inbox::{InboxKeys, IndexPosition, Place};

/// `(index, member) -> score`: membership and current score.
pub(super) const SCORES: TableDefinition<'static, (&str, &str), u64> =
    TableDefinition::new("inbox_scores");
/// `(index, score, member)`: the order scans walk.
pub(super) const ORDER: TableDefinition<'static, (&str, u64, &str), ()> =
    TableDefinition::new("inbox_order");

/// The key type of [`ORDER`], spelled once.
type OrderKey = (&'static str, u64, &'static str);

/// Both index tables of one write transaction: every write touches both,
/// so they travel together.
struct Tables<'t> {
    scores: Table<'t, (&'static str, &'static str), u64>,
    order: Table<'t, OrderKey, ()>,
}

impl Tables<'_> {
    /// Sets `member`'s score, unindexing its old one; returns the old one.
    fn set(&mut self, index: &str, member: &str, score: u64) -> Result<Option<u64>, StoreError> {
        let previous = self
            .scores
            .insert((index, member), score)
            .map_err(backend)?
            .map(|guard| guard.value());
        if let Some(old) = previous {
            self.order.remove((index, old, member)).map_err(backend)?;
        }
        self.order
            .insert((index, score, member), ())
            .map_err(backend)?;
        Ok(previous)
    }

    /// Removes `member` from both tables; returns its score if it was there.
    fn unset(&mut self, index: &str, member: &str) -> Result<Option<u64>, StoreError> {
        let previous = self
            .scores
            .remove((index, member))
            .map_err(backend)?
            .map(|guard| guard.value());
        if let Some(old) = previous {
            self.order.remove((index, old, member)).map_err(backend)?;
        }
        Ok(previous)
    }
}

/// Visits `index`'s members in `(score, member)` order, lowest first, while
/// `visit` returns true. Only the visited entries are read.
fn walk(
    order: &impl ReadableTable<OrderKey, ()>,
    index: &str,
    mut visit: impl FnMut(u64, &str) -> bool,
) -> Result<(), StoreError> {
    for item in order.range((index, 0_u64, "")..).map_err(backend)? {
        let (entry, _) = item.map_err(backend)?;
        let (owner, score, member) = entry.value();
        if owner != index || !visit(score, member) {
            break;
        }
    }
    Ok(())
}

/// Up to `limit` of `index`'s members with a score `<= up_to`, lowest first.
fn due(
    order: &impl ReadableTable<OrderKey, ()>,
    index: &str,
    up_to: u64,
    limit: usize,
) -> Result<Vec<String>, StoreError> {
    let mut found = Vec::new();
    if limit == 0 {
        return Ok(found);
    }
    walk(order, index, |score, member| {
        if score > up_to {
            return false;
        }
        found.push(member.to_owned());
        found.len() < limit
    })?;
    Ok(found)
}

impl EmbeddedStore {
    /// Runs `op` on both index tables in one write transaction on the
    /// blocking pool; commits only if it succeeds and reports a change.
    async fn index_write<T, F>(&self, mut op: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnMut(&mut Tables<'_>) -> Result<(T, bool), StoreError> + Send + 'static,
    {
        self.transact(move |txn| {
            let mut tables = Tables {
                scores: txn.open_table(SCORES).map_err(backend)?,
                order: txn.open_table(ORDER).map_err(backend)?,
            };
            op(&mut tables)
        })
        .await
    }

    /// Runs `op` on the order table in a read transaction on the blocking
    /// pool: reads see one committed state and never wait for writers.
    async fn index_read<T, F>(&self, op: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&redb::ReadOnlyTable<OrderKey, ()>) -> Result<T, StoreError> + Send + 'static,
    {
        self.read(ORDER, op).await
    }

    /// Puts `hash` into every index of `keys` that `place` enters and
    /// takes it out of those it leaves, in one durable transaction (so
    /// the two halves land together here).
    pub(crate) async fn index_place(
        &self,
        keys: &InboxKeys,
        hash: &str,
        place: Place,
    ) -> Result<(), StoreError> {
        let enter = place
            .entered()
            .iter()
            .map(|(index, at)| (keys.of(*index).as_str().to_owned(), *at))
            .collect();
        let leave = place
            .left()
            .iter()
            .map(|index| keys.of(*index).as_str().to_owned())
            .collect();
        self.index_apply(hash, enter, leave).await.map(|_| ())
    }

    /// Sets `member`'s score in each index of `enter` (insert or move),
    /// then takes it out of each of `leave`, in one write transaction.
    /// Returns whether any `leave` index held it.
    async fn index_apply(
        &self,
        member: &str,
        enter: Vec<(String, u64)>,
        leave: Vec<String>,
    ) -> Result<bool, StoreError> {
        let member = member.to_owned();
        self.index_write(move |tables| {
            let mut changed = false;
            for (index, score) in &enter {
                let unchanged = tables
                    .scores
                    .get((index.as_str(), member.as_str()))
                    .map_err(backend)?
                    .is_some_and(|guard| guard.value() == *score);
                if !unchanged {
                    tables.set(index, &member, *score)?;
                    changed = true;
                }
            }
            let mut removed = false;
            for index in &leave {
                removed |= tables.unset(index, &member)?.is_some();
            }
            Ok((removed, changed || removed))
        })
        .await
    }

    /// Atomically take up to `limit` members with score <= `now` (lowest
    /// scores first) and move each to score `push_to` (so they become due
    /// again later if the taker vanishes). Returns them.
    pub(crate) async fn index_take(
        &self,
        index: &str,
        now: u64,
        limit: usize,
        push_to: u64,
    ) -> Result<Vec<String>, StoreError> {
        let index = index.to_owned();
        self.index_write(move |tables| {
            let taken = due(&tables.order, &index, now, limit)?;
            for member in &taken {
                tables.set(&index, member, push_to)?;
            }
            let changed = !taken.is_empty();
            Ok((taken, changed))
        })
        .await
    }

    /// Members ordered by (score, member) ascending, after `after` (a
    /// range read from there, not a count from the start), at most
    /// `limit`, with scores.
    pub(crate) async fn index_page(
        &self,
        index: &str,
        after: Option<&IndexPosition>,
        limit: usize,
    ) -> Result<Vec<(String, u64)>, StoreError> {
        let index = index.to_owned();
        let after = after.cloned();
        self.index_read(move |order| {
            let mut page = Vec::new();
            if limit == 0 {
                return Ok(page);
            }
            let start = match &after {
                Some(at) => Bound::Excluded((index.as_str(), at.score, at.member.as_str())),
                None => Bound::Included((index.as_str(), 0, "")),
            };
            let range = order
                .range::<(&str, u64, &str)>((start, Bound::Unbounded))
                .map_err(backend)?;
            for item in range {
                let (entry, _) = item.map_err(backend)?;
                let (owner, score, member) = entry.value();
                if owner != index || page.len() >= limit {
                    break;
                }
                page.push((member.to_owned(), score));
            }
            Ok(page)
        })
        .await
    }

    /// Member count and the lowest score. The count walks the index
    /// (redb keeps no per-range counts) but holds nothing in memory.
    pub(crate) async fn index_stats(&self, index: &str) -> Result<(u64, Option<u64>), StoreError> {
        let index = index.to_owned();
        self.index_read(move |order| {
            let (mut count, mut lowest) = (0_u64, None);
            walk(order, &index, |score, _| {
                lowest.get_or_insert(score);
                count += 1;
                true
            })?;
            Ok((count, lowest))
        })
        .await
    }
}

#[cfg(test)]
mod tests {

    use super::*;

    const DUE: &str = "idemgate:payments:inbox:due";
    const OTHER: &str = "idemgate:orders:inbox:due";

    /// A 64-char hex member like the inbox's key hashes.
    fn hash(n: u8) -> String {
        format!("{n:02x}").repeat(32)
    }

    fn open(dir: &tempfile::TempDir) -> EmbeddedStore {
        EmbeddedStore::open(&dir.path().join("inbox.redb")).expect("open")
    }

    async fn add(
        store: &EmbeddedStore,
        index: &str,
        member: &str,
        score: u64,
    ) -> Result<(), StoreError> {
        let enter = vec![(index.to_owned(), score)];
        store
            .index_apply(member, enter, Vec::new())
            .await
            .map(|_| ())
    }

    async fn remove(store: &EmbeddedStore, index: &str, member: &str) -> Result<bool, StoreError> {
        store
            .index_apply(member, Vec::new(), vec![index.to_owned()])
            .await
    }

    async fn members(store: &EmbeddedStore, index: &str) -> Vec<(String, u64)> {
        store.index_page(index, None, usize::MAX).await.unwrap()
    }

    #[tokio::test]
    async fn add_move_remove_and_stats() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir);
        assert_eq!(store.index_stats(DUE).await.unwrap(), (0, None));

        add(&store, DUE, &hash(1), 30).await.unwrap();
        add(&store, DUE, &hash(2), 10).await.unwrap();
        add(&store, DUE, &hash(3), 20).await.unwrap();
        assert_eq!(store.index_stats(DUE).await.unwrap(), (3, Some(10)));

        // A move leaves one entry, at the new score.
        add(&store, DUE, &hash(2), 40).await.unwrap();
        add(&store, DUE, &hash(1), 30).await.unwrap();
        assert_eq!(
            members(&store, DUE).await,
            vec![(hash(3), 20), (hash(1), 30), (hash(2), 40)]
        );
        assert_eq!(store.index_stats(DUE).await.unwrap(), (3, Some(20)));

        assert!(remove(&store, DUE, &hash(3)).await.unwrap());
        assert!(!remove(&store, DUE, &hash(3)).await.unwrap());
        assert!(!remove(&store, DUE, &hash(9)).await.unwrap());
        assert_eq!(store.index_stats(DUE).await.unwrap(), (2, Some(30)));
        assert_eq!(
            members(&store, DUE).await,
            vec![(hash(1), 30), (hash(2), 40)]
        );
    }

    #[tokio::test]
    async fn page_orders_by_score_then_member() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir);
        for (n, score) in [(4, 5), (2, 5), (3, 1), (1, 9), (5, 0)] {
            add(&store, DUE, &hash(n), score).await.unwrap();
        }
        let all = members(&store, DUE).await;
        assert_eq!(
            all,
            vec![
                (hash(5), 0),
                (hash(3), 1),
                (hash(2), 5),
                (hash(4), 5),
                (hash(1), 9)
            ]
        );
        let after = |n: usize| IndexPosition {
            score: all[n].1,
            member: all[n].0.clone(),
        };
        assert_eq!(
            store.index_page(DUE, Some(&after(0)), 2).await.unwrap(),
            all[1..3]
        );
        // Equal scores: after the first of them comes the second.
        assert_eq!(
            store.index_page(DUE, Some(&after(2)), 1).await.unwrap(),
            all[3..4]
        );
        assert_eq!(
            store.index_page(DUE, Some(&after(3)), 10).await.unwrap(),
            all[4..]
        );
        assert!(
            store
                .index_page(DUE, Some(&after(4)), 10)
                .await
                .unwrap()
                .is_empty()
        );
        assert!(store.index_page(DUE, None, 0).await.unwrap().is_empty());
        // A position whose member is gone still resumes in order.
        remove(&store, DUE, &hash(2)).await.unwrap();
        assert_eq!(
            store.index_page(DUE, Some(&after(2)), 10).await.unwrap(),
            all[3..]
        );
        // Other indexes never leak in.
        add(&store, OTHER, &hash(9), 0).await.unwrap();
        assert_eq!(
            store.index_page(DUE, Some(&after(4)), 10).await.unwrap(),
            []
        );
    }

    #[tokio::test]
    async fn indexes_sharing_a_member_are_independent() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir);
        // Prefix-related names must not bleed into each other either.
        let longer = format!("{DUE}:x");
        add(&store, DUE, &hash(1), 10).await.unwrap();
        add(&store, OTHER, &hash(1), 20).await.unwrap();
        add(&store, &longer, &hash(2), 1).await.unwrap();

        assert_eq!(members(&store, DUE).await, vec![(hash(1), 10)]);
        assert_eq!(members(&store, OTHER).await, vec![(hash(1), 20)]);
        assert_eq!(store.index_stats(DUE).await.unwrap(), (1, Some(10)));

        assert!(remove(&store, OTHER, &hash(1)).await.unwrap());
        assert_eq!(members(&store, DUE).await, vec![(hash(1), 10)]);
        assert_eq!(
            store.index_take(OTHER, 100, 10, 500).await.unwrap(),
            Vec::<String>::new()
        );
        assert_eq!(
            store.index_take(DUE, 100, 10, 500).await.unwrap(),
            vec![hash(1)]
        );
        assert_eq!(members(&store, &longer).await, vec![(hash(2), 1)]);
    }

    #[tokio::test]
    async fn take_moves_due_members_lowest_first() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir);
        for (n, score) in [(1, 100), (2, 50), (3, 75), (4, 101), (5, 60)] {
            add(&store, DUE, &hash(n), score).await.unwrap();
        }
        // Due at 100: 2 (50), 5 (60), 3 (75), 1 (100); limit 3.
        let taken = store.index_take(DUE, 100, 3, 1_000).await.unwrap();
        assert_eq!(taken, vec![hash(2), hash(5), hash(3)]);
        assert_eq!(
            members(&store, DUE).await,
            vec![
                (hash(1), 100),
                (hash(4), 101),
                (hash(2), 1_000),
                (hash(3), 1_000),
                (hash(5), 1_000)
            ]
        );
        // Only what is still due, then nothing at the same moment.
        assert_eq!(
            store.index_take(DUE, 100, 3, 1_000).await.unwrap(),
            vec![hash(1)]
        );
        assert!(
            store
                .index_take(DUE, 100, 3, 1_000)
                .await
                .unwrap()
                .is_empty()
        );
        assert!(
            store
                .index_take(DUE, 1_000, 0, 2_000)
                .await
                .unwrap()
                .is_empty()
        );
        // At push_to the taken members are due again.
        assert_eq!(
            store.index_take(DUE, 1_000, 10, 2_000).await.unwrap(),
            vec![hash(4), hash(1), hash(2), hash(3), hash(5)]
        );
        assert_eq!(store.index_stats(DUE).await.unwrap(), (5, Some(2_000)));
    }

    #[tokio::test]
    async fn take_at_the_end_of_time() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir);
        add(&store, DUE, &hash(1), u64::MAX).await.unwrap();
        add(&store, OTHER, &hash(2), 0).await.unwrap();
        assert_eq!(
            store.index_take(DUE, u64::MAX, 10, u64::MAX).await.unwrap(),
            vec![hash(1)]
        );
        assert_eq!(members(&store, DUE).await, vec![(hash(1), u64::MAX)]);
    }

    #[tokio::test]
    async fn state_survives_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir);
        add(&store, DUE, &hash(1), 10).await.unwrap();
        add(&store, DUE, &hash(2), 20).await.unwrap();
        add(&store, OTHER, &hash(3), 30).await.unwrap();
        assert_eq!(
            store.index_take(DUE, 10, 5, 99).await.unwrap(),
            vec![hash(1)]
        );
        assert!(remove(&store, OTHER, &hash(3)).await.unwrap());
        drop(store);

        let store = open(&dir);
        assert_eq!(
            members(&store, DUE).await,
            vec![(hash(2), 20), (hash(1), 99)]
        );
        assert_eq!(store.index_stats(OTHER).await.unwrap(), (0, None));
        assert_eq!(
            store.index_take(DUE, 99, 5, 200).await.unwrap(),
            vec![hash(2), hash(1)]
        );
    }
}
