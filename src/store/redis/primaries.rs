//! The primaries of a Redis Cluster, as the client last saw its slot map:
//! what the eviction watch probes and the record listing scans, one node
//! at a time, so neither ever misses a shard.

use fred::interfaces::ClusterInterface;
use fred::prelude::{Client, Server};

use crate::store::StoreError;

/// Every primary of the cluster `client` talks to. An empty slot map (the
/// client has not read it yet) is an error rather than an empty answer:
/// a caller that walks "every primary" must not conclude from none.
pub(in crate::store) fn cluster_primaries(client: &Client) -> Result<Vec<Server>, StoreError> {
    let primaries = client
        .cached_cluster_state()
        .map(|state| state.unique_primary_nodes())
        .unwrap_or_default();
    if primaries.is_empty() {
        return Err(StoreError::Unavailable(
            "the cluster's primaries are not known yet".into(),
        ));
    }
    Ok(primaries)
}
