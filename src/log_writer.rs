//! Log output in timed batches, so a log line costs the request path no
//! system call and no thread wake-up.
//!
//! Every request logs one `info` line (the default level). The formatted
//! line is appended to an in-memory batch under a mutex; the first line of a
//! batch wakes a background thread, which lets the batch fill for
//! [`FLUSH_INTERVAL`], takes it and writes it to the sink (stderr) in one
//! call: one wake-up and one write per batch rather than per line (the
//! measured saving is in `bench/RESULTS.md`, Optimisations).
//!
//! Trade-offs, chosen for a proxy that must never stall on its logs:
//! - Lines reach the sink up to [`FLUSH_INTERVAL`] late, in order.
//! - A batch holds at most [`BATCH_CAPACITY`] bytes; when the sink is slower
//!   than the traffic, further lines are dropped (never blocking a request);
//!   the next batch says how many in a line of the configured format (a
//!   JSON object in JSON mode, so a JSON pipeline never meets plain text),
//!   and `idemgate_log_lines_dropped_total` counts them.
//! - [`FlushGuard`] writes what is pending when dropped (normal exit and
//!   unwinding); a process killed with SIGKILL loses at most one interval.
//!
//! For JSON lines ([`LineFormat::Json`]) the appender also
//! writes every non-ASCII character the text format escapes (C1 controls
//! such as U+0085 and U+009B, U+2028 and U+2029, bidirectional and other
//! invisible format characters) as a `\uXXXX` escape: serde_json leaves
//! them raw, and a log viewer or a JavaScript consumer splits lines at
//! them or lets them rewrite the terminal. The escaped line is the same
//! JSON value.

use std::io::{self, Write};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::time::{FormatTime, SystemTime};

use crate::metrics::Description;

/// How long a batch fills before it is written: long enough that its one
/// wake-up and write are spread over many lines, short enough for `tail -f`.
pub const FLUSH_INTERVAL: Duration = Duration::from_millis(50);

/// Bytes one batch may hold (about 20,000 request lines): ample for any
/// rate the proxy serves, bounded when the sink stalls.
pub const BATCH_CAPACITY: usize = 4 << 20;

/// `idemgate_log_lines_dropped_total`: lines the full batch could not
/// take (see the module docs).
pub(crate) const LOG_LINES_DROPPED_TOTAL: Description = Description::counter(
    "idemgate_log_lines_dropped_total",
    "Log lines dropped because the log sink was slower than the traffic",
);

/// The metrics this module owns.
pub(crate) const DESCRIPTIONS: &[Description] = &[LOG_LINES_DROPPED_TOTAL];

/// The `target` the drop notice names, as a log line would.
const NOTICE_TARGET: &str = "idemgate::log_writer";

/// The format of the lines the subscriber writes: it decides how each line
/// is appended and the form of the drop notice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineFormat {
    /// tracing-subscriber's text lines, appended as they are.
    Text,
    /// One JSON object per line, escaped as the module docs say.
    Json,
}

/// Counts dropped lines: the global counter when running, a probe in tests
/// (the writer thread can not see a test's thread-local recorder).
type DropCounter = Arc<dyn Fn(u64) + Send + Sync>;

#[derive(Default, Debug)]
struct Batch {
    bytes: Vec<u8>,
    dropped: u64,
    closing: bool,
}

impl Batch {
    fn is_empty(&self) -> bool {
        self.bytes.is_empty() && self.dropped == 0
    }
}

#[derive(Debug)]
struct Shared {
    batch: Mutex<Batch>,
    wake: Condvar,
    capacity: usize,
    format: LineFormat,
}

impl Shared {
    /// A poisoned lock only means a writer panicked mid-append; the bytes
    /// are still a valid (possibly partial) log, so keep going.
    fn lock(&self) -> MutexGuard<'_, Batch> {
        self.batch.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The `MakeWriter` handed to `tracing_subscriber::fmt`: each formatted
/// event is appended to the current batch.
#[derive(Debug, Clone)]
pub struct BatchedWriter {
    shared: Arc<Shared>,
}

/// Whether the text format (`str`'s `Debug`) would escape `c`: a control,
/// separator, format or other non-printable character.
fn escaped_in_text(c: char) -> bool {
    !c.is_ascii() && c.escape_debug().next() == Some('\\')
}

/// Appends `line` to `out`, writing each non-ASCII character the text
/// format escapes as a JSON `\uXXXX` escape (two, a surrogate pair, above
/// U+FFFF). Every such character sits inside a JSON string (JSON's own
/// syntax is ASCII), so the value is unchanged. Bytes that are not UTF-8
/// are appended as they are.
fn append_json_escaped(out: &mut Vec<u8>, line: &[u8]) {
    let Ok(text) = std::str::from_utf8(line) else {
        out.extend_from_slice(line);
        return;
    };
    if text.is_ascii() {
        out.extend_from_slice(line);
        return;
    }
    let mut start = 0;
    for (at, c) in text.char_indices() {
        if escaped_in_text(c) {
            out.extend_from_slice(&line[start..at]);
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                write!(out, "\\u{unit:04x}").expect("writing into a Vec cannot fail");
            }
            start = at + c.len_utf8();
        }
    }
    out.extend_from_slice(&line[start..]);
}

