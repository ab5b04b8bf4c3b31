//! `ghostip soak-score DIR` on generated soak directories: ledgers written through the ledger API, scrapes as text.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::net::IpAddr;
use std::path::Path;
use std::time::Duration;

use ghostip::ledger::{FindingKind, FindingRecord, Ledger};
use ghostip_core::{ServiceKey, Target, Time};

use super::common::{assert_exit_2, ghostip_wide, json, stderr_of};

fn t(hms: &str) -> Time {
    format!("2026-12-05T{hms}Z").parse().unwrap()
}

const TRUTH: &str = r#"{"seed": 7, "started": "2026-12-05T10:00:00Z", "ended": "2026-12-05T10:30:00Z",
 "nodes": ["node-1","node-2","node-3"],
 "faults": [
   {"id": "f3", "kind": "kube-proxy-stopped", "node": "node-2",
    "start": "2026-12-05T10:04:10Z", "end": "2026-12-05T10:05:40Z",
    "stale_ips": ["10.244.1.6"], "stale_from": "2026-12-05T10:04:31Z",
    "detectable": true, "layer": "datapath"},
   {"id": "f4", "kind": "apiserver-stopped", "start": "2026-12-05T10:10:00Z",
    "end": "2026-12-05T10:12:00Z", "detectable": false}
 ],
 "rollouts": [{"deployment": "default/web-h", "at": "2026-12-05T10:20:00Z", "removed_ips": ["10.244.2.9"]}]}
"#;

fn finding(layer: &str, path: &str, target: &str, t0: &str, lag_secs: u64) -> FindingRecord {
    FindingRecord {
        kind: FindingKind::Stale,
        layer: layer.into(),
        path_id: path.into(),
        path_kind: path.split('/').next().unwrap().into(),
        service: ServiceKey::new("default", "web-h"),
        target: Target::ip(target.parse::<IpAddr>().unwrap()),
        t0: t(t0),
        received: t(t0) + Duration::from_millis(200),
        trigger: None,
        t0_correction: None,
        last_seen: None,
        converged_by: None,
        window: None,
        expected_lag: Some(Duration::from_secs(lag_secs)),
        verdict: "over expected lag".into(),
        exposure: None,
        former_pod: None,
    }
}

fn write_ledger(path: &Path, findings: &[FindingRecord], gap: Option<(&str, &str)>) {
    let mut l = Ledger::open(path).unwrap();
    for f in findings {
        l.record_finding(f).unwrap();
    }
    if let Some((start, end)) = gap {
        l.truth_gap_start(t(start), "watch error: connection refused")
            .unwrap();
        l.truth_gap_end(t(end)).unwrap();
    }
}

fn write_scrape(dir: &Path, source: &str, hms: &str, rss: u64, cpu: f64) {
    let d = dir.join("metrics").join(source);
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(
        d.join(format!("{}.prom", t(hms).as_second())),
        format!(
            "# HELP process_resident_memory_bytes x\n# TYPE process_resident_memory_bytes gauge\n\
             process_resident_memory_bytes {rss}\nprocess_cpu_seconds_total {cpu}\n\
             ghostip_truth_synced 1\n# EOF\n"
        ),
    )
    .unwrap();
}

/// A 30-minute soak where ghostip caught the stale node 2 s after it went stale and recorded
/// the API server's outage as a gap.
fn clean_soak(dir: &Path) {
    std::fs::write(dir.join("ground-truth.json"), TRUTH).unwrap();
    std::fs::create_dir_all(dir.join("ledgers")).unwrap();
    write_ledger(
        &dir.join("ledgers/watch.db"),
        &[],
        Some(("10:10:01", "10:12:02")),
    );
    write_ledger(
        &dir.join("ledgers/agent-node-2.db"),
        &[finding(
            "datapath",
            "iptables/node-2",
            "10.244.1.6",
            "10:04:31",
            2,
        )],
        None,
    );
    for (hms, mb) in [
        ("10:00:00", 40),
        ("10:05:00", 100),
        ("10:15:00", 101),
        ("10:30:00", 102),
    ] {
        write_scrape(dir, "watch", hms, mb * 1_000_000, 1.5);
        write_scrape(dir, "agent-node-2", hms, mb * 500_000, 0.5);
    }
}

