//! Parses a dump file with `--format auto` detection and prints the table, the skip
//! counts and the process's peak RSS (`VmHWM`), to check that memory stays flat.
//!
//! `cargo run --release -p ghostip-datapath --example parse_file -- DUMP [FORMAT] [--quiet] [--diff-gen SERVICES ENDPOINTS] [--packed]`
//!
//! With `--packed`, the dump is parsed as the agent's audit does it
//! (`parse_reader_packed`: frontends straight into a `PackedTable`, no `LbTable`).
//!
//! With `--diff-gen`, the truth of the generated cluster of that size
//! (`GenModel::truth`, built before the clock starts) is compared with the parsed table
//! (`NodeExpectations::new` for node `node-1`, then `NodeExpectations::diff`), and both
//! are timed (CPU time of the thread).
#![allow(clippy::print_stdout, clippy::print_stderr)]
// A measuring tool: it prints how long the parse took (the parsers read no clock).
#![allow(clippy::disallowed_methods)]

use std::fs::File;
use std::io::BufReader;
use std::process::ExitCode;
use std::time::Instant;

use ghostip_datapath::against_truth::NodeExpectations;
use ghostip_datapath::{Format, Parsed, detect_format, parse_reader, parse_reader_packed};
use ghostip_testkit::dumps::{GenModel, GenSpec, THIS_NODE};

fn vm_hwm_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// CPU time this thread has used so far (`CLOCK_THREAD_CPUTIME_ID`; `schedstat` lags up to a
/// scheduler tick for the thread reading it).
fn cpu_secs() -> f64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    t.tv_sec as f64 + t.tv_nsec as f64 / 1e9
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(path) = args.first() else {
        eprintln!(
            "usage: parse_file DUMP [FORMAT] [--quiet] [--diff-gen SERVICES ENDPOINTS] [--packed]"
        );
        return ExitCode::from(2);
    };
    let quiet = args.iter().any(|a| a == "--quiet");
    let truth = args.iter().position(|a| a == "--diff-gen").and_then(|i| {
        let services = args.get(i + 1)?.parse().ok()?;
        let endpoints = args.get(i + 2)?.parse().ok()?;
        let model = GenModel::generate(&GenSpec::new(services, endpoints));
        Some(model.truth(ghostip_core::Time::UNIX_EPOCH))
    });
    let format = match args.get(1).filter(|a| !a.starts_with("--")) {
        Some(f) => match f.parse::<Format>() {
            Ok(f) => f,
            Err(e) => {
                eprintln!("{e}");
                return ExitCode::from(2);
            }
        },
        None => {
            // Detection looks at the first 64 KiB only.
            let head = match File::open(path).and_then(|f| {
                use std::io::Read;
                let mut buf = vec![0; 64 * 1024];
                let n = f.take(64 * 1024).read(&mut buf)?;
                buf.truncate(n);
                Ok(buf)
            }) {
                Ok(h) => h,
                Err(e) => {
                    eprintln!("{path}: {e}");
                    return ExitCode::from(2);
                }
            };
            match detect_format(&head) {
                Some(f) => f,
                None => {
                    eprintln!("{path}: format not recognized");
                    return ExitCode::from(2);
                }
            }
        }
    };
    let size = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    let before = vm_hwm_kib().unwrap_or(0);
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("{path}: {e}");
            return ExitCode::from(2);
        }
    };
    let start = Instant::now();
    let cpu0 = cpu_secs();
    if args.iter().any(|a| a == "--packed") {
        // The agent's audit path: frontends straight into a packed table.
        let packed = parse_reader_packed(format, BufReader::with_capacity(256 * 1024, file));
        let elapsed = start.elapsed();
        let parse_cpu = cpu_secs() - cpu0;
        let after = vm_hwm_kib().unwrap_or(0);
        match packed {
            Ok(Some(t)) => println!(
                "format={format} packed frontends={} backends={} ignored={} unknown={}",
                t.frontends.len(),
                t.backend_count(),
                t.skipped.ignored,
                t.skipped.unknown
            ),
            Ok(None) => println!("format={format}: not a load-balancer table"),
            Err(e) => {
                eprintln!("{path}: {e}");
                return ExitCode::from(1);
            }
        }
        println!(
            "input={:.1} MB parse={:.3} s cpu={:.3} s VmHWM before={} KiB after={} KiB",
            size as f64 / 1e6,
            elapsed.as_secs_f64(),
            parse_cpu,
            before,
            after
        );
        return ExitCode::SUCCESS;
    }
    let parsed = parse_reader(format, BufReader::with_capacity(256 * 1024, file));
    let elapsed = start.elapsed();
    let parse_cpu = cpu_secs() - cpu0;
    let after = vm_hwm_kib().unwrap_or(0);
    match parsed {
        Ok(Parsed::Lb(t)) => {
            if !quiet {
                println!("{}", serde_json::to_string_pretty(&t).unwrap_or_default());
            }
            if let Some(truth) = &truth {
                let cpu0 = cpu_secs();
                let expect = NodeExpectations::new(truth, Some(THIS_NODE), None);
                let cpu1 = cpu_secs();
                let d = expect.diff(&t, None, None);
                println!(
                    "expectations cpu={:.3} s (once per truth change) diff cpu={:.3} s checked={} stale={} missing={} services_missing={} unknown={}",
                    cpu1 - cpu0,
                    cpu_secs() - cpu1,
                    d.frontends_checked,
                    d.stale.len(),
                    d.missing.len(),
                    d.services_missing.len(),
                    d.unknown_frontends
                );
            }
            println!(
                "format={format} frontends={} backends={} ignored={} unknown={}",
                t.frontends.len(),
                t.backend_count(),
                t.skipped.ignored,
                t.skipped.unknown
            );
        }
        Ok(Parsed::Conntrack(t)) => {
            if !quiet {
                for e in &t.entries {
                    println!("{e:?}");
                }
            }
            println!(
                "format={format} entries={} ignored={} unknown={}",
                t.entries.len(),
                t.skipped.ignored,
                t.skipped.unknown
            );
        }
        Err(e) => {
            eprintln!("{path}: {e}");
            return ExitCode::from(1);
        }
    }
    println!(
        "input={:.1} MB parse={:.3} s cpu={:.3} s ({:.0} MB/s) VmHWM before={} KiB after={} KiB",
        size as f64 / 1e6,
        elapsed.as_secs_f64(),
        parse_cpu,
        size as f64 / 1e6 / elapsed.as_secs_f64().max(1e-9),
        before,
        after
    );
    ExitCode::SUCCESS
}
