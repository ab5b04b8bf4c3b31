//! The table of log formats the scanner reads: one entry per client, proxy or library, from
//! which the prefilter and the extractors are built, so that adding a format is one entry.
//!
//! An entry ([`FormatSpec`]) holds the format's name, the markers that say a candidate line is
//! its own, the prefilter needles that only its failure lines hold (the needles of the failure
//! phrases every format shares are in [`crate::prefilter`]), how it is parsed by structure when
//! it has one (Envoy access logs) and how its peer is read from a line ([`PeerFn`]). The table's
//! order is the order of precedence: a line holding the markers of several formats is read as
//! the first of them. The peer readers follow the table, each under its format's name.

use std::net::SocketAddr;

use crate::addr::{
    HostPort, first_url, parse_host_port, parse_ip, parse_java_socket, parse_port, parse_socket,
    socket_after, socket_after_any,
};
use crate::extract::{
    Extracted, Extractors, Outcome, contains, find, host_port_into, is_name_char, json_value,
    name_at, skip_ws, to_string,
};
use crate::lit::lit;
use crate::model::{Format, Kind};
use crate::prefilter::{Needle, Phrases, needle};

/// One log format.
#[derive(Debug)]
pub(crate) struct FormatSpec {
    /// The format.
    pub format: Format,
    /// Its short name in tables ("grpc-go").
    pub name: &'static str,
    /// A family of clients (plain Java, Go `net`, Node.js, Python) whose lines a more specific
    /// format refines: when the lines of one event disagree, the more specific format is kept.
    pub family: bool,
    /// Literals (case-sensitive) that mark a candidate line as this format's.
    pub markers: &'static [&'static str],
    /// Prefilter needles (case-sensitive) that only this format's failure lines hold, each with
    /// its bucket of the packed searcher; each needle is at least 4 bytes long and the whole set
    /// at most 32 (see [`Needle`]).
    pub needles: &'static [Needle],
    /// For a format with a structure of its own (an access log): reads a candidate line,
    /// `None` when the line does not have that structure. Tried in table order before markers.
    pub structure: Option<StructureFn>,
    /// Reads the peer of a line recognized by the markers.
    pub peer: PeerFn,
}

/// Reads a candidate line by the format's structure: `(line, message, extractors)`.
pub(crate) type StructureFn = fn(&[u8], &[u8], &Extractors) -> Option<Outcome>;

/// Reads the peer (target, host, DNS name and server) of a failure line into `e`, given the
/// message and the phrases found in it; may refine `e.kind`.
pub(crate) type PeerFn = fn(&[u8], &Phrases, &mut Extracted) -> Peer;

/// What a peer reader found out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Peer {
    /// The event is read to its end: emit it as it is.
    Final,
    /// The reader looked where the format names its peer: nothing else in the line is one.
    Done,
    /// No peer where the format names one: take the line's first URL, else its last IP:port.
    Search,
}

