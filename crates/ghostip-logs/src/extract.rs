//! Per-format extractors: from one candidate line to a failure kind, format, target and DNS facts.
//!
//! See [`extract`] for the entry point. Envoy access logs (text and JSON) are parsed by their
//! structure (response flags, `upstream_host`); every other format is recognized by marker
//! literals, its kind comes from the failure phrases and its target from the format's own way of
//! printing the peer (`dial tcp IP:PORT`, `Connect to h:p [/IP]`, `host/IP:port`,
//! `connect ECONNREFUSED IP:PORT`, `HTTPConnectionPool(host=…, port=…)`, `upstream: "…"`).
//! Phrases and markers are found in one pass over the line; the literals the target parsers look
//! for are searched with finders built once ([`crate::lit`]).

use std::net::SocketAddr;

use aho_corasick::{AhoCorasick, AhoCorasickBuilder, MatchKind};

use crate::addr::{
    HostPort, first_url, last_socket, parse_host_port, parse_java_socket, parse_socket,
    socket_after,
};
use crate::lit::{Lit, lit};
use crate::model::{Format, Kind};
use crate::prefilter::{PHRASES, Phrases, Says};

/// What one candidate line says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// A connection failure of a known format.
    Failure(Extracted),
    /// Needles matched but the line reports no connection failure.
    Dismissed,
    /// A failure phrase of kind `kind` (`None`: Envoy-like flags) in a shape no extractor knows;
    /// `emit` is set when it is clear enough to be emitted anyway as [`Format::Unknown`].
    Unknown {
        kind: Option<Kind>,
        emit: Option<Extracted>,
    },
}

/// The facts of one line's failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Extracted {
    pub kind: Kind,
    pub format: Format,
    pub target: Option<SocketAddr>,
    pub host: Option<String>,
    pub dns_name: Option<String>,
    pub dns_server: Option<SocketAddr>,
    pub response_flags: Option<String>,
    /// grpc-go logs each failed dial twice: "Creating new client transport … Error while
    /// dialing" (INFO) then "addrConn.createTransport failed" (WARNING).
    pub grpc_creating: bool,
    pub grpc_create_failed: bool,
}

impl Extracted {
    fn new(kind: Kind, format: Format) -> Extracted {
        Extracted {
            kind,
            format,
            target: None,
            host: None,
            dns_name: None,
            dns_server: None,
            response_flags: None,
            grpc_creating: false,
            grpc_create_failed: false,
        }
    }
}

// Format markers, matched case-sensitively in one pass over the candidate line.
const M_LINKERD: u8 = 0;
const M_COREDNS: u8 = 1;
const M_NGINX: u8 = 2;
const M_ENVOY_BODY: u8 = 3;
const M_GRPC_JAVA: u8 = 4;
const M_GRPC_JS: u8 = 5;
const M_GRPC_GO: u8 = 6;
const M_REACTOR: u8 = 7;
const M_CURL: u8 = 8;
const M_OKHTTP: u8 = 9;
const M_APACHE: u8 = 10;
const M_URLLIB3: u8 = 11;
const M_NODE: u8 = 12;
const M_PYTHON: u8 = 13;
const M_JAVA: u8 = 14;
const M_GO: u8 = 15;
const M_GRPC_CREATING: u8 = 16;
const M_GRPC_CREATE_FAILED: u8 = 17;

