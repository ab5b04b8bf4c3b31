//! Parses IP addresses and `IP:port` socket addresses the way clients print them in log text.
//!
//! Covers `10.0.0.1:80`, `[fd00::1]:80`, `[fe80::1%eth0]:80`, Java's unbracketed IPv6
//! (`/0:0:0:0:0:0:0:1:80`, `fe80:0:0:0:0:0:0:1%1:48555`) and URLs (`http://10.0.0.1/x` → port 80).
//! Every function takes bytes and never panics on any input.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV6};

use crate::lit::{Lit, lit};

/// Parses a decimal port (1–5 digits, ≤ 65535) at the start of `b`; the next byte must not be
/// alphanumeric (so the redacted `3xxxxx` is rejected).
pub(crate) fn parse_port(b: &[u8]) -> Option<(u16, usize)> {
    let n = b.iter().take(6).take_while(|c| c.is_ascii_digit()).count();
    if n == 0 || n > 5 {
        return None;
    }
    if b.get(n).is_some_and(|c| c.is_ascii_alphanumeric()) {
        return None;
    }
    let mut v: u32 = 0;
    for &c in &b[..n] {
        v = v * 10 + u32::from(c - b'0');
    }
    u16::try_from(v).ok().map(|p| (p, n))
}

/// Parses a dotted IPv4 address at the start of `b`. Rejects longer dotted runs (`1.2.3.4.5`).
pub(crate) fn parse_ipv4(b: &[u8]) -> Option<(Ipv4Addr, usize)> {
    let mut octets = [0u8; 4];
    let mut i = 0;
    for (k, slot) in octets.iter_mut().enumerate() {
        if k > 0 {
            if b.get(i) != Some(&b'.') {
                return None;
            }
            i += 1;
        }
        let n = b[i.min(b.len())..]
            .iter()
            .take(4)
            .take_while(|c| c.is_ascii_digit())
            .count();
        if n == 0 || n > 3 {
            return None;
        }
        let mut v: u32 = 0;
        for &c in &b[i..i + n] {
            v = v * 10 + u32::from(c - b'0');
        }
        *slot = u8::try_from(v).ok()?;
        i += n;
    }
    if b.get(i) == Some(&b'.') && b.get(i + 1).is_some_and(u8::is_ascii_digit) {
        return None;
    }
    if b.get(i).is_some_and(|c| c.is_ascii_alphanumeric()) {
        return None;
    }
    Some((Ipv4Addr::from(octets), i))
}

/// Parses an IPv6 address with an optional `%zone` from exactly `b` (no brackets, no port).
fn parse_ipv6_exact(b: &[u8]) -> Option<(Ipv6Addr, u32)> {
    if b.is_empty() || b.len() > 64 {
        return None;
    }
    let (addr, zone) = match memchr::memchr(b'%', b) {
        Some(p) => (&b[..p], &b[p + 1..]),
        None => (b, &b""[..]),
    };
    let s = std::str::from_utf8(addr).ok()?;
    let ip: Ipv6Addr = s.parse().ok()?;
    // A numeric zone is a scope id; a named zone (`eth0`) cannot be resolved here.
    let scope = std::str::from_utf8(zone)
        .ok()
        .and_then(|z| z.parse::<u32>().ok())
        .unwrap_or(0);
    Some((ip, scope))
}

fn is_v6_char(c: u8) -> bool {
    c.is_ascii_hexdigit() || c == b':' || c == b'.'
}

fn is_zone_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_' || c == b'-'
}

/// Parses `[v6(%zone)?]:port` at the start of `b`.
fn parse_bracketed(b: &[u8]) -> Option<(SocketAddr, usize)> {
    if b.first() != Some(&b'[') {
        return None;
    }
    let close = memchr::memchr(b']', &b[1..b.len().min(70)])? + 1;
    let (ip, scope) = parse_ipv6_exact(&b[1..close])?;
    if b.get(close + 1) != Some(&b':') {
        return None;
    }
    let (port, n) = parse_port(&b[close + 2..])?;
    Some((
        SocketAddr::V6(SocketAddrV6::new(ip, port, 0, scope)),
        close + 2 + n,
    ))
}

