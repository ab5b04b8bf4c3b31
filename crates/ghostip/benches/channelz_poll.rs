//! The channelz polling budget of docs/BENCHMARKS.md: `watch`'s own schedule ([`Poller`])
//! reading 500 opted-in "pods" served by 10 real grpc-go clients (`grpcclient`,
//! `lab/build grpc`) of 20 subchannels each, on loopback, with `--channelz-qps` at its
//! default and, as the baseline of the same run, with no budget.
//!
//! The rate is counted at the servers: each client's channelz server's `calls_started`
//! (`GetServers`), summed, before and after each phase, and every 5 s from a separate
//! thread for the busiest window. Printed per phase: requests/s received, reads/s, the
//! effective interval per pod, and this thread's CPU (the runtime is single-threaded: the
//! schedule, the budget and every read run on it).
//! `cargo bench -p ghostip --bench channelz_poll`; `CHANNELZ_POLL_SECS=N` sets each phase's
//! length (default 60).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::disallowed_methods,
    missing_docs
)]

#[path = "support/mod.rs"]
mod support;

use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpListener};
use std::num::NonZeroU32;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use ghostip::cli::DEFAULT_CHANNELZ_QPS;
use ghostip::layers::channelz::budget::ReadBudget;
use ghostip::layers::channelz::poll::{PollConfig, PolledRead, Poller, grpc_reader};
use ghostip::layers::channelz::reader::{ReadBounds, read};
use ghostip::layers::datapath::readers::{thread_cpu, thread_cpu_since};
use ghostip_session::layers::channelz::ClientPod;
use http::uri::PathAndQuery;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use support::lab_bin;
const CLIENTS: usize = 10;
const PODS: usize = 500;
const SUBCHANNELS: usize = 20;
const TARGET: &str = "dns:///web.demo.svc.cluster.local:50051";
const GET_SERVERS: &str = "/grpc.channelz.v1.Channelz/GetServers";

#[derive(Clone, PartialEq, prost::Message)]
struct GetServersRequest {
    #[prost(int64, tag = "1")]
    start_server_id: i64,
    #[prost(int64, tag = "2")]
    max_results: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
struct GetServersResponse {
    #[prost(message, repeated, tag = "1")]
    server: Vec<Server>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct Server {
    #[prost(message, optional, tag = "2")]
    data: Option<ServerData>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct ServerData {
    #[prost(int64, tag = "2")]
    calls_started: i64,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Calls started on one client's servers (its channelz server), this call included.
async fn calls_started(addr: SocketAddr) -> i64 {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.unwrap();
    let r: GetServersResponse = grpc
        .unary(
            tonic::Request::new(GetServersRequest {
                start_server_id: 0,
                max_results: 100,
            }),
            PathAndQuery::from_static(GET_SERVERS),
            tonic_prost::ProstCodec::<GetServersRequest, GetServersResponse>::default(),
        )
        .await
        .unwrap()
        .into_inner();
    r.server
        .iter()
        .filter_map(|s| s.data.as_ref())
        .map(|d| d.calls_started)
        .sum()
}

/// Calls started on every client, minus the `GetServers` calls counting them made.
struct Counter {
    addrs: Vec<SocketAddr>,
    own: i64,
}

impl Counter {
    async fn total(&mut self) -> i64 {
        let mut sum = 0;
        for a in &self.addrs {
            sum += calls_started(*a).await;
        }
        self.own += self.addrs.len() as i64;
        sum - self.own
    }
}

struct Phase {
    name: String,
    secs: f64,
    received: i64,
    busiest_5s: f64,
    reads: usize,
    intervals: Vec<Duration>,
    cpu: Duration,
}

fn run_phase(
    name: &str,
    qps: Option<NonZeroU32>,
    secs: u64,
    pods: &BTreeMap<ClientPod, SocketAddr>,
    addrs: &[SocketAddr],
) -> Phase {
    // The server-side count, from its own thread and runtime (not in our CPU figure).
    let stop = Arc::new(AtomicBool::new(false));
    let (samples_tx, samples_rx) = std::sync::mpsc::channel::<(Instant, i64)>();
    let sampler = {
        let stop = Arc::clone(&stop);
        let addrs = addrs.to_vec();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let mut c = Counter { addrs, own: 0 };
                samples_tx.send((Instant::now(), c.total().await)).unwrap();
                // Bounded: one sample per 5 s until the phase ends (at most secs/5 + 2).
                for _ in 0..=(secs / 5 + 1) {
                    tokio::time::sleep(Duration::from_secs(5)).await;
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    samples_tx.send((Instant::now(), c.total().await)).unwrap();
                }
                samples_tx.send((Instant::now(), c.total().await)).unwrap();
            });
        })
    };
    // Let the first sample land before the phase starts.
    let first = samples_rx.recv().unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (reads, intervals, cpu) = rt.block_on(async {
        let cfg = PollConfig {
            interval: Duration::from_secs(10),
            concurrency: 4,
            bounds: ReadBounds::default(),
        };
        let poller = Poller::new(cfg, qps.map(ReadBudget::new), grpc_reader());
        let (_pods_tx, pods_rx) = watch::channel(pods.clone());
        let (out, mut rx) = mpsc::channel::<PolledRead>(256);
        let cancel = CancellationToken::new();
        let before = thread_cpu();
        let task = tokio::spawn(poller.run(pods_rx, out, cancel.clone()));
        let end = tokio::time::Instant::now() + Duration::from_secs(secs);
        let (mut reads, mut failed, mut intervals) = (0usize, 0usize, Vec::new());
        while let Ok(Some(r)) = tokio::time::timeout_at(end, rx.recv()).await {
            match &r.result {
                Ok(c)
                    if c.channels
                        .iter()
                        .any(|ch| ch.subchannels.len() == SUBCHANNELS) =>
                {
                    reads += 1
                }
                _ => failed += 1,
            }
            intervals.extend(r.interval);
        }
        cancel.cancel();
        let _ = task.await;
        let cpu = thread_cpu_since(before);
        assert_eq!(failed, 0, "{name}: {failed} reads failed or were short");
        (reads, intervals, cpu)
    });
    stop.store(true, Ordering::SeqCst);
    sampler.join().unwrap();
    let mut samples = vec![first];
    samples.extend(samples_rx.try_iter());
    let (t0, c0) = samples[0];
    let (t1, c1) = *samples.last().unwrap();
    let busiest_5s = samples
        .windows(2)
        .map(|w| (w[1].1 - w[0].1) as f64 / w[1].0.duration_since(w[0].0).as_secs_f64())
        .fold(0.0, f64::max);
    Phase {
        name: name.into(),
        secs: t1.duration_since(t0).as_secs_f64(),
        received: c1 - c0,
        busiest_5s,
        reads,
        intervals,
        cpu,
    }
}

