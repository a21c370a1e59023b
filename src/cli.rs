//! `idemgate admin …`: the operator's jobs (resolve an unknown outcome,
//! retry or drop a dead delivery, find a retry loop) as one-line commands
//! over the admin API of a running instance, instead of hand-built `curl`
//! with a 64-hex key copied out of a log line.
//!
//! * `args` — the command line (clap), its help and examples;
//! * `access` — the admin address and token: flag, environment, then the
//!   configuration file (the token never from a flag's value);
//! * `http` — one request over plain HTTP/1.1 (hyper-util's client);
//! * `commands` — each subcommand as its request(s), paging with `--all`;
//! * `render`, `table` — the answers as aligned text for people (`--json`
//!   prints the API's own JSON instead).
//!
//! Exit codes: 0 done, 1 the API refused (its problem document's title,
//! detail and reason on stderr), 2 a usage error or an unreachable
//! listener — so a script tells "no such record" from "no idemgate".

mod access;
mod args;
mod commands;
mod http;
mod render;
mod table;

use std::io::Write as _;
use std::path::Path;
use std::process::ExitCode;

use bytes::Bytes;

pub use access::{ADDR_ENV, TOKEN_ENV};
pub use args::{
    AdminArgs, AdminCommand, InboxCommand, InboxListing, Page, RecordListing, RecordsCommand,
    Target,
};

/// Why an admin command did not do its job; each maps to an exit code.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// The command line or the configuration it points at is wrong (exit 2).
    #[error("{0}")]
    Usage(String),
    /// The admin listener could not be reached, or did not answer as the
    /// admin API does (exit 2).
    #[error("cannot reach the admin API: {0}")]
    Unreachable(String),
    /// The API answered with a refusal (exit 1): the message for people,
    /// and the answer's body as it came (printed on stdout with `--json`).
    #[error("{message}")]
    Refused {
        /// `error: <title>: <detail> (reason <reason>, HTTP <status>)`.
        message: String,
        /// The problem document.
        body: Bytes,
    },
}

impl CliError {
    /// The process exit code: 1 for a refusal, 2 for the rest.
    pub fn exit_code(&self) -> u8 {
        match self {
            Self::Refused { .. } => 1,
            Self::Usage(_) | Self::Unreachable(_) => 2,
        }
    }
}

/// Writes `text` to stdout. A closed pipe (`| head`) ends the output,
/// not the command, and is no panic (as `print!` would make it).
fn print(text: &str) {
    let mut stdout = std::io::stdout().lock();
    // The one error here is the reader gone; there is no one left to tell.
    if stdout.write_all(text.as_bytes()).is_ok() {
        stdout.flush().ok();
    }
}

/// Runs one admin command; `config` is `-c/--config` (or
/// `IDEMGATE_CONFIG`), read only for what the flags and the environment
/// leave open. Prints the result on stdout, a failure on stderr.
pub fn run(args: &AdminArgs, config: Option<&Path>) -> ExitCode {
    let sources = access::Sources {
        addr: args.addr.as_deref(),
        token_file: args.token_file.as_deref(),
        config,
    };
    let outcome = sources
        .resolve(|name| std::env::var(name).ok())
        .and_then(|endpoint| {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| CliError::Usage(format!("cannot start the tokio runtime: {e}")))?;
            let client = http::AdminClient::new(endpoint);
            runtime.block_on(commands::execute(&client, args, &mut print))
        });
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            if let (true, CliError::Refused { body, .. }) = (args.json, &error) {
                print(&format!("{}\n", String::from_utf8_lossy(body).trim_end()));
            }
            eprintln!("{error}");
            ExitCode::from(error.exit_code())
        }
    }
}
