//! CPU and memory of the agent's conntrack read against `conntrack -L` of the same table: a fresh network namespace filled with N real UDP flows, read alternately by both.
//!
//! ```text
//! conntrack_read [ENTRIES] [ROUNDS]      # root; default 100000 entries, 5 rounds
//! ```
//!
//! The namespace (`gip-ctbench-PID`, deleted at the end, with its sink `…-sink`): four
//! "pod" addresses (10.77.1.1–4) send one datagram from each of ENTRIES/400 sockets per
//! address to 100 "endpoints" (10.78.0.1–100:5353), routed over a veth pair to the sink
//! namespace, which drops them (not its address, no forwarding), so the table holds ENTRIES
//! unreplied UDP entries (timeout raised to 600 s in the namespace) and no packet leaves
//! the two namespaces. The session knows 100 Services (`bench/svc-N`, one endpoint each) and
//! the four pods on this node; 50 of the endpoints then leave their Service, so the join
//! attributes half the flows to a departure and holds them as stale from the second read.
//!
//! Each round runs `conntrack -L` (IPv4, stdout to /dev/null) from a thread moved into the
//! namespace and measures its CPU (`cutime + cstime` of `/proc/self/stat`, 10 ms ticks),
//! then the agent's read as the agent does it: `reader::read_flows` (the kernel's
//! dump in the receive calls, decoding and aggregating) and `ConntrackModel::on_read` (the
//! join), each on the thread CPU clock. Memory: VmRSS before the first read and VmHWM after
//! the last (the reads' peak above the session), from `/proc/self/status`.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::os::fd::AsFd;
use std::process::{Command, Stdio};
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use ghostip::layers::conntrack::reader;
use ghostip::layers::datapath::readers::{thread_cpu, thread_cpu_since};
use ghostip_core::truth::{
    AddressType, EndpointPort, EndpointRecord, PodRecord, ServicePort, ServiceRecord, SliceRecord,
};
use ghostip_core::{PodRef, Protocol, ServiceKey, Time};
use ghostip_session::layers::conntrack::ConntrackModel;
use ghostip_session::pacing::CpuTimes;
use ghostip_session::{
    Received, ResourceKind, Session, SessionConfig, SyncState, TruthEvent, TruthObject,
};
use ghostip_testkit::records::{headless_service, pod_record};
use rustix::thread::LinkNameSpaceType;

const NODE: &str = "bench-node";
const SERVICES: u8 = 100;
const CLIENTS: u8 = 4;
const SINK_MAC: &str = "02:00:00:00:00:02";

fn status_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| {
            l.strip_prefix(field)?
                .trim()
                .strip_suffix("kB")?
                .trim()
                .parse()
                .ok()
        })
        .unwrap()
}

fn children_cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    CpuTimes::parse_stat(&stat).unwrap().children
}

fn ip(args: &[&str]) {
    let st = Command::new("ip").args(args).status().unwrap();
    assert!(st.success(), "ip {args:?}: {st}");
}

/// A network namespace deleted on drop.
struct Netns(String);

