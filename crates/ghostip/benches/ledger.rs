//! Ledger benchmarks: ingest of pod and endpoint changes against a raw-INSERT baseline
//! in the same run, and `whois` latency on 10 M generated ownership intervals.
//!
//! `cargo bench -p ghostip --bench ledger`. The 10 M-interval database is generated
//! once through a bulk path (no journal, indexes built after the load) and cached at
//! `$GHOSTIP_BENCH_CACHE` (default `/var/cache/ghostip/bench`); `GHOSTIP_BENCH_WHOIS_ROWS`
//! changes the size. Besides criterion's estimates, a summary is printed: ingest
//! changes/s with the ratio to the baseline, the bytes the ledger keeps per pod replacement,
//! and whois p50/p99 from 10 000 random lookups timed one by one.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]
// A benchmark: it times what it measures with the system's monotonic clock.
#![allow(clippy::disallowed_methods)]

use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group};
use ghostip::ledger::{Ledger, LedgerOp, LedgerWriter, SCHEMA_VERSION, WriterOptions};
use ghostip_core::truth::{EndpointRecord, PodRecord};
use ghostip_core::{ChangeTime, PodRef, ServiceKey, Time};
use ghostip_testkit::records::pod_record;
use ghostip_testkit::rng::Rng;
use rusqlite::{Connection, params};

/// Changes per measured iteration.
const CHANGES: usize = 10_000;
/// Replacements (8 changes each) per iteration.
const REPLACEMENTS: usize = CHANGES / 8;
const SERVICES: usize = 500;
const IP_POOL: u32 = 60_000;
/// Transaction size of the batched ingest (the writer's default batch).
const BATCH: usize = 4096;
const LOOKUPS: usize = 10_000;

fn base() -> Time {
    Time::from_second(1_750_000_000).unwrap()
}

fn at(round: u64, step: u64) -> Time {
    base() + Duration::from_millis(round * 60_000 + step)
}

fn ip(round: u64, k: usize) -> IpAddr {
    let i = (round as u32 * REPLACEMENTS as u32 + k as u32) % IP_POOL;
    IpAddr::V4(Ipv4Addr::from(0x0af4_0000 + i))
}

fn pod(round: u64, k: usize) -> PodRecord {
    let name = format!("web-{}-{round}-{k}", k % SERVICES);
    let pod = PodRef {
        namespace: format!("ns-{}", k % 20),
        uid: format!("{:08x}-7d1e-4c2a-9b3f-{round:06x}{k:06x}", k % SERVICES),
        name,
    };
    PodRecord {
        node: Some(format!("node-{}", k % 50)),
        owner_kind: Some("ReplicaSet".into()),
        owner_name: Some(format!("web-{}-7c9f8d", k % SERVICES)),
        created: Some(at(round, k as u64)),
        grace_period_seconds: Some(30),
        ..pod_record(pod, vec![ip(round, k)])
    }
}

fn endpoint(p: &PodRecord, ready: bool, terminating: bool) -> EndpointRecord {
    EndpointRecord {
        ip: p.ips[0],
        ready,
        serving: ready || terminating,
        terminating,
        pod: Some(p.pod.clone()),
        node: p.node.clone(),
        hostname: None,
    }
}

fn service(k: usize) -> ServiceKey {
    ServiceKey::new(format!("ns-{}", k % 20), format!("web-{}", k % SERVICES))
}

fn change(t: Time) -> ChangeTime {
    ChangeTime {
        t0: t,
        received: t + Duration::from_millis(3),
        from_trigger_annotation: true,
        corrected: None,
    }
}

/// The pod's new state, applied at `at`.
fn apply(pod: &PodRecord, at: Time) -> LedgerOp {
    LedgerOp::ApplyPod {
        pod: pod.clone(),
        at,
    }
}

/// `ip`'s endpoint in service `k` as of `at` (`None`: it left).
fn member(k: usize, ip: IpAddr, endpoint: Option<EndpointRecord>, at: Time) -> LedgerOp {
    LedgerOp::MembershipChange {
        service: service(k),
        ip,
        endpoint,
        at: change(at),
    }
}

