//! Process metrics (`process_cpu_seconds_total`,
//! `process_resident_memory_bytes`, `process_open_fds`, …): the standard
//! set Prometheus client libraries export, from the `metrics-process`
//! collector. They are read from the OS when `/metrics` is scraped, so each
//! scrape sees current values and nothing runs between scrapes.

use std::sync::LazyLock;

use metrics_process::Collector;

/// The one collector; its metric names are built once.
static COLLECTOR: LazyLock<Collector> = LazyLock::new(Collector::default);

/// Registers the process metrics' help texts and takes a first reading, so
/// the series exist from start-up.
pub(crate) fn register_descriptions() {
    COLLECTOR.describe();
    collect();
}

/// Reads the process's CPU time, memory, file descriptors and threads into
/// the recorder (a few small `/proc` reads on Linux).
pub(crate) fn collect() {
    COLLECTOR.collect();
}
