//! `ghostip soak-score` on a generated 30-minute soak: 4 ledgers, 120 scrapes of 4 sources.
//!
//! `cargo bench -p ghostip --bench soak_score`. The directory is generated once through the
//! ledger API and cached at `$GHOSTIP_BENCH_CACHE/soak-30min` (default
//! `/var/cache/ghostip/bench`). Each round reads it the way the command does
//! (`read_soak_dir`), scores it, renders the table, the JSON and the chart. Baseline in the same
//! run: reading every file's bytes alone. Prints the median and max of 5 rounds of each, wall
//! and process CPU, and their ratio.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]
// A benchmark: it times what it measures with the system's monotonic clock.
#![allow(clippy::disallowed_methods)]

use std::fmt::Write as _;
use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use ghostip::commands::soak_score::read_soak_dir;
use ghostip::ledger::{FindingKind, FindingRecord, Ledger};
use ghostip::printer::Layout;
use ghostip::printer::soak::render_soak_table;
use ghostip_analysis::soak::{score, svg};
use ghostip_core::{ServiceKey, Target, Time};

const MINUTES: u64 = 30;
const SCRAPES: u64 = 120;
const SOURCES: [&str; 4] = ["watch", "agent-node-1", "agent-node-2", "agent-node-3"];
/// Findings per ledger: a rollout every 30 s removing 3 IPs seen by 4 paths is 720; 2 000
/// leaves room.
const FINDINGS: u64 = 2_000;
/// Services with a stale-window histogram in each scrape (16 lines each).
const SERVICES: usize = 25;
const ROUNDS: usize = 5;

fn start() -> Time {
    "2026-12-05T10:00:00Z".parse().unwrap()
}

fn at(secs: u64) -> Time {
    start() + Duration::from_secs(secs)
}

fn generate(dir: &Path) {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir.join("ledgers")).unwrap();
    let end = MINUTES * 60;
    let mut faults = Vec::new();
    for i in 0..6u64 {
        let s = 120 + i * 270;
        faults.push(format!(
            r#"{{"id":"f{i}","kind":"kube-proxy-stopped","node":"node-{n}","start":"{}","end":"{}",
"stale_ips":["10.244.{n}.{i}"],"stale_from":"{}","detectable":true,"layer":"datapath"}}"#,
            at(s),
            at(s + 90),
            at(s + 20),
            n = 1 + i % 3
        ));
    }
    faults.push(format!(
        r#"{{"id":"g1","kind":"apiserver-stopped","start":"{}","end":"{}","detectable":false}}"#,
        at(1500),
        at(1560)
    ));
    let truth = format!(
        r#"{{"seed":7,"started":"{}","ended":"{}","nodes":["node-1","node-2","node-3"],"faults":[{}],"rollouts":[]}}"#,
        start(),
        at(end),
        faults.join(",")
    );
    std::fs::write(dir.join("ground-truth.json"), truth).unwrap();
    for (k, source) in SOURCES.iter().enumerate() {
        let mut l = Ledger::open(dir.join(format!("ledgers/{source}.db"))).unwrap();
        for n in 0..FINDINGS {
            let t0 = at(n * end / FINDINGS);
            let node = 1 + (n % 3);
            let (layer, path) = if k == 0 {
                ("dns", format!("dns-pod/10.244.0.{}:53", n % 3))
            } else {
                ("datapath", format!("iptables/node-{k}"))
            };
            l.record_finding(&FindingRecord {
                kind: FindingKind::Stale,
                layer: layer.into(),
                path_id: path,
                path_kind: "iptables".into(),
                service: ServiceKey::new("default", format!("web-{}", n % 20)),
                target: Target::ip(IpAddr::V4(Ipv4Addr::new(
                    10,
                    244,
                    node as u8,
                    (n % 250) as u8,
                ))),
                t0,
                received: t0 + Duration::from_millis(100),
                trigger: None,
                t0_correction: None,
                last_seen: Some(t0 + Duration::from_secs(1)),
                converged_by: Some(t0 + Duration::from_secs(2)),
                window: Some(Duration::from_secs(2)),
                expected_lag: Some(Duration::from_secs(5)),
                // One in 50 judged over its lag: false positives for the table to list.
                verdict: if n % 50 == 0 {
                    "over expected lag"
                } else {
                    "within expected lag"
                }
                .into(),
                exposure: None,
                former_pod: None,
            })
            .unwrap();
        }
        l.truth_gap_start(at(1501), "watch error").unwrap();
        l.truth_gap_end(at(1562)).unwrap();
        let mdir = dir.join("metrics").join(source);
        std::fs::create_dir_all(&mdir).unwrap();
        for i in 0..SCRAPES {
            let t = at(i * 15);
            let mut text = String::new();
            let _ = writeln!(
                text,
                "# TYPE process_resident_memory_bytes gauge\nprocess_resident_memory_bytes {}\n\
                 # TYPE process_cpu_seconds_total gauge\nprocess_cpu_seconds_total {}",
                60_000_000 + i * 1000,
                i as f64 * 0.3
            );
            text.push_str("# TYPE ghostip_stale_window_seconds histogram\n");
            for s in 0..SERVICES {
                for le in [
                    "0.25", "0.5", "1.0", "2.0", "5.0", "10.0", "15.0", "30.0", "45.0", "60.0",
                    "120.0", "300.0", "900.0", "+Inf",
                ] {
                    let _ = writeln!(
                        text,
                        "ghostip_stale_window_seconds_bucket{{layer=\"dns\",path_kind=\"dns-pod\",namespace=\"default\",service=\"web-{s}\",le=\"{le}\"}} {i}"
                    );
                }
                let _ = writeln!(
                    text,
                    "ghostip_stale_window_seconds_sum{{layer=\"dns\",path_kind=\"dns-pod\",namespace=\"default\",service=\"web-{s}\"}} {}\n\
                     ghostip_stale_window_seconds_count{{layer=\"dns\",path_kind=\"dns-pod\",namespace=\"default\",service=\"web-{s}\"}} {i}",
                    i * 2
                );
            }
            text.push_str("# EOF\n");
            std::fs::write(mdir.join(format!("{}.prom", t.as_second())), text).unwrap();
        }
    }
    std::fs::write(dir.join("complete"), "").unwrap();
}

