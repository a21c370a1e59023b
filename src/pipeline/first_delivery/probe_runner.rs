//! The probe runner: every [`LOOK_EVERY`], each scope with a probe route
//! asks the store which plans are due (`crate::store::probe`), takes each
//! (the record becomes this instance's for the probe lease), asks the
//! handler and settles the record through the ordinary owner-checked
//! writes. Any instance runs it, so an unknown outcome is probed whether
//! the instance that recorded it is alive, restarted or gone.
//!
//! Bounded: at most `[limits] max_probes_in_flight` probes on this
//! instance and a route's `concurrency` per scope at once; a due plan
//! beyond either waits for the next look (`idemgate_probes_waiting`).
//! Attempts after the first are spread by up to a fifth of `retry_every`,
//! so a stalled handler is not asked about every outcome in one instant.
//!
//! Shutdown stops the looks at once; a probe in flight is abandoned when
//! the grace period ends, and its plan is due again when its lease ends,
//! for whichever instance is alive then.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Request};
use metrics::{counter, gauge};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use crate::config::{CacheStatus, Probe, ProbeAnswer, Upstream};
use crate::inbox::RouteInbox;
use crate::pipeline::Forwarder;
use crate::pipeline::probe::{IN_FLIGHT, WAITING};
use crate::pipeline::probe::{RESOLUTIONS_TOTAL, Reading, classify};
use crate::pipeline::runtime::RouteRuntime;
use crate::pipeline::trace;
use crate::record::{OwnerMint, RecordState, StoredResponse};
use crate::store::probe::Taken;
use crate::store::{Completion, Lease, StoreKey};
use crate::upstream;

/// Largest probe answer read, in bytes.
const MAX_PROBE_ANSWER: usize = 64 * 1024;
/// How often the runner asks the store for due plans.
const LOOK_EVERY: Duration = Duration::from_secs(1);
/// Due plans read per scope and look.
const DUE_BATCH: usize = 64;
/// How long past a probe's own timeout its taker keeps the record before
/// another instance may take it: time to write the outcome.
const LEASE_MARGIN: Duration = Duration::from_secs(5);

/// One scope with probe routes: where its plans are and who may act.
struct Scope {
    /// `{prefix}:{scope}`.
    namespace: String,
    /// The scope's probe routes: a plan names its own.
    routes: Vec<Arc<RouteRuntime>>,
    /// The scope's share of probes in flight (its routes' largest
    /// `concurrency`).
    permits: Arc<Semaphore>,
    /// The probe lease: the longest probe timeout of its routes plus
    /// [`LEASE_MARGIN`].
    lease: Duration,
}

/// A route with an inbox and a probe: its unknown redeliveries are
/// probed too (`redeliveries.rs`), within its scope's share.
struct Redeliveries {
    route: Arc<RouteRuntime>,
    inbox: Arc<RouteInbox>,
    scope: Arc<Scope>,
}

/// What the runner keeps between looks.
struct Runner {
    forwarder: Arc<Forwarder>,
    scopes: Vec<Arc<Scope>>,
    redeliveries: Vec<Arc<Redeliveries>>,
    instance: Arc<Semaphore>,
    owners: OwnerMint,
    /// Keys this instance is probing now: not taken again meanwhile.
    active: Arc<Mutex<HashSet<StoreKey>>>,
}

