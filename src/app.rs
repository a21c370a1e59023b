//! Wires a validated [`Config`] into running parts: store, pipeline,
//! listeners and background tasks, and owns their shutdown.
//!
//! Shutdown order (SIGTERM/SIGINT in `main.rs`, or [`RunningApp::stop`]):
//! stop accepting on both listeners, let open connections finish their
//! requests, then wait for detached upstream calls and their store writes
//! (tracked by a `TaskTracker`), all within `limits.shutdown_grace`. When
//! the grace period runs out, answers still waiting to be stored give up
//! and say so (they are unknown outcomes) within a short window.
//!
//! Background upkeep under the same tracker and cancellation token: the
//! metrics recorder's upkeep, the inbox's redelivery workers and backlog
//! gauges (`inbox`), the `file:` secret watcher (`rotation`, every
//! `[secrets] watch_interval`), and whatever the store's backend needs,
//! which the store starts itself (`AnyStore::spawn_upkeep`: the embedded
//! store's sweeper, or on Redis the eviction watcher and the replay
//! cache's invalidation listener).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::admin::Admin;
use crate::config::Config;
use crate::error::Rejection;
use crate::hot_keys::HotKeys;
use crate::inbox::Inboxes;
use crate::metrics::DURATION_BUCKETS;
use crate::pipeline::Pipeline;
use crate::server;
use crate::store::{AnyStore, StoreError};

/// How often the Prometheus recorder drains its histogram buffers.
const METRICS_UPKEEP_EVERY: Duration = Duration::from_secs(5);
/// Time background work gets, once the grace period is over, to give up
/// and say so (an answer still not stored is logged and counted as an
/// unknown outcome) before the process goes.
const GIVE_UP_WINDOW: Duration = Duration::from_millis(500);

/// Why the app could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The store could not be opened or configured.
    #[error("store: {0}")]
    Store(#[from] StoreError),
    /// A listener address could not be bound.
    #[error("cannot listen on {address}: {source}")]
    Bind {
        /// The configured address.
        address: SocketAddr,
        /// The OS error.
        source: std::io::Error,
    },
}

/// Installs the global Prometheus recorder with idemgate's buckets,
/// describes every metric once (each owner's own `DESCRIPTIONS`), and
/// returns the handle the admin listener renders.
pub fn install_metrics() -> Result<PrometheusHandle, String> {
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(
            Matcher::Suffix("_duration_seconds".into()),
            DURATION_BUCKETS,
        )
        .map_err(|e| e.to_string())?
        .install_recorder()
        .map_err(|e| e.to_string())?;
    describe_metrics();
    Ok(handle)
}

/// Registers every metric's help text once: each module that owns metrics
/// describes its own.
fn describe_metrics() {
    crate::metrics::register_descriptions();
    for table in [
        crate::store::metrics::DESCRIPTIONS,
        crate::replay_cache::metrics::DESCRIPTIONS,
        crate::pipeline::metrics::DESCRIPTIONS,
        crate::pipeline::admit::entity::DESCRIPTIONS,
        crate::pipeline::probe::DESCRIPTIONS,
        crate::inbox::metrics::DESCRIPTIONS,
        &[crate::peers::PEER_SHARE_REFUSALS],
        crate::admin::AUDIT_METRICS,
    ] {
        crate::metrics::describe(table);
    }
    crate::peers::Resource::register();
    crate::rotation::describe();
    crate::telemetry::describe();
    crate::log_writer::register_metrics();
}

/// A started idemgate.
#[derive(Debug)]
pub struct RunningApp {
    /// Where the proxy listens (useful with port 0).
    pub proxy_addr: SocketAddr,
    /// Where the admin listener listens.
    pub admin_addr: SocketAddr,
    shutdown: CancellationToken,
    finished: JoinHandle<()>,
}

impl RunningApp {
    /// Starts shutdown and waits for it to complete.
    pub async fn stop(self) {
        self.shutdown.cancel();
        joined("shutdown", self.finished).await;
    }

    /// Waits until the app has shut down (after `stop`-like cancellation).
    pub async fn wait(self) {
        joined("shutdown", self.finished).await;
    }
}

/// Waits for a task and says so if it panicked (its panic was printed
/// already; shutdown goes on with the rest).
async fn joined(what: &str, task: JoinHandle<()>) {
    if let Err(error) = task.await {
        tracing::error!(%error, "{what} task ended abnormally");
    }
}

/// Binds `address` and returns the listener with the address it got (the
/// port the OS chose when `address` asked for port 0); either failure is
/// a [`StartError::Bind`] naming `address`.
async fn bind(address: SocketAddr) -> Result<(TcpListener, SocketAddr), StartError> {
    let bound = |source| StartError::Bind { address, source };
    let listener = TcpListener::bind(address).await.map_err(bound)?;
    let local = listener.local_addr().map_err(bound)?;
    Ok((listener, local))
}

/// Logs what each protected route captures and refuses (contract §4 rule 9),
/// then the configuration's warnings.
fn warn_about(config: &Config) {
    for line in crate::pipeline::admit::route::spellings_report(config) {
        tracing::info!("{line}");
    }
    for warning in config.warnings() {
        tracing::warn!("{warning}");
    }
}