const MARKERS: &[(&str, u8)] = &[
    ("linkerd_", M_LINKERD),
    ("linkerd2_proxy", M_LINKERD),
    ("ThreadId(", M_LINKERD),
    ("plugin/errors", M_COREDNS),
    ("plugin/forward", M_COREDNS),
    ("unreachable backend", M_COREDNS),
    ("CoreDNS", M_COREDNS),
    ("while connecting to upstream", M_NGINX),
    ("upstream: \"", M_NGINX),
    ("no live upstreams", M_NGINX),
    ("from upstream", M_NGINX),
    ("connect() failed (", M_NGINX),
    ("recv() failed (", M_NGINX),
    (
        "upstream connect error or disconnect/reset before headers",
        M_ENVOY_BODY,
    ),
    ("io.grpc", M_GRPC_JAVA),
    ("Status{code=", M_GRPC_JAVA),
    ("StatusRuntimeException", M_GRPC_JAVA),
    ("@grpc/grpc-js", M_GRPC_JS),
    ("14 UNAVAILABLE", M_GRPC_JS),
    ("rpc error", M_GRPC_GO),
    ("rpcerror", M_GRPC_GO),
    ("Error while dialing", M_GRPC_GO),
    ("createTransport", M_GRPC_GO),
    ("transport: ", M_GRPC_GO),
    ("Creating new client transport", M_GRPC_CREATING),
    ("createTransport failed", M_GRPC_CREATE_FAILED),
    ("reactor.netty", M_REACTOR),
    ("reactor.core", M_REACTOR),
    ("WebClientRequestException", M_REACTOR),
    ("PrematureCloseException", M_REACTOR),
    ("prematurely closed", M_REACTOR),
    ("readAddress(..)", M_REACTOR),
    ("finishConnect(..)", M_REACTOR),
    ("curl: (", M_CURL),
    ("* Failed to connect to", M_CURL),
    ("* Immediate connect fail", M_CURL),
    ("okhttp", M_OKHTTP),
    ("<-- HTTP FAILED", M_OKHTTP),
    ("Failed to connect to ", M_OKHTTP),
    ("HttpHostConnectException", M_APACHE),
    ("] failed: ", M_APACHE),
    ("org.apache.http", M_APACHE),
    ("NewConnectionError", M_URLLIB3),
    ("urllib3", M_URLLIB3),
    ("HTTPConnectionPool(", M_URLLIB3),
    ("HTTPSConnectionPool(", M_URLLIB3),
    ("requests.exceptions", M_URLLIB3),
    ("MaxRetryError", M_URLLIB3),
    ("ECONNREFUSED", M_NODE),
    ("ECONNRESET", M_NODE),
    ("ETIMEDOUT", M_NODE),
    ("EHOSTUNREACH", M_NODE),
    ("ENETUNREACH", M_NODE),
    ("ENOTFOUND", M_NODE),
    ("EAI_AGAIN", M_NODE),
    ("ECONNABORTED", M_NODE),
    ("socket hang up", M_NODE),
    ("errno: ", M_NODE),
    ("[Errno ", M_PYTHON),
    ("ConnectionRefusedError", M_PYTHON),
    ("ConnectionResetError", M_PYTHON),
    ("ConnectionError", M_PYTHON),
    (" connecting to ", M_PYTHON),
    ("Traceback", M_PYTHON),
    ("socket.timeout", M_PYTHON),
    ("socket.gaierror", M_PYTHON),
    ("java.net.", M_JAVA),
    ("java.io.", M_JAVA),
    ("Exception", M_JAVA),
    ("\tat ", M_JAVA),
    ("dial tcp", M_GO),
    ("dial udp", M_GO),
    ("dial unix", M_GO),
    ("read tcp", M_GO),
    ("write tcp", M_GO),
    ("read udp", M_GO),
    ("write udp", M_GO),
    ("lookup ", M_GO),
    ("net/http", M_GO),
    ("i/o timeout", M_GO),
    ("getsockopt", M_GO),
    ("Client.Timeout", M_GO),
    ("context deadline exceeded", M_GO),
    ("connect: ", M_GO),
];

/// The automaton the extractors need, built once per process: the failure phrases (matched
/// ASCII case-insensitively) and the format markers (case-sensitive) in one automaton, searched
/// once per candidate line.
#[derive(Debug, Clone)]
pub(crate) struct Extractors {
    words: AhoCorasick,
    /// What each pattern of `words` means.
    meanings: Vec<Meaning>,
}

/// A pattern of the combined automaton: a phrase, format markers with that text (up to case),
/// or both ("i/o timeout", "ECONNREFUSED", "lookup ").
#[derive(Debug, Clone, Default)]
struct Meaning {
    phrase: Option<Says>,
    /// Marker ids with their exact text: a marker counts only when the case matches.
    markers: Vec<(u8, &'static [u8])>,
}

/// A match of one set of patterns: start, end, what it says.
type Hit<T> = (usize, usize, T);

impl Extractors {
    pub fn new() -> Option<Extractors> {
        let mut texts: Vec<String> = Vec::new();
        let mut meanings: Vec<Meaning> = Vec::new();
        let mut slot = |text: &str| {
            let lower = text.to_ascii_lowercase();
            match texts.iter().position(|t| *t == lower) {
                Some(i) => i,
                None => {
                    texts.push(lower);
                    meanings.push(Meaning::default());
                    texts.len() - 1
                }
            }
        };
        let mut slots = Vec::new();
        for (phrase, says) in PHRASES {
            slots.push((slot(phrase), Some(*says), None));
        }
        for (marker, id) in MARKERS {
            slots.push((slot(marker), None, Some((*id, marker.as_bytes()))));
        }
        for (i, says, marker) in slots {
            let m = meanings.get_mut(i)?;
            if says.is_some() {
                m.phrase = says;
            }
            m.markers.extend(marker);
        }
        // Standard semantics, so the search can report overlapping matches of both sets;
        // `words` then picks each set's leftmost-longest matches.
        let words = AhoCorasickBuilder::new()
            .ascii_case_insensitive(true)
            .kind(Some(aho_corasick::AhoCorasickKind::DFA))
            .match_kind(MatchKind::Standard)
            .build(&texts)
            .ok()?;
        Some(Extractors { words, meanings })
    }

    /// The phrases and the format markers in `msg`: exactly what two leftmost-longest,
    /// non-overlapping searches (one ASCII case-insensitive over the phrases, one case-sensitive
    /// over the markers) would report, from one overlapping pass over the bytes. Leftmost-longest
    /// matters: "HttpHostConnectException" hides the marker "Exception" and "Client.Timeout
    /// exceeded" hides the phrase "timeout exceeded" from neither set, but the marker
    /// "context deadline exceeded" would hide the phrase "deadline exceeded" in a single
    /// leftmost-longest search over both sets.
    fn words(&self, msg: &[u8]) -> (Phrases, u32) {
        let mut phrases: Vec<Hit<Says>> = Vec::new();
        let mut markers: Vec<Hit<u8>> = Vec::new();
        if let Ok(it) = self.words.try_find_overlapping_iter(msg) {
            for m in it {
                let Some(meaning) = self.meanings.get(m.pattern().as_usize()) else {
                    continue;
                };
                if let Some(says) = meaning.phrase {
                    phrases.push((m.start(), m.end(), says));
                }
                for &(id, exact) in &meaning.markers {
                    if msg.get(m.range()) == Some(exact) {
                        markers.push((m.start(), m.end(), id));
                    }
                }
            }
        }
        let mut set = 0u32;
        leftmost_longest(&mut markers, |id| set |= 1 << id);
        let mut said = Phrases::default();
        leftmost_longest(&mut phrases, |s| said.add(s));
        (said, set)
    }

