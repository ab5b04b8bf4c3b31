//! `ghostip datapath show|diff` end to end through the binary: real dumps (the generator's
//! kube-proxy rules, real `iptables-save`/`conntrack -L` captures of ghostip-datapath's
//! tests/data), truth files in `kubectl get -o json|yaml` shape, exit codes, bad input.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::path::Path;

use ghostip::ledger::Ledger;
use ghostip_core::truth::{PodRecord, ServiceRecord, SliceRecord, TrafficPolicy};
use ghostip_core::{PodRef, Time};
use ghostip_datapath::Format;
use ghostip_testkit::dumps::{GenModel, GenSpec};
use ghostip_testkit::records::pod_record;
use predicates::prelude::*;
use serde_json::{Value, json};

use crate::common::{assert_exit_2, datapath_data, ghostip_wide, spawn_piped};

/// A Service as `kubectl get -o json` prints it.
fn service_json(s: &ServiceRecord) -> Value {
    let policy = |p: TrafficPolicy| match p {
        TrafficPolicy::Cluster => "Cluster",
        TrafficPolicy::Local => "Local",
    };
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"namespace": s.key.namespace, "name": s.key.name},
        "spec": {
            "type": s.service_type,
            "clusterIP": s.cluster_ips[0].to_string(),
            "clusterIPs": s.cluster_ips.iter().map(ToString::to_string).collect::<Vec<_>>(),
            "selector": {"app": s.key.name},
            "internalTrafficPolicy": policy(s.internal_traffic_policy),
            "externalTrafficPolicy": policy(s.external_traffic_policy),
            "ports": s.ports.iter().map(|p| {
                let mut v = json!({"port": p.port, "protocol": p.protocol.to_string()});
                if let Some(n) = &p.name { v["name"] = json!(n); }
                if let Some(np) = p.node_port { v["nodePort"] = json!(np); }
                v
            }).collect::<Vec<_>>(),
        }
    })
}

/// An EndpointSlice as `kubectl get -o json` prints it.
fn slice_json(s: &SliceRecord, trigger: Option<&str>) -> Value {
    let mut meta = json!({
        "namespace": s.namespace, "name": s.name,
        "labels": {"kubernetes.io/service-name": s.service},
    });
    if let Some(t) = trigger {
        meta["annotations"] = json!({"endpoints.kubernetes.io/last-change-trigger-time": t});
    }
    json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": meta,
        "addressType": "IPv4",
        "endpoints": s.endpoints.iter().map(|e| json!({
            "addresses": [e.ip.to_string()],
            "conditions": {"ready": e.ready, "serving": e.serving, "terminating": e.terminating},
            "nodeName": e.node,
        })).collect::<Vec<_>>(),
        "ports": s.ports.iter().map(|p| {
            let mut v = json!({"port": p.port, "protocol": p.protocol.to_string()});
            if let Some(n) = &p.name { v["name"] = json!(n); }
            v
        }).collect::<Vec<_>>(),
    })
}

/// `kubectl get services,endpointslices -A -o json` for a generated cluster; `edit` may
/// change the slices first.
fn truth_list(model: &GenModel, edit: impl FnOnce(&mut Vec<SliceRecord>)) -> Value {
    let (services, mut slices) = model.truth_records();
    edit(&mut slices);
    let mut items: Vec<Value> = services.iter().map(service_json).collect();
    items.extend(
        slices
            .iter()
            .map(|s| slice_json(s, Some("2027-01-15T08:00:00Z"))),
    );
    json!({"apiVersion": "v1", "kind": "List", "items": items})
}

/// The truth with the first endpoint of svc-0 gone (the node still routes to it).
fn truth_without_first_endpoint(model: &GenModel) -> String {
    truth_list(model, |slices| {
        slices[0].endpoints.remove(0);
    })
    .to_string()
}

fn spec_12_40() -> GenSpec {
    let mut s = GenSpec::new(12, 40);
    s.empty_every = 6;
    s
}

