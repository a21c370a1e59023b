//! A scope's inbox books in the embedded store (`crate::store::inbox`):
//! one table, `(books key, line) -> count`, each addition written through
//! the store's writer like every other operation.

use redb::{ReadableTable, TableDefinition};

use super::{EmbeddedStore, backend};
use crate::store::StoreError;
use crate::store::inbox::{BookLine, Books};

/// `(books key, line) -> count`.
pub(super) const BOOKS: TableDefinition<'static, (&str, &str), u64> =
    TableDefinition::new("inbox_books");

impl EmbeddedStore {
    /// HINCRBY: adds one to `line` of the books under `key`.
    pub(crate) async fn books_add(&self, key: &str, line: BookLine) -> Result<(), StoreError> {
        let key = key.to_owned();
        self.transact(move |txn| {
            let mut table = txn.open_table(BOOKS).map_err(backend)?;
            let now = table
                .get((key.as_str(), line.as_str()))
                .map_err(backend)?
                .map_or(0, |guard| guard.value());
            table
                .insert((key.as_str(), line.as_str()), now.saturating_add(1))
                .map_err(backend)?;
            Ok(((), true))
        })
        .await
    }

    /// The books under `key` (zero for a line never written).
    pub(crate) async fn books_read(&self, key: &str) -> Result<Books, StoreError> {
        let key = key.to_owned();
        self.read(BOOKS, move |table| {
            let mut books = Books::default();
            for line in BookLine::ALL {
                let count = table
                    .get((key.as_str(), line.as_str()))
                    .map_err(backend)?
                    .map_or(0, |guard| guard.value());
                books.set(line, count);
            }
            Ok(books)
        })
        .await
    }
}
