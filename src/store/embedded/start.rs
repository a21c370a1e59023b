//! Starting the embedded store: its file opened (and checked, `open`),
//! and its writer thread.

use std::path::Path;
use std::sync::{Arc, mpsc};

use redb::Database;

use super::verify::{self, Integrity, IntegrityCell};
use super::writer::{self, Pending, Shared};
use super::{EmbeddedStore, GroupCommit, Inner, backend, disk_room, open};
use crate::config::IntegrityCheck;
use crate::store::StoreError;

impl EmbeddedStore {
    /// Opens (or, on a first start, creates) the database file with the
    /// default [`GroupCommit`] and the integrity check in the background,
    /// refusing one that was emptied, deleted, replaced or damaged
    /// ([`open`]).
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        Self::open_with(path, GroupCommit::default(), IntegrityCheck::default())
    }

    /// Opens (or creates) the database file, verifies it in full when
    /// `check` says ([`verify`]), and starts its writer thread, which
    /// groups writes into commits as `group` says.
    pub fn open_with(
        path: &Path,
        group: GroupCommit,
        check: IntegrityCheck,
    ) -> Result<Self, StoreError> {
        let opened = open::open_database(path, check).map_err(backend)?;
        let room = disk_room::on_disk_of(path, group.room);
        let (db, stamp) = opened.split();
        let integrity = Arc::new(IntegrityCell::new(Integrity::CheckedBeforeServing));
        if check == IntegrityCheck::Background {
            // Before the writer thread exists: nothing commits between the
            // pin and the copy of the file's head.
            let damaged_at = path.to_owned();
            verify::start(&db, path, Arc::clone(&integrity), move |reason| {
                open::damaged(&damaged_at, reason)
            })
            .map_err(backend)?;
        }
        let reopen_at = path.to_owned();
        let reopen = Box::new(move || Database::create(&reopen_at));
        let mut store = Self::start(db, reopen, room, group)?;
        store.stamp = Some(Arc::new(stamp));
        store.inner.shared.watch_integrity(integrity);
        Ok(store)
    }

    /// The store over `db`, reopened with `reopen` after a failure and
    /// ready again only when `room` says the disk takes new data, with its
    /// writer thread.
    pub(super) fn start(
        db: Database,
        reopen: writer::Opener,
        room: disk_room::DiskRoom,
        group: GroupCommit,
    ) -> Result<Self, StoreError> {
        let shared = Arc::new(Shared::new(db, reopen, room));
        let (jobs, queue) = mpsc::channel::<Box<dyn Pending>>();
        let writer = {
            let shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name("idemgate-store-writer".into())
                .spawn(move || writer::run(&shared, &queue, group))
                .map_err(backend)?
        };
        Ok(Self {
            inner: Arc::new(Inner {
                shared,
                jobs: Some(jobs),
                writer: Some(writer),
            }),
            stamp: None,
        })
    }
}