/// Keeps the background thread alive; dropping it writes what is pending
/// and stops the thread.
#[derive(Debug)]
pub struct FlushGuard {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

/// Starts the background thread writing lines of `format` to `sink` every
/// [`FLUSH_INTERVAL`].
pub fn batched<W>(sink: W, format: LineFormat) -> io::Result<(BatchedWriter, FlushGuard)>
where
    W: Write + Send + 'static,
{
    let count: DropCounter =
        Arc::new(|dropped| metrics::counter!(LOG_LINES_DROPPED_TOTAL.name).increment(dropped));
    with_limits(sink, format, FLUSH_INTERVAL, BATCH_CAPACITY, count)
}

/// Describes `idemgate_log_lines_dropped_total` and creates it at 0, so
/// an alert on it has a series before the first drop.
pub(crate) fn register_metrics() {
    crate::metrics::describe(DESCRIPTIONS);
    metrics::counter!(LOG_LINES_DROPPED_TOTAL.name).increment(0);
}

/// [`batched`] with an explicit interval, capacity and drop counter (the
/// tests use short and small ones, and their own counter).
fn with_limits<W>(
    sink: W,
    format: LineFormat,
    interval: Duration,
    capacity: usize,
    count_drops: DropCounter,
) -> io::Result<(BatchedWriter, FlushGuard)>
where
    W: Write + Send + 'static,
{
    let shared = Arc::new(Shared {
        batch: Mutex::new(Batch::default()),
        wake: Condvar::new(),
        capacity,
        format,
    });
    let for_thread = Arc::clone(&shared);
    let thread = std::thread::Builder::new()
        .name("idemgate-log".into())
        .spawn(move || write_batches(&for_thread, sink, interval, &*count_drops))?;
    Ok((
        BatchedWriter {
            shared: Arc::clone(&shared),
        },
        FlushGuard {
            shared,
            thread: Some(thread),
        },
    ))
}

/// The background thread: sleep until a batch starts, let it fill for one
/// interval (or until closing), take it and write it in one call outside
/// the lock. An idle proxy costs this thread no wake-ups at all.
fn write_batches<W: Write>(
    shared: &Shared,
    mut sink: W,
    interval: Duration,
    count_drops: &(dyn Fn(u64) + Send + Sync),
) {
    let mut out = Vec::new();
    loop {
        let (dropped, closing) = {
            let mut batch = shared.lock();
            while batch.is_empty() && !batch.closing {
                batch = shared
                    .wake
                    .wait(batch)
                    .unwrap_or_else(PoisonError::into_inner);
            }
            if !batch.closing {
                // Appenders do not notify a non-empty batch: only closing
                // ends this wait early.
                batch = shared
                    .wake
                    .wait_timeout(batch, interval)
                    .map_or_else(|poisoned| poisoned.into_inner().0, |(batch, _)| batch);
            }
            std::mem::swap(&mut batch.bytes, &mut out);
            (std::mem::take(&mut batch.dropped), batch.closing)
        };
        if dropped > 0 {
            count_drops(dropped);
            drop_notice(&mut out, shared.format, dropped);
        }
        if !out.is_empty() {
            // Nothing sensible to do when stderr itself fails: a failure
            // could only be logged through this very thread.
            sink.write_all(&out).and_then(|()| sink.flush()).ok();
            out.clear();
        }
        if closing {
            return;
        }
    }
}

/// Appends the line saying `dropped` lines were lost, in `format` and with
/// the log lines' own timestamp form, so it sorts and parses among them.
fn drop_notice(out: &mut Vec<u8>, format: LineFormat, dropped: u64) {
    let mut timestamp = String::new();
    if SystemTime
        .format_time(&mut Writer::new(&mut timestamp))
        .is_err()
    {
        // A clock before 1970 or a formatter error: the notice still goes
        // out, without its time.
        timestamp.clear();
    }
    let message = format!("{dropped} log line(s) dropped: the log sink is slower than the traffic");
    let written = match format {
        LineFormat::Text => writeln!(out, "{timestamp}  WARN {NOTICE_TARGET}: {message}"),
        LineFormat::Json => {
            let line = serde_json::json!({
                "timestamp": timestamp,
                "level": "WARN",
                "message": message,
                "dropped": dropped,
                "target": NOTICE_TARGET,
            });
            writeln!(out, "{line}")
        }
    };
    written.expect("writing into a Vec cannot fail");
}

impl Drop for FlushGuard {
    fn drop(&mut self) {
        self.shared.lock().closing = true;
        self.shared.wake.notify_one();
        if let Some(thread) = self.thread.take() {
            // A panic in the writer thread has already been printed by the
            // panic hook, and the log it would be reported to is closing.
            thread.join().ok();
        }
    }
}

/// One event's writer: appends to the batch, or counts the line as dropped
/// when the batch is full. Never blocks on the sink.
#[derive(Debug)]
pub struct BatchAppender<'a> {
    shared: &'a Shared,
}

