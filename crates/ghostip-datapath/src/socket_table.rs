//! The kernel's TCP socket tables as `/proc/net/tcp` and `/proc/net/tcp6` print them: which sockets listen and which connections are established, per network namespace.
//!
//! `ghostip drain-wait --wait-connections` reads the tables of the pod's own network
//! namespace (the files as the kernel generates them for the reading process) and waits
//! until no established connection to a listening port remains. A line is
//! `sl local_address rem_address st …`, addresses as hex `ADDR:PORT` with the address in the
//! kernel's byte order (each 32-bit word as the host stores it: little-endian on x86 and
//! arm64). Lines that do not parse are skipped and counted.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// The TCP states `/proc/net/tcp` prints (the `st` column, `include/net/tcp_states.h`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum TcpState {
    /// 01
    Established,
    /// 02
    SynSent,
    /// 03
    SynRecv,
    /// 04
    FinWait1,
    /// 05
    FinWait2,
    /// 06
    TimeWait,
    /// 07
    Close,
    /// 08
    CloseWait,
    /// 09
    LastAck,
    /// 0A
    Listen,
    /// 0B
    Closing,
    /// 0C
    NewSynRecv,
}

impl TcpState {
    fn from_hex(s: &str) -> Option<Self> {
        Some(match u8::from_str_radix(s, 16).ok()? {
            0x01 => TcpState::Established,
            0x02 => TcpState::SynSent,
            0x03 => TcpState::SynRecv,
            0x04 => TcpState::FinWait1,
            0x05 => TcpState::FinWait2,
            0x06 => TcpState::TimeWait,
            0x07 => TcpState::Close,
            0x08 => TcpState::CloseWait,
            0x09 => TcpState::LastAck,
            0x0A => TcpState::Listen,
            0x0B => TcpState::Closing,
            0x0C => TcpState::NewSynRecv,
            _ => return None,
        })
    }
}

/// One socket of the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct TcpSocket {
    /// Local address and port.
    pub local: SocketAddr,
    /// Remote address and port (`0.0.0.0:0` for a listener).
    pub remote: SocketAddr,
    /// State.
    pub state: TcpState,
}

/// A parsed table.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct SocketTable {
    /// The sockets, in file order.
    pub sockets: Vec<TcpSocket>,
    /// Lines that did not parse (the header excluded).
    pub skipped: usize,
}

impl SocketTable {
    /// Parses one or more files' contents (`tcp` and `tcp6` may be concatenated).
    pub fn parse(text: &str) -> Self {
        let mut table = SocketTable::default();
        for line in text.lines() {
            let line = line.trim();
            if line.is_empty() || line.starts_with("sl ") {
                continue;
            }
            match parse_line(line) {
                Some(s) => table.sockets.push(s),
                None => table.skipped += 1,
            }
        }
        table
    }

    /// Ports some socket listens on.
    pub fn listening_ports(&self) -> std::collections::BTreeSet<u16> {
        self.sockets
            .iter()
            .filter(|s| s.state == TcpState::Listen)
            .map(|s| s.local.port())
            .collect()
    }

    /// Established connections whose local port is one of `ports` (connections to the
    /// pod's servers; its own outgoing ones use other ports).
    pub fn established_to(&self, ports: &std::collections::BTreeSet<u16>) -> usize {
        self.sockets
            .iter()
            .filter(|s| s.state == TcpState::Established && ports.contains(&s.local.port()))
            .count()
    }
}

fn parse_line(line: &str) -> Option<TcpSocket> {
    let mut f = line.split_ascii_whitespace();
    let _slot = f.next().filter(|s| s.ends_with(':'))?;
    let local = parse_addr(f.next()?)?;
    let remote = parse_addr(f.next()?)?;
    let state = TcpState::from_hex(f.next()?)?;
    Some(TcpSocket {
        local,
        remote,
        state,
    })
}

/// `0100007F:1F90` or a 32-hex-digit IPv6 address and a hex port.
fn parse_addr(s: &str) -> Option<SocketAddr> {
    let (addr, port) = s.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let ip = match addr.len() {
        8 => IpAddr::V4(Ipv4Addr::from(word(addr)?.to_le_bytes())),
        32 => {
            let mut bytes = [0u8; 16];
            for (i, chunk) in bytes.chunks_exact_mut(4).enumerate() {
                let w = word(addr.get(i * 8..i * 8 + 8)?)?;
                chunk.copy_from_slice(&w.to_le_bytes());
            }
            IpAddr::V6(Ipv6Addr::from(bytes))
        }
        _ => return None,
    };
    Some(SocketAddr::new(ip, port))
}

/// One 32-bit word as the kernel prints it (`%08X` of the word in host order).
fn word(hex: &str) -> Option<u32> {
    if hex.len() != 8 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u32::from_str_radix(hex, 16).ok()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// Lines as a Linux x86_64 kernel prints them: a listener on 0.0.0.0:8080, a connection
    /// from 10.244.2.9 to 10.244.1.7:8080, an outgoing one from an ephemeral port, and an
    /// IPv6 listener on [::]:8080 with one connection from ::ffff:10.244.2.9.
    const TCP: &str = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 31337 1 0000000000000000 100 0 0 10 0
   1: 0701F40A:1F90 0902F40A:C350 01 00000000:00000000 02:000A7A0A 00000000     0        0 31338 2 0000000000000000 20 4 30 10 -1
   2: 0701F40A:A1B2 0A00600A:0035 01 00000000:00000000 00:00000000 00000000     0        0 31339 1 0000000000000000 20 4 30 10 -1
";
    const TCP6: &str = "  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000000000000:1F90 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4242 1 0000000000000000 100 0 0 10 0
   1: 0000000000000000FFFF00000701F40A:1F90 0000000000000000FFFF00000902F40A:D431 01 00000000:00000000 00:00000000 00000000     0        0 4243 1 0000000000000000 20 4 30 10 -1
";

    #[test]
    fn reads_addresses_ports_and_states_of_both_families() {
        let t = SocketTable::parse(&format!("{TCP}{TCP6}"));
        assert_eq!(t.skipped, 0);
        assert_eq!(t.sockets.len(), 5);
        assert_eq!(t.sockets[1].local, "10.244.1.7:8080".parse().unwrap());
        assert_eq!(t.sockets[1].remote, "10.244.2.9:50000".parse().unwrap());
        assert_eq!(t.sockets[1].state, TcpState::Established);
        assert_eq!(t.sockets[2].remote, "10.96.0.10:53".parse().unwrap());
        assert_eq!(
            t.sockets[4].remote,
            "[::ffff:10.244.2.9]:54321".parse().unwrap()
        );
        let ports = t.listening_ports();
        assert_eq!(ports.into_iter().collect::<Vec<_>>(), vec![8080]);
        // The outgoing DNS connection is not one to the pod's server.
        assert_eq!(t.established_to(&t.listening_ports()), 2);
    }

    #[test]
    fn damaged_lines_are_skipped_and_counted() {
        let t = SocketTable::parse("   0: 0000000:1F90 00000000:0000 0A\n   1: zz\nnot a line\n");
        assert_eq!(t.sockets.len(), 0);
        assert_eq!(t.skipped, 3);
    }
}