/// Pod (round, k) appears, joins its service, turns ready: 4 changes.
fn join(round: u64, k: usize, ops: &mut Vec<LedgerOp>) {
    let t = |s: u64| at(round, k as u64 * 8 + s);
    let mut new = pod(round, k);
    ops.push(apply(&new, t(0)));
    let ip = new.ips[0];
    ops.push(member(k, ip, Some(endpoint(&new, false, false)), t(1)));
    new.ready_since = Some(t(2));
    ops.push(apply(&new, t(2)));
    ops.push(member(k, ip, Some(endpoint(&new, true, false)), t(3)));
}

/// Pod (round - 1, k) terminates, leaves its service and disappears: 4 changes.
fn leave(round: u64, k: usize, ops: &mut Vec<LedgerOp>) {
    let t = |s: u64| at(round, k as u64 * 8 + s);
    let mut old = pod(round - 1, k);
    old.ready_since = old.created;
    old.deletion = Some(t(4));
    let ip = old.ips[0];
    ops.push(apply(&old, t(4)));
    ops.push(member(k, ip, Some(endpoint(&old, false, true)), t(5)));
    ops.push(member(k, ip, None, t(6)));
    ops.push(LedgerOp::PodGone {
        pod: old.pod,
        at: t(7),
    });
}

/// One rollout step per replacement (round >= 1): the new pod appears, joins, turns
/// ready; the previous round's pod terminates, leaves and disappears. 8 changes each.
fn rollout(round: u64) -> Vec<LedgerOp> {
    let mut ops = Vec::with_capacity(CHANGES);
    for k in 0..REPLACEMENTS {
        join(round, k, &mut ops);
        leave(round, k, &mut ops);
    }
    ops
}

fn temp_ledger() -> (tempfile::TempDir, Ledger) {
    let dir = tempfile::tempdir().unwrap();
    let mut ledger = Ledger::open(dir.path().join("ingest.db")).unwrap();
    // Round 0's pods are the old ones of round 1.
    let mut setup = Vec::new();
    for k in 0..REPLACEMENTS {
        join(0, k, &mut setup);
    }
    apply_batched(&mut ledger, &setup);
    (dir, ledger)
}

fn apply_batched(ledger: &mut Ledger, ops: &[LedgerOp]) {
    for chunk in ops.chunks(BATCH) {
        ledger.apply_batch(chunk).unwrap();
    }
}

/// The baseline: the same number of rows, raw prepared INSERTs into a plain table with
/// ip_intervals' columns, one transaction, same pragmas (WAL, synchronous=NORMAL).
struct Baseline {
    _dir: tempfile::TempDir,
    conn: Connection,
}

impl Baseline {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let conn = Connection::open(dir.path().join("raw.db")).unwrap();
        conn.execute_batch(
            "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL;
             CREATE TABLE raw (id INTEGER PRIMARY KEY, ip TEXT, pod_namespace TEXT, pod_name TEXT, pod_uid TEXT,
               node TEXT, owner_kind TEXT, owner_name TEXT, created_ns INTEGER, opened_ns INTEGER, start_ns INTEGER);",
        )
        .unwrap();
        Self { _dir: dir, conn }
    }

    fn insert(&mut self, pods: &[PodRecord]) {
        let tx = self.conn.transaction().unwrap();
        {
            let mut stmt = tx
                .prepare_cached(
                    "INSERT INTO raw (ip, pod_namespace, pod_name, pod_uid, node, owner_kind, owner_name, created_ns, \
                     opened_ns, start_ns) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
                )
                .unwrap();
            for p in pods {
                let ns = p.created.unwrap().as_nanosecond() as i64;
                stmt.execute(params![
                    p.ips[0].to_string(),
                    p.pod.namespace,
                    p.pod.name,
                    p.pod.uid,
                    p.node,
                    p.owner_kind,
                    p.owner_name,
                    ns,
                    ns,
                    ns
                ])
                .unwrap();
            }
        }
        tx.commit().unwrap();
    }
}

