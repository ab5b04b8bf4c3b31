//! The literal prefilter that picks candidate lines, and the failure phrases that decide a kind.
//!
//! The prefilter runs over whole buffers (not line by line) with one Aho-Corasick automaton of
//! case-sensitive needles, so lines without any needle cost only the automaton's scan and
//! allocate nothing. The phrases (ASCII case-insensitive) are then looked for on candidate lines
//! only, in one pass together with the format markers (`Extractors::words` in `extract.rs`).

use aho_corasick::{AhoCorasick, AhoCorasickBuilder, AhoCorasickKind, MatchKind};

use crate::model::Kind;

/// Needles of the failure phrases that lines of any format may hold. With the needles of the
/// table of formats ([`crate::formats`]: Envoy's failure flags, Node.js error codes, …) they are
/// the prefilter's: every failure phrase and Envoy failure flag contains at least one, or (as
/// `URX`, `upstream connect error … reset`) always comes with one that does.
///
/// They are chosen for speed. The packed (Teddy, SIMD) searcher matches nibble fingerprints of
/// each needle's first four bytes, per bucket of needles, so: at most 32 needles of at least 4
/// bytes (slim variant, 32 bytes per step); needles start with the space before the word
/// (" refused") or a capital ("ECONN" for ECONNREFUSED/ECONNRESET/ECONNABORTED) rather than
/// lowercase text; case variants are spelled out (a case-insensitive search is markedly
/// slower); and each names its bucket ([`Needle`]).
pub(crate) const PHRASE_NEEDLES: &[Needle] = &[
    needle(" refused", 7),
    needle(" reset", 5),
    needle(" timeout", 3),
    needle("Timeout", 7),
    needle(" timed out", 3),
    needle(" deadline", 1),
    needle(" route to host", 5),
    needle(" unreachable", 6),
    needle("navailable", 1),
    needle("y upstream", 0),
    needle(" such host", 0),
    needle("t known", 6),
    needle(" name resolution", 2),
    needle(" misbehaving", 5),
    needle(" broken pipe", 7),
    needle("o connect to", 6),
    needle("n not permitted", 6),
];

/// A prefilter needle and its bucket (0–7) of the packed searcher.
///
/// The searcher (slim Teddy) puts its needles into 8 buckets and, at each 32-byte step, checks
/// the bytes against the cross product of each bucket's nibble fingerprints: a bucket of
/// needles with similar fingerprints fires less often on text that holds none of them. The
/// buckets below came from a local search minimizing simulated bucket fires on the generated
/// benchmark log; against the same needles grouped by meaning they cut the prefilter's
/// instructions by 42 % (callgrind), and against the table's order, the scan's by 22 %
/// (docs/BENCHMARKS.md). A needle of a new format goes into the bucket of the needles it looks
/// most like, keeping the buckets at 4 needles at most.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Needle {
    /// The literal, matched case-sensitively.
    pub text: &'static str,
    /// Its bucket, 0–7.
    pub bucket: u8,
}

/// The needle `text` in bucket `bucket`.
pub(crate) const fn needle(text: &'static str, bucket: u8) -> Needle {
    Needle { text, bucket }
}

/// The prefilter's needles ([`PHRASE_NEEDLES`] and the formats', each once) laid out for the
/// packed searcher: it puts needle `i` into bucket `7 - i % 8` (aho-corasick 1.1's Teddy), so
/// the layout takes, for each position, the next needle of that bucket, or the next needle of
/// any bucket when that one is empty.
pub(crate) fn needles() -> &'static [&'static str] {
    static NEEDLES: std::sync::LazyLock<Vec<&'static str>> = std::sync::LazyLock::new(|| {
        let mut left: Vec<Needle> = Vec::new();
        let formats = crate::formats::FORMATS.iter().flat_map(|f| f.needles);
        for n in PHRASE_NEEDLES.iter().chain(formats) {
            if !left.iter().any(|m| m.text == n.text) {
                left.push(*n);
            }
        }
        let mut out = Vec::with_capacity(left.len());
        while !left.is_empty() {
            let bucket = 7 - (out.len() % 8) as u8;
            let at = left.iter().position(|n| n.bucket == bucket).unwrap_or(0);
            out.push(left.remove(at).text);
        }
        out
    });
    &NEEDLES
}

/// The prefilter's needles (for benchmarks and diagnostics: e.g. the same literals given to
/// `rg -F -f`).
pub fn prefilter_needles() -> &'static [&'static str] {
    needles()
}

/// The literal prefilter: a packed SIMD (Teddy) searcher where the CPU has one, else
/// Aho-Corasick.
#[derive(Debug, Clone)]
pub(crate) enum Prefilter {
    Packed(aho_corasick::packed::Searcher),
    Automaton(AhoCorasick),
}