/// A tiny well-formedness check: every tag closed in order, attributes quoted, entities known.
fn assert_well_formed_xml(s: &str) {
    let mut stack: Vec<String> = Vec::new();
    let mut rest = s;
    let mut roots = 0;
    while let Some(i) = rest.find(['<', '&']) {
        let text = &rest[..i];
        assert!(!text.contains('>'), "stray > in text {text:?}");
        let tail = &rest[i..];
        if tail.starts_with('&') {
            let end = tail.find(';').expect("entity not closed");
            let name = &tail[1..end];
            assert!(
                ["amp", "lt", "gt", "quot", "apos"].contains(&name),
                "unknown entity &{name};"
            );
            rest = &tail[end + 1..];
            continue;
        }
        // A tag: find its end outside quotes.
        let mut quote = None;
        let mut end = None;
        for (j, c) in tail.char_indices().skip(1) {
            match (quote, c) {
                (None, '"' | '\'') => quote = Some(c),
                (Some(q), c) if c == q => quote = None,
                (Some(_), '<') => panic!("< inside an attribute"),
                (None, '>') => {
                    end = Some(j);
                    break;
                }
                _ => {}
            }
        }
        let end = end.expect("tag not closed");
        let tag = &tail[1..end];
        if let Some(name) = tag.strip_prefix('/') {
            assert_eq!(
                stack.pop().as_deref(),
                Some(name.trim()),
                "mismatched </{name}>"
            );
        } else {
            let name: String = tag
                .chars()
                .take_while(|c| !c.is_whitespace() && *c != '/')
                .collect();
            assert!(!name.is_empty(), "empty tag");
            if stack.is_empty() {
                roots += 1;
            }
            if !tag.ends_with('/') {
                stack.push(name);
            }
        }
        rest = &tail[end + 1..];
    }
    assert!(stack.is_empty(), "unclosed {stack:?}");
    assert_eq!(roots, 1, "one root element");
}

#[test]
fn a_clean_soak_leads_with_the_answer_and_exits_0() {
    let d = tempfile::tempdir().unwrap();
    clean_soak(d.path());
    let svg = d.path().join("soak.svg");
    let out = ghostip_wide()
        .arg("soak-score")
        .arg(d.path())
        .arg("--svg")
        .arg(&svg)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}\n{}", stderr_of(&out));
    let first = text.lines().next().unwrap();
    assert_eq!(
        first,
        "faults detected 1/1, false positives 0, flagged in 2.0 s (max), \
         agent-node-2 RSS +2.0 % after minute 5 (worst of 2)"
    );
    let f3 = text.lines().find(|l| l.starts_with("f3 ")).unwrap();
    for cell in ["kube-proxy-stopped", "node-2", "+4m10s", "detected", "2.0s"] {
        assert!(f3.contains(cell), "{cell} missing in {f3:?}");
    }
    assert!(
        f3.contains("agent-node-2.db iptables/node-2 10.244.1.6"),
        "{f3}"
    );
    let f4 = text.lines().find(|l| l.starts_with("f4 ")).unwrap();
    assert!(f4.contains("gap recorded"), "{f4}");
    assert!(
        text.contains("FALSE POSITIVES (0 of 1 judged findings)"),
        "{text}"
    );
    assert!(text.contains("watch error: connection refused"), "{text}");
    assert!(text.contains("RSS within 5 %"), "{text}");
    assert_well_formed_xml(&std::fs::read_to_string(&svg).unwrap());

    let out = ghostip_wide()
        .args(["soak-score", "-o", "json"])
        .arg(d.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let v = json(&out.stdout);
    assert_eq!(v["clean"], true);
    assert_eq!(
        (v["detected"].as_u64(), v["scored"].as_u64()),
        (Some(1), Some(1))
    );
    assert_eq!(v["faults"][0]["detection"]["after_secs"], 2.0);
    assert_eq!(v["faults"][0]["detection"]["at"], "2026-12-05T10:04:33Z");
    assert_eq!(v["false_positives"].as_array().unwrap().len(), 0);
    assert_eq!(v["truth_gaps"][0]["ledger"], "watch.db");
    assert_eq!(v["processes"].as_array().unwrap().len(), 2);
}

#[test]
fn an_unexplained_finding_and_one_during_the_outage_exit_1_with_their_evidence() {
    let d = tempfile::tempdir().unwrap();
    clean_soak(d.path());
    // A DNS path of the agent on node-3 (its node from the file name), flagged long after
    // the rollout with no fault to explain it; and a datapath finding judged during f4.
    write_ledger(
        &d.path().join("ledgers/agent-node-3.db"),
        &[
            finding("dns", "dns-pod/10.244.0.3:53", "10.244.2.9", "10:20:01", 30),
            finding("datapath", "iptables/node-3", "10.244.2.4", "10:10:30", 1),
        ],
        None,
    );
    let out = ghostip_wide()
        .arg("soak-score")
        .arg(d.path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}\n{}", stderr_of(&out));
    assert!(
        text.starts_with("faults detected 1/1, false positives 2,"),
        "{text}"
    );
    let dns = text.lines().find(|l| l.contains("10.244.2.9")).unwrap();
    for cell in [
        "dns",
        "node-3",
        "+20m01s",
        "over lag",
        "agent-node-3.db",
        "removed by rollout default/web-h",
    ] {
        assert!(dns.contains(cell), "{cell} missing in {dns:?}");
    }
    let gap = text.lines().find(|l| l.contains("10.244.2.4")).unwrap();
    assert!(
        gap.contains("judged during f4 (apiserver-stopped)"),
        "{gap}"
    );
}