/// The baseline's rows for a round: CHANGES pod records.
fn raw_rows(round: u64) -> Vec<PodRecord> {
    (0..CHANGES).map(|k| pod(round, k)).collect()
}

fn ingest(c: &mut Criterion) {
    let mut g = c.benchmark_group("ledger_ingest");
    g.throughput(Throughput::Elements(CHANGES as u64))
        .sample_size(20)
        .measurement_time(Duration::from_secs(20));

    let (_dir, mut ledger) = temp_ledger();
    let mut round = 0;
    g.bench_function("apply_batch", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                round += 1;
                let ops = rollout(round);
                let start = Instant::now();
                apply_batched(&mut ledger, &ops);
                total += start.elapsed();
            }
            total
        });
    });
    drop(ledger);

    let (_dir, ledger) = temp_ledger();
    let writer = LedgerWriter::spawn(ledger, WriterOptions::default()).unwrap();
    let mut round = 0;
    g.bench_function("writer", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                round += 1;
                let ops = rollout(round);
                let start = Instant::now();
                for op in ops {
                    writer.blocking_send(op).unwrap();
                }
                writer.blocking_flush().unwrap();
                total += start.elapsed();
            }
            total
        });
    });
    let (_, stats) = writer.close().unwrap();
    assert_eq!(stats.failed_ops, 0, "{stats:?}");

    let mut baseline = Baseline::new();
    let mut round = 0;
    g.bench_function("raw_insert_baseline", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                round += 1;
                let rows = raw_rows(round);
                let start = Instant::now();
                baseline.insert(&rows);
                total += start.elapsed();
            }
            total
        });
    });
    g.finish();
}

/// A summary in one run: the same work timed directly, so the ratio compares like with like.
fn ingest_summary() {
    let rounds: u64 = std::env::var("GHOSTIP_BENCH_INGEST_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(30);
    let (dir, mut ledger) = temp_ledger();
    let db = dir.path().join("ingest.db");
    let setup_bytes = used_bytes(&db);
    let mut ledger_time = Duration::ZERO;
    let mut baseline = Baseline::new();
    let mut raw_time = Duration::ZERO;
    for round in 1..=rounds {
        let ops = rollout(round);
        let start = Instant::now();
        apply_batched(&mut ledger, &ops);
        ledger_time += start.elapsed();
        let rows = raw_rows(round);
        let start = Instant::now();
        baseline.insert(&rows);
        raw_time += start.elapsed();
    }
    let n = (rounds as usize * CHANGES) as f64;
    let ledger_rate = n / ledger_time.as_secs_f64();
    let raw_rate = n / raw_time.as_secs_f64();
    println!(
        "SUMMARY ingest: {} changes in {} rounds; ledger {:.0} changes/s; raw INSERT baseline {:.0} rows/s; ratio {:.2}",
        n as u64,
        rounds,
        ledger_rate,
        raw_rate,
        ledger_rate / raw_rate
    );
    assert!(ledger.verify().unwrap().problems.is_empty());
    // What the ledger keeps per replacement until retention prunes it: sizes the volume.
    let end_bytes = used_bytes(&db);
    let replacements = rounds as usize * REPLACEMENTS;
    println!(
        "SUMMARY size: {REPLACEMENTS} live pods {:.1} MB; after {replacements} replacements {:.1} MB; {:.0} bytes per replacement kept",
        setup_bytes as f64 / 1e6,
        end_bytes as f64 / 1e6,
        (end_bytes - setup_bytes) as f64 / replacements as f64
    );
}

/// Bytes of pages the database uses (its WAL included, as a reader sees it).
fn used_bytes(db: &std::path::Path) -> i64 {
    let conn = Connection::open(db).unwrap();
    let pages: i64 = conn
        .query_row("PRAGMA page_count", [], |r| r.get(0))
        .unwrap();
    let size: i64 = conn
        .query_row("PRAGMA page_size", [], |r| r.get(0))
        .unwrap();
    pages * size
}

// --- whois on 10 M intervals ---

fn whois_rows() -> u64 {
    std::env::var("GHOSTIP_BENCH_WHOIS_ROWS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10_000_000)
}

/// IPs and intervals per IP: 100 intervals per IP.
fn layout(rows: u64) -> (u64, u64) {
    let per_ip = 100.min(rows);
    (rows / per_ip, per_ip)
}

fn cache_dir() -> PathBuf {
    let dir = std::env::var_os("GHOSTIP_BENCH_CACHE")
        .map_or_else(|| PathBuf::from("/var/cache/ghostip/bench"), PathBuf::from);
    if std::fs::create_dir_all(&dir).is_ok() {
        return dir;
    }
    let tmp = std::env::temp_dir().join("ghostip-bench");
    std::fs::create_dir_all(&tmp).unwrap();
    tmp
}

fn whois_ip(i: u64) -> IpAddr {
    IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i as u32))
}

