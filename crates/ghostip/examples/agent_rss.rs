//! Memory and CPU of one `ghostip agent` full audit with a synthetic truth: N service ports
//! with M endpoints (default 10 000 / 150 000), applied through the same truth events the
//! kube watchers emit, into the agent's session, engine and datapath tracker; then one full
//! audit through the agent's reader (a child process streamed into the parser), the diff
//! against the truth (engine observations) and the audit period the cost cap chooses.
//!
//! ```text
//! agent_rss prepare DIR [SERVICES] [ENDPOINTS]   # DIR/dump.iptables, DIR/truth.jsonl
//! [AUDITS=N] agent_rss run DIR [-- PROGRAM ARGS…]   # N audits back to back (default 1)
//! ```
//!
//! `prepare` runs the generator in its own process, so its memory is not counted: it
//! writes the cluster's iptables-save dump (byte-identical to what `iptables-save` prints
//! for these rules) and its truth (Services and EndpointSlices, each endpoint naming its
//! pod) as JSON lines. `run` streams the truth into the agent's session and reads the dump
//! with `cat DIR/dump.iptables`, or with PROGRAM (e.g. `iptables-legacy-save -t nat` inside
//! a network namespace loaded with the dump). Prints VmHWM (peak RSS) at each step.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used, clippy::panic)]
// A measuring tool: it times the agent it runs with the system's clocks.
#![allow(clippy::disallowed_methods)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use ghostip::kube::{Received, ResourceKind, SyncState, TruthEvent, TruthObject};
use ghostip::layers::datapath::readers::run_and_parse;
use ghostip_core::truth::PodRecord;

use ghostip_core::{PathInfo, PodRef, Time};
use ghostip_datapath::Format;
use ghostip_datapath::layers::IPTABLES;
use ghostip_session::layers::datapath::DatapathModel;
use ghostip_session::layers::dns::paths::PathConfig;
use ghostip_session::layers::dns::{DnsConfig, DnsModel};
use ghostip_session::pacing::{CostCap, CostConfig};
use ghostip_session::{Session, SessionConfig};
use ghostip_testkit::dumps::{GenModel, GenSpec, THIS_NODE};

fn status_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with(field)).map(str::to_string))
        .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        .unwrap_or(0)
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

#[derive(serde::Serialize, serde::Deserialize)]
enum Record {
    Service(ghostip_core::truth::ServiceRecord),
    Slice(ghostip_core::truth::SliceRecord),
}

fn prepare(dir: &Path, services: usize, endpoints: usize) {
    std::fs::create_dir_all(dir).unwrap();
    let model = GenModel::generate(&GenSpec::new(services, endpoints));
    let mut f = std::io::BufWriter::new(std::fs::File::create(dir.join("dump.iptables")).unwrap());
    model.write_iptables_save(&mut f).unwrap();
    f.flush().unwrap();
    let (svc_records, mut slice_records) = model.truth_records();
    // Real EndpointSlices name each endpoint's pod (namespace, name, uid).
    let mut n = 0u64;
    for s in &mut slice_records {
        for e in &mut s.endpoints {
            n += 1;
            e.pod = Some(PodRef {
                namespace: s.namespace.clone(),
                name: format!("{}-7c9d8f6b5-{n:05}", s.service),
                uid: format!("{:08x}-1b2c-4d5e-8f90-{n:012x}", n as u32),
            });
        }
    }
    let mut t = std::io::BufWriter::new(std::fs::File::create(dir.join("truth.jsonl")).unwrap());
    for r in svc_records
        .into_iter()
        .map(Record::Service)
        .chain(slice_records.into_iter().map(Record::Slice))
    {
        serde_json::to_writer(&mut t, &r).unwrap();
        t.write_all(b"\n").unwrap();
    }
    t.flush().unwrap();
    println!(
        "prepared {services} service ports, {endpoints} endpoints in {}",
        dir.display()
    );
}

