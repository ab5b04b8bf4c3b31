//! The channelz read of docs/BENCHMARKS.md: full reads of the lab's real grpc-go client
//! (`grpcclient`, `lab/build grpc`) holding 1 000 subchannels, on loopback.
//!
//! Measures this thread's CPU per read (the runtime is single-threaded: the gRPC
//! connection, decoding and the read loop all run on it) and, as the baseline of the same
//! run, the CPU the client spent serving those reads (its `/proc/<pid>/stat`, 10 ms ticks,
//! summed over the rounds). `cargo bench -p ghostip --bench channelz`.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::disallowed_methods,
    missing_docs
)]

#[path = "support/mod.rs"]
mod support;

use std::net::{SocketAddr, TcpListener};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ghostip::layers::channelz::reader::{ReadBounds, read};
use ghostip::layers::datapath::readers::{thread_cpu, thread_cpu_since};

use support::lab_bin;
const SUBCHANNELS: usize = 1000;
const ROUNDS: usize = 30;
const TARGET: &str = "dns:///web.demo.svc.cluster.local:50051";

fn client_cpu(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after = stat.rsplit_once(')').unwrap().1;
    let f: Vec<u64> = after
        .split_whitespace()
        .skip(11)
        .take(2)
        .map(|v| v.parse().unwrap())
        .collect();
    Duration::from_millis((f[0] + f[1]) * 10)
}

fn main() {
    let cz = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("addrs");
    let lines: Vec<String> = (0..SUBCHANNELS)
        .map(|i| format!("127.0.{}.{}:9", 1 + i / 250, 1 + i % 250))
        .collect();
    std::fs::write(&file, lines.join("\n")).unwrap();
    let bin = lab_bin().join("grpcclient");
    assert!(
        bin.is_file(),
        "{} is missing: run lab/build grpc",
        bin.display()
    );
    let mut child = Command::new(bin)
        .args([
            format!("--target={TARGET}"),
            format!("--channelz-listen=127.0.0.1:{cz}"),
            format!("--addresses-file={}", file.display()),
            "--rate=1".into(),
            "--duration=300s".into(),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let addr: SocketAddr = format!("127.0.0.1:{cz}").parse().unwrap();
    // `CHANNELZ_CONCURRENCY=N`: GetSubchannel requests in flight (default: the reader's).
    let concurrency = std::env::var("CHANNELZ_CONCURRENCY")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(ReadBounds::default().concurrency);
    let bounds = ReadBounds {
        deadline: Duration::from_secs(10),
        concurrency,
        ..ReadBounds::default()
    };
    let count = |r: &ghostip_session::layers::channelz::ClientRead| -> usize {
        r.channels
            .iter()
            .filter(|c| c.target == TARGET)
            .map(|c| c.subchannels.len())
            .sum()
    };
    rt.block_on(async {
        let started = Instant::now();
        loop {
            match read(addr, &bounds).await {
                Ok(r) if count(&r) == SUBCHANNELS => break,
                _ if started.elapsed() > Duration::from_secs(30) => panic!("no full read"),
                _ => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
        let mut ours = Vec::with_capacity(ROUNDS);
        let client_before = client_cpu(pid);
        let wall = Instant::now();
        for _ in 0..ROUNDS {
            let before = thread_cpu();
            let r = read(addr, &bounds).await.unwrap();
            ours.push(thread_cpu_since(before));
            assert!(count(&r) == SUBCHANNELS && !r.truncated);
        }
        let wall = wall.elapsed();
        let client = client_cpu(pid) - client_before;
        ours.sort();
        let total: Duration = ours.iter().sum();
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        println!(
            "SUMMARY channelz read of {SUBCHANNELS} subchannels, {ROUNDS} rounds, {concurrency} in flight: ghostip CPU per read median {:.2} ms (min {:.2}, p90 {:.2}, max {:.2}); wall per read {:.2} ms; client CPU per read {:.2} ms; ratio ghostip/client {:.2}",
            ms(ours[ROUNDS / 2]),
            ms(ours[0]),
            ms(ours[ROUNDS * 9 / 10]),
            ms(ours[ROUNDS - 1]),
            ms(wall) / ROUNDS as f64,
            ms(client) / ROUNDS as f64,
            total.as_secs_f64() / client.as_secs_f64().max(1e-9),
        );
    });
    let _ = child.kill();
    let _ = child.wait();
}
