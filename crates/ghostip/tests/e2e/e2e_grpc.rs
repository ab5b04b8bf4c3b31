//! End-to-end test of the first incident with real gRPC on the real-node lab: the lab's grpc-go
//! and grpc-java clients (`dns:///` + `round_robin`, channelz served on a port named
//! `channelz`) call grpcdemo/echo (three grpc-go servers behind a headless Service, graceful
//! stop on SIGTERM) while `kubectl rollout restart` replaces them
//! (`lab/scenarios/grpc-headless`).
//!
//! - With the classic Corefile and no preStop, each client's own log holds `connection
//!   refused` failures naming removed pod IPs. The watch installed from `deploy/helm/ghostip`
//!   reads the clients' channelz every second: for every removed IP a client failed on, its
//!   ledger holds a window of that client's balancer over the address; every failure from the
//!   address's removal on falls inside it (those a second or two before are the terminating
//!   pod's), and the window never closes before the last failure (it may close long after: a
//!   re-resolution that still returns the dead address leaves it held while calls go to the
//!   live ones). `ghostip explain` over the client's log, joined with that ledger, classes
//!   them `stale-client-balancer`, names each removed pod, and no live pod.
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
use crate::lab_support::{self, run};

use ghostip::ledger::Ledger;
use ghostip_core::Time;
use serde_json::Value;

/// The watch's ledger, on the hostPath volume lab/ghostip-install gives its claim.
const WATCH_DB: &str = "/var/lib/ghostip-lab/pv/ghostip-watch-db/ghostip.db";

/// Runs the scenario; returns its exit code and its `RESULT` JSON.
fn scenario(args: &[&str]) -> (i32, Value) {
    lab_support::scenario("grpc-headless", args)
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

/// The times of a client's failed calls naming `ip`, from the scenario's
/// `<pod>.failures.tsv` (`ms<TAB>ip<TAB>kind`, read from the client's own log).
fn failure_times(client: &Value, ip: &str) -> Vec<Time> {
    let log = client["log"].as_str().unwrap();
    let tsv = std::fs::read_to_string(log.replace(".log", ".failures.tsv")).unwrap();
    tsv.lines()
        .filter_map(|l| {
            let mut f = l.split('\t');
            let (ms, to) = (f.next()?, f.next()?);
            (to == ip).then(|| Time::from_millisecond(ms.parse().ok()?).ok())?
        })
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
    // 75 s: the clients start 12 s before the restart, grpc-java's 30 s cache ends about
    // 35 s after it.
    let (code, r) = scenario(&["--client-seconds", "75"]);
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
            // Every failure from the moment the address left the Service (the slice's change
            // time, to the second) falls inside the window: the balancer still held it. Those
            // before it (the server stopped at SIGTERM, the slice changed a moment later) are
            // the terminating pod's, within a second or two of it.
            let times = failure_times(c, ip);
            let after: Vec<&Time> = times.iter().filter(|t| **t >= since).collect();
            assert!(
                after.iter().all(|t| **t <= until),
                "a failure of {pod_name} to {ip} after the window closed at {until}: {times:?}"
            );
            assert_eq!(
                held["failures_within"].as_u64().unwrap(),
                after.len() as u64,
                "{held}"
            );
            assert!(
                times
                    .iter()
                    .filter(|t| **t < since)
                    .all(|t| since.duration_since(*t).as_secs_f64() <= 2.0),
                "failures of {pod_name} to {ip} long before it left at {since}: {times:?}"
            );
            // The window never closes before the client's last failure to the address; it may
            // close long after (a re-resolution that still returns the dead address leaves it
            // held, in TRANSIENT_FAILURE, while calls go to the READY ones).
            assert!(
                end_gap >= 0.0,
                "window of {pod_name} over {ip} closed {end_gap:.2} s before the last failure: {held}"
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
        // Failures to removed IPs are the balancer's (or, before the slice changed, the
        // terminating pod's); none is put on a live pod.
        let mut balancer = BTreeSet::new();
        for g in x["report"]["groups"].as_array().unwrap() {
            let peer = g["peer"].as_str().unwrap();
            assert_ne!(g["class"], "not_staleness", "a live pod blamed: {g}");
            if failed_on.contains(peer) {
                assert!(
                    ["stale_client_balancer", "terminating_target"]
                        .contains(&g["class"].as_str().unwrap()),
                    "{pod_name}: {g}"
                );
                if g["class"] == "stale_client_balancer" {
                    balancer.insert(peer.to_string());
                }
            }
        }
        assert_eq!(
            balancer, failed_on,
            "{pod_name}: every removed IP failed on is the balancer's"
        );
    }
}

#[test]
#[ignore = "needs the real-node lab (lab/up --node-kind real, ghostip installed, GHOSTIP_LAB=1, root)"]
fn a_prestop_past_the_re_resolution_leaves_no_failure_and_no_window_over_its_lag() {
    require_real_nodes();
    // 90 s: the old pods' SIGTERM comes 45 s after their removal, the clients' re-resolution
    // right after it.
    let (code, r) = scenario(&["--prestop", "45", "--client-seconds", "90"]);
    assert_eq!(code, 0, "{r}");
    assert_eq!(r["failed_to_removed"], 0, "{r}");
    let restart = ms(&r["restart_unix_ms"]);
    let over: Vec<_> = channelz_findings(restart)
        .into_iter()
        .filter(|f| f.verdict == "over expected lag" || f.verdict == "stuck")
        .collect();
    assert!(over.is_empty(), "windows over their lag: {over:#?}");
}