    /// The phrases in `msg` (leftmost-longest, as [`Extractors::words`]).
    pub(crate) fn phrases(&self, msg: &[u8]) -> Phrases {
        self.words(msg).0
    }
}

/// Calls `f` with the matches a leftmost-longest, non-overlapping search would report, given
/// all (overlapping) matches: from left to right, the longest match at the leftmost start at
/// or after the end of the previous one.
fn leftmost_longest<T: Copy>(hits: &mut [Hit<T>], mut f: impl FnMut(T)) {
    hits.sort_unstable_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
    let mut at = 0;
    for &(start, end, x) in hits.iter() {
        if start >= at {
            f(x);
            at = end;
        }
    }
}

fn has(set: u32, id: u8) -> bool {
    set & (1 << id) != 0
}

fn find(hay: &[u8], needle: &Lit) -> Option<usize> {
    needle.find(hay)
}

fn contains(hay: &[u8], needle: &Lit) -> bool {
    find(hay, needle).is_some()
}

fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while matches!(b.get(i), Some(b' ' | b'\t')) {
        i += 1;
    }
    i
}

fn to_string(b: &[u8]) -> Option<String> {
    std::str::from_utf8(b).ok().map(str::to_owned)
}

fn is_name_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, b'.' | b'-' | b'_')
}

/// A DNS-ish name starting at `b[0]` (trailing dot dropped).
fn name_at(b: &[u8]) -> Option<String> {
    let n = b.iter().take(253).take_while(|&&c| is_name_char(c)).count();
    let name = b[..n].strip_suffix(b".").unwrap_or(&b[..n]);
    if name.is_empty() || !name.iter().any(u8::is_ascii_alphanumeric) {
        return None;
    }
    to_string(name)
}

/// A JSON string (or `null` → `None`, other scalars as written) after `key` in `line`.
fn json_value<'a>(line: &'a [u8], key: &Lit) -> Option<&'a [u8]> {
    let p = find(line, key)?;
    let mut i = skip_ws(line, p + key.needle().len());
    if line.get(i) != Some(&b':') {
        return None;
    }
    i = skip_ws(line, i + 1);
    match line.get(i)? {
        b'"' => {
            let start = i + 1;
            let mut j = start;
            while j < line.len() && j - start < 4096 {
                match line[j] {
                    b'\\' => j += 2,
                    b'"' => return Some(&line[start..j]),
                    _ => j += 1,
                }
            }
            None
        }
        b'n' => None,
        _ => {
            let n = line[i..]
                .iter()
                .take(64)
                .take_while(|&&c| c != b',' && c != b'}' && c != b' ')
                .count();
            Some(&line[i..i + n])
        }
    }
}

const FAILURE_FLAGS: [&[u8]; 4] = [b"UF", b"URX", b"UH", b"UC"];

fn flags_fail(flags: &[u8]) -> bool {
    flags
        .split(|&c| c == b',')
        .any(|f| FAILURE_FLAGS.contains(&f))
}

fn envoy_kind(flags: &[u8], phrases: &Phrases) -> Kind {
    for k in [Kind::Refused, Kind::NoRoute, Kind::Reset, Kind::Timeout] {
        if phrases.has(k) {
            return k;
        }
    }
    if flags.split(|&c| c == b',').any(|f| f == b"UC") {
        Kind::Reset
    } else {
        Kind::Unavailable
    }
}

fn envoy_target(value: &[u8], e: &mut Extracted) {
    match parse_socket(value) {
        Some((sa, n)) if n == value.len() => e.target = Some(sa),
        _ if value != b"-" && !value.is_empty() => e.host = to_string(value),
        _ => {}
    }
}

/// Envoy JSON access log line.
fn envoy_json(line: &[u8], ex: &Extractors) -> Outcome {
    let Some(flags) = json_value(line, lit!(b"\"response_flags\"")) else {
        return Outcome::Dismissed;
    };
    if !flags_fail(flags) {
        return Outcome::Dismissed;
    }
    // Refine the kind only from the detail fields: other keys (`connection_termination_details`)
    // would match the phrases by their names.
    let mut phrases = Phrases::default();
    for key in [
        lit!(b"\"response_code_details\""),
        lit!(b"\"upstream_transport_failure_reason\""),
    ] {
        if let Some(v) = json_value(line, key) {
            phrases = phrases.union(ex.phrases(v));
        }
    }
    let mut e = Extracted::new(envoy_kind(flags, &phrases), Format::EnvoyJson);
    e.response_flags = to_string(flags);
    if let Some(up) = json_value(line, lit!(b"\"upstream_host\"")) {
        envoy_target(up, &mut e);
    }
    Outcome::Failure(e)
}

