//! End-to-end test of the first incident with real gRPC on the real-node lab: the lab's grpc-go
//! and grpc-java clients (`dns:///` + `round_robin`, channelz served on a port named
//! `channelz`) call grpcdemo/echo (three grpc-go servers behind a headless Service, graceful
//! stop on SIGTERM) while `kubectl rollout restart` replaces them
//! (`lab/scenarios/grpc-headless`).
//!
//! - With the classic Corefile and no preStop, each client's own log holds `connection
//!   refused` failures naming removed pod IPs. The watch installed from `deploy/helm/ghostip`
//!   reads the clients' channelz every second: for every removed IP a client failed on, its
//!   ledger holds a window of that client's balancer over the address that covers every one of
//!   those failures and closes at most the read interval + 1 s after the last one; `ghostip
//!   explain` over the client's log, joined with that ledger, classes them
//!   `stale-client-balancer`, names each removed pod, and no live pod.
//! - With a preStop longer than grpc-go's 30 s re-resolution interval plus the DNS budget, no
//!   call to a removed IP fails and the watch records no channelz window over its expected lag.
//!
//! Needs the real-node lab (`lab/up --node-kind real`, ghostip installed) and root;
//! `#[ignore]`d. scripts/test runs it with
//! `GHOSTIP_LAB=1 cargo test --release -p ghostip --test e2e -- --ignored --test-threads=1 e2e_grpc::`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::e2e_nodes::require_real_nodes;
use crate::lab_support::{lab, run};

use ghostip::ledger::Ledger;
use ghostip_core::Time;
use serde_json::Value;

/// The watch's ledger, on the hostPath volume lab/ghostip-install gives its claim.
const WATCH_DB: &str = "/var/lib/ghostip-lab/pv/ghostip-watch-db/ghostip.db";
/// The watch's `--channelz-interval` in the lab (lab/ghostip-install).
const READ_INTERVAL_S: f64 = 1.0;

/// Runs the scenario; returns its exit code and its `RESULT` JSON.
fn scenario(args: &[&str]) -> (i32, Value) {
    let (code, out, err) = run(lab("scenarios/grpc-headless").args(args));
    eprintln!("{out}");
    let result = out
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("RESULT "))
        .unwrap_or_else(|| panic!("no RESULT line (exit {code}):\n{err}"));
    (code, serde_json::from_str(result).unwrap())
}

fn ms(v: &Value) -> Time {
    Time::from_millisecond(v.as_i64().unwrap()).unwrap()
}

/// The channelz findings of the scenario's clients (namespace grpcdemo) recorded since `since`.
fn channelz_findings(since: Time) -> Vec<ghostip::ledger::FindingRecord> {
    let ledger = Ledger::open_read_only(WATCH_DB).unwrap();
    ledger
        .findings_since(since)
        .unwrap()
        .into_iter()
        .filter(|f| f.layer == "channelz" && f.path_id.starts_with("channelz/grpcdemo/"))
        .collect()
}