/// Parses `IPv4:port` or `[IPv6]:port` at the start of `b`.
pub(crate) fn parse_socket(b: &[u8]) -> Option<(SocketAddr, usize)> {
    match b.first()? {
        b'[' => parse_bracketed(b),
        c if c.is_ascii_digit() => {
            let (ip, n) = parse_ipv4(b)?;
            if b.get(n) != Some(&b':') {
                return None;
            }
            let (port, m) = parse_port(&b[n + 1..])?;
            Some((SocketAddr::new(IpAddr::V4(ip), port), n + 1 + m))
        }
        _ => None,
    }
}

/// Parses a socket address as Java prints an `InetSocketAddress` after its `/`: IPv4, bracketed
/// IPv6 (JDK 14+) or unbracketed IPv6 whose last `:` starts the port (`0:0:0:0:0:0:0:1:80`).
pub(crate) fn parse_java_socket(b: &[u8]) -> Option<(SocketAddr, usize)> {
    if let Some(r) = parse_socket(b) {
        return Some(r);
    }
    // Unbracketed IPv6 with an optional zone, then `:port`.
    let mut end = b.iter().take(80).take_while(|&&c| is_v6_char(c)).count();
    if b.get(end) == Some(&b'%') {
        end += 1;
        end += b[end..]
            .iter()
            .take(20)
            .take_while(|&&c| is_zone_char(c))
            .count();
        // The zone ran into `:port`.
        if b.get(end) == Some(&b':') {
            let (port, n) = parse_port(&b[end + 1..])?;
            let (ip, scope) = parse_ipv6_exact(&b[..end])?;
            return Some((
                SocketAddr::V6(SocketAddrV6::new(ip, port, 0, scope)),
                end + 1 + n,
            ));
        }
        return None;
    }
    let run = &b[..end];
    let colon = memchr::memrchr(b':', run)?;
    let (port, n) = parse_port(&run[colon + 1..])?;
    if colon + 1 + n != end {
        return None;
    }
    let (ip, scope) = parse_ipv6_exact(&run[..colon])?;
    Some((SocketAddr::V6(SocketAddrV6::new(ip, port, 0, scope)), end))
}

/// Parses a bare IP (v4, or v6 in brackets or not) at the start of `b`.
pub(crate) fn parse_ip(b: &[u8]) -> Option<(IpAddr, usize)> {
    if let Some((ip, n)) = parse_ipv4(b) {
        return Some((IpAddr::V4(ip), n));
    }
    if b.first() == Some(&b'[') {
        let close = memchr::memchr(b']', &b[1..b.len().min(70)])? + 1;
        let (ip, _) = parse_ipv6_exact(&b[1..close])?;
        return Some((IpAddr::V6(ip), close + 1));
    }
    let end = b.iter().take(64).take_while(|&&c| is_v6_char(c)).count();
    memchr::memchr(b':', &b[..end])?;
    let (ip, _) = parse_ipv6_exact(&b[..end])?;
    Some((IpAddr::V6(ip), end))
}

fn is_boundary(c: u8) -> bool {
    !(c.is_ascii_alphanumeric() || c == b'.' || c == b':' || c == b'_' || c == b'-')
}

/// The last `IPv4:port` or `[IPv6]:port` in `line` that starts on a token boundary.
pub(crate) fn last_socket(line: &[u8]) -> Option<SocketAddr> {
    let mut found = None;
    let mut i = 0;
    while i < line.len() {
        let c = line[i];
        let at_boundary = i == 0 || is_boundary(line[i - 1]);
        if at_boundary
            && (c.is_ascii_digit() || c == b'[')
            && let Some((sa, n)) = parse_socket(&line[i..])
        {
            found = Some(sa);
            i += n;
            continue;
        }
        i += 1;
    }
    found
}

/// The first socket address right after any occurrence of `marker` in `line`.
pub(crate) fn socket_after(line: &[u8], marker: &Lit) -> Option<SocketAddr> {
    for p in marker.find_iter(line) {
        if let Some((sa, _)) = parse_socket(&line[p + marker.needle().len()..]) {
            return Some(sa);
        }
    }
    None
}

/// [`socket_after`] the first of `markers`, in order, that has one.
pub(crate) fn socket_after_any(line: &[u8], markers: &[&Lit]) -> Option<SocketAddr> {
    markers.iter().find_map(|m| socket_after(line, m))
}

/// A host as written in a URL or a message: an IP or a DNS-ish name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HostPort {
    pub ip: Option<IpAddr>,
    pub name: Option<String>,
    pub port: Option<u16>,
}