impl Netns {
    /// Runs `f` on a thread moved into the namespace.
    fn enter<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        let path = format!("/run/netns/{}", self.0);
        std::thread::scope(|s| {
            s.spawn(|| {
                let ns = std::fs::File::open(&path).unwrap();
                rustix::thread::move_into_link_name_space(
                    ns.as_fd(),
                    Some(LinkNameSpaceType::Network),
                )
                .unwrap();
                f()
            })
            .join()
            .unwrap()
        })
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

fn endpoint(i: u8) -> Ipv4Addr {
    Ipv4Addr::new(10, 78, 0, i)
}

fn client(i: u8) -> Ipv4Addr {
    Ipv4Addr::new(10, 77, 1, i)
}

/// The namespace, with conntrack on and `sockets` sockets per client address each sending
/// once to every endpoint.
fn fill(sockets: usize) -> (Netns, Netns) {
    let ns = Netns(format!("gip-ctbench-{}", std::process::id()));
    ip(&["netns", "add", &ns.0]);
    let sink = Netns(format!("gip-ctbench-{}-sink", std::process::id()));
    ip(&["netns", "add", &sink.0]);
    let n = |args: &[&str]| {
        let mut all = vec!["-n", ns.0.as_str()];
        all.extend_from_slice(args);
        ip(&all);
    };
    n(&[
        "link", "add", "v0", "type", "veth", "peer", "name", "eth0", "netns", &sink.0,
    ]);
    n(&["link", "set", "v0", "up"]);
    n(&["link", "set", "lo", "up"]);
    n(&["addr", "add", "10.77.0.1/24", "dev", "v0"]);
    for c in 1..=CLIENTS {
        n(&["addr", "add", &format!("{}/32", client(c)), "dev", "v0"]);
    }
    ip(&[
        "-n", &sink.0, "link", "set", "eth0", "address", SINK_MAC, "up",
    ]);
    // The sink's MAC, permanent: no ARP; the sink drops what is not addressed to it.
    n(&[
        "neigh",
        "add",
        "10.77.0.2",
        "lladdr",
        SINK_MAC,
        "dev",
        "v0",
        "nud",
        "permanent",
    ]);
    n(&[
        "route",
        "add",
        "10.78.0.0/16",
        "via",
        "10.77.0.2",
        "dev",
        "v0",
    ]);
    let rules = "table inet bench {\n  chain out { type filter hook output priority 0; ct state new accept; }\n}\n";
    let file = std::env::temp_dir().join(format!("{}.nft", ns.0));
    std::fs::write(&file, rules).unwrap();
    let exec = |cmd: &[&str]| {
        let mut all = vec!["netns", "exec", ns.0.as_str()];
        all.extend_from_slice(cmd);
        ip(&all);
    };
    exec(&["nft", "-f", file.to_str().unwrap()]);
    let _ = std::fs::remove_file(&file);
    exec(&[
        "sysctl",
        "-qw",
        "net.netfilter.nf_conntrack_udp_timeout=600",
    ]);
    ns.enter(|| {
        for c in 1..=CLIENTS {
            for _ in 0..sockets {
                let s = UdpSocket::bind(SocketAddr::new(IpAddr::V4(client(c)), 0)).unwrap();
                for e in 1..=SERVICES {
                    s.send_to(b"x", SocketAddr::new(IpAddr::V4(endpoint(e)), 5353))
                        .unwrap();
                }
            }
        }
    });
    (ns, sink)
}

fn t(s: i64) -> Time {
    Time::from_second(1_800_000_000 + s).unwrap()
}

fn feed(s: &mut Session, event: TruthEvent, at: Time) {
    s.on_truth(&Received { at, event });
}

fn slice(i: u8, present: bool) -> SliceRecord {
    SliceRecord {
        namespace: "bench".into(),
        name: format!("svc-{i}-abc"),
        service: format!("svc-{i}"),
        address_type: AddressType::IPv4,
        endpoints: present
            .then(|| EndpointRecord {
                ip: IpAddr::V4(endpoint(i)),
                ready: true,
                serving: true,
                terminating: false,
                pod: Some(PodRef {
                    namespace: "bench".into(),
                    name: format!("svc-{i}-0"),
                    uid: String::new(),
                }),
                node: Some("other".into()),
                hostname: None,
            })
            .into_iter()
            .collect(),
        ports: vec![EndpointPort {
            name: None,
            port: 5353,
            protocol: Protocol::Udp,
        }],
        trigger_time: None,
    }
}

/// A synced session with the conntrack model attached; then half the endpoints leave.
fn session() -> Session {
    let kinds = [
        ResourceKind::Services,
        ResourceKind::EndpointSlices,
        ResourceKind::Pods,
    ];
    let mut s = Session::new(
        SessionConfig::default(),
        SyncState::new(t(0), kinds.clone()),
    )
    .with_layer(ConntrackModel::new(NODE));
    for k in kinds {
        feed(&mut s, TruthEvent::Init(k.clone()), t(0));
        for i in 1..=SERVICES {
            let object = match k {
                ResourceKind::Services => TruthObject::Service(ServiceRecord {
                    ports: vec![ServicePort {
                        name: None,
                        port: 5353,
                        protocol: Protocol::Udp,
                        node_port: None,
                    }],
                    ..headless_service(ServiceKey::new("bench", format!("svc-{i}")))
                }),
                ResourceKind::EndpointSlices => TruthObject::Slice(slice(i, true)),
                ResourceKind::Pods if i <= CLIENTS => TruthObject::Pod(PodRecord {
                    node: Some(NODE.into()),
                    ..pod_record(
                        PodRef {
                            namespace: "bench".into(),
                            name: format!("client-{i}"),
                            uid: String::new(),
                        },
                        vec![IpAddr::V4(client(i))],
                    )
                }),
                _ => continue,
            };
            feed(&mut s, TruthEvent::InitApply(object), t(0));
        }
        feed(&mut s, TruthEvent::InitDone(k), t(0));
    }
    s.with_layer_cx::<ConntrackModel, _>(|m, cx| m.attach(cx, Duration::from_secs(2), t(0)))
        .unwrap();
    for i in (1..=SERVICES).filter(|i| i % 2 == 0) {
        feed(
            &mut s,
            TruthEvent::Apply(TruthObject::Slice(slice(i, false))),
            t(1),
        );
    }
    s
}

fn main() {
    let mut args = std::env::args().skip(1);
    let entries: usize = args.next().map_or(100_000, |a| a.parse().unwrap());
    let rounds: usize = args.next().map_or(5, |a| a.parse().unwrap());
    let sockets = entries.div_ceil(usize::from(CLIENTS) * usize::from(SERVICES));
    let (ns, _sink) = fill(sockets);
    let mut s = session();
    let rss_before = status_kib("VmRSS:");
    let hwm_before = status_kib("VmHWM:");
    println!(
        "entries sent {} ({} sockets x {} clients x {} endpoints); VmRSS before the reads {} KiB, VmHWM {} KiB",
        sockets * usize::from(CLIENTS) * usize::from(SERVICES),
        sockets,
        CLIENTS,
        SERVICES,
        rss_before,
        hwm_before
    );
    println!(
        "round  conntrack-L_s  listed  dump_s  parse_s  join_s  entries  flows  stale  (parse+join)/L  (dump+parse+join)/L"
    );
    let cancel = AtomicBool::new(false);
    let (mut sum_l, mut sum_pj, mut sum_all) = (0.0, 0.0, 0.0);
    for round in 1..=rounds {
        let before = children_cpu();
        let out = ns.enter(|| {
            Command::new("conntrack")
                .args(["-L", "-f", "ipv4"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .output()
                .unwrap()
        });
        let l = children_cpu().saturating_sub(before).as_secs_f64();
        let stderr = String::from_utf8_lossy(&out.stderr);
        let listed = stderr
            .split_whitespace()
            .zip(stderr.split_whitespace().skip(1))
            .find_map(|(n, w)| (w == "flow").then(|| n.to_string()))
            .unwrap_or_default();
        let clients = s.layer::<ConntrackModel>().unwrap().client_ips();
        let read = ns
            .enter(|| reader::read_flows(clients, Duration::from_secs(60), &cancel))
            .unwrap();
        let cpu = thread_cpu();
        let (outcome, _) = s
            .with_layer_cx::<ConntrackModel, _>(|m, cx| {
                m.on_read(cx, &read.flows, t(10 + round as i64))
            })
            .unwrap();
        let join = thread_cpu_since(cpu).as_secs_f64();
        let (stale, _) = s.layer::<ConntrackModel>().unwrap().stale_counts();
        let dump = read.stats.dump_cpu.as_secs_f64();
        let parse = read.stats.parse_cpu.as_secs_f64();
        println!(
            "{round:>5}  {l:>13.3}  {listed:>6}  {dump:>6.3}  {parse:>7.3}  {join:>6.4}  {:>7}  {:>5}  {stale:>5}  {:>14.3}  {:>19.3}",
            read.flows.entries,
            outcome.flows,
            (parse + join) / l,
            (dump + parse + join) / l,
        );
        sum_l += l;
        sum_pj += parse + join;
        sum_all += dump + parse + join;
    }
    let hwm = status_kib("VmHWM:");
    println!(
        "totals: conntrack -L {sum_l:.3} s; parse + join {sum_pj:.3} s = {:.3}x; dump + parse + join {sum_all:.3} s = {:.3}x",
        sum_pj / sum_l,
        sum_all / sum_l
    );
    println!(
        "memory: VmHWM after the reads {hwm} KiB; above VmRSS before them: {} KiB",
        hwm.saturating_sub(rss_before)
    );
}
