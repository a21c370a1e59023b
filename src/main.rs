//! The `idemgate` binary: command line, logging, signals.
//!
//! `idemgate [serve] -c PATH` runs the proxy until SIGTERM/SIGINT;
//! `idemgate check-config --config PATH` validates a file (exit 2 with every
//! error on failure) and prints the effective configuration as TOML; `idemgate demo` runs the self-contained demonstration;
//! `idemgate admin …` talks to a running instance's admin API (`idemgate::cli`).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand, ValueEnum};
use idemgate::config::Config;
use idemgate::log_writer::{self, FlushGuard};
use idemgate::telemetry::{self, Telemetry};
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{EnvFilter, Layer as _};

/// mimalloc instead of glibc malloc: about 9% less CPU per request, for
/// more peak RSS (bench/RESULTS.md, Optimisations).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Exit code for an invalid configuration (contract §8).
const EXIT_BAD_CONFIG: u8 = 2;

/// The end of `--help`: what an operator needs beyond the flags, so a
/// script or a unit file can be written from the binary alone.
const AFTER_HELP: &str = "\
Exit codes:
  0  stopped cleanly (serve), valid configuration (check-config), healthy (healthcheck)
  1  could not start or run: a listener, the store, a secret file, an unhealthy probe
  2  invalid configuration: every problem is printed, one per line
  admin: 0 done, 1 the API refused, 2 usage error or no admin listener (admin --help)

Signals (serve):
  SIGTERM, SIGINT  stop accepting, finish in-flight deliveries (up to [limits] shutdown_grace), exit 0
  SIGHUP           re-read every file: secret and public key; a refused file keeps the old one

Configuration reference: config/idemgate.toml in the repository (every key, its
default and why), docs/contract.md for the guarantees; check-config prints the
effective configuration.";

#[derive(Debug, Parser)]
#[command(
    name = "idemgate",
    version = env!("IDEMGATE_VERSION"),
    about = "Idempotency sidecar for at-least-once webhooks",
    after_help = AFTER_HELP
)]
struct Cli {
    /// Configuration file (TOML; see config/idemgate.toml).
    #[arg(
        short = 'c',
        long,
        global = true,
        value_name = "FILE",
        env = "IDEMGATE_CONFIG"
    )]
    config: Option<PathBuf>,
    /// Log line format.
    #[arg(long, global = true, value_enum, value_name = "FORMAT", default_value_t = LogFormat::Text, env = "IDEMGATE_LOG_FORMAT")]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the proxy (the default).
    Serve,
    /// Validate the configuration and print it with secrets redacted.
    CheckConfig,
    /// Run a self-contained demonstration on loopback.
    Demo {
        /// Show idemgate's own log (warnings and errors) here, on stderr,
        /// instead of in the file the demo names.
        #[arg(long)]
        verbose: bool,
    },
    /// Operator commands over a running instance's admin API: records,
    /// inbox, hot keys, configuration, info.
    Admin(Box<idemgate::cli::AdminArgs>),
    /// Probe the admin listener's /healthz (container HEALTHCHECK; no shell
    /// tools needed). Exit 0 when healthy, 1 otherwise.
    Healthcheck,
}

/// Installs the log subscriber. Lines go to stderr in timed batches
/// (`idemgate::log_writer`), so the per-request line costs the request path
/// a formatted string and a memcpy, not a write syscall or a thread wake-up;
/// when stderr is slower than the traffic, lines are dropped and counted
/// rather than stalling requests. Keep the returned guard alive: dropping it
/// writes what is pending. Reports its own failure, like [`load`].
///
/// With `telemetry`, its OpenTelemetry layer goes beside the log layer; the
/// delivery spans it exports (target [`telemetry::TARGET`]) are kept out of
/// the log lines whatever `RUST_LOG` says.
fn init_logging(
    format: LogFormat,
    default: &str,
    telemetry: Option<&Telemetry>,
) -> Result<FlushGuard, ExitCode> {
    init_logging_to(LogSink::stderr(), format, default, telemetry)
}

/// Where log lines go, and whether they may carry colours (only a
/// terminal shows them; a file would keep the escape codes).
struct LogSink {
    writer: Box<dyn std::io::Write + Send>,
    colours: bool,
}

impl LogSink {
    /// Standard error, coloured when it is a terminal.
    fn stderr() -> Self {
        Self {
            writer: Box::new(std::io::stderr()),
            colours: std::io::IsTerminal::is_terminal(&std::io::stderr()),
        }
    }
}

