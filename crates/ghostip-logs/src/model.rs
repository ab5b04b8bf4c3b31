//! The vocabulary of `explain`: what a connection failure found in a log is, and what scanning counted.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};

use jiff::Timestamp;
use jiff::tz::TimeZone;
use serde::Serialize;

/// Longest excerpt of the source line kept in [`ConnFailure::raw`], in bytes.
pub const RAW_EXCERPT_MAX: usize = 512;

/// What kind of connection failure a log line reports.
///
/// The order is from most to least specific; when two lines of one event (a Java stack trace, a
/// Node.js error object) disagree, the more specific kind wins.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// The peer answered the SYN with a RST (`ECONNREFUSED`, errno 111): nothing listens there.
    Refused,
    /// An established (often pooled) connection was reset or closed under the client
    /// (`ECONNRESET`, errno 104, broken pipe, "socket hang up", Envoy `UC`).
    Reset,
    /// The connect or the exchange timed out (`ETIMEDOUT`, `i/o timeout`, "connect timed out").
    Timeout,
    /// No route / host unreachable (`EHOSTUNREACH`, errno 113): typically an IP nobody answers
    /// ARP for any more.
    NoRoute,
    /// A DNS lookup timed out or its server failed (`lookup NAME on IP:53: i/o timeout`,
    /// `EAI_AGAIN`, "server misbehaving").
    DnsTimeout,
    /// A DNS lookup said the name does not exist (`no such host`, `UnknownHostException`,
    /// `ENOTFOUND`).
    DnsNotFound,
    /// Another connect error with an explicit reason (`operation not permitted`, curl's
    /// "Couldn't connect to server", OkHttp's bare "Failed to connect to").
    Other,
    /// The upstream was unavailable without a more precise reason in the line (gRPC
    /// `Unavailable`, Envoy `UF`/`UH`/`URX`, nginx "no live upstreams").
    Unavailable,
}

impl Kind {
    /// Every kind, in rank order.
    pub const ALL: [Kind; 8] = [
        Kind::Refused,
        Kind::Reset,
        Kind::Timeout,
        Kind::NoRoute,
        Kind::DnsTimeout,
        Kind::DnsNotFound,
        Kind::Other,
        Kind::Unavailable,
    ];

    /// Short lower-case name used in tables ("refused", "dns-timeout").
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Refused => "refused",
            Kind::Reset => "reset",
            Kind::Timeout => "timeout",
            Kind::NoRoute => "no-route",
            Kind::DnsTimeout => "dns-timeout",
            Kind::DnsNotFound => "dns-not-found",
            Kind::Other => "other",
            Kind::Unavailable => "unavailable",
        }
    }

    /// True for the kinds that say nothing precise (gRPC `Unavailable`, bare "failed to connect"):
    /// a later line of the same event may refine them.
    pub fn is_generic(self) -> bool {
        matches!(self, Kind::Unavailable | Kind::Other)
    }

    /// True for DNS lookup failures (no target IP involved, a DNS server maybe).
    pub fn is_dns(self) -> bool {
        matches!(self, Kind::DnsTimeout | Kind::DnsNotFound)
    }
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which client, proxy or library wrote the line. Each format but [`Format::Unknown`] has its
/// entry (name, markers, needles, peer reader) in the crate's table of formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Format {
    /// grpc-go (`rpc error: code = Unavailable`, `Error while dialing`, `createTransport`).
    GrpcGo,
    /// grpc-java over Netty (`io.grpc`, `StatusRuntimeException`, `AnnotatedConnectException`).
    GrpcJava,
    /// @grpc/grpc-js (`14 UNAVAILABLE`).
    GrpcJs,
    /// Plain Java (`java.net.ConnectException`, `SocketException: Connection reset`).
    Java,
    /// OkHttp (`Failed to connect to host/ip:port`, `<-- HTTP FAILED`).
    OkHttp,
    /// Apache HttpClient (`HttpHostConnectException: Connect to host:port [/ip] failed`).
    ApacheHttpClient,
    /// reactor-netty / Spring WebClient (`finishConnect(..) failed`, `prematurely closed`).
    ReactorNetty,
    /// Go `net` / `net/http` errors (`dial tcp IP:PORT: connect: …`, `lookup NAME on IP:53`).
    GoNet,
    /// Envoy / Istio default text access log.
    EnvoyText,
    /// Envoy / Istio JSON access log.
    EnvoyJson,
    /// nginx error log (`connect() failed (111: …) while connecting to upstream`).
    Nginx,
    /// Node.js (`connect ECONNREFUSED IP:PORT`, `read ECONNRESET`).
    NodeJs,
    /// Python requests / urllib3 (`NewConnectionError`, `HTTPConnectionPool(host=…)`).
    PythonUrllib3,
    /// Other Python clients (`[Errno 111]`, redis-py `Error -3 connecting to`).
    Python,
    /// linkerd2-proxy.
    Linkerd,
    /// CoreDNS `errors` plugin (`read udp A->B:53: i/o timeout`).
    CoreDns,
    /// curl (`curl: (7) Failed to connect to HOST port PORT`).
    Curl,
    /// A failure phrase in a line whose shape no extractor knows (see [`UnknownShape`]).
    Unknown,
}

