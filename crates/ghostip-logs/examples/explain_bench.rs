//! Measures the `explain` scanner's throughput on a log file, side by side with ripgrep searching
//! the same file, and reports the scanner's peak RSS.
//!
//! `cargo run --release -p ghostip-logs --example explain_bench -- PATH [RUNS]`
//!
//! Each tool runs RUNS times (default 3) over a warm page cache; the best run counts. ripgrep runs
//! twice per round: for one literal IP:port (`rg -c -F 10.244.3.70:8080`) and for an IP:port regex
//! (`rg -c '[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+:[0-9]+'`), and a third time for the scanner's own 31
//! prefilter needles as fixed strings (`rg -c -F -f needles.txt`, written beside the log): the
//! same literal work as the scanner's first stage. With `EXPLAIN_BENCH_NO_RG=1` only the
//! scanner runs (for instruction counts under callgrind); with `EXPLAIN_BENCH_SLICE=1` the file is
//! also read into memory and scanned with `Scanner::scan_slice` (no copy), after the peak RSS was
//! taken. The scan on several threads (segments read with positional reads) is the command's:
//! time `ghostip explain --threads N` (docs/BENCHMARKS.md).
// A benchmark: it prints how long each scan took (the scanner reads no clock).
#![allow(clippy::disallowed_methods)]

use std::process::Command;
use std::time::Instant;

use ghostip_logs::{ScanOptions, Scanner, open_reader, prefilter_needles};

fn vm_hwm_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn rg(args: &[&str], path: &str) -> Result<(f64, String), Box<dyn std::error::Error>> {
    let t = Instant::now();
    let out = Command::new("rg").args(args).arg(path).output()?;
    let secs = t.elapsed().as_secs_f64();
    Ok((secs, String::from_utf8_lossy(&out.stdout).trim().to_owned()))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let Some(path) = args.get(1) else {
        return Err("usage: explain_bench PATH [RUNS]".into());
    };
    let runs: usize = args.get(2).map_or(Ok(3), |s| s.parse())?;
    let bytes = std::fs::metadata(path)?.len() as f64;
    let gb = bytes / 1e9;
    let hwm_before = vm_hwm_kib().unwrap_or(0);
    let mut best_scan = f64::MAX;
    let mut best_lit = f64::MAX;
    let mut best_re = f64::MAX;
    let mut best_set = f64::MAX;
    let needles_path = format!("{path}.needles.txt");
    std::fs::write(&needles_path, prefilter_needles().join("\n") + "\n")?;
    let mut set_count = String::new();
    let mut failures = 0;
    let mut rg_counts = (String::new(), String::new());
    let with_rg = std::env::var_os("EXPLAIN_BENCH_NO_RG").is_none();
    let new_scanner = || {
        Scanner::new(ScanOptions {
            year: Some(2024),
            ..ScanOptions::default()
        })
    };
    for _ in 0..runs {
        let t = Instant::now();
        let mut scanner = new_scanner()?;
        let mut n = 0u64;
        scanner.scan(open_reader(std::fs::File::open(path)?)?, &mut |_| n += 1)?;
        best_scan = best_scan.min(t.elapsed().as_secs_f64());
        failures = n;
        if !with_rg {
            continue;
        }
        let (s, c) = rg(&["-c", "-F", "10.244.3.70:8080"], path)?;
        best_lit = best_lit.min(s);
        rg_counts.0 = c;
        let (s, c) = rg(&["-c", r"[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+:[0-9]+"], path)?;
        best_re = best_re.min(s);
        rg_counts.1 = c;
        let (s, c) = rg(&["-c", "-F", "-f", &needles_path], path)?;
        best_set = best_set.min(s);
        set_count = c;
    }
    let hwm = vm_hwm_kib().unwrap_or(0);
    if std::env::var_os("EXPLAIN_BENCH_SLICE").is_some() {
        // The file in memory, scanned without a copy.
        let t = Instant::now();
        let data = std::fs::read(path)?;
        let read_secs = t.elapsed().as_secs_f64();
        let mut best = f64::MAX;
        for _ in 0..runs {
            let t = Instant::now();
            let mut scanner = new_scanner()?;
            let mut n = 0u64;
            scanner.scan_slice(&data, &mut |_| n += 1);
            best = best.min(t.elapsed().as_secs_f64());
        }
        println!(
            "explain scan_slice (in memory, read took {read_secs:.3} s): {best:.3} s = {:.2} GB/s",
            gb / best
        );
    }
    println!("file: {path} ({:.3} GB)", gb);
    println!(
        "explain scanner: {best_scan:.3} s = {:.2} GB/s, {failures} failures, peak RSS {} MiB (before scanning {} MiB)",
        gb / best_scan,
        hwm / 1024,
        hwm_before / 1024
    );
    if !with_rg {
        return Ok(());
    }
    println!(
        "rg -c -F 10.244.3.70:8080: {best_lit:.3} s = {:.2} GB/s ({} matching lines); explain/rg = {:.2}x",
        gb / best_lit,
        rg_counts.0,
        best_lit / best_scan,
    );
    println!(
        "rg -c IP:port regex:       {best_re:.3} s = {:.2} GB/s ({} matching lines); explain/rg = {:.2}x",
        gb / best_re,
        rg_counts.1,
        best_re / best_scan
    );
    println!(
        "rg -c -F -f needles (31):  {best_set:.3} s = {:.2} GB/s ({set_count} matching lines); explain/rg = {:.2}x",
        gb / best_set,
        best_set / best_scan
    );
    Ok(())
}
