//! Generates realistic mixed-format logs with a chosen share of connection-failure lines, for the
//! throughput benchmark and for tests that need volume.
//!
//! See [`LogGenerator`]. The output is deterministic for a seed. Normal lines mix a Spring Boot
//! application, Envoy access logs, klog, zap JSON, nginx access logs, Python logging and
//! `kubectl logs --timestamps` output; a few of them contain prefilter needles on purpose
//! ("timeoutSeconds=", "PasswordResetService") so the extractors' dismissal path is exercised.
//! Each error line is self-contained and yields exactly one failure, described by the
//! [`GeneratedError`] returned with it.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use jiff::Timestamp;
use jiff::tz::Offset;
use serde::Serialize;

use ghostip_logs::{Format, Kind};

/// Generator settings.
#[derive(Debug, Clone, Copy)]
pub struct GenConfig {
    /// PRNG seed.
    pub seed: u64,
    /// Share of error lines, e.g. 0.01.
    pub error_ratio: f64,
    /// Share of benign lines that still contain a prefilter needle, e.g. 0.003.
    pub near_miss_ratio: f64,
    /// Time of the first line, in microseconds since the epoch.
    pub start_micros: i64,
}

impl Default for GenConfig {
    fn default() -> GenConfig {
        GenConfig {
            seed: 0x5eed,
            error_ratio: 0.01,
            near_miss_ratio: 0.003,
            // 2024-05-01T15:42:00Z
            start_micros: 1_714_578_120_000_000,
        }
    }
}

/// What an error line should yield when scanned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct GeneratedError {
    /// Expected kind.
    pub kind: Kind,
    /// Expected format.
    pub format: Format,
    /// Expected target.
    pub target: Option<SocketAddr>,
}

/// Counts of a generated log.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct GenSummary {
    /// Lines written.
    pub lines: u64,
    /// Bytes written.
    pub bytes: u64,
    /// Error lines written.
    pub errors: u64,
    /// Error lines per kind.
    pub per_kind: BTreeMap<Kind, u64>,
    /// Error lines per format.
    pub per_format: BTreeMap<Format, u64>,
    /// Error lines with a target.
    pub with_target: u64,
}

impl GenSummary {
    /// Records one line.
    pub fn record(&mut self, bytes: usize, err: Option<GeneratedError>) {
        self.lines += 1;
        self.bytes += bytes as u64;
        if let Some(e) = err {
            self.errors += 1;
            *self.per_kind.entry(e.kind).or_default() += 1;
            *self.per_format.entry(e.format).or_default() += 1;
            self.with_target += u64::from(e.target.is_some());
        }
    }
}

/// A deterministic generator of log lines.
#[derive(Debug, Clone)]
pub struct LogGenerator {
    cfg: GenConfig,
    state: u64,
    micros: i64,
    seq: u64,
}

struct Stamp {
    y: i16,
    mo: i8,
    d: i8,
    h: i8,
    mi: i8,
    s: i8,
    us: i32,
}

const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];
const PATHS: [&str; 6] = [
    "/api/v1/orders",
    "/api/v1/cart/items",
    "/api/v2/catalog/products",
    "/healthz",
    "/api/v1/payments/authorize",
    "/static/js/app.7f3a2c.js",
];
const AGENTS: [&str; 4] = [
    "okhttp/4.9.3",
    "Go-http-client/1.1",
    "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0 Safari/537.36",
    "python-requests/2.31.0",
];

// === impl LogGenerator ===

impl LogGenerator {
    /// A generator for `cfg`.
    pub fn new(cfg: GenConfig) -> LogGenerator {
        LogGenerator {
            cfg,
            state: cfg.seed ^ 0x9E37_79B9_7F4A_7C15,
            micros: cfg.start_micros,
            seq: 0,
        }
    }