impl HostPort {
    pub fn socket(&self) -> Option<SocketAddr> {
        Some(SocketAddr::new(self.ip?, self.port?))
    }
}

fn is_host_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'.' || c == b'-' || c == b'_'
}

/// Parses `host[:port]` (host an IP, `[v6]` or a name) at the start of `b`.
pub(crate) fn parse_host_port(b: &[u8]) -> Option<(HostPort, usize)> {
    if let Some((sa, n)) = parse_socket(b) {
        return Some((
            HostPort {
                ip: Some(sa.ip()),
                name: None,
                port: Some(sa.port()),
            },
            n,
        ));
    }
    let (ip, name, n) = if let Some((ip, n)) = parse_ip(b) {
        (Some(ip), None, n)
    } else {
        let n = b.iter().take(253).take_while(|&&c| is_host_char(c)).count();
        if n == 0 || !b[..n].iter().any(u8::is_ascii_alphabetic) {
            return None;
        }
        let name = std::str::from_utf8(&b[..n]).ok()?.to_owned();
        (None, Some(name), n)
    };
    if b.get(n) == Some(&b':')
        && let Some((port, m)) = parse_port(&b[n + 1..])
    {
        return Some((
            HostPort {
                ip,
                name,
                port: Some(port),
            },
            n + 1 + m,
        ));
    }
    Some((
        HostPort {
            ip,
            name,
            port: None,
        },
        n,
    ))
}

/// The first `http://` / `https://` / `grpc://` URL in `line`, as host and port (the scheme's
/// default port when none is written).
pub(crate) fn first_url(line: &[u8]) -> Option<HostPort> {
    for p in lit!(b"://").find_iter(line) {
        let scheme_start = line[..p]
            .iter()
            .rposition(|c| !c.is_ascii_alphabetic())
            .map_or(0, |i| i + 1);
        let scheme = &line[scheme_start..p];
        let default = match scheme {
            b"http" | b"ws" => Some(80),
            b"https" | b"wss" => Some(443),
            _ => None,
        };
        if let Some((mut hp, _)) = parse_host_port(&line[p + 3..]) {
            if hp.port.is_none() {
                hp.port = default;
            }
            return Some(hp);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    fn sa(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn v4_sockets() {
        assert_eq!(
            parse_socket(b"10.42.3.17:9090: connect").map(|x| x.0),
            Some(sa("10.42.3.17:9090"))
        );
        assert_eq!(parse_socket(b"192.168.64.7:3xxxxx"), None);
        assert_eq!(parse_socket(b"1.2.3.4.5:80"), None);
        assert_eq!(parse_socket(b"256.1.1.1:80"), None);
        assert_eq!(parse_socket(b"1.2.3.4:99999"), None);
    }

    #[test]
    fn v6_sockets() {
        assert_eq!(
            parse_socket(b"[fd00:10:244::27]:1500: read").map(|x| x.0),
            Some(sa("[fd00:10:244::27]:1500"))
        );
        assert_eq!(
            parse_java_socket(b"0:0:0:0:0:0:0:1:80; nested").map(|x| x.0),
            Some(sa("[::1]:80"))
        );
        assert_eq!(
            parse_java_socket(b"fe80:0:0:0:0:0:0:1%1:48555").map(|x| x.0),
            Some(sa("[fe80::1%1]:48555"))
        );
    }

    #[test]
    fn last_socket_picks_the_remote() {
        assert_eq!(
            last_socket(b"read tcp 10.42.0.1:52682->10.42.0.7:10250: read: connection reset"),
            Some(sa("10.42.0.7:10250"))
        );
        assert_eq!(last_socket(b"version 1.2.3.4.5:6"), None);
    }

    #[test]
    fn urls() {
        let hp = first_url(b"Get \"https://10.42.0.7:10250/readyz\": context").unwrap();
        assert_eq!(hp.socket(), Some(sa("10.42.0.7:10250")));
        let hp = first_url(b"Get http://10.48.8.21/wp-login.php: dial").unwrap();
        assert_eq!(hp.socket(), Some(sa("10.48.8.21:80")));
        let hp = first_url(b"upstream: \"http://svc.ns:8080/x\"").unwrap();
        assert_eq!(hp.name.as_deref(), Some("svc.ns"));
        assert_eq!(hp.port, Some(8080));
    }
}