/// Envoy default text access log: `"REQ" CODE FLAGS … "UPSTREAM_HOST" CLUSTER …`. `None` when
/// the message does not have that shape.
fn envoy_text(msg: &[u8], ex: &Extractors) -> Option<Outcome> {
    let close = memchr::memchr(b'"', msg.get(1..)?)? + 1;
    let mut i = skip_ws(msg, close + 1);
    let code = msg[i.min(msg.len())..]
        .iter()
        .take(4)
        .take_while(|c| c.is_ascii_digit())
        .count();
    if code == 0 || code > 3 || msg.get(i + code) != Some(&b' ') {
        return None;
    }
    i = skip_ws(msg, i + code);
    let flen = msg[i..].iter().take(64).take_while(|&&c| c != b' ').count();
    let flags = &msg[i..i + flen];
    if flen == 0
        || !flags
            .iter()
            .all(|c| c.is_ascii_uppercase() || *c == b',' || *c == b'-')
    {
        return None;
    }
    if !flags_fail(flags) {
        return Some(Outcome::Dismissed);
    }
    // Details (Istio >= 1.9), termination details and the quoted transport failure reason follow
    // the flags; refine the kind from them only.
    let rest = &msg[i + flen..];
    let detail_end = memchr::memchr(b'"', rest)
        .and_then(|o| memchr::memchr(b'"', &rest[o + 1..]).map(|c| o + 1 + c))
        .unwrap_or(rest.len().min(256));
    let phrases = ex.phrases(&rest[..detail_end]);
    let mut e = Extracted::new(envoy_kind(flags, &phrases), Format::EnvoyText);
    e.response_flags = to_string(flags);
    // UPSTREAM_HOST is the last quoted field in every default format since Istio 1.5.
    let mut last: Option<&[u8]> = None;
    let mut j = i + flen;
    while let Some(open) = memchr::memchr(b'"', &msg[j..]) {
        let s = j + open + 1;
        let Some(close) = memchr::memchr(b'"', &msg[s..]) else {
            break;
        };
        last = Some(&msg[s..s + close]);
        j = s + close + 1;
    }
    if let Some(up) = last {
        envoy_target(up, &mut e);
    }
    Some(Outcome::Failure(e))
}

/// True when the message carries something that looks like Envoy failure flags.
fn envoy_flag_like(msg: &[u8]) -> bool {
    [
        lit!(b" UF"),
        lit!(b",UF"),
        lit!(b"\"UF"),
        lit!(b" UH"),
        lit!(b"\"UH"),
        lit!(b" UC"),
        lit!(b"\"UC"),
        lit!(b"URX"),
    ]
    .iter()
    .any(|n| contains(msg, n))
}

fn detect_format(set: u32) -> Format {
    const ORDER: [(u8, Format); 18] = [
        (M_LINKERD, Format::Linkerd),
        (M_COREDNS, Format::CoreDns),
        (M_NGINX, Format::Nginx),
        (M_ENVOY_BODY, Format::EnvoyText),
        (M_GRPC_JAVA, Format::GrpcJava),
        (M_GRPC_JS, Format::GrpcJs),
        (M_GRPC_GO, Format::GrpcGo),
        (M_REACTOR, Format::ReactorNetty),
        (M_CURL, Format::Curl),
        (M_OKHTTP, Format::OkHttp),
        (M_APACHE, Format::ApacheHttpClient),
        (M_URLLIB3, Format::PythonUrllib3),
        (M_NODE, Format::NodeJs),
        (M_PYTHON, Format::Python),
        (M_JAVA, Format::Java),
        (M_GO, Format::GoNet),
        (M_GRPC_CREATING, Format::GrpcGo),
        (M_GRPC_CREATE_FAILED, Format::GrpcGo),
    ];
    ORDER
        .iter()
        .find(|(m, _)| has(set, *m))
        .map_or(Format::Unknown, |(_, f)| *f)
}

/// Go: `dial tcp IP:PORT`, `read tcp A->B`, grpc's `Addr: "IP:PORT"`.
fn go_target(msg: &[u8]) -> Option<SocketAddr> {
    for m in [
        lit!(b"dial tcp "),
        lit!(b"dial tcp4 "),
        lit!(b"dial tcp6 "),
        lit!(b"dial udp "),
        lit!(b"->"),
        lit!(b"Addr: \\\""),
        lit!(b"Addr: \""),
    ] {
        if let Some(sa) = socket_after(msg, m) {
            return Some(sa);
        }
    }
    None
}

/// Go `lookup NAME on SERVER: …` or `lookup NAME: …`.
fn go_lookup(msg: &[u8], e: &mut Extracted) -> bool {
    for p in lit!(b"lookup ").find_iter(msg) {
        let rest = &msg[p + 7..];
        let Some(name) = name_at(rest) else { continue };
        let after = &rest[name.len().min(rest.len())..];
        let after = after.strip_prefix(b".").unwrap_or(after);
        if let Some(srv) = after.strip_prefix(b" on ") {
            e.dns_name = Some(name);
            e.dns_server = parse_socket(srv).map(|x| x.0);
            return true;
        }
        if after.starts_with(b":") {
            e.dns_name = Some(name);
            return true;
        }
    }
    false
}

