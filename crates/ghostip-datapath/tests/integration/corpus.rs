//! Corpus test: reads every file of `../shared/fixtures/{cilium,kube-proxy,conntrack}/`
//! in place (real tool outputs collected from public sources; never copied here).
//!
//! Every complete sample of a supported format is detected and parses into a non-empty
//! table; partial or damaged samples (`_PARTIAL`, `_ELIDED`, `_TRIMMED`) give a table with
//! counted skips or a typed error; nothing panics. Outputs of tools no parser reads
//! (`bpf ct list`, `nft list` text, kernel and kube-proxy logs) must not be
//! mistaken for a supported format. `.txtar` files are split into their sections. The
//! test prints what it read, per file and per format, and checks facts known from a few
//! samples. Ignored by default (`needs the fixture corpus`); run with `--ignored`, it fails
//! when the corpus (`$GHOSTIP_FIXTURES`, default `../shared/fixtures`) is absent.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;

use ghostip_datapath::{
    BackendState, Format, FrontendKind, LbTable, ParseError, Parsed, Protocol, detect_format, parse,
};

/// Outputs of tools that no parser reads (by file-name prefix), and why.
const NOT_PARSED: [(&str, &str); 7] = [
    (
        "bpf-ct-list",
        "cilium bpf ct list (Cilium's own conntrack; not a load-balancer table)",
    ),
    ("cilium-dbg-bpf-ct-list", "cilium bpf ct list"),
    (
        "nft-",
        "nft text listing or nft -f transaction (the parser reads nft -j JSON)",
    ),
    ("dmesg_", "kernel log"),
    ("kube-proxy-log_", "kube-proxy log"),
    ("lb-testdata_", "txtar script, read per section"),
    (
        "db-show-frontends_and_service-list",
        "two outputs concatenated; read as db/show frontends",
    ),
];

fn is_damaged(name: &str) -> bool {
    ["PARTIAL", "ELIDED", "TRIMMED"]
        .iter()
        .any(|m| name.contains(m))
}

#[derive(Default)]
struct Tally {
    files: usize,
    ok: usize,
    typed_errors: usize,
    undetected: usize,
    skipped_items: u64,
}

enum Outcome {
    Lb(LbTable),
    Ct(usize, u64),
    Error(ParseError),
    Undetected,
}

fn run(bytes: &[u8]) -> (Option<Format>, Outcome) {
    let res = catch_unwind(AssertUnwindSafe(|| {
        let format = detect_format(bytes);
        let outcome = match format {
            None => Outcome::Undetected,
            Some(f) => match parse(f, bytes) {
                Ok(Parsed::Lb(t)) => Outcome::Lb(t),
                Ok(Parsed::Conntrack(t)) => Outcome::Ct(t.entries.len(), t.skipped.total()),
                Err(e) => Outcome::Error(e),
            },
        };
        (format, outcome)
    }));
    match res {
        Ok(r) => r,
        Err(_) => panic!("parser panicked"),
    }
}