/// [`init_logging`] into `sink` instead of stderr.
fn init_logging_to(
    sink: LogSink,
    format: LogFormat,
    default: &str,
    telemetry: Option<&Telemetry>,
) -> Result<FlushGuard, ExitCode> {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new(default))
        .add_directive(
            format!("{}=off", telemetry::TARGET)
                .parse()
                .map_err(|error| {
                    eprintln!("bad log filter directive: {error}");
                    ExitCode::FAILURE
                })?,
        );
    let line_format = match format {
        LogFormat::Text => log_writer::LineFormat::Text,
        LogFormat::Json => log_writer::LineFormat::Json,
    };
    let (writer, guard) = log_writer::batched(sink.writer, line_format).map_err(|error| {
        eprintln!("could not start the log writer thread: {error}");
        ExitCode::FAILURE
    })?;
    let lines = tracing_subscriber::fmt::layer().with_ansi(sink.colours);
    let lines = match format {
        LogFormat::Text => lines.with_writer(writer).boxed(),
        // serde_json leaves U+2028, C1 controls and the like raw; the
        // writer escapes them as the text format does (`log_writer`).
        LogFormat::Json => lines.json().flatten_event(true).with_writer(writer).boxed(),
    };
    tracing_subscriber::registry()
        .with(lines.with_filter(filter))
        .with(telemetry.map(Telemetry::layer))
        .init();
    Ok(guard)
}

/// Starts trace export when `[tracing]` configures it. Reports its own
/// failure, like [`load`].
fn start_telemetry(config: &Config) -> Result<Option<Telemetry>, ExitCode> {
    let Some(tracing) = &config.tracing else {
        return Ok(None);
    };
    Telemetry::start(tracing).map(Some).map_err(|error| {
        eprintln!("could not start trace export: {error}");
        ExitCode::FAILURE
    })
}

fn load(path: Option<&PathBuf>) -> Result<Config, ExitCode> {
    let Some(path) = path else {
        eprintln!("no configuration: pass --config PATH or set IDEMGATE_CONFIG");
        return Err(ExitCode::from(EXIT_BAD_CONFIG));
    };
    Config::load(path).map_err(|error| {
        eprintln!("{}: {error}", path.display());
        ExitCode::from(EXIT_BAD_CONFIG)
    })
}

/// Resolves on SIGTERM or SIGINT. The handlers are installed when this is
/// called, so call it before anything slow (connecting the store).
fn shutdown_signal() -> anyhow::Result<impl std::future::Future<Output = ()>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let mut int = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM received, shutting down"),
            _ = int.recv() => tracing::info!("SIGINT received, shutting down"),
        }
    })
}

/// SIGHUP re-reads every `file:` secret (rotation without a restart; the
/// same reload the file watcher runs, `idemgate::rotation`).
fn reload_secrets_on_sighup(config: Config) -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut hup = signal(SignalKind::hangup()).context("installing the SIGHUP handler")?;
    tokio::spawn(async move {
        while hup.recv().await.is_some() {
            idemgate::rotation::reload(&config, "SIGHUP");
        }
    });
    Ok(())
}

/// Tells systemd (`Type=notify`) about a state change; nothing happens
/// when `NOTIFY_SOCKET` is unset, and a failure is only logged (the
/// service manager then times the start out, which says enough).
fn notify_systemd(state: &[sd_notify::NotifyState<'_>]) {
    if let Err(error) = sd_notify::notify(state) {
        tracing::warn!(%error, "could not notify the service manager");
    }
}

/// The runtime `serve` runs on: tokio's current-thread scheduler for one
/// worker, the multi-thread one for more (why: the crate docs, "Runtime").
fn serving_runtime(worker_threads: usize) -> std::io::Result<tokio::runtime::Runtime> {
    let mut builder = if worker_threads <= 1 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut builder = tokio::runtime::Builder::new_multi_thread();
        builder.worker_threads(worker_threads);
        builder
    };
    builder.enable_all().thread_name("idemgate-worker").build()
}