impl Format {
    /// Short name used in tables (the format's entry in the table of formats).
    pub fn as_str(self) -> &'static str {
        crate::formats::spec(self).map_or("unknown", |s| s.name)
    }

    /// How specific the format attribution is; merged lines keep the most specific one.
    pub(crate) fn specificity(self) -> u8 {
        match crate::formats::spec(self) {
            None => 0,
            Some(s) if s.family => 1,
            Some(_) => 2,
        }
    }
}

impl std::fmt::Display for Format {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One connection failure found in a log: one log event, which may span a few lines (a Java
/// exception and its `Caused by:`, a Node.js error object).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ConnFailure {
    /// 1-based number of the first line of the event in its input.
    pub line_no: u64,
    /// 1-based number of the last line that contributed to the event (equal to `line_no` for
    /// single-line events).
    pub end_line_no: u64,
    /// When it happened, if the line (or the log record it continues) carries a time.
    pub timestamp: Option<Timestamp>,
    /// True when the year or the zone of `timestamp` was assumed rather than read (syslog, klog
    /// and zone-less formats without `--year` / `--tz`).
    pub approximate_time: bool,
    /// The IP:port the client was connecting to, when the line names one.
    pub target: Option<SocketAddr>,
    /// The host name the client was connecting to, when the line names one (`localhost`,
    /// `app.example.com`), with or without an IP.
    pub host: Option<String>,
    /// For DNS failures: the name being looked up.
    pub dns_name: Option<String>,
    /// For DNS failures: the DNS server queried, when named (`lookup x on 10.96.0.10:53`).
    pub dns_server: Option<SocketAddr>,
    /// What failed.
    pub kind: Kind,
    /// Who wrote the line.
    pub format: Format,
    /// Envoy response flags (`UF,URX`), as written.
    pub response_flags: Option<String>,
    /// The first line of the event, at most [`RAW_EXCERPT_MAX`] bytes.
    pub raw: String,
}

impl ConnFailure {
    /// A `kind` failure of a `format` log on line 1 to `target`, at `timestamp`, with nothing
    /// else known (no host, DNS name or server, flags or text): what tests and generated inputs
    /// build on.
    pub fn at(
        kind: Kind,
        format: Format,
        target: Option<SocketAddr>,
        timestamp: Option<Timestamp>,
    ) -> ConnFailure {
        ConnFailure {
            line_no: 1,
            end_line_no: 1,
            timestamp,
            approximate_time: false,
            target,
            host: None,
            dns_name: None,
            dns_server: None,
            kind,
            format,
            response_flags: None,
            raw: String::new(),
        }
    }
}

/// Caller-supplied defaults for timestamps that lack a year or a zone. The scanner has no clock:
/// the CLI passes `--year` / `--tz` (or the current year and the local zone) here.
#[derive(Debug, Clone, Default)]
pub struct ScanOptions {
    /// Year for formats that have none (syslog `Nov 30 05:00:00`, klog `I1130 05:00:00.123456`).
    /// Without it the year of the last full timestamp seen in the same input is used and the time
    /// is marked approximate; with neither, such lines get no timestamp.
    pub year: Option<i16>,
    /// Year assumed, and marked approximate, when neither `year` nor a full timestamp earlier in
    /// the input gives one (the CLI passes the current year), so such lines are not undated.
    pub fallback_year: Option<i16>,
    /// Zone for formats that have none (Go log, nginx, logback, Python logging). Without it UTC
    /// is assumed and the time is marked approximate.
    pub tz: Option<TimeZone>,
    /// Skip the whole-input check for binary lines (NUL bytes; candidate lines are always
    /// checked). Saves one pass over the bytes; `binary_lines` then counts candidate lines only.
    pub skip_binary_check: bool,
    /// Only failures aimed at this address (see [`Target`]). For an IPv4 address the scan also
    /// gets faster: only the lines around the ones that spell it are examined.
    pub target: Option<Target>,
}

/// The one address a scan looks for: failures whose target (or, for DNS failures, whose DNS
/// server) has this IP, and this port when one is given.
///
/// For an IPv4 address the scan examines only the lines that hold its dotted-decimal text and,
/// around each, the lines of a multi-line event it can belong to: back to the closest line with
/// a timestamp when it has none, and forward to the line before the next line with one, at most
/// [`FOCUS_LINES`] lines each way (and back at most the 16 KiB the look-back sees). A failure of
/// one line is found exactly as by the full scan; a multi-line event whose parts lie further
/// than that from every line naming the address may be joined differently, and a yearless
/// timestamp (syslog, klog) takes the year of the closest line before it that has one, where the
/// full scan takes the last failure line's. An IPv6 address has several spellings, so its scan
/// examines every line and keeps the failures aimed at it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Target {
    /// The address.
    pub ip: IpAddr,
    /// The port, or any.
    pub port: Option<u16>,
}

