//! The store operations of the durable inbox (`crate::inbox`).
//!
//! Each is atomic, and each touches one key or keys of one hash slot, so
//! every one is Redis Cluster safe:
//!
//! | verb | effect |
//! |----|--------|
//! | swap | owner-fenced compare-and-set of a whole record, with its owed-set entry: how a worker settles a delivery, an operator acts on one, a claim is undone |
//! | take | a worker's claim of a due delivery: the swap to `delivering`, judged first by the delivery's entity |
//! | hold | a notice kept behind its busy entity, with its owed-set entry |
//! | place | put a delivery into the scope's indexes its stage belongs in and take it out of the others ([`Place`]) |
//! | take_due | hand out up to N due deliveries, each pushed one visibility timeout ahead in the same step |
//! | page / backlog | list an index a page at a time; count the backlog (admin API, gauges, `max_queued`) |
//! | owed / owed_prune | every delivery a scope owes, read from the owed sets; take out an entry whose record is resolved or gone |
//! | book / books | one line more in a scope's books; the books as read |
//!
//! Each verb names a scope by its [`InboxKeys`]; how a backend keeps the
//! indexes (Redis sorted sets, redb tables) is its own affair.
//!
//! The record is the truth; the indexes only say where to look. A scope
//! has three ([`IndexKey`]): `due` (queued or delivering, scored by when a
//! worker should look next), `since` (the same deliveries, scored by when
//! they were first queued: the oldest-age gauge and the queued listing)
//! and `dead` (dead or unknown, scored by when they got there). Because
//! they are separate keys, they are written one after another; a crash in
//! between leaves an index entry a worker later finds stale and repairs.
//!
//! # Owed sets
//!
//! An index is one key, so on a Redis Cluster it lives on one primary
//! while the records live on all of them: a failover of that primary with
//! replication lag, or any lost index write, can leave a queued record
//! that no index names. So every delivery the inbox owes (queued,
//! delivering, dead or unknown) is also a member of its scope's owed set
//! ([`OwedKey`]), written **in the same atomic step as the record**
//! (`complete` when it is queued, `swap` for every later stage, resolved
//! stages taking it out). On a Cluster the set is split by hash slot and
//! each record's entry sits in the set of the record's own slot
//! (`{prefix}:{scope}:inbox:owed:{<tag of the slot>}`, see
//! `redis/slots.rs`), so record and entry live and fail over together.
//! `crate::inbox`'s repair pass reads the owed sets and puts back every
//! index entry that went missing: a delivery is always findable from its
//! own record. Entries whose record is gone or resolved without the set
//! hearing of it (a released claim, a purge, an eviction) are pruned by
//! `owed_prune`, which takes an entry out only if the record is still
//! the one the pass read.
//!
//! `swap` succeeds when the record's owner is the expected one, and also
//! when the record already is exactly the one being written: a retried
//! swap whose reply was lost (Redis restarted, connection dropped) then
//! succeeds for its own writer, so a worker whose claim landed unseen still
//! sends the delivery once. With `[store] min_replicas_ack`, a swap that
//! too few replicas acknowledged says so ([`Swapped::Unreplicated`]): a
//! worker does not send a delivery whose claim a failover could undo.

use std::time::Duration;

use super::entity::{EntityEffect, EntityStep, HoldVerdict, KeptBack};
use super::{AnyStore, Call, StoreError, StoreKey};
use crate::record::{OwnerToken, Record};

/// Where a walk of an index stands: the (score, member) of the last member
/// listed. Members order by score, then member bytes, in both stores.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexPosition {
    /// The last listed member's score.
    pub score: u64,
    /// The last listed member.
    pub member: String,
}

/// What a [`AnyStore::swap`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Swapped {
    /// The store holds the new record at the declared `[store]
    /// durability` (fsynced, and with `min_replicas_ack` on enough
    /// replicas: `store::durability`).
    Written,
    /// Written on the primary, but not confirmed at the declared
    /// durability in time (no fsync confirmed, or too few replicas): a
    /// restart or failover may still undo it.
    Unreplicated,
    /// Nothing written: the key is free or another owner wrote it.
    Refused,
}

impl Swapped {
    /// Whether the primary holds the new record.
    pub fn written(self) -> bool {
        self != Self::Refused
    }
}

/// One of a scope's three inbox indexes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct IndexKey(String);

/// Which of a scope's indexes (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Index {
    /// Queued and delivering deliveries, by when a worker looks next.
    Due,
    /// The same, by when they were first queued.
    Since,
    /// Dead and unknown deliveries, by when they got there.
    Dead,
}