async fn serve(config: Config) -> anyhow::Result<()> {
    let stop = shutdown_signal()?;
    tokio::pin!(stop);
    let metrics = idemgate::app::install_metrics()
        .map_err(anyhow::Error::msg)
        .context("installing the metrics recorder")?;
    // Clones share their secret cells, so reloading this copy's `file:`
    // secrets changes what every route verifies with.
    reload_secrets_on_sighup(config.clone())?;
    let app = tokio::select! {
        started = idemgate::app::start(config, Some(metrics)) => started.context("starting idemgate")?,
        () = &mut stop => return Ok(()),
    };
    // Both listeners are bound and the store is open (Redis: connected, or
    // the first connect wait is over and /readyz reports it): ready.
    notify_systemd(&[
        sd_notify::NotifyState::Ready,
        sd_notify::NotifyState::Status("serving"),
    ]);
    stop.await;
    notify_systemd(&[
        sd_notify::NotifyState::Stopping,
        sd_notify::NotifyState::Status("draining connections"),
    ]);
    app.stop().await;
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command.unwrap_or(Command::Serve) {
        Command::CheckConfig => match load(cli.config.as_ref()) {
            Ok(config) => {
                // One TOML document: the settings, then the report as
                // comments, so the whole output can be diffed or re-checked.
                print!("{}", config.to_toml());
                println!();
                for line in idemgate::pipeline::admit::route::spellings_report(&config) {
                    println!("# {line}");
                }
                for warning in config.warnings() {
                    println!("# warning: {warning}");
                }
                println!("# configuration is valid");
                ExitCode::SUCCESS
            }
            Err(code) => code,
        },
        Command::Serve => {
            let config = match load(cli.config.as_ref()) {
                Ok(config) => config,
                Err(code) => return code,
            };
            // Dropped after the runtime's end, flushing the last spans
            // (bounded by `telemetry::SHUTDOWN_FLUSH_BOUND`) before the logs.
            let telemetry = match start_telemetry(&config) {
                Ok(telemetry) => telemetry,
                Err(code) => return code,
            };
            let _flush_on_exit = match init_logging(cli.log_format, "info", telemetry.as_ref()) {
                Ok(guard) => guard,
                Err(code) => return code,
            };
            let _telemetry = telemetry;
            let runtime = match serving_runtime(config.limits.worker_threads) {
                Ok(runtime) => runtime,
                Err(error) => {
                    tracing::error!(%error, "could not start the tokio runtime");
                    return ExitCode::FAILURE;
                }
            };
            match runtime.block_on(serve(config)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(error) => {
                    tracing::error!("{error:#}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Admin(args) => idemgate::cli::run(&args, cli.config.as_deref()),
        Command::Healthcheck => {
            // Only the admin address is needed: no secrets are resolved, and
            // every failure is exit 1 (container runtimes reserve 2).
            let admin = match cli.config.as_deref().map(idemgate::config::admin_address) {
                Some(Ok(admin)) => admin,
                Some(Err(error)) => {
                    eprintln!("unhealthy: {error}");
                    return ExitCode::FAILURE;
                }
                None => {
                    eprintln!("unhealthy: no configuration (--config or IDEMGATE_CONFIG)");
                    return ExitCode::FAILURE;
                }
            };
            let runtime = tokio::runtime::Runtime::new().expect("tokio runtime");
            match runtime.block_on(idemgate::admin::probe_health(admin)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(error) => {
                    eprintln!("unhealthy: {error}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Demo { verbose } => {
            // Scenario 7 has the inbox acknowledge and queue deliveries on
            // purpose; its row reports that, so its warnings would be noise.
            let filter = "warn,idemgate::inbox=error";
            // The demo's own output is its table and its verdict, last:
            // idemgate's log goes to a file the demo names, unless asked
            // for here.
            let opened = (!verbose).then(idemgate::demo::log_file).and_then(|path| {
                match std::fs::File::create(&path) {
                    Ok(file) => Some((path, file)),
                    Err(error) => {
                        eprintln!(
                            "idemgate demo: its log file {}: {error}; the log goes to stderr",
                            path.display()
                        );
                        None
                    }
                }
            });
            let (sink, log_file) = match opened {
                Some((path, file)) => {
                    let sink = LogSink {
                        writer: Box::new(file),
                        colours: false,
                    };
                    (sink, Some(path))
                }
                None => (LogSink::stderr(), None),
            };
            let _flush_on_exit = match init_logging_to(sink, cli.log_format, filter, None) {
                Ok(guard) => guard,
                Err(code) => return code,
            };
            let runtime = tokio::runtime::Runtime::new().expect("tokio runtime");
            match runtime.block_on(idemgate::demo::run(log_file.as_deref())) {
                Ok(true) => ExitCode::SUCCESS,
                Ok(false) => ExitCode::FAILURE,
                Err(error) => {
                    eprintln!("demo failed: {error}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}