impl Prefilter {
    /// The first needle in `hay[range]`, as (start, end).
    pub fn find(&self, hay: &[u8], range: std::ops::Range<usize>) -> Option<(usize, usize)> {
        match self {
            Prefilter::Packed(p) => p
                .find_in(hay, aho_corasick::Span::from(range))
                .map(|m| (m.start(), m.end())),
            Prefilter::Automaton(ac) => ac
                .find(aho_corasick::Input::new(hay).range(range))
                .map(|m| (m.start(), m.end())),
        }
    }
}

/// Builds the prefilter.
pub(crate) fn build_prefilter() -> Option<Prefilter> {
    let mut cfg = aho_corasick::packed::Config::new();
    cfg.match_kind(aho_corasick::packed::MatchKind::LeftmostFirst);
    if let Some(p) = cfg.builder().extend(needles().iter()).build() {
        return Some(Prefilter::Packed(p));
    }
    AhoCorasickBuilder::new()
        .match_kind(MatchKind::LeftmostFirst)
        .kind(Some(AhoCorasickKind::DFA))
        .build(needles())
        .ok()
        .map(Prefilter::Automaton)
}

/// What a phrase says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Says {
    Kind(Kind),
    /// A DNS-lookup marker (Go `lookup NAME`): decides DNS kinds together with a timeout phrase.
    Lookup,
    /// A gRPC stream refusal (HTTP/2 REFUSED_STREAM): unavailable, not a TCP refusal.
    StreamRefused,
}

/// Failure phrases (matched ASCII case-insensitively on candidate lines).
pub(crate) const PHRASES: &[(&str, Says)] = &[
    ("connection refused", Says::Kind(Kind::Refused)),
    ("econnrefused", Says::Kind(Kind::Refused)),
    ("errno 111]", Says::Kind(Kind::Refused)),
    ("errno 111)", Says::Kind(Kind::Refused)),
    ("os error 111", Says::Kind(Kind::Refused)),
    ("connect error: 111", Says::Kind(Kind::Refused)),
    ("connect_error:_111", Says::Kind(Kind::Refused)),
    ("actively refused", Says::Kind(Kind::Refused)),
    ("connection reset", Says::Kind(Kind::Reset)),
    ("econnreset", Says::Kind(Kind::Reset)),
    ("errno 104", Says::Kind(Kind::Reset)),
    ("os error 104", Says::Kind(Kind::Reset)),
    ("socket hang up", Says::Kind(Kind::Reset)),
    ("prematurely closed", Says::Kind(Kind::Reset)),
    ("broken pipe", Says::Kind(Kind::Reset)),
    ("econnaborted", Says::Kind(Kind::Reset)),
    ("connection termination", Says::Kind(Kind::Reset)),
    ("connection_termination", Says::Kind(Kind::Reset)),
    ("no route to host", Says::Kind(Kind::NoRoute)),
    ("ehostunreach", Says::Kind(Kind::NoRoute)),
    ("errno 113", Says::Kind(Kind::NoRoute)),
    ("noroutetohost", Says::Kind(Kind::NoRoute)),
    ("network is unreachable", Says::Kind(Kind::NoRoute)),
    ("enetunreach", Says::Kind(Kind::NoRoute)),
    ("host is unreachable", Says::Kind(Kind::NoRoute)),
    ("i/o timeout", Says::Kind(Kind::Timeout)),
    ("timed out", Says::Kind(Kind::Timeout)),
    ("timeout exceeded", Says::Kind(Kind::Timeout)),
    ("deadline exceeded", Says::Kind(Kind::Timeout)),
    ("etimedout", Says::Kind(Kind::Timeout)),
    ("timeoutexception", Says::Kind(Kind::Timeout)),
    ("errno 110", Says::Kind(Kind::Timeout)),
    ("os error 110", Says::Kind(Kind::Timeout)),
    ("connection_timeout", Says::Kind(Kind::Timeout)),
    ("no such host", Says::Kind(Kind::DnsNotFound)),
    ("unknownhostexception", Says::Kind(Kind::DnsNotFound)),
    ("failed to resolve", Says::Kind(Kind::DnsNotFound)),
    ("name or service not known", Says::Kind(Kind::DnsNotFound)),
    ("nodename nor servname", Says::Kind(Kind::DnsNotFound)),
    ("enotfound", Says::Kind(Kind::DnsNotFound)),
    (
        "temporary failure in name resolution",
        Says::Kind(Kind::DnsTimeout),
    ),
    ("eai_again", Says::Kind(Kind::DnsTimeout)),
    (
        "dnsnameresolvertimeoutexception",
        Says::Kind(Kind::DnsTimeout),
    ),
    ("server misbehaving", Says::Kind(Kind::DnsTimeout)),
    ("operation not permitted", Says::Kind(Kind::Other)),
    ("couldn't connect to server", Says::Kind(Kind::Other)),
    ("failed to connect to", Says::Kind(Kind::Other)),
    ("unavailable", Says::Kind(Kind::Unavailable)),
    ("no healthy upstream", Says::Kind(Kind::Unavailable)),
    ("no live upstreams", Says::Kind(Kind::Unavailable)),
    ("upstream connect error", Says::Kind(Kind::Unavailable)),
    ("stream refused", Says::StreamRefused),
    ("lookup ", Says::Lookup),
];