fn main() {
    let all: Vec<String> = std::env::args().skip(1).collect();
    let split = all.iter().position(|a| a == "--");
    let (head, reader) = match split {
        Some(i) => (&all[..i], Some(&all[i + 1..])),
        None => (&all[..], None),
    };
    let dir = PathBuf::from(head.get(1).map_or("/tmp/ghostip-agent-rss", String::as_str));
    match head.first().map(String::as_str) {
        Some("prepare") => {
            let services = head.get(2).and_then(|s| s.parse().ok()).unwrap_or(10_000);
            let endpoints = head.get(3).and_then(|s| s.parse().ok()).unwrap_or(150_000);
            prepare(&dir, services, endpoints);
            return;
        }
        Some("run") => {}
        _ => panic!(
            "usage: agent_rss prepare DIR [SERVICES] [ENDPOINTS] | agent_rss run DIR [-- PROGRAM ARGS...]"
        ),
    }
    println!("start: VmHWM {:.1} MiB", mib(status_kib("VmHWM:")));
    let tmp = dir.join("dump.iptables");
    let dump_bytes = std::fs::metadata(&tmp).map(|m| m.len()).unwrap_or(0);

    // The agent's session: truth, engine, DNS paths seen from this node; pods node-scoped.
    let t = Time::now();
    let kinds = [
        ResourceKind::EndpointSlices,
        ResourceKind::Services,
        ResourceKind::Pods,
    ];
    let dns = DnsModel::new(DnsConfig {
        paths: PathConfig {
            node: Some(THIS_NODE.to_string()),
            ..PathConfig::default()
        },
        ..DnsConfig::default()
    });
    let mut s =
        Session::new(SessionConfig::default(), SyncState::new(t, kinds.clone())).with_layer(dns);
    let info = PathInfo {
        id: format!("iptables/{THIS_NODE}"),
        kind: IPTABLES,
        description: format!("datapath iptables on {THIS_NODE}"),
        node: Some(THIS_NODE.to_string()),
    };
    let idx = s.add_path(info, Duration::from_secs(2));
    // `AGENT_RSS_NO_TRACKER=1`: the session alone (what `watch` would hold for this truth),
    // to tell the datapath path's share of the memory.
    if std::env::var_os("AGENT_RSS_NO_TRACKER").is_none() {
        s.register(DatapathModel::new(THIS_NODE, idx));
    }
    let feed = |s: &mut Session, event: TruthEvent| {
        s.on_truth(&Received { at: t, event });
    };
    for k in &kinds {
        feed(&mut s, TruthEvent::Init(k.clone()));
    }
    // Stream the truth in; this node's pods (spec.nodeName field selector) are one in 50
    // in a 50-node cluster.
    let mut endpoint_count = 0usize;
    let mut services = 0usize;
    let mut pods = 0usize;
    let lines = std::io::BufReader::new(std::fs::File::open(dir.join("truth.jsonl")).unwrap());
    for line in std::io::BufRead::lines(lines) {
        let record: Record = serde_json::from_str(&line.unwrap()).unwrap();
        match record {
            Record::Service(svc) => {
                services += 1;
                feed(&mut s, TruthEvent::InitApply(TruthObject::Service(svc)));
            }
            Record::Slice(sl) => {
                for e in &sl.endpoints {
                    endpoint_count += 1;
                    if !endpoint_count.is_multiple_of(50) {
                        continue;
                    }
                    pods += 1;
                    feed(
                        &mut s,
                        TruthEvent::InitApply(TruthObject::Pod(PodRecord {
                            pod: e.pod.clone().unwrap(),
                            ips: vec![e.ip],
                            node: Some(THIS_NODE.to_string()),
                            owner_kind: Some("ReplicaSet".into()),
                            owner_name: Some(format!("{}-7c9d8f6b5", sl.service)),
                            created: Some(t),
                            ready_since: Some(t),
                            deletion: None,
                            grace_period_seconds: Some(30),
                            prestop_seconds: None,
                            host_network: false,
                            labels: Default::default(),
                        })),
                    );
                }
                feed(&mut s, TruthEvent::InitApply(TruthObject::Slice(sl)));
            }
        }
    }
    for k in &kinds {
        feed(&mut s, TruthEvent::InitDone(k.clone()));
    }
    assert!(s.judging(), "the truth did not sync");
    println!(
        "truth: {services} service ports, {endpoint_count} endpoints, {pods} pods on this node: VmHWM {:.1} MiB, VmRSS {:.1} MiB",
        mib(status_kib("VmHWM:")),
        mib(status_kib("VmRSS:"))
    );

    // One full audit, as the agent does it.
    let cancel = Arc::new(AtomicBool::new(false));
    let (program, args): (String, Vec<String>) = match reader {
        Some(r) if !r.is_empty() => (r[0].clone(), r[1..].to_vec()),
        _ => ("cat".to_string(), vec![tmp.to_string_lossy().into_owned()]),
    };
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    // `AUDITS=N`: N audits one after the other, as the agent runs them (the later ones reuse
    // what the allocator kept from the earlier ones).
    let audits: usize = std::env::var("AUDITS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    for _ in 0..audits.max(1) {
        audit(&mut s, &program, &argv, &cancel, dump_bytes);
    }
    println!(
        "after audit: VmHWM {:.1} MiB, VmRSS {:.1} MiB",
        mib(status_kib("VmHWM:")),
        mib(status_kib("VmRSS:"))
    );
}