/// `--format` takes every format's name and aliases from the format table.
#[test]
fn format_aliases_from_the_format_table_are_accepted() {
    let dump = datapath_data("iptables-save_gen-12svc-40ep_iptables-1.8.9-nft.txt");
    for name in ["iptables", "iptables-save", "ip6tables-save"] {
        ghostip_wide()
            .args(["datapath", "show", "--format", name, "--from-file"])
            .arg(&dump)
            .assert()
            .success()
            .stdout(predicate::str::contains("10.96.0.1:80/TCP ClusterIP"));
    }
    ghostip_wide()
        .args(["datapath", "show", "--format", "nft", "--from-file"])
        .arg(datapath_data("nft-j_gen-12svc-40ep_nft-1.0.6.json"))
        .assert()
        .success();
}

#[test]
fn show_prints_the_table_of_a_real_capture_and_json_with_format() {
    let dump = datapath_data("iptables-save_gen-12svc-40ep_iptables-1.8.9-nft.txt");
    ghostip_wide()
        .args(["datapath", "show", "--from-file"])
        .arg(&dump)
        .assert()
        .success()
        .stdout(predicate::str::contains(
            "10.96.0.1:80/TCP ClusterIP ns-0/svc-0:http",
        ))
        .stdout(predicate::str::contains("skipped: "));
    let out = ghostip_wide()
        .args([
            "datapath",
            "show",
            "-o",
            "json",
            "--format",
            "iptables",
            "--from-file",
        ])
        .arg(&dump)
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let v: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v["format"], "iptables");
    let model = GenModel::generate(&spec_12_40());
    assert_eq!(
        v["frontends"].as_array().unwrap().len(),
        model.expected(Format::Iptables).frontends.len()
    );
}

#[test]
fn show_reads_standard_input_and_conntrack() {
    let dump = std::fs::read(datapath_data("conntrack-L_netns-pods_conntrack-1.4.7.txt")).unwrap();
    ghostip_wide()
        .args(["datapath", "show", "--from-file", "-"])
        .write_stdin(dump)
        .assert()
        .success()
        .stdout(predicate::str::contains("10.96.5.5:80"))
        .stdout(predicate::str::contains("10.244.3.71:8080"))
        .stdout(predicate::str::contains("6 entries"));
}

/// A transcript of two `iptables-save` runs: the last is read, and both the table and the
/// JSON say so.
#[test]
fn several_snapshots_in_one_dump_are_reported_and_the_last_is_judged() {
    let dir = tempfile::tempdir().unwrap();
    let model = GenModel::generate(&spec_12_40());
    let one = std::fs::read_to_string(datapath_data(
        "iptables-save_gen-12svc-40ep_iptables-1.8.9-nft.txt",
    ))
    .unwrap();
    let dump = dir.path().join("two-runs.txt");
    std::fs::write(&dump, format!("{one}$ iptables-save\n{one}")).unwrap();
    let table_line =
        one.lines().count() + 2 + one.lines().position(|l| l.starts_with('*')).unwrap();
    let warning = format!(
        "warning: the input holds 2 snapshots of this datapath (its header or a listed item repeats): only the last, from line {table_line}, was read"
    );
    ghostip_wide()
        .args(["datapath", "show", "--from-file"])
        .arg(&dump)
        .assert()
        .success()
        .stdout(predicate::str::contains(warning.as_str()));
    let truth = dir.path().join("truth.json");
    std::fs::write(&truth, truth_list(&model, |_| {}).to_string()).unwrap();
    let out = ghostip_wide()
        .args([
            "datapath",
            "diff",
            "-o",
            "json",
            "--node",
            "node-1",
            "--from-file",
        ])
        .arg(&dump)
        .arg("--truth")
        .arg(&truth)
        .assert()
        .code(0)
        .get_output()
        .stdout
        .clone();
    let v: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(
        v["warnings"][0],
        json!(warning.trim_start_matches("warning: "))
    );
    ghostip_wide()
        .args(["datapath", "diff", "--node", "node-1", "--from-file"])
        .arg(&dump)
        .arg("--truth")
        .arg(&truth)
        .assert()
        .code(0)
        .stdout(predicate::str::contains(warning.as_str()));
}

