//! The per-route runtime: everything a request to one protected route
//! needs, built once at start-up and handed to the request by stage 1
//! (the router holds one per route), so no stage looks a route up by its
//! number.

use std::sync::Arc;

use crate::config::{self, Config, Route};
use crate::hot_keys::{HotKeys, RouteHotKeys};
use crate::inbox::{Inboxes, RouteInbox};
use crate::pipeline::metrics::RouteMetrics;
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
    /// Its inbox, when it has `[route.inbox]`.
    pub(crate) inbox: Option<InboxRuntime>,
    /// Its entity machine, when it has `[route.entity]`.
    pub(crate) entity: Option<EntityRuntime>,
}

/// A route's `[route.inbox]` at request time: everything a delivery to it
/// needs from the inbox, together, so no stage holds one part without the
/// other.
#[derive(Debug)]
pub(crate) struct InboxRuntime {
    /// The inbox itself: the same one the workers and the admin API use.
    pub(crate) queue: Arc<RouteInbox>,
    /// Its known acknowledgement: a completed answer equal to it is
    /// stored as a compact marker, and a marker is replayed as it
    /// (`crate::record::AckMarker`).
    pub(crate) ack: StoredResponse,
}

/// A route's `[route.entity]` at request time, its settings beside the
/// answer they make.
#[derive(Debug)]
pub(crate) struct EntityRuntime {
    /// `[route.entity]`.
    pub(crate) rules: config::Entity,
    /// Its acknowledgement: what a repeated state (and, with
    /// `on_refused = "acknowledge"`, a refused change) is answered.
    pub(crate) ack: StoredResponse,
}

impl RouteRuntime {
    /// The route's name (its `route` label and store key component).
    pub(crate) fn name(&self) -> &str {
        &self.settings.name
    }

    /// The inbox's acknowledgement, on a route with an inbox: what a
    /// compact record is replayed as.
    pub(crate) fn inbox_ack(&self) -> Option<&StoredResponse> {
        self.inbox.as_ref().map(|inbox| &inbox.ack)
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
                inbox: inboxes.route(&route.name).map(|queue| InboxRuntime {
                    ack: crate::inbox::ack(&queue.rules),
                    queue: Arc::clone(queue),
                }),
                entity: route.entity.as_ref().map(|rules| EntityRuntime {
                    ack: crate::inbox::ack_response(&rules.ack),
                    rules: rules.clone(),
                }),
                settings: route.clone(),
            })
        })
        .collect()
}