/// One full audit, as the agent does it.
fn audit(s: &mut Session, program: &str, argv: &[&str], cancel: &Arc<AtomicBool>, dump_bytes: u64) {
    let wall = Instant::now();
    let read = run_and_parse(
        program,
        argv,
        Format::Iptables,
        Duration::from_secs(600),
        cancel,
    )
    .unwrap_or_else(|e| panic!("reading {program}: {e}"));
    println!(
        "after read (parse done, packed table held): VmHWM {:.1} MiB, VmRSS {:.1} MiB",
        mib(status_kib("VmHWM:")),
        mib(status_kib("VmRSS:"))
    );
    // The thread's CPU in nanoseconds, as the agent measures it.
    let diff_cpu_before = ghostip::layers::datapath::readers::thread_cpu();
    let Some((out, _)) =
        s.with_layer_cx::<DatapathModel, _>(|m, cx| m.on_read(cx, &read.table, Time::now()))
    else {
        println!("audit: no datapath model registered (AGENT_RSS_NO_TRACKER)");
        return;
    };
    let diff_cpu = ghostip::layers::datapath::readers::thread_cpu_since(diff_cpu_before);
    let total_wall = wall.elapsed();
    let stale = s
        .layer::<DatapathModel>()
        .map_or(0, |m| m.stale_now(s.engine()));
    let open = s.engine().open_count();
    println!(
        "audit: {program} {} bytes{}: {} frontends, {} backends, {} services observed, {} unknown frontends, {stale} stale, {open} open trackings",
        read.bytes,
        if dump_bytes > 0 {
            format!(" (file {dump_bytes})")
        } else {
            String::new()
        },
        read.table.frontends.len(),
        read.table.backend_count(),
        out.services,
        out.unknown_frontends,
    );
    let cpu = read.child_cpu + read.parse_cpu + diff_cpu;
    println!(
        "audit CPU: reader {:.2} s, parse {:.3} s, diff {:.3} s, total {:.2} s; wall {:.2} s",
        read.child_cpu.as_secs_f64(),
        read.parse_cpu.as_secs_f64(),
        diff_cpu.as_secs_f64(),
        cpu.as_secs_f64(),
        total_wall.as_secs_f64()
    );
    for pct in [1.0, 2.0, 5.0] {
        let mut cap = CostCap::new(CostConfig {
            max_cpu: pct / 100.0,
            ..CostConfig::default()
        });
        cap.record(Time::now(), cpu);
        println!(
            "audit period at --max-cpu {pct}: {:.0} s",
            cap.audit_period().as_secs_f64()
        );
    }
}