/// Peak resident memory of a running process (`VmHWM`), in KiB.
fn peak_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// A 256 MiB line on standard input is dropped after its first MiB: the process stays
/// small while it reads it, the line is reported with its number, and the dump around it
/// is read as without it.
#[test]
fn a_huge_line_on_standard_input_is_skipped_without_holding_it() {
    use std::io::Write;
    let dump = std::fs::read(datapath_data(
        "iptables-save_gen-12svc-40ep_iptables-1.8.9-nft.txt",
    ))
    .unwrap();
    let cut = dump.iter().position(|b| *b == b'\n').unwrap() + 1;
    let mut child = spawn_piped(&[
        "datapath",
        "show",
        "-o",
        "json",
        "--format",
        "iptables",
        "--from-file",
        "-",
    ]);
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(&dump[..cut]).unwrap();
    let chunk = vec![b'x'; 1 << 20];
    for _ in 0..256 {
        stdin.write_all(&chunk).unwrap();
    }
    stdin.write_all(b"\n").unwrap();
    // All but a pipe's worth of the line has been read: the peak so far is the line's.
    let peak = peak_rss_kib(child.id());
    stdin.write_all(&dump[cut..]).unwrap();
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        peak < 64 * 1024,
        "peak RSS {peak} KiB while reading a 256 MiB line"
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let reason = ghostip_datapath::OVERLONG_LINE;
    assert_eq!(
        v["skipped"]["unknown_by_reason"][reason], 1,
        "{}",
        v["skipped"]
    );
    let sample = &v["skipped"]["samples"][0];
    assert_eq!(sample["location"], json!({"line": 2}));
    assert!(sample["excerpt"].as_str().unwrap().starts_with("xxxx"));
    let plain: Value = serde_json::from_slice(
        &ghostip_wide()
            .args(["datapath", "show", "-o", "json", "--from-file"])
            .arg(datapath_data(
                "iptables-save_gen-12svc-40ep_iptables-1.8.9-nft.txt",
            ))
            .assert()
            .success()
            .get_output()
            .stdout,
    )
    .unwrap();
    assert_eq!(v["frontends"], plain["frontends"]);
}

#[test]
fn diff_of_a_real_capture_against_its_truth_is_clean_then_stale_after_a_removal() {
    let dir = tempfile::tempdir().unwrap();
    let model = GenModel::generate(&spec_12_40());
    let dump = datapath_data("iptables-save_gen-12svc-40ep_iptables-1.8.9-nft.txt");
    let truth = dir.path().join("truth.json");
    std::fs::write(&truth, truth_list(&model, |_| {}).to_string()).unwrap();
    ghostip_wide()
        .args(["datapath", "diff", "--node", "node-1", "--from-file"])
        .arg(&dump)
        .arg("--truth")
        .arg(&truth)
        .assert()
        .code(0)
        .stdout(predicate::str::contains(format!(
            "node node-1: {} frontends checked: 0 stale, 0 missing backends, 0 services and 0 frontends missing; 0 unknown frontends",
            model.expected(Format::Iptables).frontends.len()
        )));
    // The first endpoint of svc-0 is gone from the truth; the node still routes to it.
    let gone = model.services[0].endpoints[0];
    std::fs::write(&truth, truth_without_first_endpoint(&model)).unwrap();
    ghostip_wide()
        .args([
            "datapath",
            "diff",
            "--at",
            "2027-01-15T08:00:47Z",
            "--from-file",
        ])
        .arg(&dump)
        .arg("--truth")
        .arg(&truth)
        .assert()
        .code(1)
        .stdout(predicate::str::contains(format!("{gone}")))
        .stdout(predicate::str::contains("ns-0/svc-0:http"))
        .stdout(predicate::str::contains("47s"));
    let out = ghostip_wide()
        .args(["datapath", "diff", "-o", "json", "--from-file"])
        .arg(&dump)
        .arg("--truth")
        .arg(&truth)
        .assert()
        .code(1)
        .get_output()
        .stdout
        .clone();
    let v: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v["format"], "iptables");
    assert_eq!(v["truth"]["services"], 12);
    assert_eq!(v["stale"].as_array().unwrap().len(), 1);
    assert_eq!(v["stale"][0]["backend"]["ip"], gone.ip().to_string());
    assert_eq!(v["stale"][0]["service"]["name"], "svc-0");
}