fn cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    let after = stat.rsplit_once(')').unwrap().1;
    let f: Vec<u64> = after
        .split_whitespace()
        .skip(11)
        .take(2)
        .map(|v| v.parse().unwrap())
        .collect();
    Duration::from_millis((f[0] + f[1]) * 10)
}

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            files(&p, out);
        } else {
            out.push(p);
        }
    }
}

fn measure(mut f: impl FnMut()) -> (Duration, Duration, Duration) {
    let mut walls = Vec::new();
    let mut cpus = Vec::new();
    for _ in 0..ROUNDS {
        let (w, c) = (Instant::now(), cpu());
        f();
        walls.push(w.elapsed());
        cpus.push(cpu() - c);
    }
    walls.sort();
    cpus.sort();
    (walls[ROUNDS / 2], walls[ROUNDS - 1], cpus[ROUNDS / 2])
}

fn main() {
    let cache = std::env::var_os("GHOSTIP_BENCH_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/cache/ghostip/bench"));
    let dir = cache.join("soak-30min");
    if !dir.join("complete").exists() {
        let t = Instant::now();
        generate(&dir);
        eprintln!("generated {} in {:?}", dir.display(), t.elapsed());
    }
    let mut all = Vec::new();
    files(&dir, &mut all);
    let bytes: u64 = all.iter().map(|p| p.metadata().unwrap().len()).sum();
    let now = at(MINUTES * 60);
    let (full_med, full_max, full_cpu) = measure(|| {
        let input = read_soak_dir(&dir, 64 << 20, now).unwrap();
        let s = score(&input);
        black_box(render_soak_table(&s, &Layout::fixed(120)));
        black_box(serde_json::to_string(&s).unwrap());
        black_box(svg::render(&s));
    });
    let (base_med, base_max, base_cpu) = measure(|| {
        for p in &all {
            black_box(std::fs::read(p).unwrap());
        }
    });
    println!(
        "soak-score, {MINUTES}-minute soak: {} files, {:.1} MiB ({} ledgers × {FINDINGS} findings, {SCRAPES} scrapes × {} sources)",
        all.len(),
        bytes as f64 / 1_048_576.0,
        SOURCES.len(),
        SOURCES.len()
    );
    println!(
        "  read + score + table + json + svg: median {full_med:.3?} (max {full_max:.3?}), CPU {full_cpu:.3?}"
    );
    println!(
        "  baseline, reading the bytes alone: median {base_med:.3?} (max {base_max:.3?}), CPU {base_cpu:.3?}"
    );
    println!(
        "  ratio {:.1}× (target: under 10 s)",
        full_med.as_secs_f64() / base_med.as_secs_f64().max(1e-9)
    );
}