/// CoreDNS `plugin/errors: 2 NAME. TYPE: … read udp A->B:53: i/o timeout`.
fn coredns(msg: &[u8], e: &mut Extracted) {
    if let Some(p) = find(msg, lit!(b"plugin/errors: ")) {
        let rest = &msg[p + 15..];
        let n = rest.iter().take_while(|c| c.is_ascii_digit()).count();
        if let Some(r) = rest.get(n..).and_then(|r| r.strip_prefix(b" ")) {
            e.dns_name = name_at(r);
        }
    }
    e.dns_server = socket_after(msg, lit!(b"->")).or_else(|| socket_after(msg, lit!(b"dial udp ")));
    if e.dns_server.is_none() {
        e.dns_server = socket_after(msg, lit!(b"dial tcp "));
    }
    if matches!(e.kind, Kind::Timeout | Kind::Refused | Kind::NoRoute) {
        e.kind = Kind::DnsTimeout;
    }
}

/// Java's `host/IP:port` (OkHttp, Netty, NIO) anywhere in the line; also sets the host name.
fn java_slash_target(msg: &[u8], e: &mut Extracted) -> bool {
    for p in memchr::memchr_iter(b'/', msg) {
        let after = &msg[p + 1..];
        if let Some((sa, _)) = parse_java_socket(after) {
            e.target = Some(sa);
            let hs = msg[..p]
                .iter()
                .rposition(|&c| !is_name_char(c))
                .map_or(0, |i| i + 1);
            let host = &msg[hs..p];
            if !host.is_empty() && host.iter().any(u8::is_ascii_alphabetic) {
                e.host = to_string(host);
            }
            return true;
        }
    }
    false
}

/// Apache HttpClient: `Connect to HOST:PORT [HOST/IP, …] failed`.
fn apache_target(msg: &[u8], e: &mut Extracted) -> bool {
    let Some(p) = find(msg, lit!(b"Connect to ")) else {
        return false;
    };
    let rest = &msg[p + 11..];
    let Some((hp, n)) = parse_host_port(rest) else {
        return false;
    };
    e.host = hp.name.clone();
    if let Some(sa) = hp.socket() {
        e.target = Some(sa);
        return true;
    }
    let after = &rest[n..];
    if let (Some(port), Some(open)) = (hp.port, after.strip_prefix(b" ["))
        && let Some(slash) = memchr::memchr(b'/', &open[..open.len().min(300)])
        && let Some((ip, _)) = crate::addr::parse_ip(&open[slash + 1..])
    {
        e.target = Some(SocketAddr::new(ip, port));
        return true;
    }
    false
}

fn host_port_into(hp: &HostPort, e: &mut Extracted) {
    if let Some(sa) = hp.socket() {
        e.target = Some(sa);
    }
    if hp.name.is_some() {
        e.host = hp.name.clone();
    }
}

/// Python: `HTTPConnectionPool(host='X', port=N)`, redis-py `connecting to HOST:PORT.`.
fn python_target(msg: &[u8], e: &mut Extracted) -> bool {
    if let Some(p) = find(msg, lit!(b"host='")) {
        let rest = &msg[p + 6..];
        let end = memchr::memchr(b'\'', &rest[..rest.len().min(256)]).unwrap_or(0);
        let host = &rest[..end];
        let port = find(rest, lit!(b"port=")).and_then(|q| crate::addr::parse_port(&rest[q + 5..]));
        let ip = crate::addr::parse_ip(host)
            .filter(|(_, n)| *n == host.len())
            .map(|x| x.0);
        match (ip, port) {
            (Some(ip), Some((port, _))) => e.target = Some(SocketAddr::new(ip, port)),
            (None, _) if !host.is_empty() => e.host = to_string(host),
            _ => {}
        }
        return e.target.is_some() || e.host.is_some();
    }
    if let Some(p) = find(msg, lit!(b" connecting to "))
        && let Some((hp, _)) = parse_host_port(&msg[p + 15..])
    {
        host_port_into(&hp, e);
        return true;
    }
    false
}

/// Node.js: `connect ECONNREFUSED IP:PORT`, `getaddrinfo ENOTFOUND name`.
fn node_target(msg: &[u8], e: &mut Extracted) -> bool {
    for m in [
        lit!(b"ECONNREFUSED "),
        lit!(b"ETIMEDOUT "),
        lit!(b"EHOSTUNREACH "),
        lit!(b"ENETUNREACH "),
        lit!(b"ECONNRESET "),
    ] {
        if let Some(sa) = socket_after(msg, m) {
            e.target = Some(sa);
            return true;
        }
    }
    for m in [lit!(b"ENOTFOUND "), lit!(b"EAI_AGAIN ")] {
        if let Some(p) = find(msg, m) {
            e.dns_name = name_at(&msg[p + m.needle().len()..]);
            return e.dns_name.is_some();
        }
    }
    false
}