/// Starts the runner under the pipeline's tracker if any route probes;
/// it stops looking when `shutdown` is cancelled.
pub(crate) fn spawn(
    forwarder: &Arc<Forwarder>,
    routes: &[Arc<RouteRuntime>],
    shutdown: &CancellationToken,
) {
    let mut scopes: Vec<(String, Vec<Arc<RouteRuntime>>)> = Vec::new();
    let prefix = &forwarder.config.store.key_prefix;
    for route in routes.iter().filter(|r| r.settings.probe.is_some()) {
        let namespace = format!("{prefix}:{}", route.settings.idempotency.scope);
        match scopes.iter_mut().find(|(n, _)| *n == namespace) {
            Some((_, routes)) => routes.push(Arc::clone(route)),
            None => scopes.push((namespace, vec![Arc::clone(route)])),
        }
    }
    if scopes.is_empty() {
        return;
    }
    let scopes: Vec<Arc<Scope>> = scopes
        .into_iter()
        .map(|(namespace, routes)| {
            let probes = || routes.iter().filter_map(|r| r.settings.probe.as_ref());
            let concurrency = probes().map(|p| p.concurrency).max().unwrap_or(1);
            let timeout = probes().map(|p| p.timeout).max().unwrap_or_default();
            Arc::new(Scope {
                namespace,
                permits: Arc::new(Semaphore::new(concurrency as usize)),
                lease: timeout + LEASE_MARGIN,
                routes,
            })
        })
        .collect();
    let redeliveries = scopes
        .iter()
        .flat_map(|scope| scope.routes.iter().map(move |route| (scope, route)))
        .filter_map(|(scope, route)| {
            Some(Arc::new(Redeliveries {
                inbox: Arc::clone(&route.inbox.as_ref()?.queue),
                route: Arc::clone(route),
                scope: Arc::clone(scope),
            }))
        })
        .collect();
    let runner = Runner {
        instance: Arc::new(Semaphore::new(forwarder.config.limits.max_probes_in_flight)),
        forwarder: Arc::clone(forwarder),
        scopes,
        redeliveries,
        owners: OwnerMint::new(),
        active: Arc::default(),
    };
    forwarder.tracker.spawn(crate::time::every(
        LOOK_EVERY,
        shutdown.clone(),
        move || runner.look(),
    ));
}

impl Runner {
    /// One look at every scope's due plans (module docs).
    fn look(&self) -> impl std::future::Future<Output = ()> + Send + use<> {
        let (forwarder, scopes) = (Arc::clone(&self.forwarder), self.scopes.clone());
        let redeliveries = self.redeliveries.clone();
        let (instance, active) = (Arc::clone(&self.instance), Arc::clone(&self.active));
        let owners: Vec<_> = (0..scopes.len() * DUE_BATCH)
            .map(|_| self.owners.next())
            .collect();
        async move {
            let mut owners = owners.into_iter();
            let mut waiting = 0usize;
            for scope in scopes {
                let due = match forwarder
                    .store
                    .due_probes(&scope.namespace, DUE_BATCH)
                    .await
                {
                    Ok(due) => due,
                    Err(error) => {
                        tracing::warn!(scope = scope.namespace, %error, "could not read the due probes; looking again soon");
                        continue;
                    }
                };
                for key in due {
                    let owner = owners.next().expect("one token per due plan");
                    if !active
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .insert(key.clone())
                    {
                        continue;
                    }
                    let permits = (
                        Arc::clone(&instance).try_acquire_owned(),
                        Arc::clone(&scope.permits).try_acquire_owned(),
                    );
                    let (Ok(one), Ok(two)) = permits else {
                        waiting += 1;
                        active
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner)
                            .remove(&key);
                        continue;
                    };
                    let (forwarder_, scope, active) = (
                        Arc::clone(&forwarder),
                        Arc::clone(&scope),
                        Arc::clone(&active),
                    );
                    forwarder.tracker.spawn(async move {
                        let _permits = (one, two);
                        gauge!(IN_FLIGHT.name).increment(1.0);
                        forwarder_.probe_due(&scope, &key, owner).await;
                        gauge!(IN_FLIGHT.name).decrement(1.0);
                        active
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner)
                            .remove(&key);
                    });
                }
            }
            for held in redeliveries {
                look_at_redeliveries(&forwarder, &held, &instance).await;
            }
            gauge!(WAITING.name).set(waiting as f64);
        }
    }
}