/// `ghostip explain` over the client's log, joined with the watch's ledger.
fn explain(log: &Path) -> Value {
    let (code, out, err) = run(Command::new(env!("CARGO_BIN_EXE_ghostip"))
        .args(["--db", WATCH_DB, "explain", "--tz", "UTC", "-o", "json"])
        .arg(log));
    assert!(code == 0 || code == 1, "explain failed ({code}): {err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("bad JSON ({e}):\n{out}\n{err}"))
}

#[test]
#[ignore = "needs the real-node lab (lab/up --node-kind real, ghostip installed, GHOSTIP_LAB=1, root)"]
fn grpc_clients_fail_on_removed_ips_inside_the_windows_of_their_own_balancers() {
    require_real_nodes();
    let (code, r) = scenario(&[]);
    assert_eq!(code, 0, "the incident reproduced: {r}");
    let restart = ms(&r["restart_unix_ms"]);
    let old_pods: Vec<&Value> = r["old_pods"].as_array().unwrap().iter().collect();
    let clients = r["clients"].as_array().unwrap();
    assert_eq!(clients.len(), 2, "grpc-go and grpc-java: {r}");

    // (client pod, ip) of every removed IP a client failed on.
    let want: BTreeSet<(String, String)> = clients
        .iter()
        .flat_map(|c| {
            c["removed"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|x| x["failures"].as_u64().unwrap() > 0)
                .map(move |x| {
                    (
                        c["pod"].as_str().unwrap().to_string(),
                        x["ip"].as_str().unwrap().to_string(),
                    )
                })
        })
        .collect();
    assert!(!want.is_empty(), "{r}");
    // A window is written when it closes: every one of them gets one.
    let start = Instant::now();
    let findings = loop {
        let f = channelz_findings(restart);
        let have: BTreeSet<(String, String)> = f
            .iter()
            .filter_map(|f| {
                let mut p = f.path_id.splitn(4, '/');
                let (_, ns, pod) = (p.next()?, p.next()?, p.next()?);
                Some((format!("{ns}/{pod}"), f.target.ip.to_string()))
            })
            .collect();
        if want.is_subset(&have) {
            break f;
        }
        assert!(
            start.elapsed() < Duration::from_secs(90),
            "no channelz window for {:?} in the watch's ledger: {f:#?}",
            want.difference(&have).collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_secs(1));
    };
    for f in &findings {
        eprintln!(
            "channelz window {} {}: t0 {} last seen {:?} converged {:?} verdict {}",
            f.path_id, f.target, f.t0, f.last_seen, f.converged_by, f.verdict
        );
    }

    for c in clients {
        let pod_name = c["pod"].as_str().unwrap();
        let x = explain(Path::new(c["log"].as_str().unwrap()));
        let mut failed_on = BTreeSet::new();
        for rem in c["removed"].as_array().unwrap() {
            if rem["failures"].as_u64().unwrap() == 0 {
                continue;
            }
            let ip = rem["ip"].as_str().unwrap();
            failed_on.insert(ip.to_string());
            let first = ms(&rem["first_failure_ms"]);
            let last = ms(&rem["last_failure_ms"]);
            let t = x["targets"]
                .as_array()
                .unwrap()
                .iter()
                .find(|t| t["ip"] == ip)
                .unwrap_or_else(|| panic!("explain of {pod_name} has no target {ip}: {x}"));
            let held = t["held"]
                .as_array()
                .and_then(|h| h.iter().find(|h| h["holder"] == pod_name))
                .unwrap_or_else(|| panic!("no window of {pod_name}'s balancer over {ip}: {t}"));
            let since: Time = held["since"].as_str().unwrap().parse().unwrap();
            let until: Time = held["until"].as_str().unwrap().parse().unwrap();
            let start_gap = first.duration_since(since).as_secs_f64();
            let end_gap = until.duration_since(last).as_secs_f64();
            eprintln!(
                "{pod_name} {ip}: failures {first}..{last} ({}), balancer held it {since}..{until}: first failure {start_gap:+.2} s after it left, window closed {end_gap:+.2} s after the last failure",
                rem["failures"]
            );
            assert_eq!(
                held["failures_within"], rem["failures"],
                "every failure of {pod_name} to {ip} inside the window: {held}"
            );
            // The window closes at the first read without the address; the client's last
            // failure to it comes before the re-resolution that dropped it.
            assert!(
                (0.0..=READ_INTERVAL_S + 1.0).contains(&end_gap),
                "window of {pod_name} over {ip} closed {end_gap:.2} s after the last failure: {held}"
            );
            // explain names the removed pod that owned it.
            let owner = t["owner_at_first_error"]["pod"]
                .as_str()
                .unwrap_or_default();
            let pod = old_pods
                .iter()
                .find(|p| p["ip"] == ip)
                .unwrap_or_else(|| panic!("{ip} is no old pod's: {r}"));
            assert!(
                owner.ends_with(pod["name"].as_str().unwrap()),
                "explain names {owner} for {ip}, the scenario {pod}"
            );
        }
        // Failures to removed IPs are the balancer's; none is put on a live pod.
        for g in x["report"]["groups"].as_array().unwrap() {
            let peer = g["peer"].as_str().unwrap();
            assert_ne!(g["class"], "not_staleness", "a live pod blamed: {g}");
            if failed_on.contains(peer) {
                assert_eq!(g["class"], "stale_client_balancer", "{pod_name}: {g}");
            }
        }
    }
}

#[test]
#[ignore = "needs the real-node lab (lab/up --node-kind real, ghostip installed, GHOSTIP_LAB=1, root)"]
fn a_prestop_past_the_re_resolution_leaves_no_failure_and_no_window_over_its_lag() {
    require_real_nodes();
    let (code, r) = scenario(&["--prestop", "45"]);
    assert_eq!(code, 0, "{r}");
    assert_eq!(r["failed_to_removed"], 0, "{r}");
    let restart = ms(&r["restart_unix_ms"]);
    let over: Vec<_> = channelz_findings(restart)
        .into_iter()
        .filter(|f| f.verdict == "over expected lag" || f.verdict == "stuck")
        .collect();
    assert!(over.is_empty(), "windows over their lag: {over:#?}");
}