/// linkerd2-proxy: `endpoint{addr=IP:PORT}`, `error=endpoint IP:PORT:`, `server.addr=`,
/// `dst=`, or a plain `addr=` that is not the client's.
fn linkerd_target(msg: &[u8]) -> Option<SocketAddr> {
    for m in [
        lit!(b"endpoint{addr="),
        lit!(b"endpoint "),
        lit!(b"server.addr="),
        lit!(b"dst="),
    ] {
        if let Some(sa) = socket_after(msg, m) {
            return Some(sa);
        }
    }
    for p in lit!(b"addr=").find_iter(msg) {
        let before = &msg[p.saturating_sub(7)..p];
        if before.ends_with(b"client.") || before.ends_with(b"local.") {
            continue;
        }
        if let Some((sa, _)) = parse_socket(&msg[p + 5..]) {
            return Some(sa);
        }
    }
    None
}

/// curl: `Failed to connect to HOST port PORT`, `Immediate connect fail for IP:`.
fn curl_target(msg: &[u8], e: &mut Extracted) -> bool {
    if let Some(p) = find(msg, lit!(b"connect to ")) {
        let rest = &msg[p + 11..];
        if let Some((hp, n)) = parse_host_port(rest) {
            let port = rest[n..]
                .strip_prefix(b" port ")
                .and_then(crate::addr::parse_port)
                .map(|x| x.0);
            let hp = HostPort {
                port: hp.port.or(port),
                ..hp
            };
            host_port_into(&hp, e);
            return e.target.is_some();
        }
    }
    // `* Immediate connect fail for 10.15.1.8: Operation not permitted`: the IP, no port yet
    // (the summary line that follows has it and is merged).
    if let Some(p) = find(msg, lit!(b"connect fail for "))
        && let Some((ip, _)) = crate::addr::parse_ip(&msg[p + 17..])
    {
        e.host = Some(ip.to_string());
    }
    false
}

/// nginx: `upstream: "http://IP:PORT/…"` or `upstream: "IP:PORT"`.
fn nginx_target(msg: &[u8], e: &mut Extracted) {
    if let Some(p) = find(msg, lit!(b"upstream: \"")) {
        let rest = &msg[p + 11..];
        let hp = first_url(&rest[..rest.len().min(300)])
            .filter(|_| rest.starts_with(b"http") || rest.starts_with(b"grpc"))
            .or_else(|| parse_host_port(rest).map(|x| x.0));
        if let Some(hp) = hp {
            host_port_into(&hp, e);
        }
    }
}

/// Java DNS names: `Failed to resolve 'NAME'`, `UnknownHostException: NAME`.
fn java_dns_name(msg: &[u8]) -> Option<String> {
    if let Some(p) = find(msg, lit!(b"resolve '")) {
        return name_at(&msg[p + 9..]);
    }
    if let Some(p) = find(msg, lit!(b"UnknownHostException: ")) {
        return name_at(&msg[p + 22..]);
    }
    None
}

/// Key describing an unknown line's shape: kind and first two words, digits folded.
pub(crate) fn shape_key(kind: Option<Kind>, msg: &[u8]) -> String {
    let mut key = String::from(kind.map_or("envoy-flags", Kind::as_str));
    key.push(':');
    let mut words = 0;
    let mut in_word = false;
    for &c in msg.iter().take(200) {
        if c == b' ' || c == b'\t' {
            if in_word {
                words += 1;
                in_word = false;
                if words == 2 {
                    break;
                }
                key.push(' ');
            }
            continue;
        }
        in_word = true;
        let c = if c.is_ascii_digit() { b'0' } else { c };
        if c.is_ascii() && !c.is_ascii_control() {
            key.push(char::from(c));
        }
        if key.len() >= 48 {
            break;
        }
    }
    key
}