/// Every route's runtime, with the series its probe and entity stages
/// count in created at zero: the stages own those series, and the
/// runtime, which every stage names, can not call them without an import
/// circle.
fn route_runtimes(
    config: &Config,
    inboxes: &Inboxes,
    hot_keys: &HotKeys,
) -> Vec<Arc<crate::pipeline::runtime::RouteRuntime>> {
    for route in &config.routes {
        if route.probe.is_some() {
            crate::pipeline::probe::register(&route.name);
        }
        if let Some(entity) = &route.entity {
            crate::pipeline::admit::entity::register(&route.name, entity);
        }
    }
    crate::pipeline::runtime::build(config, inboxes, hot_keys)
}

/// Starts the proxy and admin listeners and the background tasks.
pub async fn start(
    config: Config,
    metrics: Option<PrometheusHandle>,
) -> Result<RunningApp, StartError> {
    warn_about(&config);
    let config = Arc::new(config);
    let mut store = AnyStore::connect(&config.store).await?;
    store.with_replay_cache(config.limits.replay_cache_bytes)?;
    let store = Arc::new(store);
    let (proxy_listener, proxy_addr) = bind(config.listen.proxy).await?;
    let (admin_listener, admin_addr) = bind(config.listen.admin).await?;

    let shutdown = CancellationToken::new();
    let grace_over = CancellationToken::new();
    let tracker = TaskTracker::new();
    let inboxes = Arc::new(Inboxes::new(Arc::clone(&config), Arc::clone(&store)));
    let hot_keys = Arc::new(HotKeys::new(
        &config.hot_keys,
        config.routes.iter().map(|route| route.name.as_str()),
    ));
    let routes = route_runtimes(&config, &inboxes, &hot_keys);
    let pipeline = Arc::new(Pipeline::new(
        Arc::clone(&config),
        Arc::clone(&store),
        Arc::clone(&inboxes),
        tracker.clone(),
        grace_over.clone(),
        &routes,
    ));
    crate::pipeline::first_delivery::probe_runner::spawn(pipeline.forwarder(), &routes, &shutdown);
    let admin = Arc::new(Admin::new(
        Arc::clone(&config),
        Arc::clone(&store),
        metrics.clone(),
        Arc::clone(&inboxes),
        hot_keys,
    ));
    let limits = config.limits.clone();
    let over_share: server::Answer = {
        let types = config.problem_types.clone();
        Arc::new(move || Rejection::PeerOverShare.into_response(&types))
    };

    let proxy = tokio::spawn(server::serve(
        proxy_listener,
        move |request, addrs: server::Addrs| {
            Arc::clone(&pipeline).handle(request, Some(addrs.peer))
        },
        server::Crowding::Share(over_share),
        limits.clone(),
        shutdown.clone(),
    ));
    let admin_server = tokio::spawn(server::serve(
        admin_listener,
        move |request, addrs: server::Addrs| {
            let admin = Arc::clone(&admin);
            async move {
                let mut response = admin.handle(request, addrs.local).await;
                response.headers_mut().insert(
                    crate::admin::LISTENER_HEADER,
                    http::HeaderValue::from_static("admin"),
                );
                response
            }
        },
        server::Crowding::EvictSilent,
        limits.clone(),
        shutdown.clone(),
    ));
    spawn_metrics_upkeep(&tracker, &shutdown, metrics);
    inboxes.start(&tracker, &shutdown);
    store.spawn_upkeep(&tracker, &shutdown);
    crate::rotation::zero_metrics(&config);
    if config.tracing.is_some() {
        crate::telemetry::zero_metrics();
    }
    if let Some(interval) = config.secrets_watch {
        tracker.spawn(crate::rotation::watch(
            Arc::clone(&config),
            interval,
            shutdown.clone(),
        ));
    }

    let token = shutdown.clone();
    let finished = tokio::spawn(async move {
        token.cancelled().await;
        let deadline = tokio::time::Instant::now() + limits.shutdown_grace;
        joined("proxy listener", proxy).await;
        joined("admin listener", admin_server).await;
        tracker.close();
        if tokio::time::timeout_at(deadline, tracker.wait())
            .await
            .is_err()
        {
            grace_over.cancel();
            if tokio::time::timeout(GIVE_UP_WINDOW, tracker.wait())
                .await
                .is_err()
            {
                tracing::warn!("background work still running after the shutdown grace period");
            }
        }
        tracing::info!("shutdown complete");
    });
    tracing::info!(%proxy_addr, %admin_addr, "idemgate listening");
    Ok(RunningApp {
        proxy_addr,
        admin_addr,
        shutdown,
        finished,
    })
}

/// Drains the Prometheus recorder's histogram buffers every
/// [`METRICS_UPKEEP_EVERY`] until `shutdown`.
fn spawn_metrics_upkeep(
    tracker: &TaskTracker,
    shutdown: &CancellationToken,
    metrics: Option<PrometheusHandle>,
) {
    if let Some(handle) = metrics {
        tracker.spawn(crate::time::every(
            METRICS_UPKEEP_EVERY,
            shutdown.clone(),
            move || {
                handle.run_upkeep();
                std::future::ready(())
            },
        ));
    }
}