/// Takes `held`'s due unknown redeliveries, as many as the permits left
/// allow, and probes each in a task of its own.
async fn look_at_redeliveries(
    forwarder: &Arc<Forwarder>,
    held: &Arc<Redeliveries>,
    instance: &Arc<Semaphore>,
) {
    let Some(probe) = &held.route.settings.probe else {
        return;
    };
    let room = instance
        .available_permits()
        .min(held.scope.permits.available_permits());
    if room == 0 {
        return;
    }
    let taken = match forwarder
        .inboxes
        .take_unknown(&held.inbox, probe, held.scope.lease, room)
        .await
    {
        Ok(taken) => taken,
        Err(error) => {
            tracing::warn!(route = held.route.name(), %error, "inbox: could not look for unknown redeliveries to probe");
            return;
        }
    };
    for delivery in taken {
        let permits = (
            Arc::clone(instance).try_acquire_owned(),
            Arc::clone(&held.scope.permits).try_acquire_owned(),
        );
        let (forwarder_, held) = (Arc::clone(forwarder), Arc::clone(held));
        forwarder.tracker.spawn(async move {
            let _permits = permits;
            gauge!(IN_FLIGHT.name).increment(1.0);
            forwarder_
                .probe_redelivery(&held.route, &held.inbox, delivery)
                .await;
            gauge!(IN_FLIGHT.name).decrement(1.0);
        });
    }
}

/// Up to a fifth of `every`, at random: the spread of retries.
pub(in crate::pipeline) fn jitter(every: Duration) -> Duration {
    let mut bytes = [0u8; 4];
    getrandom::fill(&mut bytes).unwrap_or_default();
    let fifth = crate::time::millis(every) / 5;
    Duration::from_millis(u64::from(u32::from_be_bytes(bytes)) % fifth.max(1))
}

impl Forwarder {
    /// Takes the due plan of `key` in `scope` as `owner`, asks the
    /// handler once and settles or notes the answer.
    async fn probe_due(&self, scope: &Scope, key: &StoreKey, owner: crate::record::OwnerToken) {
        let advance = |name: &str| -> Option<CacheStatus> {
            let route = scope.routes.iter().find(|r| r.name() == name)?;
            route
                .settings
                .entity
                .as_ref()
                .map(|e| e.advance_status.clone())
        };
        let taken = match self
            .store
            .take_probe(key, owner, scope.lease, &advance)
            .await
        {
            Ok(Some(taken)) => taken,
            Ok(None) => return,
            Err(error) => {
                tracing::warn!(key = key.hash(), %error, "could not take a due probe; looking again soon");
                return;
            }
        };
        let Some(route) = scope.routes.iter().find(|r| r.name() == taken.plan.route) else {
            let Taken { lease, mut plan } = taken;
            plan.done = true;
            plan.last = "its route has no probe any more".into();
            tracing::warn!(
                route = plan.route,
                key = key.hash(),
                "a probe plan names a route without [route.probe]; the outcome stays unknown"
            );
            let _ = self.store.note_probe(&lease, &plan, None).await;
            return;
        };
        let Some(probe) = &route.settings.probe else {
            return;
        };
        let span = trace::probe(
            self.tracing,
            route.name(),
            key.hash(),
            taken.lease.record().trace.as_ref(),
        );
        let result = self.attempt(route, probe, taken).instrument(span).await;
        if let Some(result) = result {
            counter!(RESOLUTIONS_TOTAL.name, "route" => route.name().to_owned(), "result" => result)
                .increment(1);
        }
        self.claimer.settled(key);
    }