/// The formats, in order of precedence.
pub(crate) const FORMATS: &[FormatSpec] = &[
    FormatSpec {
        format: Format::Linkerd,
        name: "linkerd",
        family: false,
        markers: &["linkerd_", "linkerd2_proxy", "ThreadId("],
        needles: &[],
        structure: None,
        peer: linkerd,
    },
    FormatSpec {
        format: Format::CoreDns,
        name: "coredns",
        family: false,
        markers: &[
            "plugin/errors",
            "plugin/forward",
            "unreachable backend",
            "CoreDNS",
        ],
        needles: &[],
        structure: None,
        peer: coredns,
    },
    FormatSpec {
        format: Format::Nginx,
        name: "nginx",
        family: false,
        markers: &[
            "while connecting to upstream",
            "upstream: \"",
            "no live upstreams",
            "from upstream",
            "connect() failed (",
            "recv() failed (",
        ],
        needles: &[needle(" live upstream", 5)],
        structure: None,
        peer: nginx,
    },
    FormatSpec {
        format: Format::EnvoyJson,
        name: "envoy-json",
        family: false,
        markers: &[],
        // The flags follow the `response_flags` key (`DC,UF` is not found this way).
        needles: &[needle("_flags\":\"U", 1), needle("_flags\": \"U", 1)],
        structure: Some(envoy_json),
        peer: no_peer,
    },
    FormatSpec {
        format: Format::EnvoyText,
        name: "envoy-text",
        family: false,
        // Envoy's local reply body, quoted by an application.
        markers: &["upstream connect error or disconnect/reset before headers"],
        // The flags follow the response code: `" 503 UF,URX`, `"- - -" 0 UF,URX` for TCP.
        needles: &[needle("503 U", 4), needle("\" 0 U", 3)],
        structure: Some(envoy_text),
        peer: no_peer,
    },
    FormatSpec {
        format: Format::GrpcJava,
        name: "grpc-java",
        family: false,
        markers: &["io.grpc", "Status{code=", "StatusRuntimeException"],
        needles: &[needle("UNAVAILABLE", 7)],
        structure: None,
        peer: java,
    },
    FormatSpec {
        format: Format::GrpcJs,
        name: "grpc-js",
        family: false,
        markers: &["@grpc/grpc-js", "14 UNAVAILABLE"],
        needles: &[needle("UNAVAILABLE", 7)],
        structure: None,
        peer: no_peer,
    },
    FormatSpec {
        format: Format::GrpcGo,
        name: "grpc-go",
        family: false,
        markers: &[
            "rpc error",
            "rpcerror",
            "Error while dialing",
            "createTransport",
            "transport: ",
        ],
        needles: &[],
        structure: None,
        peer: go,
    },
    FormatSpec {
        format: Format::ReactorNetty,
        name: "reactor-netty",
        family: false,
        markers: &[
            "reactor.netty",
            "reactor.core",
            "WebClientRequestException",
            "PrematureCloseException",
            "prematurely closed",
            "readAddress(..)",
            "finishConnect(..)",
        ],
        needles: &[needle(" prematurely", 2)],
        structure: None,
        peer: java,
    },
    FormatSpec {
        format: Format::Curl,
        name: "curl",
        family: false,
        markers: &[
            "curl: (",
            "* Failed to connect to",
            "* Immediate connect fail",
        ],
        needles: &[],
        structure: None,
        peer: curl,
    },
    FormatSpec {
        format: Format::OkHttp,
        name: "okhttp",
        family: false,
        markers: &["okhttp", "<-- HTTP FAILED", "Failed to connect to "],
        needles: &[],
        structure: None,
        peer: java,
    },
    FormatSpec {
        format: Format::ApacheHttpClient,
        name: "apache-httpclient",
        family: false,
        markers: &["HttpHostConnectException", "] failed: ", "org.apache.http"],
        needles: &[],
        structure: None,
        peer: apache,
    },
    FormatSpec {
        format: Format::PythonUrllib3,
        name: "python-urllib3",
        family: false,
        markers: &[
            "NewConnectionError",
            "urllib3",
            "HTTPConnectionPool(",
            "HTTPSConnectionPool(",
            "requests.exceptions",
            "MaxRetryError",
        ],
        needles: &[],
        structure: None,
        peer: python,
    },
    FormatSpec {
        format: Format::NodeJs,
        name: "nodejs",
        family: true,
        markers: &[
            "ECONNREFUSED",
            "ECONNRESET",
            "ETIMEDOUT",
            "EHOSTUNREACH",
            "ENETUNREACH",
            "ENOTFOUND",
            "EAI_AGAIN",
            "ECONNABORTED",
            "socket hang up",
            "errno: ",
        ],
        // ECONNREFUSED, ECONNRESET, ECONNABORTED; ETIMEDOUT; EHOSTUNREACH, ENETUNREACH.
        needles: &[
            needle("ECONN", 4),
            needle("IMEDOUT", 0),
            needle("UNREACH", 2),
            needle("ENOTFOUND", 4),
            needle("EAI_AGAIN", 3),
            needle(" hang up", 2),
        ],
        structure: None,
        peer: node,
    },
    FormatSpec {
        format: Format::Python,
        name: "python",
        family: true,
        markers: &[
            "[Errno ",
            "ConnectionRefusedError",
            "ConnectionResetError",
            "ConnectionError",
            " connecting to ",
            "Traceback",
            "socket.timeout",
            "socket.gaierror",
        ],
        needles: &[],
        structure: None,
        peer: python,
    },
    FormatSpec {
        format: Format::Java,
        name: "java",
        family: true,
        markers: &["java.net.", "java.io.", "Exception", "\tat "],
        needles: &[needle("UnknownHost", 4)],
        structure: None,
        peer: java,
    },
    FormatSpec {
        format: Format::GoNet,
        name: "go-net",
        family: true,
        markers: &[
            "dial tcp",
            "dial udp",
            "dial unix",
            "read tcp",
            "write tcp",
            "read udp",
            "write udp",
            "lookup ",
            "net/http",
            "i/o timeout",
            "getsockopt",
            "Client.Timeout",
            "context deadline exceeded",
            "connect: ",
        ],
        needles: &[],
        structure: None,
        peer: go,
    },
];

