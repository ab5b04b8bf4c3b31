//! The `ghostip` binary: parses the command line, runs one command, maps the outcome to an exit code.
#![deny(unsafe_code)]

mod allocator;

use std::io::IsTerminal;
use std::process::ExitCode;

use ghostip::cli::{Cli, Command};
use ghostip::commands::{self, Outcome};
use ghostip::printer::sanitize::escape_controls_keep_newlines;
use ghostip::printer::write_stderr;

fn main() -> ExitCode {
    // As `ghostip`, or as `kubectl ghostip` through a file named kubectl-ghostip.
    let cli = match Cli::try_parse_invoked(std::env::args_os()) {
        Ok(cli) => cli,
        Err(e) if e.use_stderr() && invokes_drain_wait() => {
            // A preStop hook that fails makes a termination worse: a command line drain-wait
            // cannot read is reported in its JSON line, and the hook returns at once with 0.
            commands::drain_wait::parse_failure(&e.to_string());
            return ExitCode::SUCCESS;
        }
        Err(e) => e.exit(),
    };
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
            write_stderr(&format!("ghostip: starting the async runtime: {e}\n"));
            return ExitCode::from(2);
        }
    };
    let result = runtime.block_on(commands::run(cli));
    // Blocking threads (a datapath reader being killed) get one second, not forever.
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    // Output lost to a failed write (a full disk behind `> file`) is an error, not a success;
    // a reader that went away (`| head`) is not.
    let result = match (result, ghostip::printer::stdout_failure()) {
        (Ok(_), Some(cause)) => Err(anyhow::anyhow!("writing to stdout: {cause}")),
        (result, _) => result,
    };
    match result {
        Ok(Outcome::Clean) => ExitCode::SUCCESS,
        Ok(Outcome::Finding) => ExitCode::from(1),
        Err(e) => {
            // `ghostip: <what failed>: <cause>`, then a hint where one helps.
            // The causes may quote a file name or a cluster object: their control characters
            // are escaped, as in every other output.
            let mut text = format!(
                "ghostip: {}\n",
                escape_controls_keep_newlines(&format!("{e:#}"))
            );
            if let Some(hint) = commands::hint_for(&e) {
                text.push_str(&format!("hint: {hint}\n"));
            }
            write_stderr(&text);
            ExitCode::from(2)
        }
    }
}

/// Whether the command line names the `drain-wait` subcommand (its first argument that is not
/// a flag), read before clap could parse it.
fn invokes_drain_wait() -> bool {
    std::env::args_os()
        .skip(1)
        .find(|a| !a.to_string_lossy().starts_with('-'))
        .is_some_and(|a| a == "drain-wait")
}

/// Whether log lines may carry colour: only on a terminal, and never with `NO_COLOR` set
/// (<https://no-color.org>: any non-empty value).
fn colour(stderr_is_terminal: bool) -> bool {
    stderr_is_terminal && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// Human logs on a terminal, JSON lines otherwise (and always for `watch` when not on a TTY).
fn init_logging(filter: &str, long_running: bool) {
    let filter = tracing_subscriber::EnvFilter::try_new(filter)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let terminal = std::io::stderr().is_terminal();
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if terminal || !long_running && std::env::var_os("GHOSTIP_JSON_LOGS").is_none() {
        builder
            .with_ansi(colour(terminal))
            .with_target(false)
            .compact()
            .init();
    } else {
        builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .init();
    }
}