/// How many lines before and after a line naming the [`Target`] a focused scan examines at
/// most (the merge window of multi-line events).
pub const FOCUS_LINES: u64 = crate::lines::MERGE_WINDOW;

impl Target {
    /// Whether the failure is aimed at this address: its target, or the DNS server it asked
    /// (an IPv4-mapped IPv6 address, `[::ffff:10.0.0.5]`, is its IPv4 address).
    pub fn matches(&self, f: &ConnFailure) -> bool {
        let ip = self.ip.to_canonical();
        let hit = |a: Option<SocketAddr>| {
            a.is_some_and(|a| {
                a.ip().to_canonical() == ip && self.port.is_none_or(|p| p == a.port())
            })
        };
        hit(f.target) || hit(f.dns_server)
    }

    /// The text every line naming the address holds, when there is one spelling (IPv4, also
    /// written as an IPv4-mapped IPv6 address).
    pub(crate) fn literal(&self) -> Option<String> {
        match self.ip.to_canonical() {
            IpAddr::V4(v4) => Some(v4.to_string()),
            IpAddr::V6(_) => None,
        }
    }
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.ip, self.port) {
            (ip, None) => write!(f, "{ip}"),
            (ip, Some(p)) => write!(f, "{}", SocketAddr::new(ip, p)),
        }
    }
}

/// A shape of line that contained a failure phrase or Envoy flags but that no extractor knows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UnknownShape {
    /// A short key describing the shape (kind and leading words, digits folded).
    pub shape: String,
    /// Lines of this shape.
    pub count: u64,
    /// Line number of the example.
    pub example_line_no: u64,
    /// The first line of this shape, bounded to [`RAW_EXCERPT_MAX`] bytes.
    pub example: String,
}

/// What a scan counted, besides the failures it emitted.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ScanStats {
    /// Bytes read.
    pub bytes: u64,
    /// Lines read (a final line without newline counts).
    pub lines: u64,
    /// Lines that matched the literal prefilter.
    pub candidate_lines: u64,
    /// Failure events emitted.
    pub failures: u64,
    /// Candidate lines that turned out not to report a failure ("timeoutSeconds=30", an Envoy
    /// 200, a "password reset").
    pub dismissed_lines: u64,
    /// Lines skipped as binary (they hold a NUL byte). Lines with bytes that are not UTF-8 are
    /// scanned as any other.
    pub binary_lines: u64,
    /// Lines longer than the scanner's line cap (1 MiB); only their first MiB is examined.
    pub overlong_lines: u64,
    /// Failures whose timestamp assumed the year (no `--year`).
    pub assumed_year: u64,
    /// Failures whose timestamp assumed UTC (no zone in the line and no `--tz`).
    pub assumed_zone: u64,
    /// Failures without any timestamp.
    pub undated: u64,
    /// Candidate lines of an unrecognized shape (they may still have produced a failure with
    /// [`Format::Unknown`]).
    pub unknown_lines: u64,
    /// One example per unrecognized shape (at most 32 shapes; the rest only count).
    pub unknown_shapes: Vec<UnknownShape>,
    /// Failures per format.
    pub per_format: BTreeMap<Format, u64>,
    /// Failures per kind.
    pub per_kind: BTreeMap<Kind, u64>,
}