/// grpc-go logs each failed dial twice: "Creating new client transport … Error while dialing"
/// (INFO), then "addrConn.createTransport failed" (WARNING); these markers tell the two apart
/// (the merge stage joins them) and say grpc-go when no format's marker does.
pub(crate) const GRPC_CREATING: &str = "Creating new client transport";
/// See [`GRPC_CREATING`].
pub(crate) const GRPC_CREATE_FAILED: &str = "createTransport failed";

/// The entry of `format` (`None` for [`Format::Unknown`]).
pub(crate) fn spec(format: Format) -> Option<&'static FormatSpec> {
    FORMATS.iter().find(|s| s.format == format)
}

fn no_peer(_: &[u8], _: &Phrases, _: &mut Extracted) -> Peer {
    Peer::Done
}

fn found(yes: bool) -> Peer {
    if yes { Peer::Done } else { Peer::Search }
}

// === linkerd ===

/// linkerd2-proxy: `endpoint{addr=IP:PORT}`, `error=endpoint IP:PORT:`, `server.addr=`,
/// `dst=`, or a plain `addr=` that is not the client's.
fn linkerd(msg: &[u8], _: &Phrases, e: &mut Extracted) -> Peer {
    e.target = linkerd_target(msg);
    found(e.target.is_some())
}