    /// One attempt of a taken probe; the `result` label once the outcome
    /// is settled or the attempts are spent, `None` while more follow.
    async fn attempt(
        &self,
        route: &RouteRuntime,
        probe: &Probe,
        taken: Taken,
    ) -> Option<&'static str> {
        let Taken { lease, mut plan } = taken;
        let key = lease.key().hash().to_owned();
        let name = route.name();
        let attempt = plan.attempts;
        let upstream = Upstream {
            url: route.settings.upstream.url.clone(),
            timeout: probe.timeout,
        };
        let answer = tokio::select! {
            answer = ask(self, &upstream, probe, &plan.target) => answer,
            () = self.grace_over.cancelled() => {
                tracing::info!(route = name, key, "shutdown: probe abandoned; another instance takes it when its lease ends");
                return None;
            }
        };
        let (failed, status) = match answer {
            Err(error) => {
                tracing::warn!(
                    route = name,
                    key,
                    attempt,
                    error,
                    "probe failed; the outcome stays unknown"
                );
                plan.last = format!("error: {error}");
                ("error", None)
            }
            Ok(answer) => {
                let status = answer.status;
                match classify(probe, answer) {
                    Reading::Applied(answer) => {
                        return Some(self.applied(route, &lease, probe, answer, status).await);
                    }
                    Reading::NotApplied => {
                        return Some(self.not_applied(route, &lease, status).await);
                    }
                    Reading::Undecided => {
                        tracing::info!(
                            route = name,
                            key,
                            attempt,
                            status,
                            "probe can not tell; the outcome stays unknown"
                        );
                        plan.last = format!("status {status}: can not tell");
                        ("undecided", Some(status))
                    }
                }
            }
        };
        let spent = attempt >= probe.max_attempts;
        plan.done = spent;
        let next = (!spent).then(|| probe.retry_every + jitter(probe.retry_every));
        if let Err(error) = self.store.note_probe(&lease, &plan, next).await {
            tracing::warn!(route = name, key, %error, ?status, "could not note the probe attempt; it is due again when its lease ends");
        }
        spent.then_some(failed)
    }

    /// Completes the record with the route's answer for "applied".
    async fn applied(
        &self,
        route: &RouteRuntime,
        lease: &Lease,
        probe: &Probe,
        answer: StoredResponse,
        status: u16,
    ) -> &'static str {
        let entity_ack = route.entity.as_ref().map(|entity| &entity.ack);
        let ack = route.inbox_ack().or(entity_ack);
        let mut stored = match (probe.answer, ack) {
            (ProbeAnswer::Ack, Some(ack)) => ack.clone(),
            _ => answer,
        };
        stored.headers.push((
            Bytes::from_static(crate::pipeline::probe::RESOLVED_HEADER.as_bytes()),
            Bytes::from_static(b"probe"),
        ));
        let record = lease.record().with_state(RecordState::Completed(stored));
        let retention = route.settings.idempotency.retention;
        let key = lease.key().hash();
        match self.store.complete(lease, &record, retention).await {
            Ok(Completion::TakenOver) => {
                tracing::warn!(
                    route = route.name(),
                    key,
                    status,
                    "probe says applied, but another delivery holds the key now; nothing written"
                );
                "error"
            }
            Ok(_) => {
                tracing::info!(
                    route = route.name(),
                    key,
                    status,
                    "probe says applied: the outcome is completed; duplicates replay it"
                );
                "applied"
            }
            Err(error) => {
                tracing::error!(route = route.name(), key, status, %error, "probe says applied, but the store refused the answer; the outcome stays unknown");
                "error"
            }
        }
    }

    /// Releases the claim for "not applied".
    async fn not_applied(&self, route: &RouteRuntime, lease: &Lease, status: u16) -> &'static str {
        let key = lease.key().hash();
        match self.store.release(lease).await {
            Ok(true) => {
                tracing::info!(
                    route = route.name(),
                    key,
                    status,
                    "probe says not applied: the claim is released; the next copy executes once"
                );
                "not_applied"
            }
            Ok(false) => {
                tracing::warn!(
                    route = route.name(),
                    key,
                    status,
                    "probe says not applied, but the record is no longer this instance's; nothing released"
                );
                "error"
            }
            Err(error) => {
                tracing::error!(route = route.name(), key, status, %error, "probe says not applied, but the release failed; the outcome stays unknown");
                "error"
            }
        }
    }
}

/// Sends one probe of `target`; its answer as a stored response (body at
/// most 64 KiB).
pub(in crate::pipeline) async fn ask(
    forwarder: &Forwarder,
    upstream: &Upstream,
    probe: &Probe,
    target: &str,
) -> Result<StoredResponse, String> {
    let mut builder = Request::builder().method(probe.method.clone()).uri(target);
    for (name, value) in &probe.headers {
        let value = HeaderValue::from_bytes(&value.expose()).map_err(|e| e.to_string())?;
        builder = builder.header(name.as_str(), value);
    }
    let (parts, ()) = builder.body(()).map_err(|e| e.to_string())?.into_parts();
    let answer = upstream::forward(
        forwarder.calls.client(),
        upstream,
        parts,
        Bytes::new(),
        None,
        MAX_PROBE_ANSWER,
    )
    .await
    .map_err(|e| format!("{e:?}"))?;
    Ok(upstream::stored(&answer))
}