#[test]
fn diff_reads_yaml_truth_and_nft_json() {
    let dir = tempfile::tempdir().unwrap();
    let model = GenModel::generate(&spec_12_40());
    let list = truth_list(&model, |slices| {
        // A new endpoint the datapath does not have yet.
        let mut e = slices[1].endpoints[0].clone();
        e.ip = "100.127.0.1".parse().unwrap();
        slices[1].endpoints.push(e);
    });
    // Two YAML documents: the Services, then the slices.
    let items = list["items"].as_array().unwrap();
    let (svcs, slices): (Vec<Value>, Vec<Value>) =
        items.iter().cloned().partition(|i| i["kind"] == "Service");
    let yaml = format!(
        "{}---\n{}",
        serde_saphyr::to_string(&json!({"kind": "List", "items": svcs})).unwrap(),
        serde_saphyr::to_string(&json!({"kind": "List", "items": slices})).unwrap()
    );
    let truth = dir.path().join("truth.yaml");
    std::fs::write(&truth, yaml).unwrap();
    ghostip_wide()
        .args(["datapath", "diff", "--from-file"])
        .arg(datapath_data("nft-j_gen-12svc-40ep_nft-1.0.6.json"))
        .arg("--truth")
        .arg(&truth)
        .assert()
        .code(1)
        .stdout(predicate::str::contains("missing"))
        .stdout(predicate::str::contains("100.127.0.1:"));
}

fn pref(ns: &str, name: &str) -> PodRef {
    PodRef {
        namespace: ns.into(),
        name: name.into(),
        uid: format!("uid-{name}"),
    }
}

fn pod(p: PodRef, ip: &str, created: Time) -> PodRecord {
    PodRecord {
        node: Some("node-1".into()),
        owner_kind: Some("ReplicaSet".into()),
        created: Some(created),
        grace_period_seconds: Some(30),
        ..pod_record(p, vec![ip.parse().unwrap()])
    }
}

