//! The extractors: from one candidate line to a failure kind, format, target and DNS facts.
//!
//! See [`extract`] for the entry point. The formats and how each is read are the table in
//! [`crate::formats`]: formats with a structure of their own (Envoy access logs, text and JSON)
//! are parsed by it; every other format is recognized by its marker literals, its kind comes
//! from the failure phrases ([`crate::prefilter`]) and its peer from the format's peer reader
//! (`dial tcp IP:PORT`, `Connect to h:p [/IP]`, `host/IP:port`, `connect ECONNREFUSED IP:PORT`,
//! `HTTPConnectionPool(host=…, port=…)`, `upstream: "…"`), else from the line's first URL or
//! last IP:port. Phrases and markers are found in one pass over the line; the literals the peer
//! readers look for are searched with finders built once ([`crate::lit`]).

use std::net::SocketAddr;

use aho_corasick::{AhoCorasick, AhoCorasickBuilder, MatchKind};

use crate::addr::{HostPort, first_url, last_socket};
use crate::formats::{
    FORMATS, FormatSpec, GRPC_CREATE_FAILED, GRPC_CREATING, Peer, StructureFn, go_lookup, spec,
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
    pub(crate) fn new(kind: Kind, format: Format) -> Extracted {
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

/// Marker ids: the index of the format in [`FORMATS`] (its bit in a line's marker set), then
/// the two grpc-go dial reports.
pub(crate) const DIAL_BITS: u8 = 30;
const M_GRPC_CREATING: u8 = DIAL_BITS;
const M_GRPC_CREATE_FAILED: u8 = DIAL_BITS + 1;

/// Every marker with its id, formats first in table order.
fn markers() -> impl Iterator<Item = (&'static str, u8)> {
    FORMATS
        .iter()
        .zip(0u8..)
        .flat_map(|(s, id)| s.markers.iter().map(move |m| (*m, id)))
        .chain([
            (GRPC_CREATING, M_GRPC_CREATING),
            (GRPC_CREATE_FAILED, M_GRPC_CREATE_FAILED),
        ])
}

/// The automaton the extractors need, built once per process: the failure phrases (matched
/// ASCII case-insensitively) and the format markers (case-sensitive) in one automaton, searched
/// once per candidate line; and the structure readers of the formats that have one.
#[derive(Debug, Clone)]
pub(crate) struct Extractors {
    words: AhoCorasick,
    /// What each pattern of `words` means.
    meanings: Vec<Meaning>,
    /// The structure readers, in table order.
    structured: Vec<StructureFn>,
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
        for (marker, id) in markers() {
            slots.push((slot(marker), None, Some((id, marker.as_bytes()))));
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
        let structured = FORMATS.iter().filter_map(|s| s.structure).collect();
        Some(Extractors {
            words,
            meanings,
            structured,
        })
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

pub(crate) fn find(hay: &[u8], needle: &Lit) -> Option<usize> {
    needle.find(hay)
}

pub(crate) fn contains(hay: &[u8], needle: &Lit) -> bool {
    find(hay, needle).is_some()
}

pub(crate) fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while matches!(b.get(i), Some(b' ' | b'\t')) {
        i += 1;
    }
    i
}

pub(crate) fn to_string(b: &[u8]) -> Option<String> {
    std::str::from_utf8(b).ok().map(str::to_owned)
}

pub(crate) fn is_name_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, b'.' | b'-' | b'_')
}

/// A DNS-ish name starting at `b[0]` (trailing dot dropped).
pub(crate) fn name_at(b: &[u8]) -> Option<String> {
    let n = b.iter().take(253).take_while(|&&c| is_name_char(c)).count();
    let name = b[..n].strip_suffix(b".").unwrap_or(&b[..n]);
    if name.is_empty() || !name.iter().any(u8::is_ascii_alphanumeric) {
        return None;
    }
    to_string(name)
}

/// A JSON string (or `null` → `None`, other scalars as written) after `key` in `line`.
pub(crate) fn json_value<'a>(line: &'a [u8], key: &Lit) -> Option<&'a [u8]> {
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

/// Sets the target (an IP and a port) and the host name (a name) of `hp`.
pub(crate) fn host_port_into(hp: &HostPort, e: &mut Extracted) {
    if let Some(sa) = hp.socket() {
        e.target = Some(sa);
    }
    if hp.name.is_some() {
        e.host = hp.name.clone();
    }
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

/// The format of a line from its marker set: the first entry of [`FORMATS`] whose marker it
/// holds, else grpc-go for a dial report, else none ([`Format::Unknown`]).
fn detect(set: u32) -> Option<&'static FormatSpec> {
    let formats = set & ((1 << DIAL_BITS) - 1);
    if formats != 0 {
        return FORMATS.get(formats.trailing_zeros() as usize);
    }
    if set != 0 {
        return spec(Format::GrpcGo);
    }
    None
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
    for read in &ex.structured {
        if let Some(o) = read(line, msg, ex) {
            return o;
        }
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
    let spec = detect(set);
    let format = spec.map_or(Format::Unknown, |s| s.format);
    let mut e = Extracted::new(kind, format);
    e.grpc_creating = has(set, M_GRPC_CREATING);
    e.grpc_create_failed = has(set, M_GRPC_CREATE_FAILED);

    match spec.map_or(Peer::Search, |s| (s.peer)(msg, &phrases, &mut e)) {
        Peer::Final => return Outcome::Failure(e),
        Peer::Done => {}
        Peer::Search => {
            if let Some(hp) = first_url(msg) {
                host_port_into(&hp, &mut e);
            }
            if e.target.is_none() {
                e.target = last_socket(msg);
            }
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

/// Whether a line without a timestamp may be part of the log record a timestamped line above it
/// began: a continuation shape ([`continuation`]), an indented or blank line, or Python's
/// `Traceback (most recent call last):`. An undated line of any other shape is a record of its
/// own, whose time the log does not give.
pub(crate) fn may_continue_record(line: &[u8]) -> bool {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    line.first().is_none_or(|c| matches!(c, b' ' | b'\t'))
        || line.starts_with(b"Traceback")
        || continuation(line) != Continuation::No
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

    /// Every marker with its id.
    static MARKERS: std::sync::LazyLock<Vec<(&str, u8)>> =
        std::sync::LazyLock::new(|| markers().collect());

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