impl IndexKey {
    /// `{prefix}:{scope}:inbox:{due|since|dead}`: never a record key, whose
    /// last part is a 64-digit hash.
    pub fn new(prefix: &str, scope: &str, index: Index) -> Self {
        let name = match index {
            Index::Due => "due",
            Index::Since => "since",
            Index::Dead => "dead",
        };
        Self(format!("{prefix}:{scope}:inbox:{name}"))
    }

    /// The key as stored.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A scope's owed set: `{prefix}:{scope}:inbox:owed` (split by hash slot
/// on a Cluster), every delivery the scope owes (module docs, "Owed sets").
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct OwedKey(String);

impl OwedKey {
    /// `{prefix}:{scope}:inbox:owed`: never a record or index key.
    pub fn new(prefix: &str, scope: &str) -> Self {
        Self(format!("{prefix}:{scope}:inbox:owed"))
    }

    /// The owed set of the scope `key` belongs to.
    pub fn of(key: &StoreKey) -> Self {
        Self(format!("{}:inbox:owed", key.namespace()))
    }

    /// The key as stored (the name every slot's set starts with on a
    /// Cluster).
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A scope's books: `{prefix}:{scope}:inbox:books`, how many deliveries
/// entered the inbox and how many left it resolved. With the backlog
/// (`since` index) and the held deliveries (`dead` index) they balance:
/// acknowledged = delivered + dropped + queued + held. They live in the
/// store, not in the process, so they survive restarts and every instance
/// reads the same numbers.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BooksKey(String);

impl BooksKey {
    /// `{prefix}:{scope}:inbox:books`: never a record or index key.
    pub fn new(prefix: &str, scope: &str) -> Self {
        Self(format!("{prefix}:{scope}:inbox:books"))
    }

    /// The key as stored.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// One line of a scope's books.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BookLine {
    /// A first delivery the inbox took (queued, or held as unknown): its
    /// sender was acknowledged.
    Acknowledged,
    /// A redelivery the handler took.
    Delivered,
    /// A delivery an operator resolved without sending.
    Dropped,
}

impl BookLine {
    /// Every line, in label order.
    pub const ALL: [Self; 3] = [Self::Acknowledged, Self::Delivered, Self::Dropped];

    /// The line's name (a hash field on Redis, a metric label).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Acknowledged => "acknowledged",
            Self::Delivered => "delivered",
            Self::Dropped => "dropped",
        }
    }
}

/// A scope's books as read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Books {
    counts: [u64; 3],
}

impl Books {
    /// The count on `line`.
    pub fn get(&self, line: BookLine) -> u64 {
        self.counts[line as usize]
    }

    /// Sets the count on `line` (as read from the store).
    pub fn set(&mut self, line: BookLine, count: u64) {
        self.counts[line as usize] = count;
    }
}

/// A scope's inbox keys: its three indexes, its owed set and its books,
/// built once from the key prefix and the scope and named by every verb
/// of [`InboxOps`] that is about a scope rather than one delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InboxKeys {
    due: IndexKey,
    since: IndexKey,
    dead: IndexKey,
    owed: OwedKey,
    books: BooksKey,
}

impl InboxKeys {
    /// The keys of `scope` under `prefix`.
    pub fn new(prefix: &str, scope: &str) -> Self {
        Self {
            due: IndexKey::new(prefix, scope, Index::Due),
            since: IndexKey::new(prefix, scope, Index::Since),
            dead: IndexKey::new(prefix, scope, Index::Dead),
            owed: OwedKey::new(prefix, scope),
            books: BooksKey::new(prefix, scope),
        }
    }

    /// The scope's index `which`.
    pub fn of(&self, which: Index) -> &IndexKey {
        match which {
            Index::Due => &self.due,
            Index::Since => &self.since,
            Index::Dead => &self.dead,
        }
    }

    /// The scope's owed set.
    pub fn owed(&self) -> &OwedKey {
        &self.owed
    }

    /// The scope's books.
    pub fn books(&self) -> &BooksKey {
        &self.books
    }
}

/// Where [`InboxOps::place`] puts a delivery: the indexes to enter (each
/// at a score, unix ms) and those to leave. Entries are written before
/// any is taken out, so a delivery is never in no index between the two.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    enter: Vec<(Index, u64)>,
    leave: Vec<Index>,
}

impl Place {
    /// Queued or being redelivered: first queued at `since`, due at
    /// `due`; out of the held deliveries.
    pub fn pending(since: u64, due: u64) -> Self {
        Self {
            enter: vec![(Index::Since, since), (Index::Due, due)],
            leave: vec![Index::Dead],
        }
    }