/// `-- name --` sections of a txtar file.
fn txtar_sections(text: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for line in text.lines() {
        if let Some(name) = line.strip_prefix("-- ").and_then(|l| l.strip_suffix(" --")) {
            out.push((name.to_string(), String::new()));
        } else if let Some((_, body)) = out.last_mut() {
            body.push_str(line);
            body.push('\n');
        }
    }
    out
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

#[test]
#[ignore = "needs the fixture corpus (../shared/fixtures)"]
fn shared_fixture_corpus() {
    let root = ghostip_testkit::env::fixtures("");
    let mut per_format: BTreeMap<String, Tally> = BTreeMap::new();
    let mut tables: BTreeMap<String, LbTable> = BTreeMap::new();
    let mut conntrack_entries: BTreeMap<String, usize> = BTreeMap::new();
    let mut read = 0usize;
    let mut failures = Vec::new();
    for dir in ["cilium", "kube-proxy", "conntrack"] {
        let mut files: Vec<PathBuf> = std::fs::read_dir(root.join(dir))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.is_file())
            .collect();
        files.sort();
        for path in files {
            let name = path.file_name().unwrap().to_string_lossy().to_string();
            let bytes = std::fs::read(&path).unwrap();
            read += 1;
            let mut units: Vec<(String, Vec<u8>)> = vec![(name.clone(), bytes.clone())];
            if name.ends_with(".txtar") {
                units = txtar_sections(&String::from_utf8_lossy(&bytes))
                    .into_iter()
                    .map(|(s, body)| (format!("{name}#{s}"), body.into_bytes()))
                    .collect();
            }
            let damaged = is_damaged(&name);
            let not_parsed = NOT_PARSED.iter().find(|(p, _)| name.starts_with(p));
            for (unit, body) in units {
                let (format, outcome) = run(&body);
                let key = format.map_or("(none)".to_string(), |f| f.to_string());
                let tally = per_format.entry(key.clone()).or_default();
                tally.files += 1;
                let summary = match &outcome {
                    Outcome::Lb(t) => {
                        tally.ok += 1;
                        tally.skipped_items += t.skipped.total();
                        format!(
                            "{} frontends, {} backends, {} ignored, {} unknown",
                            t.frontends.len(),
                            t.backend_count(),
                            t.skipped.ignored,
                            t.skipped.unknown
                        )
                    }
                    Outcome::Ct(n, skipped) => {
                        tally.ok += 1;
                        tally.skipped_items += skipped;
                        format!("{n} entries, {skipped} skipped")
                    }
                    Outcome::Error(e) => {
                        tally.typed_errors += 1;
                        format!("typed error: {e}")
                    }
                    Outcome::Undetected => {
                        tally.undetected += 1;
                        "not detected".to_string()
                    }
                };
                let class = if damaged { "damaged" } else { "complete" };
                println!("{dir}/{unit} [{class}] -> {key}: {summary}");
                // What each kind of sample must give.
                match (&outcome, not_parsed, damaged) {
                    (_, Some(_), _) | (_, _, true) => {}
                    (Outcome::Lb(t), None, false) if !t.frontends.is_empty() => {}
                    (Outcome::Ct(n, _), None, false) if *n > 0 => {}
                    _ => failures.push(format!(
                        "{unit}: complete sample of a supported format did not parse: {summary}"
                    )),
                }
                if let (Some((_, why)), Some(f)) = (not_parsed, format)
                    && !name.ends_with(".txtar")
                    && !name.starts_with("db-show-frontends_and")
                {
                    failures.push(format!("{unit}: {why}, but detected as {f}"));
                }
                match outcome {
                    Outcome::Lb(t) => {
                        tables.insert(unit, t);
                    }
                    Outcome::Ct(n, _) => {
                        conntrack_entries.insert(unit, n);
                    }
                    _ => {}
                }
            }
        }
    }
    println!("\nread {read} files from {}", root.display());
    for (format, t) in &per_format {
        println!(
            "  {format:<22} {:>3} inputs: {:>3} parsed, {:>2} typed errors, {:>2} not detected, {:>4} skipped items",
            t.files, t.ok, t.typed_errors, t.undetected, t.skipped_items
        );
    }
    assert!(
        failures.is_empty(),
        "corpus failures:\n{}",
        failures.join("\n")
    );
    assert!(read >= 30, "expected the whole fixture corpus, read {read}");

    // Facts known from individual samples.
    let t = &tables["iptables-save-c_k3s-node_iptables-1.8.4_2022_full-with-counters_no-endpoints-REJECT.txt"];
    let dns = t.frontend(ip("10.43.0.10"), 53, Protocol::Udp).unwrap();
    assert!(dns.backends.is_empty() && dns.flags.contains(&"no-endpoints".to_string()));
    let api = t.frontend(ip("10.43.0.1"), 443, Protocol::Tcp).unwrap();
    assert_eq!(
        (api.backends[0].ip, api.backends[0].port),
        (ip("10.0.20.5"), 6443)
    );

    let t = &tables["iptables-save_k8s-proxier_test_TestOverallIPTablesRules_v1.29plus.txt"];
    assert_eq!(
        t.frontend(ip("172.30.0.44"), 80, Protocol::Tcp)
            .unwrap()
            .backends
            .len(),
        2
    );
    let lb = t.frontend(ip("5.6.7.8"), 80, Protocol::Tcp).unwrap();
    assert_eq!(lb.kind, FrontendKind::LoadBalancer);
    assert!(lb.flags.contains(&"session-affinity".to_string()));
    assert_eq!(
        t.frontend(ip("0.0.0.0"), 3001, Protocol::Tcp).unwrap().kind,
        FrontendKind::NodePort
    );
    assert_eq!(t.skipped.unknown, 0);

    let t = &tables["iptables-save_k8s-proxier_test_TestGetChainLinesMultipleTables_iptables-1.4.21_userspace-era.txt"];
    assert_eq!(
        t.frontend(ip("10.247.0.10"), 53, Protocol::Udp)
            .unwrap()
            .backends[0]
            .ip,
        ip("10.246.1.2")
    );

    let t = &tables["iptables-save-grep_k3s-v1.29.5_clusterip-3-endpoints_iptables-1.8.7-nft.txt"];
    assert_eq!(
        t.frontend(ip("10.43.180.238"), 80, Protocol::Tcp)
            .unwrap()
            .backends
            .len(),
        3
    );

    let t = &tables["ipvsadm-L-n_opsnull-issue251_kube-proxy-ipvs_2018.txt"];
    let api = t.frontend(ip("10.254.0.1"), 443, Protocol::Tcp).unwrap();
    assert_eq!(api.backends.len(), 2);
    assert!(api.flags.contains(&"persistent=10800".to_string()));
    assert!(api.backends.iter().all(|b| b.weight == Some(1)));

    let t = &tables["service-list_pr44301_kind_cilium-dbg_2026_PARTIAL.txt"];
    let dns = t.frontend(ip("10.96.0.10"), 53, Protocol::Udp).unwrap();
    assert_eq!(dns.backends.len(), 2);
    assert!(dns.backends.iter().all(|b| b.state == BackendState::Active));

    let t = &tables["bpf-lb-list_issue10402_cilium-v1.7-era_2020_PARTIAL.txt"];
    let ext = t.frontend(ip("10.88.58.5"), 443, Protocol::Any).unwrap();
    assert_eq!(
        (ext.kind, ext.backends.len()),
        (FrontendKind::ExternalIp, 6)
    );

    let t = &tables["bpf-lb-list_tke-guide_empty-backends_cilium-v1.18.6.txt"];
    assert_eq!(t.frontends.len(), 3);
    assert!(t.frontends.iter().all(|f| f.backends.is_empty()));

    let t = &tables["service-get-o-json_blog-zh_cilium-v1.10.3.json"];
    assert_eq!(
        t.frontends[0].service.as_ref().unwrap().to_string(),
        "knative-serving/autoscaler"
    );

    let t = &tables["lb-testdata_graceful-termination_cilium-v1.18-dev.txtar#lbmaps-terminating1.expected"];
    let fe = t.frontend(ip("10.96.116.33"), 8081, Protocol::Tcp).unwrap();
    let term = fe
        .backends
        .iter()
        .find(|b| b.ip == ip("10.244.0.112"))
        .unwrap();
    assert_eq!(term.state, BackendState::Terminating);

    assert_eq!(
        conntrack_entries["conntrack-E-p-sctp-e-new_976-events_k3s-metallb_robric.log"],
        977
    );
    assert_eq!(
        conntrack_entries["conntrack-L_tcp-TIME_WAIT-dns-to-clusterip_k8s-issue91216_e2e-gce_2020_PARTIAL.txt"],
        5
    );
}

/// The corpus's `conntrack -L` sample with accounting and delta-time columns (Kubernetes
/// issue 129617) is detected as a conntrack dump.
#[test]
#[ignore = "needs the fixture corpus (../shared/fixtures)"]
fn conntrack_sample_with_accounting_is_detected() {
    let fixture = ghostip_testkit::env::fixtures("conntrack")
        .join("conntrack-L-p-udp-dport-53_accounting-delta-time_k8s-issue129617_2025.txt");
    let bytes = std::fs::read(&fixture).unwrap_or_else(|e| panic!("{}: {e}", fixture.display()));
    assert_eq!(detect_format(&bytes), Some(Format::Conntrack));
}