    fn next_u64(&mut self) -> u64 {
        // splitmix64
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next_u64() % n }
    }

    fn chance(&mut self, p: f64) -> bool {
        // 53 random bits as a fraction in [0, 1).
        let x = (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        x < p
    }

    fn pick<'a>(&mut self, xs: &[&'a str]) -> &'a str {
        let i = self.below(xs.len() as u64) as usize;
        xs.get(i).copied().unwrap_or("")
    }

    fn stamp(&self) -> Stamp {
        let ts = Timestamp::from_microsecond(self.micros).unwrap_or(Timestamp::UNIX_EPOCH);
        let dt = Offset::UTC.to_datetime(ts);
        Stamp {
            y: dt.year(),
            mo: dt.month(),
            d: dt.day(),
            h: dt.hour(),
            mi: dt.minute(),
            s: dt.second(),
            us: dt.subsec_nanosecond() / 1000,
        }
    }

    fn ip(&mut self, subnet: u8) -> Ipv4Addr {
        Ipv4Addr::new(10, 244, subnet, 10 + (self.below(24) as u8) * 3)
    }

    fn target(&mut self, port: u16) -> SocketAddr {
        let n = 1 + self.below(4) as u8;
        SocketAddr::new(IpAddr::V4(self.ip(n)), port)
    }

    /// Appends the next line (with its newline) to `out`; returns what an error line should
    /// yield, `None` for normal lines.
    pub fn next_line(&mut self, out: &mut Vec<u8>) -> Option<GeneratedError> {
        self.micros += 200 + self.below(20_000) as i64;
        self.seq += 1;
        let r = if self.chance(self.cfg.error_ratio) {
            Some(self.error_line(out))
        } else if self.chance(self.cfg.near_miss_ratio) {
            self.near_miss_line(out);
            None
        } else {
            self.normal_line(out);
            None
        };
        out.push(b'\n');
        r
    }

    /// A log of at least `bytes` bytes: `error_ratio` of its lines errors, and after every
    /// `every` generated bytes the `i`-th block of `extra` (multi-line events, odd shapes the
    /// generator does not write).
    pub fn interleaved(
        seed: u64,
        error_ratio: f64,
        bytes: usize,
        every: usize,
        mut extra: impl FnMut(usize) -> Vec<u8>,
    ) -> Vec<u8> {
        let mut g = LogGenerator::new(GenConfig {
            seed,
            error_ratio,
            ..GenConfig::default()
        });
        let mut data = Vec::new();
        let mut i = 0;
        while data.len() < bytes {
            g.fill(&mut data, every);
            data.extend_from_slice(&extra(i));
            i += 1;
        }
        data
    }

    /// Appends lines until `out` grew by at least `bytes`; returns their summary.
    pub fn fill(&mut self, out: &mut Vec<u8>, bytes: usize) -> GenSummary {
        let mut sum = GenSummary::default();
        let start = out.len();
        while out.len() - start < bytes {
            let before = out.len();
            let e = self.next_line(out);
            sum.record(out.len() - before, e);
        }
        sum
    }

    fn iso(&self, out: &mut Vec<u8>, sep: char, frac: usize, zulu: bool) {
        let t = self.stamp();
        let _ = write!(
            out,
            "{:04}-{:02}-{:02}{sep}{:02}:{:02}:{:02}",
            t.y, t.mo, t.d, t.h, t.mi, t.s
        );
        match frac {
            3 => {
                let _ = write!(out, ".{:03}", t.us / 1000);
            }
            6 => {
                let _ = write!(out, ".{:06}", t.us);
            }
            9 => {
                let _ = write!(out, ".{:06}{:03}", t.us, self.seq % 1000);
            }
            _ => {}
        }
        if zulu {
            out.push(b'Z');
        }
    }

    fn logback(&self, out: &mut Vec<u8>, level: &str, thread: &str, logger: &str) {
        self.iso(out, ' ', 3, false);
        let _ = write!(out, " {level:>5} 1 --- [{thread:>15}] {logger:<40} : ");
    }

    fn klog(&self, out: &mut Vec<u8>, sev: char, file: &str) {
        let t = self.stamp();
        let _ = write!(
            out,
            "{sev}{:02}{:02} {:02}:{:02}:{:02}.{:06}       1 {file}] ",
            t.mo, t.d, t.h, t.mi, t.s, t.us
        );
    }

    fn golog(&self, out: &mut Vec<u8>) {
        let t = self.stamp();
        let _ = write!(
            out,
            "{:04}/{:02}/{:02} {:02}:{:02}:{:02} ",
            t.y, t.mo, t.d, t.h, t.mi, t.s
        );
    }

    fn request_id(&mut self, out: &mut Vec<u8>) {
        let a = self.next_u64();
        let b = self.next_u64();
        let _ = write!(
            out,
            "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
            a >> 32,
            (a >> 16) & 0xffff,
            a & 0xffff,
            b >> 48,
            b & 0xffff_ffff_ffff
        );
    }

    fn envoy_prefix(&mut self, out: &mut Vec<u8>, method: &str, path: &str) {
        out.push(b'[');
        self.iso(out, 'T', 3, true);
        let _ = write!(out, "] \"{method} {path} HTTP/1.1\" ");
    }

    fn normal_line(&mut self, out: &mut Vec<u8>) {
        let path = self.pick(&PATHS);
        let id = self.below(100_000);
        match self.below(8) {
            0 | 1 => {
                let ms = self.below(90);
                self.logback(
                    out,
                    "INFO",
                    "nio-8080-exec-3",
                    "c.e.shop.orders.OrderController",
                );
                let _ = write!(
                    out,
                    "GET {path}/{id} completed in {ms} ms status=200 user=u{}",
                    id % 977
                );
            }
            2 | 3 => {
                let ua = self.pick(&AGENTS);
                self.envoy_prefix(out, "GET", path);
                let up = self.target(8080);
                let (bytes, dur) = (self.below(20_000), self.below(120));
                let _ = write!(
                    out,
                    "200 - via_upstream - \"-\" 0 {bytes} {dur} {} \"-\" \"{ua}\" \"",
                    dur.saturating_sub(1)
                );
                self.request_id(out);
                let _ = write!(
                    out,
                    "\" \"orders.shop.svc.cluster.local:8080\" \"{up}\" outbound|8080||orders.shop.svc.cluster.local 10.244.1.15:{} 10.96.12.40:8080 10.244.1.15:{} - default",
                    30_000 + self.below(30_000),
                    30_000 + self.below(30_000)
                );
            }
            4 => {
                self.klog(out, 'I', "controller.go:123");
                let _ = write!(
                    out,
                    "\"Reconciled object\" object=\"shop/orders-7d9f8c6b5-{:05x}\" duration=\"{}.{}ms\"",
                    id,
                    self.below(9),
                    self.below(9)
                );
            }
            5 => {
                out.extend_from_slice(b"{\"level\":\"info\",\"ts\":\"");
                self.iso(out, 'T', 3, true);
                let _ = write!(
                    out,
                    "\",\"caller\":\"server/handler.go:88\",\"msg\":\"request served\",\"method\":\"GET\",\"path\":\"{path}/{id}\",\"status\":200,\"duration_ms\":{}.{},\"trace_id\":\"{:016x}{:016x}\"}}",
                    self.below(40),
                    self.below(9),
                    self.next_u64(),
                    self.next_u64()
                );
            }
            6 => {
                let t = self.stamp();
                let ua = self.pick(&AGENTS);
                let up = self.target(80);
                let _ = write!(
                    out,
                    "10.244.1.{} - - [{:02}/{}/{:04}:{:02}:{:02}:{:02} +0000] \"GET {path} HTTP/1.1\" 200 {} \"https://shop.example.com/\" \"{ua}\" 0.00{} [shop-frontend-80] [] {up} 5321 0.004 200 {:08x}",
                    self.below(250),
                    t.d,
                    MONTHS
                        .get(usize::try_from(t.mo - 1).unwrap_or(0))
                        .copied()
                        .unwrap_or("Jan"),
                    t.y,
                    t.h,
                    t.mi,
                    t.s,
                    self.below(50_000),
                    self.below(9),
                    self.next_u64() & 0xffff_ffff
                );
            }
            _ => {
                self.iso(out, ' ', 0, false);
                let _ = write!(
                    out,
                    ",{:03} INFO worker.tasks: processed job {id} in 0.{}s (queue=emails)",
                    self.below(1000),
                    self.below(99)
                );
            }
        }
    }

    fn near_miss_line(&mut self, out: &mut Vec<u8>) {
        match self.below(3) {
            0 => {
                self.klog(out, 'I', "reflector.go:255");
                let _ = write!(
                    out,
                    "Listing and watching *v1.Pod from k8s.io/client-go/informers/factory.go:150 (timeoutSeconds={})",
                    300 + self.below(300)
                );
            }
            1 => {
                self.logback(
                    out,
                    "INFO",
                    "nio-8080-exec-9",
                    "c.e.shop.PasswordResetService",
                );
                let _ = write!(
                    out,
                    "password reset email queued for user {}",
                    self.below(10_000)
                );
            }
            _ => {
                self.envoy_prefix(out, "GET", "/api/v1/reports?timeout=30s");
                let up = self.target(8080);
                let _ = write!(
                    out,
                    "200 - via_upstream - \"-\" 0 512 30 29 \"-\" \"okhttp/4.9.3\" \"abc\" \"reports:8080\" \"{up}\" outbound|8080||reports.shop.svc.cluster.local - 10.96.0.12:8080 10.244.1.15:40000 - default"
                );
            }
        }
    }

    fn error_line(&mut self, out: &mut Vec<u8>) -> GeneratedError {
        let port = if self.chance(0.5) { 8080 } else { 9090 };
        let t = self.target(port);
        let e = |kind, format, target| GeneratedError {
            kind,
            format,
            target,
        };
        match self.below(17) {
            0 => {
                self.golog(out);
                let _ = write!(
                    out,
                    "WARNING: [core] [Channel #1 SubChannel #{}] grpc: addrConn.createTransport failed to connect to {{Addr: \"{t}\", ServerName: \"orders:{port}\", }}. Err: connection error: desc = \"transport: Error while dialing: dial tcp {t}: connect: connection refused\"",
                    self.below(90)
                );
                e(Kind::Refused, Format::GrpcGo, Some(t))
            }
            1 => {
                self.klog(out, 'E', "client.go:88");
                let _ = write!(
                    out,
                    "\"request failed\" err=\"Get \\\"http://{t}/api\\\": dial tcp {t}: i/o timeout\""
                );
                e(Kind::Timeout, Format::GoNet, Some(t))
            }
            2 => {
                self.iso(out, 'T', 3, true);
                let _ = write!(
                    out,
                    "\tERROR\tcache/redis.go:41\tdial failed\t{{\"error\": \"dial tcp: lookup redis.shop.svc.cluster.local on 10.96.0.10:53: read udp 10.244.1.15:{}->10.96.0.10:53: i/o timeout\"}}",
                    30_000 + self.below(30_000)
                );
                e(Kind::DnsTimeout, Format::GoNet, None)
            }
            3 => {
                self.envoy_prefix(out, "GET", "/api/v1/orders");
                let _ = write!(
                    out,
                    "503 UF,URX upstream_reset_before_response_started{{connection_failure}} - \"-\" 0 91 3003 - \"-\" \"okhttp/4.9.3\" \"abc\" \"orders:{port}\" \"{t}\" outbound|{port}||orders.shop.svc.cluster.local - 10.96.12.40:{port} 10.244.1.15:50214 - default"
                );
                e(Kind::Unavailable, Format::EnvoyText, Some(t))
            }
            4 => {
                out.extend_from_slice(b"{\"start_time\":\"");
                self.iso(out, 'T', 3, true);
                let _ = write!(
                    out,
                    "\",\"method\":\"GET\",\"path\":\"/api/v1/cart\",\"protocol\":\"HTTP/1.1\",\"response_code\":503,\"response_flags\":\"UC\",\"response_code_details\":\"upstream_reset_before_response_started{{connection_termination}}\",\"upstream_host\":\"{t}\",\"upstream_cluster\":\"outbound|{port}||cart.shop.svc.cluster.local\",\"duration\":2}}"
                );
                e(Kind::Reset, Format::EnvoyJson, Some(t))
            }
            5 => {
                self.golog(out);
                let _ = write!(
                    out,
                    "[error] 37#37: *{} connect() failed (111: Connection refused) while connecting to upstream, client: 10.244.1.15, server: shop.example.com, request: \"GET /api/cart HTTP/1.1\", upstream: \"http://{t}/api/cart\", host: \"shop.example.com\"",
                    self.below(1_000_000)
                );
                e(Kind::Refused, Format::Nginx, Some(t))
            }
            6 => {
                self.golog(out);
                let _ = write!(
                    out,
                    "[error] 37#37: *{} connect() failed (113: No route to host) while connecting to upstream, client: 10.244.1.15, server: shop.example.com, request: \"GET /favicon.ico HTTP/2.0\", upstream: \"http://{t}/favicon.ico\", host: \"shop.example.com\"",
                    self.below(1_000_000)
                );
                e(Kind::NoRoute, Format::Nginx, Some(t))
            }
            7 => {
                self.iso(out, 'T', 3, true);
                let _ = write!(
                    out,
                    " error: upstream call failed Error: connect ECONNREFUSED {t}"
                );
                e(Kind::Refused, Format::NodeJs, Some(t))
            }
            8 => {
                self.iso(out, ' ', 0, false);
                let _ = write!(
                    out,
                    ",{:03} ERROR app.client: urllib3.exceptions.MaxRetryError: HTTPConnectionPool(host='{}', port={port}): Max retries exceeded with url: /api/v1/items (Caused by NewConnectionError('<urllib3.connection.HTTPConnection object at 0x7f3a2c1b4d90>: Failed to establish a new connection: [Errno 111] Connection refused'))",
                    self.below(1000),
                    t.ip()
                );
                e(Kind::Refused, Format::PythonUrllib3, Some(t))
            }
            9 => {
                self.logback(
                    out,
                    "ERROR",
                    "pool-2-thread-1",
                    "c.e.shop.orders.InventoryClient",
                );
                let _ = write!(
                    out,
                    "call failed: org.apache.http.conn.HttpHostConnectException: Connect to {t} [/{}] failed: Connection refused (Connection refused)",
                    t.ip()
                );
                e(Kind::Refused, Format::ApacheHttpClient, Some(t))
            }
            10 => {
                self.logback(
                    out,
                    "ERROR",
                    "nio-8080-exec-7",
                    "c.e.shop.orders.PaymentClient",
                );
                let _ = write!(
                    out,
                    "I/O error on POST request for \"http://{t}/pay\": Connection reset; nested exception is java.net.SocketException: Connection reset"
                );
                e(Kind::Reset, Format::Java, Some(t))
            }
            11 => {
                self.logback(out, "WARN", "ault-executor-0", "c.e.shop.GrpcCatalogClient");
                let _ = write!(
                    out,
                    "call failed: io.grpc.StatusRuntimeException: UNAVAILABLE: io exception; cause: io.grpc.netty.shaded.io.netty.channel.AbstractChannel$AnnotatedConnectException: finishConnect(..) failed: Connection refused: /{t}"
                );
                e(Kind::Refused, Format::GrpcJava, Some(t))
            }
            12 => {
                self.logback(
                    out,
                    "ERROR",
                    "actor-tcp-nio-2",
                    "o.s.w.r.f.c.ExchangeFunctions",
                );
                let _ = write!(
                    out,
                    "[a1b2c3] Error: reactor.netty.http.client.PrematureCloseException: Connection prematurely closed BEFORE response"
                );
                e(Kind::Reset, Format::ReactorNetty, None)
            }
            13 => {
                self.iso(out, 'T', 9, true);
                let _ = write!(
                    out,
                    " [  1285.215813s]  WARN ThreadId(01) outbound:proxy{{addr=10.96.12.40:{port}}}:service{{ns=shop name=orders port={port}}}:endpoint{{addr={t}}}: linkerd_reconnect: Failed to connect error=Connection refused (os error 111)"
                );
                e(Kind::Refused, Format::Linkerd, Some(t))
            }
            14 => {
                self.logback(out, "ERROR", "OkHttp Dispatcher", "c.e.shop.CatalogClient");
                let _ = write!(
                    out,
                    "request failed: java.net.ConnectException: Failed to connect to catalog.shop.svc.cluster.local/{t}"
                );
                e(Kind::Other, Format::OkHttp, Some(t))
            }
            15 => {
                self.iso(out, 'T', 9, true);
                let _ = write!(
                    out,
                    " [ERROR] plugin/errors: 2 orders.shop.svc.cluster.local. A: read udp 10.244.0.5:{}->10.96.0.10:53: i/o timeout",
                    30_000 + self.below(30_000)
                );
                e(Kind::DnsTimeout, Format::CoreDns, None)
            }
            _ => {
                let st = self.stamp();
                let _ = write!(
                    out,
                    "<30>{} {:>2} {:02}:{:02}:{:02} node-2 kubelet[1234]: ",
                    MONTHS
                        .get(usize::try_from(st.mo - 1).unwrap_or(0))
                        .copied()
                        .unwrap_or("Jan"),
                    st.d,
                    st.h,
                    st.mi,
                    st.s
                );
                self.klog(out, 'I', "prober.go:107");
                let _ = write!(
                    out,
                    "\"Probe failed\" probeType=\"Readiness\" pod=\"shop/orders-7d9f8c6b5-x2x9z\" output=\"Get \\\"http://{t}/healthz\\\": dial tcp {t}: connect: connection refused\""
                );
                e(Kind::Refused, Format::GoNet, Some(t))
            }
        }
    }
}
