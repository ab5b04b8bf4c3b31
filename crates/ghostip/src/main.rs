//! The `ghostip` binary: parses the command line, runs one command, maps the outcome to an exit code.
#![deny(unsafe_code)]

mod allocator;

use std::io::IsTerminal;
use std::process::ExitCode;

use ghostip::cli::{Cli, Command};
use ghostip::commands::{self, Outcome};
use ghostip::report::sanitize::escape_controls_keep_newlines;

fn main() -> ExitCode {
    // As `ghostip`, or as `kubectl ghostip` through a file named kubectl-ghostip.
    let cli = Cli::try_parse_invoked(std::env::args_os()).unwrap_or_else(|e| e.exit());
    if matches!(cli.command, Command::Agent(_)) {
        allocator::tune_for_agent();
    }
    init_logging(
        &cli.global.log,
        matches!(cli.command, Command::Watch(_) | Command::Agent(_)),
    );
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("ghostip: starting the async runtime: {e}");
            return ExitCode::from(2);
        }
    };
    let result = runtime.block_on(commands::run(cli));
    // Blocking threads (a datapath reader being killed) get one second, not forever.
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    match result {
        Ok(Outcome::Clean) => ExitCode::SUCCESS,
        Ok(Outcome::Finding) => ExitCode::from(1),
        Err(e) => {
            // `ghostip: <what failed>: <cause>`, then a hint where one helps.
            // The causes may quote a file name or a cluster object: their control characters
            // are escaped, as in every other output.
            eprintln!(
                "ghostip: {}",
                escape_controls_keep_newlines(&format!("{e:#}"))
            );
            if let Some(hint) = commands::hint_for(&e) {
                eprintln!("hint: {hint}");
            }
            ExitCode::from(2)
        }
    }
}

/// Human logs on a terminal, JSON lines otherwise (and always for `watch` when not on a TTY).
fn init_logging(filter: &str, long_running: bool) {
    let filter = tracing_subscriber::EnvFilter::try_new(filter)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if std::io::stderr().is_terminal()
        || !long_running && std::env::var_os("GHOSTIP_JSON_LOGS").is_none()
    {
        builder.with_target(false).compact().init();
    } else {
        builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .init();
    }
}
