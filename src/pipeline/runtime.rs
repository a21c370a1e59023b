//! The per-route runtime: everything a request to one protected route
//! needs, built once at start-up and handed to the request by stage 1
//! (the router holds one per route), so no stage looks a route up by its
//! number.

use std::sync::Arc;

use super::metrics::RouteMetrics;
use crate::config::{Config, Route};
use crate::hot_keys::{HotKeys, RouteHotKeys};
use crate::inbox::{Inboxes, RouteInbox};
use crate::record::StoredResponse;

/// One protected route at request time.
#[derive(Debug)]
pub(crate) struct RouteRuntime {
    /// The route's validated settings.
    pub(crate) settings: Route,
    /// Its metric handles, resolved once.
    pub(crate) meters: RouteMetrics,
    /// Its hot-key table, when `[hot_keys]` is enabled.
    pub(crate) hot_keys: Option<Arc<RouteHotKeys>>,
    /// Its inbox, when it has `[route.inbox]`: the same one the workers
    /// and the admin API use.
    pub(crate) inbox: Option<Arc<RouteInbox>>,
    /// Its known acknowledgement (the `[route.inbox]` ack): a completed
    /// answer equal to it is stored as a compact marker, and a marker is
    /// replayed as it (`crate::record::AckMarker`).
    pub(crate) ack: Option<StoredResponse>,
    /// Its `[route.entity]` acknowledgement: what a repeated state (and,
    /// with `on_refused = "acknowledge"`, a refused change) is answered.
    pub(crate) entity_ack: Option<StoredResponse>,
}

impl RouteRuntime {
    /// The route's name (its `route` label and store key component).
    pub(crate) fn name(&self) -> &str {
        &self.settings.name
    }
}

/// Every route's runtime, in route order: its settings from `config`, its
/// inbox from `inboxes`, its hot-key table from `hot_keys`.
pub(crate) fn build(
    config: &Config,
    inboxes: &Inboxes,
    hot_keys: &HotKeys,
) -> Vec<Arc<RouteRuntime>> {
    config
        .routes
        .iter()
        .map(|route| {
            Arc::new(RouteRuntime {
                meters: RouteMetrics::new(&route.name, route.scheme.secret_count()),
                hot_keys: hot_keys.named(&route.name).cloned(),
                inbox: inboxes.route(&route.name).cloned(),
                ack: route.inbox.as_ref().map(crate::inbox::ack),
                entity_ack: route
                    .entity
                    .as_ref()
                    .map(|entity| crate::inbox::ack_response(&entity.ack)),
                settings: route.clone(),
            })
        })
        .collect()
}
