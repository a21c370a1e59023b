//! The bounded span queue between the request path and the collector.
//!
//! [`QueueProcessor::on_end`] runs on the thread that ended a span — a
//! request's — so it only tries to put the span in a bounded channel: a
//! full queue drops the span and counts it (`reason="queue_full"`), it
//! never waits. One background thread with its own single-threaded tokio
//! runtime takes spans off the queue in batches and exports them, one
//! export at a time; a batch the collector does not take is dropped and
//! counted (`reason="export_failed"`), not retried, so a dead collector
//! costs the request path nothing but the counter. Warnings about export
//! failures are logged once per failing stretch, not per batch.
//!
//! Flushing and shutdown are bounded waits on the thread's answer.

use std::sync::Mutex;
use std::sync::mpsc as std_mpsc;
use std::time::Duration;

use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{SpanData, SpanExporter, SpanProcessor};
use tokio::sync::mpsc;

use super::SPANS_DROPPED_TOTAL;

/// Most spans per export request.
const MAX_BATCH: usize = 512;
/// How long the first span of a batch waits for more to join it.
const BATCH_DELAY: Duration = Duration::from_millis(200);
/// How long `force_flush` waits for the export thread.
const FLUSH_BOUND: Duration = Duration::from_secs(5);

/// Sizes of the queue.
#[derive(Debug, Clone, Copy)]
pub struct QueueSettings {
    /// Finished spans waiting for export at most (at least 1).
    capacity: usize,
    /// Most spans per export.
    max_batch: usize,
    /// How long a batch gathers before it is sent.
    delay: Duration,
}

impl QueueSettings {
    /// A queue of `capacity` spans (raised to 1 if 0).
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity: capacity.max(1),
            max_batch: MAX_BATCH,
            delay: BATCH_DELAY,
        }
    }
}

/// What the export thread is asked besides exporting.
#[derive(Debug)]
enum Control {
    /// Export everything queued, then answer.
    Flush(std_mpsc::SyncSender<()>),
    /// Export everything queued, answer, and stop.
    Shutdown(std_mpsc::SyncSender<()>),
}

/// A [`SpanProcessor`] that queues finished spans for a background
/// export thread and drops (and counts) what does not fit.
#[derive(Debug)]
pub struct QueueProcessor {
    spans: mpsc::Sender<SpanData>,
    control: mpsc::UnboundedSender<Control>,
    /// The export thread, joined at shutdown if it finished in time.
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl QueueProcessor {
    /// Starts the export thread for `exporter`.
    pub fn start<E>(exporter: E, settings: QueueSettings) -> std::io::Result<Self>
    where
        E: SpanExporter + 'static,
    {
        let (spans, queued) = mpsc::channel(settings.capacity);
        let (control, commands) = mpsc::unbounded_channel();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let thread = std::thread::Builder::new()
            .name("idemgate-otlp".to_owned())
            .spawn(move || runtime.block_on(export_loop(exporter, queued, commands, settings)))?;
        Ok(Self {
            spans,
            control,
            thread: Mutex::new(Some(thread)),
        })
    }

    /// Asks the export thread for `command` and waits for its answer at
    /// most `bound`.
    fn ask(
        &self,
        command: fn(std_mpsc::SyncSender<()>) -> Control,
        bound: Duration,
    ) -> OTelSdkResult {
        let (reply, answer) = std_mpsc::sync_channel(1);
        self.control
            .send(command(reply))
            .map_err(|_| OTelSdkError::AlreadyShutdown)?;
        answer.recv_timeout(bound).map_err(|error| match error {
            std_mpsc::RecvTimeoutError::Timeout => OTelSdkError::Timeout(bound),
            std_mpsc::RecvTimeoutError::Disconnected => OTelSdkError::AlreadyShutdown,
        })
    }
}

impl SpanProcessor for QueueProcessor {
    fn on_start(&self, _span: &mut opentelemetry_sdk::trace::Span, _cx: &opentelemetry::Context) {}