impl ScanStats {
    /// Human warnings about the input: garbled lines, assumed years and zones, unknown shapes.
    pub fn warnings(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.binary_lines > 0 {
            out.push(format!(
                "{} binary line(s) (NUL bytes) skipped",
                self.binary_lines
            ));
        }
        if self.overlong_lines > 0 {
            out.push(format!(
                "{} line(s) longer than 1 MiB: only their first MiB was examined",
                self.overlong_lines
            ));
        }
        if self.assumed_year > 0 {
            out.push(format!(
                "{} timestamp(s) have no year: the year was assumed (marked approximate); pass --year",
                self.assumed_year
            ));
        }
        if self.assumed_zone > 0 {
            out.push(format!(
                "{} timestamp(s) have no zone: UTC was assumed (marked approximate); pass --tz",
                self.assumed_zone
            ));
        }
        if self.undated > 0 {
            out.push(format!(
                "{} failure(s) have no time (their line has none and continues no timestamped \
                 log record): they are not joined with the history nor placed in a rollout window",
                self.undated
            ));
        }
        if self.unknown_lines > 0 {
            out.push(format!(
                "{} line(s) of {} unrecognized shape(s) mention a connection failure; e.g. line {}: {}",
                self.unknown_lines,
                self.unknown_shapes.len(),
                self.unknown_shapes.first().map_or(0, |s| s.example_line_no),
                self.unknown_shapes
                    .first()
                    .map_or("", |s| s.example.as_str())
            ));
        }
        out
    }

    /// Adds another input's counts (for several files scanned one after the other).
    pub fn merge(&mut self, other: &ScanStats) {
        self.bytes += other.bytes;
        self.lines += other.lines;
        self.candidate_lines += other.candidate_lines;
        self.failures += other.failures;
        self.dismissed_lines += other.dismissed_lines;
        self.binary_lines += other.binary_lines;
        self.overlong_lines += other.overlong_lines;
        self.assumed_year += other.assumed_year;
        self.assumed_zone += other.assumed_zone;
        self.undated += other.undated;
        self.unknown_lines += other.unknown_lines;
        for s in &other.unknown_shapes {
            if let Some(mine) = self.unknown_shapes.iter_mut().find(|m| m.shape == s.shape) {
                mine.count += s.count;
            } else if self.unknown_shapes.len() < crate::scanner::MAX_UNKNOWN_SHAPES {
                self.unknown_shapes.push(s.clone());
            }
        }
        for (f, n) in &other.per_format {
            *self.per_format.entry(*f).or_default() += n;
        }
        for (k, n) in &other.per_kind {
            *self.per_kind.entry(*k).or_default() += n;
        }
    }
}

/// Cuts `line` to at most [`RAW_EXCERPT_MAX`] bytes on a char boundary, lossily decoded.
pub(crate) fn excerpt(line: &[u8]) -> String {
    let mut end = line.len().min(RAW_EXCERPT_MAX);
    // Back off to a UTF-8 boundary (continuation bytes are 0b10xx_xxxx).
    while end > 0 && end < line.len() && (line[end] & 0xC0) == 0x80 {
        end -= 1;
    }
    match std::str::from_utf8(&line[..end]) {
        Ok(s) => s.to_owned(),
        Err(_) => {
            // Each byte that is not UTF-8 becomes U+FFFD, three bytes: cut again.
            let mut s = String::from_utf8_lossy(&line[..end]).into_owned();
            let mut cut = s.len().min(RAW_EXCERPT_MAX);
            while !s.is_char_boundary(cut) {
                cut -= 1;
            }
            s.truncate(cut);
            s
        }
    }
}