/// Each IP: intervals every 10 minutes starting at `base`, lasting 1 to 9 minutes; the last is open.
const SLOT_SECS: u64 = 600;

/// FNV-1a of the schema a fresh ledger gets, so a changed schema never reuses a stale cache.
fn schema_hash() -> u64 {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("schema.db");
    drop(Ledger::open(&path).unwrap());
    let sql: String = Connection::open(&path)
        .unwrap()
        .query_row(
            "SELECT group_concat(sql, ';') FROM (SELECT sql FROM sqlite_schema ORDER BY name)",
            [],
            |r| r.get(0),
        )
        .unwrap();
    sql.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Builds the cached database once: schema from `Ledger::open`, then a bulk load with no
/// journal and the ip_intervals indexes dropped, then the indexes rebuilt, then WAL back on.
fn whois_db(rows: u64) -> PathBuf {
    let path = cache_dir().join(format!(
        "whois-{rows}-schema{SCHEMA_VERSION}-{:016x}.db",
        schema_hash()
    ));
    if path.exists() {
        return path;
    }
    let started = Instant::now();
    let tmp = path.with_extension("db.partial");
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", tmp.display()));
    }
    drop(Ledger::open(&tmp).unwrap());
    let mut conn = Connection::open(&tmp).unwrap();
    conn.execute_batch(
        "PRAGMA journal_mode = DELETE; PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF;",
    )
    .unwrap();
    let indexes: Vec<(String, String)> = conn
        .prepare("SELECT name, sql FROM sqlite_schema WHERE type = 'index' AND tbl_name = 'ip_intervals' AND sql IS NOT NULL")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    for (name, _) in &indexes {
        conn.execute_batch(&format!("DROP INDEX {name}")).unwrap();
    }
    let (ips, per_ip) = layout(rows);
    let base_ns = base().as_nanosecond() as i64;
    let mut rng = Rng(0x5eed);
    let tx = conn.transaction().unwrap();
    {
        let mut stmt = tx
            .prepare(
                "INSERT INTO ip_intervals (ip, pod_namespace, pod_name, pod_uid, node, owner_kind, owner_name, \
                 created_ns, ready_ns, terminating_ns, grace_period_s, gone_ns, opened_ns, start_ns, closed_ns, \
                 end_reason) VALUES (?1, ?2, ?3, ?4, ?5, 'ReplicaSet', ?6, ?7, ?8, ?9, 30, ?10, ?7, ?7, ?10, ?11)",
            )
            .unwrap();
        for i in 0..ips {
            let addr = whois_ip(i).to_string();
            for j in 0..per_ip {
                let start = base_ns + ((j * SLOT_SECS + rng.below(60)) * 1_000_000_000) as i64;
                let len = (60 + rng.below(480)) as i64 * 1_000_000_000;
                let last = j + 1 == per_ip;
                let closed = (!last).then_some(start + len);
                let svc = rng.below(5000);
                stmt.execute(params![
                    addr,
                    format!("ns-{}", svc % 40),
                    format!("web-{svc}-7c9f8d-{:05x}", rng.below(1 << 20)),
                    format!("{:08x}-7d1e-4c2a-9b3f-{:012x}", i, j),
                    format!("node-{}", rng.below(200)),
                    format!("web-{svc}-7c9f8d"),
                    start,
                    start + 2_000_000_000,
                    closed.map(|c| c - 30_000_000_000),
                    closed,
                    closed.map(|_| "gone"),
                ])
                .unwrap();
            }
        }
    }
    tx.commit().unwrap();
    for (_, sql) in &indexes {
        conn.execute_batch(sql).unwrap();
    }
    conn.execute_batch("PRAGMA journal_mode = WAL;").unwrap();
    drop(conn);
    std::fs::rename(&tmp, &path).unwrap();
    println!(
        "generated {rows} intervals in {:?} at {}",
        started.elapsed(),
        path.display()
    );
    path
}