/// The agents' own word on kube-proxy: node-2's log line times component-stalled before the
/// stale backend was flagged; a scrape that read node-3 stalled with no fault on it is a
/// healthy node called stalled (exit 1). Lines of the log that are not JSON are skipped.
#[test]
fn component_stalled_is_read_from_the_agents_logs_and_scrapes() {
    let d = tempfile::tempdir().unwrap();
    clean_soak(d.path());
    let logs = d.path().join("logs");
    std::fs::create_dir_all(&logs).unwrap();
    std::fs::write(
        logs.join("agent-node-2.log"),
        format!(
            "unable to retrieve container logs for a previous container\n\
             {{\"timestamp\":\"{}\",\"level\":\"INFO\",\"message\":\"agent started\",\"node\":\"node-2\"}}\n\
             {{\"timestamp\":\"{}\",\"level\":\"WARN\",\"message\":\"component-stalled: kube-proxy's last sync does not advance past Service changes\",\"node\":\"node-2\",\"component\":\"kube-proxy\"}}\n",
            t("10:00:01"),
            t("10:04:32.5")
        ),
    )
    .unwrap();
    let out = ghostip_wide()
        .arg("soak-score")
        .arg(d.path())
        .args(["-o", "json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let c = &v["component_stalled"];
    assert_eq!(c["faults"][0]["fault_id"], "f3", "{c}");
    assert_eq!(
        c["faults"][0]["first_seen"], "2026-12-05T10:04:32.5Z",
        "{c}"
    );
    assert_eq!(c["faults"][0]["before_detection"], true, "{c}");
    assert_eq!(c["unexplained"].as_array().unwrap().len(), 0, "{c}");
    // A scrape of node-3's agent reads it stalled at 10:20: no fault there.
    let m = d.path().join("metrics/agent-node-3");
    std::fs::create_dir_all(&m).unwrap();
    std::fs::write(
        m.join(format!("{}.prom", t("10:20:00").as_second())),
        "ghostip_component_stalled{node=\"node-3\",component=\"kube-proxy\"} 1\n",
    )
    .unwrap();
    let out = ghostip_wide()
        .arg("soak-score")
        .arg(d.path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.lines()
            .next()
            .unwrap()
            .ends_with("component-stalled in 1/1 kube-proxy faults, 1 on a healthy node"),
        "{text}"
    );
    let row = text
        .lines()
        .find(|l| l.contains("a healthy node read stalled"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(row.contains("node-3") && row.contains("+20m00s"), "{row}");
}

#[test]
fn bad_inputs_exit_2_naming_the_file_and_line() {
    let d = tempfile::tempdir().unwrap();
    clean_soak(d.path());
    std::fs::write(
        d.path().join("ground-truth.json"),
        "{\"seed\": 7,\n \"started\": \"2026-12-05T10:00:00Z\",\n \"faults\": [,]}\n",
    )
    .unwrap();
    let mut cmd = ghostip_wide();
    cmd.arg("soak-score").arg(d.path());
    assert_exit_2(&mut cmd, "ground-truth.json");
    assert_exit_2(&mut cmd, "line 3");

    clean_soak(d.path());
    let bad = d.path().join("metrics/watch/1796464800.prom");
    std::fs::write(
        &bad,
        "process_cpu_seconds_total 1\nprocess_resident_memory_bytes lots\n",
    )
    .unwrap();
    assert_exit_2(&mut cmd, "1796464800.prom: line 2: not a number");

    std::fs::remove_file(&bad).unwrap();
    std::fs::write(d.path().join("metrics/watch/yesterday.prom"), "").unwrap();
    assert_exit_2(
        &mut cmd,
        "yesterday.prom: the name is not <unix-seconds>.prom",
    );

    let empty = tempfile::tempdir().unwrap();
    std::fs::write(empty.path().join("ground-truth.json"), TRUTH).unwrap();
    std::fs::create_dir(empty.path().join("ledgers")).unwrap();
    let mut cmd = ghostip_wide();
    cmd.arg("soak-score").arg(empty.path());
    assert_exit_2(&mut cmd, "no ledger (*.db) in");
}