#[test]
fn diff_of_real_conntrack_attributes_flows_through_the_ledger() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("ghostip.db");
    let t = |s: &str| s.parse::<Time>().unwrap();
    {
        let mut l = Ledger::open(&db).unwrap();
        l.apply_pod(
            &pod(
                pref("prod", "order-7c9"),
                "10.244.1.10",
                t("2027-01-15T07:00:00Z"),
            ),
            t("2027-01-15T07:00:01Z"),
        )
        .unwrap();
        let stock = pref("prod", "stock-5d8-x");
        l.apply_pod(
            &pod(stock.clone(), "10.244.3.71", t("2027-01-15T07:00:00Z")),
            t("2027-01-15T07:00:01Z"),
        )
        .unwrap();
        l.pod_gone(&stock, t("2027-01-15T08:00:00Z")).unwrap();
    }
    // The truth of the capture after the removals: kube-dns now at 10.244.3.54.
    let truth = json!({"kind": "List", "items": [
        {"kind": "Service", "metadata": {"namespace": "kube-system", "name": "kube-dns"},
         "spec": {"clusterIP": "10.96.0.10", "ports": [{"name": "dns", "port": 53, "protocol": "UDP"}]}},
        {"kind": "EndpointSlice", "metadata": {"namespace": "kube-system", "name": "kube-dns-1",
           "labels": {"kubernetes.io/service-name": "kube-dns"}},
         "addressType": "IPv4", "endpoints": [{"addresses": ["10.244.3.54"]}],
         "ports": [{"name": "dns", "port": 53, "protocol": "UDP"}]},
        {"kind": "Service", "metadata": {"namespace": "prod", "name": "stock"},
         "spec": {"clusterIP": "10.96.5.5", "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}},
    ]});
    let truth_path = dir.path().join("truth.json");
    std::fs::write(&truth_path, truth.to_string()).unwrap();
    let dump = datapath_data("conntrack-L_netns-pods_conntrack-1.4.7.txt");
    ghostip_wide()
        .arg("--db")
        .arg(&db)
        .args(["datapath", "diff", "--at", "2027-01-15T08:00:47Z", "--from-file"])
        .arg(&dump)
        .arg("--truth")
        .arg(&truth_path)
        .assert()
        .code(1)
        .stdout(predicate::str::contains(
            "client pod prod/order-7c9 (10.244.1.10) still sends tcp to 10.244.3.71:8080 via 10.96.5.5:80 (was prod/stock-5d8-x, removed 47 s ago, no longer an endpoint of prod/stock)",
        ))
        .stdout(predicate::str::contains(
            "still sends udp to 10.244.3.53:53 via 10.96.0.10:53",
        ));
    // Without the ledger the truth still shows the flows through a ClusterIP to an IP no
    // longer among the Service's endpoints, without the pod that had it; the flow sent
    // straight to 10.244.3.71:7000 needs the ledger.
    ghostip_wide()
        .args(["datapath", "diff", "--from-file"])
        .arg(&dump)
        .arg("--truth")
        .arg(&truth_path)
        .assert()
        .code(1)
        .stdout(predicate::str::contains("2 stale flows"))
        .stdout(predicate::str::contains(
            "client 10.244.1.10 still sends tcp to 10.244.3.71:8080 via 10.96.5.5:80 (no longer an endpoint of prod/stock): 1 entry",
        ))
        .stdout(predicate::str::contains("--db"));
}

/// Flows whose client is one of the node's own addresses (where ghostip's own probes ran) are
/// left out with `--exclude-source`, and the output says how many.
#[test]
fn excluded_sources_are_not_judged() {
    let dir = tempfile::tempdir().unwrap();
    let truth = json!({"kind": "List", "items": [
        {"kind": "Service", "metadata": {"namespace": "prod", "name": "stock"},
         "spec": {"clusterIP": "10.96.5.5", "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}},
    ]});
    let truth_path = dir.path().join("truth.json");
    std::fs::write(&truth_path, truth.to_string()).unwrap();
    let dump = datapath_data("conntrack-L_netns-pods_conntrack-1.4.7.txt");
    let diff = |extra: &[&str]| {
        ghostip_wide()
            .args(["datapath", "diff", "-o", "json", "--from-file"])
            .arg(&dump)
            .arg("--truth")
            .arg(&truth_path)
            .args(extra)
            .output()
            .unwrap()
    };
    let all = diff(&[]);
    assert_eq!(all.status.code(), Some(1), "{all:?}");
    let v: Value = serde_json::from_slice(&all.stdout).unwrap();
    assert!(v.to_string().contains("10.244.1.10"), "{v}");
    let mine = diff(&["--exclude-source", "10.244.1.10"]);
    assert_eq!(mine.status.code(), Some(0), "{mine:?}");
    let v: Value = serde_json::from_slice(&mine.stdout).unwrap();
    assert!(!v["stale"].to_string().contains("10.244.1.10"), "{v}");
    assert_eq!(
        v["warnings"],
        json!(["6 flow(s) from --exclude-source addresses not judged"]),
        "{v}"
    );
}

/// A dump and a truth that share nothing (a truth file without the dump's Services): not
/// clean, as nothing was compared.
#[test]
fn a_dump_that_shares_nothing_with_the_truth_is_a_finding() {
    let dir = tempfile::tempdir().unwrap();
    let truth = dir.path().join("truth.json");
    // A truth of one headless Service (a namespace's `kubectl get`): nothing it has is a
    // frontend.
    std::fs::write(
        &truth,
        r#"{"kind": "List", "items": [{"kind": "Service", "metadata": {"namespace": "db", "name": "pg"},
            "spec": {"clusterIP": "None", "ports": [{"port": 5432, "protocol": "TCP"}]}}]}"#,
    )
    .unwrap();
    let dump = datapath_data("ipvsadm-Ln_weight0.txt");
    ghostip_wide()
        .args(["datapath", "diff", "--from-file"])
        .arg(&dump)
        .arg("--truth")
        .arg(&truth)
        .assert()
        .code(1)
        .stdout(predicate::str::contains("0 frontends checked"))
        .stdout(predicate::str::contains(
            "nothing compared: none of the dump's 7 frontends belongs to one of the truth's 1 Services",
        ));
    let out = ghostip_wide()
        .args(["datapath", "diff", "-o", "json", "--from-file"])
        .arg(&dump)
        .arg("--truth")
        .arg(&truth)
        .assert()
        .code(1)
        .get_output()
        .stdout
        .clone();
    let v: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v["compared_nothing"], json!(true));
    assert_eq!(v["frontends_checked"], json!(0));
}