    /// Due again at `at`: only the due index moves.
    pub fn due_at(at: u64) -> Self {
        Self::into_index(Index::Due, at)
    }

    /// Held (dead or unknown) since `at`: into the dead index, then out of
    /// the pending ones.
    pub fn held(at: u64) -> Self {
        Self {
            enter: vec![(Index::Dead, at)],
            leave: vec![Index::Since, Index::Due],
        }
    }

    /// Resolved, gone, or never queued after all: out of every index.
    pub fn resolved() -> Self {
        Self {
            enter: Vec::new(),
            leave: vec![Index::Due, Index::Since, Index::Dead],
        }
    }

    /// Into `index` at `at`, nothing else (the repair pass restoring one
    /// lost entry).
    pub fn into_index(index: Index, at: u64) -> Self {
        Self {
            enter: vec![(index, at)],
            leave: Vec::new(),
        }
    }

    /// Out of `index`, nothing else (a dead-index entry whose record is no
    /// longer held).
    pub fn out_of(index: Index) -> Self {
        Self {
            enter: Vec::new(),
            leave: vec![index],
        }
    }

    /// The entries to write: each index with its score.
    pub fn entered(&self) -> &[(Index, u64)] {
        &self.enter
    }

    /// The indexes to leave, after every entry is written.
    pub fn left(&self) -> &[Index] {
        &self.leave
    }
}

/// How much a scope's inbox holds, as its indexes say.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Backlog {
    /// Queued or being redelivered.
    pub pending: u64,
    /// When the oldest pending delivery was first queued (unix ms).
    pub oldest_ms: Option<u64>,
    /// Dead or with an unknown outcome.
    pub held: u64,
}

impl Backlog {
    /// Every delivery the scope owes (what `max_queued` bounds).
    pub fn owed(&self) -> u64 {
        self.pending.saturating_add(self.held)
    }
}

/// The inbox's verbs, futures boxed (one small allocation next to a
/// network round trip or a durable commit), implemented by every backend.
/// The pipeline reaches them through [`AnyStore`]; the trait is public so
/// the store contract tests hold every backend to it.
pub trait InboxOps: Send + Sync + std::fmt::Debug {
    /// See [`AnyStore::swap`].
    fn swap<'a>(
        &'a self,
        key: &'a StoreKey,
        expected: OwnerToken,
        record: &'a Record,
        ttl: Duration,
        effect: EntityEffect,
    ) -> Call<'a, Swapped>;
    /// See [`AnyStore::take`].
    fn take<'a>(
        &'a self,
        key: &'a StoreKey,
        expected: OwnerToken,
        record: &'a Record,
        ttl: Duration,
    ) -> Call<'a, Result<Swapped, KeptBack>>;
    /// See [`AnyStore::hold`].
    fn hold<'a>(
        &'a self,
        key: &'a StoreKey,
        record: &'a Record,
        step: &'a EntityStep,
        max: usize,
    ) -> Call<'a, HoldVerdict>;
    /// See [`AnyStore::place`].
    fn place<'a>(&'a self, keys: &'a InboxKeys, hash: &'a str, place: Place) -> Call<'a, ()>;
    /// See [`AnyStore::take_due`].
    fn take_due<'a>(
        &'a self,
        keys: &'a InboxKeys,
        now: u64,
        limit: usize,
        push_to: u64,
    ) -> Call<'a, Vec<String>>;
    /// See [`AnyStore::page`].
    fn page<'a>(
        &'a self,
        keys: &'a InboxKeys,
        index: Index,
        after: Option<&'a IndexPosition>,
        limit: usize,
    ) -> Call<'a, Vec<(String, u64)>>;
    /// See [`AnyStore::backlog`].
    fn backlog<'a>(&'a self, keys: &'a InboxKeys) -> Call<'a, Backlog>;
    /// See [`AnyStore::owed`].
    fn owed<'a>(&'a self, keys: &'a InboxKeys) -> Call<'a, Vec<String>>;
    /// See [`AnyStore::owed_prune`].
    fn owed_prune<'a>(&'a self, key: &'a StoreKey, read: Option<OwnerToken>) -> Call<'a, bool>;
    /// See [`AnyStore::book`].
    fn book<'a>(&'a self, keys: &'a InboxKeys, line: BookLine) -> Call<'a, ()>;
    /// See [`AnyStore::books`].
    fn books<'a>(&'a self, keys: &'a InboxKeys) -> Call<'a, Books>;
}