fn linkerd_target(msg: &[u8]) -> Option<SocketAddr> {
    let named = [
        lit!(b"endpoint{addr="),
        lit!(b"endpoint "),
        lit!(b"server.addr="),
        lit!(b"dst="),
    ];
    if let Some(sa) = socket_after_any(msg, &named) {
        return Some(sa);
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

// === coredns ===

/// CoreDNS `plugin/errors: 2 NAME. TYPE: … read udp A->B:53: i/o timeout`.
fn coredns(msg: &[u8], _: &Phrases, e: &mut Extracted) -> Peer {
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
    Peer::Final
}

// === nginx ===

/// nginx: `upstream: "http://IP:PORT/…"` or `upstream: "IP:PORT"`.
fn nginx(msg: &[u8], _: &Phrases, e: &mut Extracted) -> Peer {
    if let Some(p) = find(msg, lit!(b"upstream: \"")) {
        let rest = &msg[p + 11..];
        let hp = first_url(&rest[..rest.len().min(300)])
            .filter(|_| rest.starts_with(b"http") || rest.starts_with(b"grpc"))
            .or_else(|| parse_host_port(rest).map(|x| x.0));
        if let Some(hp) = hp {
            host_port_into(&hp, e);
        }
    }
    Peer::Final
}

// === envoy-json, envoy-text ===

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

/// Envoy JSON access log line: one with a `"response_flags"` key.
fn envoy_json(line: &[u8], _: &[u8], ex: &Extractors) -> Option<Outcome> {
    if !contains(line, lit!(b"\"response_flags\"")) {
        return None;
    }
    let Some(flags) = json_value(line, lit!(b"\"response_flags\"")) else {
        return Some(Outcome::Dismissed);
    };
    if !flags_fail(flags) {
        return Some(Outcome::Dismissed);
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
    Some(Outcome::Failure(e))
}

/// Envoy default text access log: `"REQ" CODE FLAGS … "UPSTREAM_HOST" CLUSTER …`. `None` when
/// the message does not have that shape.
fn envoy_text(_: &[u8], msg: &[u8], ex: &Extractors) -> Option<Outcome> {
    if msg.first() != Some(&b'"') {
        return None;
    }
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

// === grpc-go, go-net ===

/// Go: a lookup (`lookup NAME on SERVER: …`, `lookup NAME: …`) is a DNS failure; else the
/// target of `dial tcp IP:PORT`, `read tcp A->B`, grpc's `Addr: "IP:PORT"`.
fn go(msg: &[u8], phrases: &Phrases, e: &mut Extracted) -> Peer {
    if phrases.lookup && go_lookup(msg, e) {
        if !e.kind.is_dns() {
            e.kind = Kind::DnsTimeout;
        }
        return Peer::Final;
    }
    e.target = go_target(msg);
    found(e.target.is_some())
}

fn go_target(msg: &[u8]) -> Option<SocketAddr> {
    socket_after_any(
        msg,
        &[
            lit!(b"dial tcp "),
            lit!(b"dial tcp4 "),
            lit!(b"dial tcp6 "),
            lit!(b"dial udp "),
            lit!(b"->"),
            lit!(b"Addr: \\\""),
            lit!(b"Addr: \""),
        ],
    )
}

/// Go `lookup NAME on SERVER: …` or `lookup NAME: …`: sets the DNS name (and server).
pub(crate) fn go_lookup(msg: &[u8], e: &mut Extracted) -> bool {
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

// === grpc-java, reactor-netty, okhttp, java ===

/// Java's `host/IP:port` (OkHttp, Netty, NIO) anywhere in the line; also sets the host name.
fn java(msg: &[u8], _: &Phrases, e: &mut Extracted) -> Peer {
    found(java_slash_target(msg, e))
}

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

// === apache-httpclient ===

/// Apache HttpClient: `Connect to HOST:PORT [HOST/IP, …] failed`, else Java's `host/IP:port`.
fn apache(msg: &[u8], _: &Phrases, e: &mut Extracted) -> Peer {
    found(apache_target(msg, e) || java_slash_target(msg, e))
}

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
        && let Some((ip, _)) = parse_ip(&open[slash + 1..])
    {
        e.target = Some(SocketAddr::new(ip, port));
        return true;
    }
    false
}

// === python-urllib3, python ===

/// Python: `HTTPConnectionPool(host='X', port=N)`, redis-py `connecting to HOST:PORT.`.
fn python(msg: &[u8], _: &Phrases, e: &mut Extracted) -> Peer {
    if let Some(p) = find(msg, lit!(b"host='")) {
        let rest = &msg[p + 6..];
        let end = memchr::memchr(b'\'', &rest[..rest.len().min(256)]).unwrap_or(0);
        let host = &rest[..end];
        let port = find(rest, lit!(b"port=")).and_then(|q| parse_port(&rest[q + 5..]));
        let ip = parse_ip(host)
            .filter(|(_, n)| *n == host.len())
            .map(|x| x.0);
        match (ip, port) {
            (Some(ip), Some((port, _))) => e.target = Some(SocketAddr::new(ip, port)),
            (None, _) if !host.is_empty() => e.host = to_string(host),
            _ => {}
        }
        return found(e.target.is_some() || e.host.is_some());
    }
    if let Some(p) = find(msg, lit!(b" connecting to "))
        && let Some((hp, _)) = parse_host_port(&msg[p + 15..])
    {
        host_port_into(&hp, e);
        return Peer::Done;
    }
    Peer::Search
}

// === nodejs ===

/// Node.js: `connect ECONNREFUSED IP:PORT`, `getaddrinfo ENOTFOUND name`.
fn node(msg: &[u8], _: &Phrases, e: &mut Extracted) -> Peer {
    let codes = [
        lit!(b"ECONNREFUSED "),
        lit!(b"ETIMEDOUT "),
        lit!(b"EHOSTUNREACH "),
        lit!(b"ENETUNREACH "),
        lit!(b"ECONNRESET "),
    ];
    if let Some(sa) = socket_after_any(msg, &codes) {
        e.target = Some(sa);
        return Peer::Done;
    }
    for m in [lit!(b"ENOTFOUND "), lit!(b"EAI_AGAIN ")] {
        if let Some(p) = find(msg, m) {
            e.dns_name = name_at(&msg[p + m.needle().len()..]);
            return found(e.dns_name.is_some());
        }
    }
    Peer::Search
}

// === curl ===

/// curl: `Failed to connect to HOST port PORT`, `Immediate connect fail for IP:` (the IP, no
/// port yet: the summary line that follows has it and is merged). Nothing else in a curl line
/// is its peer.
fn curl(msg: &[u8], _: &Phrases, e: &mut Extracted) -> Peer {
    if let Some(p) = find(msg, lit!(b"connect to ")) {
        let rest = &msg[p + 11..];
        if let Some((hp, n)) = parse_host_port(rest) {
            let port = rest[n..]
                .strip_prefix(b" port ")
                .and_then(parse_port)
                .map(|x| x.0);
            let hp = HostPort {
                port: hp.port.or(port),
                ..hp
            };
            host_port_into(&hp, e);
            return Peer::Done;
        }
    }
    if let Some(p) = find(msg, lit!(b"connect fail for "))
        && let Some((ip, _)) = parse_ip(&msg[p + 17..])
    {
        e.host = Some(ip.to_string());
    }
    Peer::Done
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    #[test]
    fn one_entry_per_format_and_room_for_the_marker_bits() {
        for (i, s) in FORMATS.iter().enumerate() {
            assert!(
                FORMATS[..i].iter().all(|t| t.format != s.format),
                "{} twice",
                s.name
            );
            assert_eq!(s.format.as_str(), s.name);
            assert!(s.needles.iter().all(|n| n.text.len() >= 4), "{}", s.name);
        }
        // Marker ids are table indexes in a u32 beside the two grpc-go dial bits.
        assert!(FORMATS.len() <= crate::extract::DIAL_BITS as usize);
        assert_eq!(Format::Unknown.as_str(), "unknown");
        assert!(spec(Format::Unknown).is_none());
    }
}