#[test]
fn bad_input_is_exit_2_naming_the_file_and_place() {
    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("junk.txt");
    std::fs::write(&junk, "hello\nworld\n").unwrap();
    ghostip_wide()
        .args(["datapath", "show", "--from-file"])
        .arg(&junk)
        .assert()
        .code(2)
        .stderr(predicate::str::starts_with("ghostip: reading "))
        .stderr(predicate::str::contains("junk.txt"))
        .stderr(predicate::str::contains("--format"));
    ghostip_wide()
        .args(["datapath", "show", "--format", "nft-json", "--from-file"])
        .arg(&junk)
        .assert()
        .code(2)
        .stderr(predicate::str::contains("parsing "))
        .stderr(predicate::str::contains("line 1"));
    let truth = dir.path().join("truth.json");
    std::fs::write(&truth, "{\"kind\": \"List\", \"items\": [\n  {\"kind\": \"Service\", \"metadata\": {\"name\": \"x\"}}\n]}").unwrap();
    assert_exit_2(
        ghostip_wide()
            .args(["datapath", "diff", "--from-file"])
            .arg(datapath_data("ipvsadm-Ln_weight0.txt"))
            .arg("--truth")
            .arg(&truth),
        "truth.json: items[0]: ",
    );
    std::fs::write(&truth, "{\"kind\": \"List\",\n \"items\": [").unwrap();
    assert_exit_2(
        ghostip_wide()
            .args(["datapath", "diff", "--from-file"])
            .arg(datapath_data("ipvsadm-Ln_weight0.txt"))
            .arg("--truth")
            .arg(&truth),
        "truth.json: line 2",
    );
    assert_exit_2(
        ghostip_wide().args(["datapath", "show", "--from-file", "/nonexistent/dump"]),
        "opening /nonexistent/dump",
    );
}

use crate::width_support;

/// `show` and `diff` fit 80 columns, turn into `key: value` lists at 30, and keep every value
/// whole with `-o wide`.
#[test]
fn tables_fit_the_terminal_and_wide_keeps_the_full_values() {
    use width_support::{assert_fits, assert_wider};
    let conntrack = datapath_data("conntrack-L_netns-pods_conntrack-1.4.7.txt");
    let iptables = datapath_data("iptables-save_gen-12svc-40ep_iptables-1.8.9-nft.txt");
    let run = |columns: &str, args: &[&str], dump: &Path, extra: &[&Path]| {
        let mut c = ghostip_wide();
        c.env("COLUMNS", columns).args(args).arg(dump);
        for e in extra {
            c.arg("--truth").arg(e);
        }
        c.assert().get_output().stdout.clone()
    };
    let show = ["datapath", "show", "--from-file"];
    let out = assert_fits(&run("80", &show, &conntrack, &[]), 80);
    // Addresses break before their port rather than lose characters.
    assert!(
        out.contains("10.244.3.71") && out.contains(":8080"),
        "{out}"
    );
    let out = assert_fits(&run("30", &show, &conntrack, &[]), 30);
    assert!(out.contains("proto: tcp"), "{out}");
    assert_fits(&run("80", &show, &iptables, &[]), 80);
    assert_fits(&run("30", &show, &iptables, &[]), 30);

    let dir = tempfile::tempdir().unwrap();
    let model = GenModel::generate(&spec_12_40());
    let truth = dir.path().join("truth.json");
    std::fs::write(&truth, truth_without_first_endpoint(&model)).unwrap();
    let diff = [
        "datapath",
        "diff",
        "--at",
        "2027-01-15T08:00:47Z",
        "--from-file",
    ];
    let out = assert_fits(&run("80", &diff, &iptables, &[&truth]), 80);
    assert!(out.contains("SINCE"), "{out}");
    assert!(out.contains("47s"), "{out}");
    let out = assert_fits(&run("30", &diff, &iptables, &[&truth]), 30);
    assert!(out.contains("since: 47s"), "{out}");
    let wide = [
        "datapath",
        "diff",
        "-o",
        "wide",
        "--at",
        "2027-01-15T08:00:47Z",
        "--from-file",
    ];
    let out = assert_wider(&run("80", &wide, &iptables, &[&truth]), 80);
    assert!(
        out.lines()
            .any(|l| l.contains("frontends checked: 1 stale") && l.contains("(dump: ")),
        "{out}"
    );
}