/// Extracts the failure of one candidate line. `msg_start` is where the message begins after the
/// time / syslog / klog prefixes.
pub(crate) fn extract(line: &[u8], msg_start: usize, ex: &Extractors) -> Outcome {
    let msg = &line[msg_start.min(line.len())..];
    if contains(line, lit!(b"\"response_flags\"")) {
        return envoy_json(line, ex);
    }
    if msg.first() == Some(&b'"')
        && let Some(o) = envoy_text(msg, ex)
    {
        return o;
    }
    let (phrases, set) = ex.words(msg);
    let Some(kind) = phrases.kind() else {
        return if envoy_flag_like(msg) {
            Outcome::Unknown {
                kind: None,
                emit: None,
            }
        } else {
            Outcome::Dismissed
        };
    };
    let format = detect_format(set);
    let mut e = Extracted::new(kind, format);
    e.grpc_creating = has(set, M_GRPC_CREATING);
    e.grpc_create_failed = has(set, M_GRPC_CREATE_FAILED);

    let mut found = false;
    match format {
        Format::GoNet | Format::GrpcGo => {
            if phrases.lookup && go_lookup(msg, &mut e) {
                if !e.kind.is_dns() {
                    e.kind = if kind == Kind::DnsNotFound {
                        Kind::DnsNotFound
                    } else {
                        Kind::DnsTimeout
                    };
                }
                return Outcome::Failure(e);
            }
            e.target = go_target(msg);
            found = e.target.is_some();
        }
        Format::CoreDns => {
            coredns(msg, &mut e);
            return Outcome::Failure(e);
        }
        Format::Nginx => {
            nginx_target(msg, &mut e);
            return Outcome::Failure(e);
        }
        Format::Linkerd => {
            e.target = linkerd_target(msg);
            found = e.target.is_some();
        }
        Format::ApacheHttpClient => {
            found = apache_target(msg, &mut e) || java_slash_target(msg, &mut e);
        }
        Format::GrpcJava | Format::OkHttp | Format::ReactorNetty | Format::Java => {
            found = java_slash_target(msg, &mut e);
        }
        Format::NodeJs => found = node_target(msg, &mut e),
        Format::PythonUrllib3 | Format::Python => found = python_target(msg, &mut e),
        Format::Curl => found = curl_target(msg, &mut e),
        Format::GrpcJs | Format::EnvoyText | Format::EnvoyJson | Format::Unknown => {}
    }
    if !found && !matches!(format, Format::Curl | Format::GrpcJs | Format::EnvoyText) {
        if let Some(hp) = first_url(msg) {
            host_port_into(&hp, &mut e);
        }
        if e.target.is_none() {
            e.target = last_socket(msg);
        }
    }
    if e.kind.is_dns() {
        if e.dns_name.is_none() {
            e.dns_name = java_dns_name(msg).or_else(|| e.host.take()).or_else(|| {
                if phrases.lookup {
                    let mut tmp = Extracted::new(kind, format);
                    go_lookup(msg, &mut tmp);
                    tmp.dns_name
                } else {
                    None
                }
            });
        }
        if e.dns_server.is_none() {
            e.dns_server = e.target.take();
        }
        e.target = None;
    } else if e.kind == Kind::Timeout
        && e.target.is_some_and(|t| t.port() == 53)
        && contains(msg, lit!(b"udp "))
    {
        // `read udp A->B:53: i/o timeout`: a DNS exchange.
        e.kind = Kind::DnsTimeout;
        e.dns_server = e.target.take();
    }
    if format == Format::Unknown {
        let strong = matches!(e.kind, Kind::Refused | Kind::NoRoute) || e.target.is_some();
        return if strong {
            Outcome::Unknown {
                kind: Some(e.kind),
                emit: Some(e),
            }
        } else if e.kind == Kind::Unavailable {
            Outcome::Dismissed
        } else {
            Outcome::Unknown {
                kind: Some(e.kind),
                emit: None,
            }
        };
    }
    if e.kind == Kind::Other && e.target.is_none() && e.host.is_none() {
        // "Failed to connect to socket /run/dbus/…", "operation not permitted" without a peer.
        return Outcome::Dismissed;
    }
    if e.kind == Kind::Unavailable && matches!(format, Format::Java | Format::Python) {
        // "503 Service Unavailable" from an application is not a connection failure.
        return Outcome::Dismissed;
    }
    Outcome::Failure(e)
}

/// How a line may continue the previous log event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Continuation {
    /// It starts a new event.
    No,
    /// A stack frame, `Caused by:`, `Suppressed:`, a Node.js error property, curl's summary.
    Part,
    /// A bare exception line (`java.net.ConnectException: …`, `Error: …`): it continues the
    /// previous event only when no stack frame came in between (after a complete stack trace, it
    /// is the next trace).
    Exception,
}

/// True when `line` is a stack frame (`\tat …`, `    at …`).
pub(crate) fn is_frame(line: &[u8]) -> bool {
    line[skip_ws(line, 0)..].starts_with(b"at ")
}

/// Whether the line continues the previous log event rather than starting one.
pub(crate) fn continuation(msg: &[u8]) -> Continuation {
    if is_continuation_part(msg) {
        Continuation::Part
    } else if is_exception_line(msg) {
        Continuation::Exception
    } else {
        Continuation::No
    }
}

fn is_continuation_part(msg: &[u8]) -> bool {
    let t = &msg[skip_ws(msg, 0)..];
    const STARTS: [&[u8]; 11] = [
        b"at ",
        b"Caused by:",
        b"Suppressed:",
        b"...",
        b"code: ",
        b"errno: ",
        b"syscall: ",
        b"curl: (",
        b"* ",
        b"nested exception",
        b"During handling",
    ];
    STARTS.iter().any(|s| t.starts_with(s))
}