impl AnyStore {
    fn inbox(&self) -> &dyn InboxOps {
        &*self.backend
    }

    /// Replaces the inbox record under `key` with `record` for `ttl` if
    /// its owner is `expected` (or it already is `record`), and keeps the
    /// scope's owed set and, on an entity route, the entity (`effect`) in
    /// step (module docs). Says whether the store now holds `record`, and
    /// whether enough replicas have it.
    pub async fn swap(
        &self,
        key: &StoreKey,
        expected: OwnerToken,
        record: &Record,
        ttl: Duration,
        effect: EntityEffect,
    ) -> Result<Swapped, StoreError> {
        let swapped = self.inbox().swap(key, expected, record, ttl, effect).await;
        self.forget(key);
        swapped
    }

    /// [`AnyStore::swap`] of a worker claiming the queued delivery `key`
    /// to send it (`record`: stage delivering, its effect `keep`): on an
    /// entity route the entity decides first, in the same step
    /// ([`crate::store::entity::EntityState::take`]), and nothing is
    /// written unless it may go (`Err`: wait, or decided without the
    /// handler).
    pub async fn take(
        &self,
        key: &StoreKey,
        expected: OwnerToken,
        record: &Record,
        ttl: Duration,
    ) -> Result<Result<Swapped, KeptBack>, StoreError> {
        let taken = self.inbox().take(key, expected, record, ttl).await;
        self.forget(key);
        taken
    }

    /// Holds the notice `record` (an inbox delivery, stage queued, kept
    /// until resolved) under the free `key` behind its busy entity
    /// (`step`), with its owed-set entry, if fewer than `max` notices wait
    /// there ([`crate::store::entity::EntityState::hold`]).
    pub async fn hold(
        &self,
        key: &StoreKey,
        record: &Record,
        step: &EntityStep,
        max: usize,
    ) -> Result<HoldVerdict, StoreError> {
        let held = self.inbox().hold(key, record, step, max).await;
        self.forget(key);
        held
    }

    /// Puts the delivery `hash` of the scope `keys` where `place` says:
    /// every entry written first (stopping at the first that fails), then
    /// every index it leaves (each tried; the first failure returned).
    pub async fn place(
        &self,
        keys: &InboxKeys,
        hash: &str,
        place: Place,
    ) -> Result<(), StoreError> {
        self.inbox().place(keys, hash, place).await
    }

    /// Hands out up to `limit` deliveries due at `now` or before, the
    /// earliest first, each pushed to `push_to` in the same step (taken
    /// with a visibility timeout: due again if the taker vanishes).
    pub async fn take_due(
        &self,
        keys: &InboxKeys,
        now: u64,
        limit: usize,
        push_to: u64,
    ) -> Result<Vec<String>, StoreError> {
        self.inbox().take_due(keys, now, limit, push_to).await
    }

    /// Up to `limit` members of the scope's `index` with their scores in
    /// (score, member) order, lowest first, after `after` (from the start
    /// without): a keyset walk, so removing a member already listed, or
    /// adding one, never moves the members still to come.
    pub async fn page(
        &self,
        keys: &InboxKeys,
        index: Index,
        after: Option<&IndexPosition>,
        limit: usize,
    ) -> Result<Vec<(String, u64)>, StoreError> {
        self.inbox().page(keys, index, after, limit).await
    }

    /// The scope's backlog: pending and held deliveries, and when the
    /// oldest pending one was queued.
    pub async fn backlog(&self, keys: &InboxKeys) -> Result<Backlog, StoreError> {
        self.inbox().backlog(keys).await
    }

    /// Every key hash in the scope's owed set (all slots' sets on a
    /// Cluster), in no particular order.
    pub async fn owed(&self, keys: &InboxKeys) -> Result<Vec<String>, StoreError> {
        self.inbox().owed(keys).await
    }

    /// Takes `key` out of its scope's owed set if its record is absent, or
    /// is still the record whose owner was `read` (`None`: none was
    /// found). Returns whether it was taken out.
    pub async fn owed_prune(
        &self,
        key: &StoreKey,
        read: Option<OwnerToken>,
    ) -> Result<bool, StoreError> {
        self.inbox().owed_prune(key, read).await
    }

    /// Adds one to `line` of the scope's books.
    pub async fn book(&self, keys: &InboxKeys, line: BookLine) -> Result<(), StoreError> {
        self.inbox().book(keys, line).await
    }

    /// The scope's books.
    pub async fn books(&self, keys: &InboxKeys) -> Result<Books, StoreError> {
        self.inbox().books(keys).await
    }
}