/// The kinds a line's phrases mention, as a bit set, plus the lookup marker.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Phrases {
    kinds: u16,
    pub lookup: bool,
}

impl Phrases {
    /// Adds what one phrase says.
    pub fn add(&mut self, says: Says) {
        match says {
            Says::Kind(k) => self.kinds |= 1 << (k as u16),
            Says::Lookup => self.lookup = true,
            // A stream refusal (HTTP/2 REFUSED_STREAM) is unavailable, not a TCP refusal.
            Says::StreamRefused => self.kinds |= 1 << (Kind::Unavailable as u16),
        }
    }

    /// Both sets.
    pub fn union(self, other: Phrases) -> Phrases {
        Phrases {
            kinds: self.kinds | other.kinds,
            lookup: self.lookup || other.lookup,
        }
    }

    /// True when the phrase for `k` was seen.
    pub fn has(&self, k: Kind) -> bool {
        self.kinds & (1 << (k as u16)) != 0
    }

    /// The kind the line reports, by precedence: DNS failures (a `lookup` or a DNS phrase), then
    /// refused, reset, no-route, timeout, other, unavailable.
    pub fn kind(&self) -> Option<Kind> {
        if self.has(Kind::DnsNotFound) {
            return Some(Kind::DnsNotFound);
        }
        if self.has(Kind::DnsTimeout) {
            return Some(Kind::DnsTimeout);
        }
        if self.lookup && self.has(Kind::Timeout) {
            return Some(Kind::DnsTimeout);
        }
        [
            Kind::Refused,
            Kind::Reset,
            Kind::NoRoute,
            Kind::Timeout,
            Kind::Other,
            Kind::Unavailable,
        ]
        .into_iter()
        .find(|k| self.has(*k))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    fn kind(line: &str) -> Option<Kind> {
        let ex = crate::extract::Extractors::new().unwrap();
        ex.phrases(line.as_bytes()).kind()
    }

    #[test]
    fn precedence() {
        assert_eq!(
            kind(
                "rpc error: code = Unavailable desc = dial tcp 1.2.3.4:1: connect: connection refused"
            ),
            Some(Kind::Refused)
        );
        assert_eq!(
            kind("dial tcp: lookup argocd-redis: i/o timeout"),
            Some(Kind::DnsTimeout)
        );
        assert_eq!(
            kind("Error: 14 UNAVAILABLE: Stream refused by server"),
            Some(Kind::Unavailable)
        );
        assert_eq!(kind("all good"), None);
    }

    #[test]
    fn prefilter_finds_needles_only() {
        let p = build_prefilter().unwrap();
        let hay = b"200 SUCCESS BUFFER time=3 ok";
        assert_eq!(p.find(hay, 0..hay.len()), None);
        let hay = b"x connect: connection refused";
        assert_eq!(p.find(hay, 0..hay.len()), Some((21, 29)));
    }

    #[test]
    fn the_layout_puts_each_needle_into_its_bucket() {
        let all: Vec<Needle> = PHRASE_NEEDLES
            .iter()
            .chain(crate::formats::FORMATS.iter().flat_map(|f| f.needles))
            .copied()
            .collect();
        let laid = needles();
        for n in &all {
            let i = laid.iter().position(|t| *t == n.text).unwrap();
            assert_eq!(7 - i % 8, usize::from(n.bucket), "{:?}", n.text);
        }
        // Each text once, and a needle listed by two formats in one bucket.
        assert_eq!(laid.len(), {
            let mut texts: Vec<&str> = all.iter().map(|n| n.text).collect();
            texts.sort_unstable();
            texts.dedup();
            texts.len()
        });
        for a in &all {
            assert!(all.iter().all(|b| a.text != b.text || a.bucket == b.bucket));
        }
    }

    #[test]
    fn at_most_32_needles_of_4_bytes() {
        assert!(needles().len() <= 32, "{}", needles().len());
        assert!(needles().iter().all(|n| n.len() >= 4));
    }

    #[test]
    fn every_phrase_contains_a_needle() {
        // The extractors only see lines the prefilter picked.
        let exempt = [
            "lookup ",
            "errno 111]",
            "errno 111)",
            "os error 111",
            "errno 104",
            "os error 104",
            "errno 113",
            "errno 110",
            "os error 110",
            "connect_error:_111",
            "connect error: 111",
            "connection_termination",
            "connection termination",
            "connection_timeout",
            "failed to resolve",
            "stream refused",
            "nodename nor servname",
            "noroutetohost",
            "upstream connect error",
            "couldn't connect to server",
        ];
        for (phrase, _) in PHRASES {
            if exempt.contains(phrase) {
                continue;
            }
            let found = needles().iter().any(|n| {
                let n = n.to_ascii_lowercase();
                phrase.contains(n.trim_start_matches(['"', ' '])) || phrase.contains(&n)
            });
            assert!(found, "no needle for phrase {phrase:?}");
        }
    }
}