fn random_query(rng: &mut Rng, ips: u64, per_ip: u64) -> (IpAddr, Time) {
    let addr = whois_ip(rng.below(ips));
    // Anywhere from before the first interval to after the last.
    let secs = rng.below((per_ip + 2) * SLOT_SECS);
    (
        addr,
        base() - Duration::from_secs(SLOT_SECS) + Duration::from_secs(secs),
    )
}

fn whois(c: &mut Criterion) {
    let rows = whois_rows();
    let (ips, per_ip) = layout(rows);
    // Built on first use, so a filter that skips this bench skips the generation too.
    let ledger = std::cell::OnceCell::new();
    let mut rng = Rng(42);
    let mut g = c.benchmark_group("ledger_whois");
    g.bench_function(format!("whois_{rows}_intervals"), |b| {
        let ledger = ledger.get_or_init(|| Ledger::open(whois_db(rows)).unwrap());
        b.iter(|| {
            let (addr, t) = random_query(&mut rng, ips, per_ip);
            black_box(ledger.whois(addr, t).unwrap())
        });
    });
    g.finish();
}

/// p50/p99 from `LOOKUPS` random lookups, each timed on its own (after 1 000 warm-up lookups).
fn whois_summary() {
    let rows = whois_rows();
    let path = whois_db(rows);
    let ledger = Ledger::open(&path).unwrap();
    let (ips, per_ip) = layout(rows);
    let mut rng = Rng(7);
    let mut found = 0usize;
    for _ in 0..1000 {
        let (addr, t) = random_query(&mut rng, ips, per_ip);
        black_box(ledger.whois(addr, t).unwrap());
    }
    let mut times = Vec::with_capacity(LOOKUPS);
    for _ in 0..LOOKUPS {
        let (addr, t) = random_query(&mut rng, ips, per_ip);
        let start = Instant::now();
        let w = ledger.whois(addr, t).unwrap();
        times.push(start.elapsed());
        found += usize::from(w.at_time.is_some());
        black_box(w);
    }
    times.sort();
    let pct = |p: f64| times[((times.len() as f64 * p) as usize).min(times.len() - 1)];
    let total: i64 = Connection::open(&path)
        .unwrap()
        .query_row("SELECT count(*) FROM ip_intervals", [], |r| r.get(0))
        .unwrap();
    println!(
        "SUMMARY whois: {total} intervals ({ips} IPs x {per_ip}); {LOOKUPS} random lookups ({found} with an owner at the time): \
         p50 {:?}, p90 {:?}, p99 {:?}, max {:?}",
        pct(0.50),
        pct(0.90),
        pct(0.99),
        times[times.len() - 1]
    );
}

criterion_group!(benches, ingest, whois);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
    // `cargo test --benches` / `--bench ledger -- --test` only check that the benches run.
    if std::env::args().any(|a| a == "--test" || a == "--list") {
        return;
    }
    // A criterion filter (`-- whois`) also selects the summaries.
    let filter = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    if filter
        .as_deref()
        .is_none_or(|f| "ledger_ingest".contains(f) || f.contains("ingest"))
    {
        ingest_summary();
    }
    if filter
        .as_deref()
        .is_none_or(|f| "ledger_whois".contains(f) || f.contains("whois"))
    {
        whois_summary();
    }
}