    fn on_end(&self, span: SpanData) {
        if !span.span_context.is_sampled() {
            return;
        }
        if self.spans.try_send(span).is_err() {
            dropped("queue_full", 1);
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.ask(Control::Flush, FLUSH_BOUND)
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        let result = self.ask(Control::Shutdown, timeout);
        let thread = self.thread.lock().map(|mut t| t.take()).ok().flatten();
        if let (Ok(()), Some(thread)) = (&result, thread) {
            // It answered, so it is returning: the join is immediate. A
            // panic in it has already been printed by the panic hook.
            if thread.join().is_err() {
                tracing::debug!("span export thread ended by a panic");
            }
        }
        result
    }
}

/// Counts `count` spans that will not reach the collector.
fn dropped(reason: &'static str, count: usize) {
    metrics::counter!(SPANS_DROPPED_TOTAL, "reason" => reason).increment(count as u64);
}

/// The export thread: batches, exports, answers flushes, stops on
/// shutdown or when the processor is gone.
async fn export_loop<E: SpanExporter>(
    exporter: E,
    mut queued: mpsc::Receiver<SpanData>,
    mut commands: mpsc::UnboundedReceiver<Control>,
    settings: QueueSettings,
) {
    let mut batch = Vec::with_capacity(settings.max_batch);
    let mut failing = false;
    loop {
        tokio::select! {
            biased;
            command = commands.recv() => {
                let (reply, stop) = match command {
                    Some(Control::Flush(reply)) => (Some(reply), false),
                    Some(Control::Shutdown(reply)) => (Some(reply), true),
                    None => (None, true),
                };
                // Everything queued now, without waiting for more.
                loop {
                    while batch.len() < settings.max_batch {
                        let Ok(span) = queued.try_recv() else { break };
                        batch.push(span);
                    }
                    if batch.is_empty() {
                        break;
                    }
                    export(&exporter, &mut batch, &mut failing).await;
                }
                // The asker may have given up waiting: nobody to tell then.
                if let Some(reply) = reply {
                    reply.try_send(()).ok();
                }
                if stop {
                    if let Err(error) = exporter.shutdown() {
                        tracing::debug!(%error, "span exporter shutdown");
                    }
                    return;
                }
            }
            received = queued.recv_many(&mut batch, settings.max_batch) => {
                if received == 0 {
                    return;
                }
                // Let a batch gather (or fill up) before it is sent.
                let deadline = tokio::time::Instant::now() + settings.delay;
                while batch.len() < settings.max_batch {
                    let room = settings.max_batch - batch.len();
                    match tokio::time::timeout_at(deadline, queued.recv_many(&mut batch, room)).await {
                        Ok(0) | Err(_) => break,
                        Ok(_) => {}
                    }
                }
                export(&exporter, &mut batch, &mut failing).await;
            }
        }
    }
}

/// Exports and empties `batch`; a refused batch is counted as dropped.
async fn export<E: SpanExporter>(exporter: &E, batch: &mut Vec<SpanData>, failing: &mut bool) {
    if batch.is_empty() {
        return;
    }
    let count = batch.len();
    match exporter.export(std::mem::take(batch)).await {
        Ok(()) => {
            if std::mem::take(failing) {
                tracing::info!("trace export works again");
            }
        }
        Err(error) => {
            dropped("export_failed", count);
            if !std::mem::replace(failing, true) {
                tracing::warn!(%error, spans = count, "trace export failed; dropping spans until it works again");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use opentelemetry::trace::{
        SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState,
    };
    use opentelemetry_sdk::trace::{SpanEvents, SpanLinks};

    use super::*;

    /// Counts exported spans; blocks each export until released when
    /// `gate` is set, fails every export when `fail` is set.
    #[derive(Debug, Clone, Default)]
    struct Counting {
        exported: Arc<AtomicUsize>,
        fail: bool,
        gate: Option<Arc<tokio::sync::Semaphore>>,
    }

    impl SpanExporter for Counting {
        async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
            if let Some(gate) = &self.gate {
                let _permit = gate.acquire().await;
            }
            if self.fail {
                return Err(OTelSdkError::InternalFailure("refused".to_owned()));
            }
            self.exported.fetch_add(batch.len(), Ordering::SeqCst);
            Ok(())
        }
    }

    fn span(sampled: bool) -> SpanData {
        let flags = if sampled {
            TraceFlags::SAMPLED
        } else {
            TraceFlags::default()
        };
        SpanData {
            span_context: SpanContext::new(
                TraceId::from(1_u128),
                SpanId::from(1_u64),
                flags,
                false,
                TraceState::default(),
            ),
            parent_span_id: SpanId::INVALID,
            parent_span_is_remote: false,
            span_kind: SpanKind::Server,
            name: "delivery".into(),
            start_time: std::time::SystemTime::UNIX_EPOCH,
            end_time: std::time::SystemTime::UNIX_EPOCH,
            attributes: Vec::new(),
            dropped_attributes_count: 0,
            events: SpanEvents::default(),
            links: SpanLinks::default(),
            status: Status::Unset,
            instrumentation_scope: Default::default(),
        }
    }

    #[test]
    fn exports_sampled_spans_and_flushes() {
        let exporter = Counting::default();
        let exported = Arc::clone(&exporter.exported);
        let processor = QueueProcessor::start(exporter, QueueSettings::new(16)).expect("thread");
        for _ in 0..3 {
            processor.on_end(span(true));
        }
        processor.on_end(span(false));
        processor.force_flush().expect("flushed");
        assert_eq!(exported.load(Ordering::SeqCst), 3);
        processor
            .shutdown_with_timeout(Duration::from_secs(5))
            .expect("shut down");
        assert!(processor.force_flush().is_err(), "gone after shutdown");
    }

    #[test]
    fn a_full_queue_drops_instead_of_waiting() {
        let gate = Arc::new(tokio::sync::Semaphore::new(0));
        let exporter = Counting {
            gate: Some(Arc::clone(&gate)),
            ..Counting::default()
        };
        let exported = Arc::clone(&exporter.exported);
        let processor = QueueProcessor::start(exporter, QueueSettings::new(2)).expect("thread");
        let started = tokio::time::Instant::now();
        for _ in 0..1000 {
            processor.on_end(span(true));
        }
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "on_end never waits for the exporter"
        );
        gate.add_permits(1000);
        processor
            .shutdown_with_timeout(Duration::from_secs(5))
            .expect("shut down");
        // The thread holds one batch, the queue two more at most.
        let done = exported.load(Ordering::SeqCst);
        assert!((1..=1000 - 1).contains(&done), "{done} exported");
        assert!(done <= 2 + MAX_BATCH, "{done} exported");
    }

    #[test]
    fn a_failing_exporter_neither_blocks_nor_stops_the_thread() {
        let exporter = Counting {
            fail: true,
            ..Counting::default()
        };
        let processor = QueueProcessor::start(exporter, QueueSettings::new(4)).expect("thread");
        processor.on_end(span(true));
        processor
            .force_flush()
            .expect("flushed despite the failure");
        processor.on_end(span(true));
        processor.force_flush().expect("still running");
    }
}