fn main() {
    let secs: u64 = std::env::var("CHANNELZ_POLL_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(60)
        .clamp(10, 600);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("addrs");
    let lines: Vec<String> = (0..SUBCHANNELS)
        .map(|i| format!("127.0.9.{}:9", 1 + i))
        .collect();
    std::fs::write(&file, lines.join("\n")).unwrap();
    let bin = lab_bin().join("grpcclient");
    assert!(
        bin.is_file(),
        "{} is missing: run lab/build grpc",
        bin.display()
    );
    let mut children: Vec<Child> = Vec::new();
    let mut addrs: Vec<SocketAddr> = Vec::new();
    for _ in 0..CLIENTS {
        let port = free_port();
        addrs.push(format!("127.0.0.1:{port}").parse().unwrap());
        children.push(
            Command::new(&bin)
                .args([
                    format!("--target={TARGET}"),
                    format!("--channelz-listen=127.0.0.1:{port}"),
                    format!("--addresses-file={}", file.display()),
                    "--rate=1".into(),
                    // Bounded: outlives both phases, killed at the end.
                    format!("--duration={}s", 2 * secs + 120),
                ])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        );
    }
    // Every client answers a full read before the phases start.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        for a in &addrs {
            let started = Instant::now();
            loop {
                match read(*a, &ReadBounds::default()).await {
                    Ok(r)
                        if r.channels
                            .iter()
                            .any(|c| c.subchannels.len() == SUBCHANNELS) =>
                    {
                        break;
                    }
                    _ if started.elapsed() > Duration::from_secs(30) => panic!("no full read"),
                    _ => tokio::time::sleep(Duration::from_millis(200)).await,
                }
            }
        }
    });
    drop(rt);
    let pods: BTreeMap<ClientPod, SocketAddr> = (0..PODS)
        .map(|i| {
            let pod = ClientPod {
                namespace: "demo".into(),
                name: format!("client-{i:03}"),
            };
            (pod, addrs[i % CLIENTS])
        })
        .collect();
    let qps = NonZeroU32::new(DEFAULT_CHANNELZ_QPS).unwrap();
    let phases = [
        run_phase(
            &format!("--channelz-qps={qps}"),
            Some(qps),
            secs,
            &pods,
            &addrs,
        ),
        run_phase("no budget", None, secs, &pods, &addrs),
    ];
    for c in &mut children {
        let _ = c.kill();
        let _ = c.wait();
    }
    let per_read = (1 + SUBCHANNELS) as f64;
    for p in &phases {
        let mut iv = p.intervals.clone();
        iv.sort();
        let pick = |q: f64| {
            iv.get(((iv.len() as f64 - 1.0) * q) as usize)
                .map_or(f64::NAN, Duration::as_secs_f64)
        };
        println!(
            "SUMMARY channelz poll, {PODS} pods on {CLIENTS} grpc-go clients of {SUBCHANNELS} subchannels, interval 10s, 4 reads in flight, {name}, {secs:.1} s: received {rps:.1} requests/s at the servers (busiest 5 s: {busy:.1}/s; {req} requests), {reads:.1} reads/s ({exp:.0} requests/s at {per_read} a read), effective interval per pod median {p50:.2} s (min {min:.2}, max {max:.2}), ghostip CPU {cpu:.2} s ({cpu_pct:.1} % of one core, {cpu_req:.1} µs per request)",
            name = p.name,
            secs = p.secs,
            rps = p.received as f64 / p.secs,
            busy = p.busiest_5s,
            req = p.received,
            reads = p.reads as f64 / p.secs,
            exp = p.reads as f64 * per_read / p.secs,
            p50 = pick(0.5),
            min = pick(0.0),
            max = pick(1.0),
            cpu = p.cpu.as_secs_f64(),
            cpu_pct = 100.0 * p.cpu.as_secs_f64() / p.secs,
            cpu_req = 1e6 * p.cpu.as_secs_f64() / p.received.max(1) as f64,
        );
    }
    let (a, b) = (&phases[0], &phases[1]);
    let ra = a.received as f64 / a.secs;
    let rb = b.received as f64 / b.secs;
    println!(
        "SUMMARY budget {qps}/s: received {ra:.1}/s = {:.3}× the budget, {:.2}× the unbudgeted baseline ({rb:.1}/s); ghostip CPU {:.2}× the baseline's",
        ra / f64::from(qps.get()),
        ra / rb,
        a.cpu.as_secs_f64() / b.cpu.as_secs_f64().max(1e-9),
    );
    // The budget holds at the servers (1 % for the phase edges and sampling).
    assert!(
        ra <= f64::from(qps.get()) * 1.01,
        "received {ra:.1}/s over a budget of {qps}/s"
    );
}
