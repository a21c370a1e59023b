//! Raising the embedded store's generation while it runs (`open` module
//! docs, "restored backup"): with every sweep of expired records (every
//! 30 s, `store::upkeep`) the counter inside the database goes up by one
//! in a committed write, then the marker is rewritten with it. A copy of the file taken before a raise is then
//! older than the marker, and refused at the next start; one taken since
//! the last raise is not told apart (the window a hot copy can hide in).

use super::open::{read_generation, write_generation, write_marker};
use super::{EmbeddedStore, backend};
use crate::store::StoreError;

impl EmbeddedStore {
    /// Raises the generation inside the database, then in its marker.
    /// Nothing to do for a store without a marker (a test's own backend).
    pub async fn raise_generation(&self) -> Result<u64, StoreError> {
        let Some(stamp) = self.stamp.clone() else {
            return Ok(0);
        };
        let generation = self
            .transact(|txn| {
                let next = read_generation(txn).map_err(backend)? + 1;
                write_generation(txn, next).map_err(backend)?;
                Ok((next, true))
            })
            .await?;
        write_marker(&stamp.marker, stamp.id, generation).map_err(backend)?;
        Ok(generation)
    }
}