fn is_exception_line(msg: &[u8]) -> bool {
    let t = &msg[skip_ws(msg, 0)..];
    // First token `[A-Za-z_$][\w$.]*(Exception|Error)` followed by `:` or end.
    let n = t
        .iter()
        .take(200)
        .take_while(|&&c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'$' | b'.'))
        .count();
    let tok = &t[..n];
    if n == 0 || !(tok[0].is_ascii_alphabetic() || tok[0] == b'_' || tok[0] == b'$') {
        return false;
    }
    (tok.ends_with(b"Exception") || tok.ends_with(b"Error"))
        && matches!(t.get(n), None | Some(b':'))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    fn run(line: &str) -> Outcome {
        let ex = Extractors::new().unwrap();
        let p = crate::time::parse_prefix(line.as_bytes());
        extract(line.as_bytes(), p.msg_start, &ex)
    }

    /// The two searches `Extractors::words` replaces: leftmost-longest over the phrases (ASCII
    /// case-insensitive) and over the markers (case-sensitive).
    fn two_searches(msg: &[u8]) -> (Phrases, u32) {
        static BOTH: std::sync::LazyLock<(AhoCorasick, AhoCorasick)> =
            std::sync::LazyLock::new(|| {
                let phrases = AhoCorasickBuilder::new()
                    .ascii_case_insensitive(true)
                    .match_kind(MatchKind::LeftmostLongest)
                    .build(PHRASES.iter().map(|(p, _)| p))
                    .unwrap();
                let markers = AhoCorasickBuilder::new()
                    .match_kind(MatchKind::LeftmostLongest)
                    .build(MARKERS.iter().map(|(m, _)| m))
                    .unwrap();
                (phrases, markers)
            });
        let (phrases, markers) = &*BOTH;
        let mut said = Phrases::default();
        for m in phrases.find_iter(msg) {
            said.add(PHRASES[m.pattern().as_usize()].1);
        }
        let mut set = 0u32;
        for m in markers.find_iter(msg) {
            set |= 1 << MARKERS[m.pattern().as_usize()].1;
        }
        (said, set)
    }

    #[test]
    fn one_pass_finds_what_two_searches_find() {
        let ex = Extractors::new().unwrap();
        for line in [
            "Get \"http://x/\": net/http: request canceled (Client.Timeout exceeded while awaiting headers)",
            "rpc error: code = Unavailable desc = context deadline exceeded",
            "Creating new client transport to {Addr: \"1.2.3.4:5\"}: Exception: connection refused",
            "org.apache.http.conn.HttpHostConnectException: Connect to a:1 [a/1.2.3.4] failed: Connection refused",
            "* Failed to connect to 10.0.0.1 port 80: Connection refused",
            "while connecting to upstream, upstream: \"http://1.2.3.4:80/\"",
            "io.grpc.netty.shaded.io.netty.channel.AbstractChannel$AnnotatedConnectException: finishConnect(..) failed: Connection refused",
            "DnsNameResolverTimeoutException: ECONNREFUSED econnrefused Econnreset lookup x on 1.2.3.4:53: i/o timeout",
        ] {
            assert_eq!(
                ex.words(line.as_bytes()),
                two_searches(line.as_bytes()),
                "{line}"
            );
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]

        /// Phrases and markers run together, cut, overlapped and case-flipped.
        #[test]
        fn one_pass_agrees_on_glued_words(
            parts in proptest::collection::vec(
                (0..PHRASES.len() + MARKERS.len(), 0usize..40, 0usize..40, proptest::bool::ANY, "[ a-zA-Z:./]{0,3}"),
                0..8,
            ),
        ) {
            static EX: std::sync::LazyLock<Extractors> =
                std::sync::LazyLock::new(|| Extractors::new().unwrap());
            let ex = &*EX;
            let mut line = String::new();
            for (i, from, len, upper, glue) in parts {
                let word = if i < PHRASES.len() { PHRASES[i].0 } else { MARKERS[i - PHRASES.len()].0 };
                let from = from.min(word.len());
                let to = (from + len.max(3)).min(word.len());
                let piece = if upper { word.to_ascii_uppercase() } else { word.to_owned() };
                // Whole words mostly, pieces sometimes.
                if len < 30 { line.push_str(&piece) } else { line.push_str(&piece[from..to]) }
                line.push_str(&glue);
            }
            proptest::prop_assert_eq!(ex.words(line.as_bytes()), two_searches(line.as_bytes()), "{}", line);
        }
    }

    fn failure(line: &str) -> Extracted {
        match run(line) {
            Outcome::Failure(e) => e,
            other => panic!("not a failure: {other:?} for {line}"),
        }
    }

    #[test]
    fn continuation_shapes() {
        let is_continuation = |l: &[u8]| continuation(l) != Continuation::No;
        assert_eq!(
            continuation(b"Caused by: java.net.ConnectException: x"),
            Continuation::Part
        );
        assert!(is_continuation(b"\tat a.b.C(C.java:1)"));
        assert_eq!(
            continuation(b"java.net.SocketException: Connection reset"),
            Continuation::Exception
        );
        assert!(is_continuation(
            b"org.apache.http.conn.HttpHostConnectException: Connect"
        ));
        assert!(is_continuation(b" Error: read ECONNRESET"));
        assert!(!is_continuation(b"error:  Error: read ECONNRESET"));
        assert!(!is_continuation(b"Readiness probe failed: Get x"));
    }

    #[test]
    fn envoy_text_flags() {
        let e = failure(
            "[2020-09-24T13:31:37.980Z] \"PUT /x HTTP/1.1\" 503 UF,URX \"-\" \"-\" 0 91 3037 - \"-\" \"ua\" \"id\" \"eureka-server:8761\" \"172.16.0.198:8761\" outbound|8761||x - 172.16.0.198:8761 172.16.0.169:53890 - default",
        );
        assert_eq!(e.format, Format::EnvoyText);
        assert_eq!(e.kind, Kind::Unavailable);
        assert_eq!(e.target, Some("172.16.0.198:8761".parse().unwrap()));
        assert_eq!(e.response_flags.as_deref(), Some("UF,URX"));
        assert_eq!(
            run(
                "[2020-09-24T13:35:28.790Z] \"PUT /x HTTP/1.1\" 200 - \"-\" \"-\" 0 0 4 4 \"-\" \"ua\" \"id\" \"a:1\" \"172.16.1.3:8761\" c"
            ),
            Outcome::Dismissed
        );
    }
}