impl Write for BatchAppender<'_> {
    fn write(&mut self, line: &[u8]) -> io::Result<usize> {
        let mut batch = self.shared.lock();
        let starts_batch = batch.is_empty();
        // An escaped character takes at most three times its UTF-8 bytes
        // (2 → 6, 4 → 12): bound the batch by the worst case.
        let format = self.shared.format;
        let room = match format {
            LineFormat::Json => line.len() * 3,
            LineFormat::Text => line.len(),
        };
        if batch.bytes.len() + room <= self.shared.capacity {
            match format {
                LineFormat::Json => append_json_escaped(&mut batch.bytes, line),
                LineFormat::Text => batch.bytes.extend_from_slice(line),
            }
        } else {
            batch.dropped += 1;
        }
        drop(batch);
        // One wake-up per batch, not per line.
        if starts_batch {
            self.shared.wake.notify_one();
        }
        Ok(line.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for BatchedWriter {
    type Writer = BatchAppender<'a>;

    fn make_writer(&'a self) -> Self::Writer {
        BatchAppender {
            shared: &self.shared,
        }
    }
}

#[cfg(test)]
// The writer is an OS thread, which tokio's clock does not drive: these
// tests wait for it in real time.
#[allow(clippy::disallowed_types, clippy::disallowed_methods)]
mod tests {
    use super::*;
    use std::time::Instant;
    use tracing_subscriber::fmt::MakeWriter;

    /// A sink the test can read while the writer thread owns a handle,
    /// with the count of dropped lines the writer reported.
    #[derive(Clone, Default)]
    struct Sink {
        bytes: Arc<Mutex<Vec<u8>>>,
        dropped: Arc<std::sync::atomic::AtomicU64>,
    }

    impl Write for Sink {
        fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
            self.bytes.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl Sink {
        fn text(&self) -> String {
            String::from_utf8(self.bytes.lock().unwrap().clone()).unwrap()
        }
    }

    /// An interval no test waits out: only dropping the guard writes.
    const NEVER: Duration = Duration::from_secs(3600);
    /// A batch capacity no test fills.
    const ROOMY: usize = 1 << 16;

    /// A writer of `format` with these limits onto a fresh [`Sink`] the
    /// test reads.
    fn writer_into_sink(
        format: LineFormat,
        interval: Duration,
        capacity: usize,
    ) -> (Sink, BatchedWriter, FlushGuard) {
        let sink = Sink::default();
        let dropped = Arc::clone(&sink.dropped);
        let count: DropCounter = Arc::new(move |n| {
            dropped.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
        });
        let (writer, guard) = with_limits(sink.clone(), format, interval, capacity, count).unwrap();
        (sink, writer, guard)
    }

    /// Closes the writer (dropping its guard writes what is pending) and
    /// reads all that reached the sink.
    fn text_once_closed(sink: &Sink, guard: FlushGuard) -> String {
        drop(guard);
        sink.text()
    }

    fn log(writer: &BatchedWriter, line: &str) {
        writer.make_writer().write_all(line.as_bytes()).unwrap();
    }

    #[test]
    fn lines_wait_for_the_batch_and_arrive_in_order() {
        let (sink, writer, guard) =
            writer_into_sink(LineFormat::Text, Duration::from_millis(200), ROOMY);
        log(&writer, "one\n");
        log(&writer, "two\n");
        // Written through, a line would already be in the sink.
        assert_eq!(sink.text(), "", "a line reached the sink before its batch");
        let deadline = Instant::now() + Duration::from_secs(5);
        while sink.text().is_empty() {
            assert!(Instant::now() < deadline, "the batch was never written");
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(sink.text(), "one\ntwo\n");
        // The thread sleeps again and wakes for the next batch.
        log(&writer, "three\n");
        while sink.text().len() == "one\ntwo\n".len() {
            assert!(
                Instant::now() < deadline,
                "the second batch was never written"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(sink.text(), "one\ntwo\nthree\n");
        drop(guard);
    }

    #[test]
    fn dropping_the_guard_writes_what_is_pending() {
        let (sink, writer, guard) = writer_into_sink(LineFormat::Text, NEVER, ROOMY);
        log(&writer, "last words\n");
        let started = Instant::now();
        drop(guard);
        assert_eq!(sink.text(), "last words\n");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "closing waited for the interval"
        );
    }

    /// A full batch drops lines, counts them, and says how many in a line
    /// of the writer's own format.
    #[test]
    fn a_full_batch_drops_lines_and_says_how_many_in_its_format() {
        for (format, capacity, kept) in [
            (LineFormat::Text, 11, ["12345\n", "6789\n"]),
            // JSON appends reserve three times a line's length.
            (LineFormat::Json, 33, ["{\"a\":1}\n", "{\"b\":2}\n"]),
        ] {
            let (sink, writer, guard) = writer_into_sink(format, NEVER, capacity);
            for line in kept {
                log(&writer, line);
            }
            log(&writer, "{\"too\":\"long\"}\n");
            log(&writer, "{\"x\":\"yz\"}\n");
            let text = text_once_closed(&sink, guard);
            assert!(text.starts_with(&kept.concat()), "{text}");
            let notice = text.lines().nth(2).expect("a notice line");
            assert_eq!(text.lines().count(), 3, "{text}");
            assert!(notice.contains("2 log line(s) dropped"), "{notice}");
            match format {
                LineFormat::Text => {
                    assert!(notice.contains("  WARN idemgate::log_writer: "), "{notice}");
                }
                LineFormat::Json => {
                    let doc: serde_json::Value = serde_json::from_str(notice).expect(notice);
                    assert_eq!(doc["level"], "WARN", "{doc}");
                    assert_eq!(doc["dropped"], 2, "{doc}");
                    assert_eq!(doc["target"], NOTICE_TARGET, "{doc}");
                    assert!(doc["timestamp"].as_str().is_some_and(|t| t.ends_with('Z')));
                }
            }
            let counted = sink.dropped.load(std::sync::atomic::Ordering::Relaxed);
            assert_eq!(counted, 2, "{format:?}");
        }
    }

    #[test]
    fn json_lines_escape_what_the_text_format_escapes() {
        let mut out = Vec::new();
        let line =
            "{\"path\":\"/a\u{2028}b\u{2029}c\u{85}d\u{9b}e\u{202e}f\u{1d173}g é ✓ 日本\"}\n";
        append_json_escaped(&mut out, line.as_bytes());
        let escaped = String::from_utf8(out).unwrap();
        assert_eq!(
            escaped,
            "{\"path\":\"/a\\u2028b\\u2029c\\u0085d\\u009be\\u202ef\\ud834\\udd73g é ✓ 日本\"}\n"
        );
        let value: serde_json::Value = serde_json::from_str(&escaped).unwrap();
        let original: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(value, original, "the same JSON value");
        for raw in ['\u{2028}', '\u{2029}', '\u{85}', '\u{9b}'] {
            assert!(!escaped.contains(raw), "{raw:?} left raw");
        }
        let mut plain = Vec::new();
        append_json_escaped(&mut plain, b"{\"a\":1}\n\xff");
        assert_eq!(
            plain, b"{\"a\":1}\n\xff",
            "ASCII and non-UTF-8 pass as they are"
        );
    }

    #[test]
    fn a_json_writer_escapes_through_tracing() {
        let (sink, writer, guard) = writer_into_sink(LineFormat::Json, NEVER, ROOMY);
        let subscriber = tracing_subscriber::fmt()
            .json()
            .with_writer(writer)
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!(path = "/notify\u{2028}x\u{85}", "request");
        });
        let text = text_once_closed(&sink, guard);
        assert!(text.contains("/notify\\u2028x\\u0085"), "{text}");
        assert!(
            !text.contains('\u{2028}') && !text.contains('\u{85}'),
            "{text}"
        );
    }

    #[test]
    fn tracing_events_go_through_the_batch() {
        let (sink, writer, guard) = writer_into_sink(LineFormat::Text, NEVER, ROOMY);
        let subscriber = tracing_subscriber::fmt()
            .with_writer(writer)
            .with_ansi(false)
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!(route = "hook", "request");
        });
        assert_eq!(sink.text(), "");
        let text = text_once_closed(&sink, guard);
        assert!(
            text.contains("request") && text.contains("route=\"hook\""),
            "{text}"
        );
    }
}
