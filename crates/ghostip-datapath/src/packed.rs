//! A compact load-balancer table for audits: frontends with their backends packed in one array, filled frontend by frontend as a parser resolves them.
//!
//! [`LbTable`] is the table to print, serialize and diff; every backend there is a
//! [`Backend`] of 56 bytes with its own vector per frontend. An audit of a node with
//! 150 000 endpoints only needs each backend's address and state, so a [`PackedTable`]
//! keeps 8 bytes per backend in one array (IPVS weights are not kept) and never holds
//! the whole [`LbTable`]. Parsers hand frontends to a [`FrontendSink`] one at a time;
//! both tables implement it.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::format::Format;
use crate::model::{
    Backend, BackendState, Frontend, FrontendKind, LbTable, Protocol, ServiceRef, SkipStats,
};

/// A consumer of the frontends a parser produces, one at a time.
pub trait FrontendSink {
    /// Takes one frontend with its backends.
    fn frontend(&mut self, f: Frontend);

    /// About how many frontends and backends will follow (to size storage once).
    fn expect(&mut self, _frontends: usize, _backends: usize) {}
}

impl FrontendSink for LbTable {
    fn frontend(&mut self, f: Frontend) {
        self.frontends.push(f);
    }

    fn expect(&mut self, frontends: usize, _backends: usize) {
        self.frontends.reserve(frontends);
    }
}

/// One backend of a [`PackedTable`], in 8 bytes: an IPv4 address inline, an IPv6 one as
/// an index into the table's list (read both with [`PackedTable::ip`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PackedBackend {
    addr: u32,
    port: u16,
    /// 0 active, 1 terminating, 2 quarantined, 3 maintenance, 4 other.
    state: u8,
    v6: bool,
}

impl PackedBackend {
    /// Backend port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Whether the datapath sends new connections to it ([`BackendState::Active`]).
    pub fn is_active(&self) -> bool {
        self.state == 0
    }
}

/// One frontend of a [`PackedTable`]; its backends are [`PackedTable::backends`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PackedFrontend {
    /// Frontend address (`0.0.0.0` / `::` for NodePorts on every local address).
    pub ip: IpAddr,
    /// Frontend port.
    pub port: u16,
    /// Transport protocol.
    pub protocol: Protocol,
    /// What kind of service address this is.
    pub kind: FrontendKind,
    /// The Kubernetes service port, when the dump names it.
    pub service: Option<ServiceRef>,
    /// Extra facts from the dump (`no-endpoints`, `session-affinity`, …).
    pub flags: Vec<String>,
    start: u32,
    end: u32,
}

/// A load-balancer table with the backends of all frontends in one array.
///
/// Frontends are kept in the order the parser produced them, each with its backends
/// sorted by address and port without duplicates; two descriptions of the same frontend
/// are not merged (unlike [`LbTable::normalize`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PackedTable {
    /// The dump format this table was read from.
    pub format: Option<Format>,
    /// Frontends.
    pub frontends: Vec<PackedFrontend>,
    backends: Vec<PackedBackend>,
    v6: Vec<Ipv6Addr>,
    /// Lines or objects that were not turned into rows, counted by reason.
    pub skipped: SkipStats,
}

impl PackedTable {
    /// An empty table read from `format`.
    pub fn new(format: Format) -> Self {
        Self {
            format: Some(format),
            ..Self::default()
        }
    }

    /// Reserves room for `n` more backends.
    pub fn reserve_backends(&mut self, n: usize) {
        self.backends.reserve(n);
    }

    /// Number of backends over all frontends.
    pub fn backend_count(&self) -> usize {
        self.backends.len()
    }

    /// The backends of `f` (a frontend of this table).
    pub fn backends(&self, f: &PackedFrontend) -> &[PackedBackend] {
        self.backends.get(self.backend_range(f)).unwrap_or_default()
    }

    /// Every backend, frontend after frontend; a frontend's are at
    /// [`PackedTable::backend_range`].
    pub fn all_backends(&self) -> &[PackedBackend] {
        &self.backends
    }

    /// Where the backends of `f` (a frontend of this table) are in
    /// [`PackedTable::all_backends`].
    pub fn backend_range(&self, f: &PackedFrontend) -> std::ops::Range<usize> {
        let end = (f.end as usize).min(self.backends.len());
        (f.start as usize).min(end)..end
    }

    /// The address of `b` (a backend of this table).
    pub fn ip(&self, b: &PackedBackend) -> IpAddr {
        if b.v6 {
            IpAddr::V6(
                self.v6
                    .get(b.addr as usize)
                    .copied()
                    .unwrap_or(Ipv6Addr::UNSPECIFIED),
            )
        } else {
            IpAddr::V4(Ipv4Addr::from(b.addr))
        }
    }

    /// `b` (a backend of this table) as the core's `ip:port` target.
    pub fn target(&self, b: &PackedBackend) -> ghostip_core::Target {
        ghostip_core::Target::socket(self.ip(b), b.port)
    }

    fn pack(&mut self, b: &Backend) -> PackedBackend {
        let state = match b.state {
            BackendState::Active => 0,
            BackendState::Terminating => 1,
            BackendState::Quarantined => 2,
            BackendState::Maintenance => 3,
            BackendState::Unknown(_) => 4,
        };
        let (addr, v6) = match b.ip {
            IpAddr::V4(ip) => (u32::from(ip), false),
            IpAddr::V6(ip) => {
                self.v6.push(ip);
                (u32::try_from(self.v6.len() - 1).unwrap_or(u32::MAX), true)
            }
        };
        PackedBackend {
            addr,
            port: b.port,
            state,
            v6,
        }
    }

    /// Releases unused capacity.
    pub fn shrink_to_fit(&mut self) {
        self.backends.shrink_to_fit();
        self.frontends.shrink_to_fit();
        self.v6.shrink_to_fit();
    }
}

impl FrontendSink for PackedTable {
    fn expect(&mut self, frontends: usize, backends: usize) {
        self.frontends.reserve(frontends);
        self.backends.reserve(backends);
    }

    fn frontend(&mut self, mut f: Frontend) {
        f.flags.sort();
        f.flags.dedup();
        let first = self.backends.len();
        if f.backends.iter().all(|b| b.ip.is_ipv4()) {
            // Packed IPv4 backends sort as 8-byte values (address, then port), a stable
            // sort keeping the first of equal ones as the general path below does.
            for b in &f.backends {
                let p = self.pack(b);
                self.backends.push(p);
            }
            if let Some(tail) = self.backends.get_mut(first..) {
                tail.sort_by_key(|b| (b.addr, b.port));
                let kept = dedup_sorted(tail);
                self.backends.truncate(first + kept);
            }
        } else {
            f.backends.sort_by_key(|b| (b.ip, b.port));
            f.backends.dedup_by(|b, a| a.ip == b.ip && a.port == b.port);
            for b in &f.backends {
                let p = self.pack(b);
                self.backends.push(p);
            }
        }
        let start = u32::try_from(first).unwrap_or(u32::MAX);
        let end = u32::try_from(self.backends.len()).unwrap_or(u32::MAX);
        self.frontends.push(PackedFrontend {
            ip: f.ip,
            port: f.port,
            protocol: f.protocol,
            kind: f.kind,
            service: f.service,
            flags: f.flags,
            start,
            end,
        });
    }
}

/// Moves the first of each run of equal addresses and ports in sorted IPv4 backends to the
/// front; returns how many there are.
fn dedup_sorted(v: &mut [PackedBackend]) -> usize {
    let mut kept = 0usize;
    for r in 0..v.len() {
        let Some(&b) = v.get(r) else { break };
        let last = kept.checked_sub(1).and_then(|i| v.get(i));
        if last.is_none_or(|l| (l.addr, l.port) != (b.addr, b.port)) {
            if let Some(slot) = v.get_mut(kept) {
                *slot = b;
            }
            kept += 1;
        }
    }
    kept
}

impl From<LbTable> for PackedTable {
    fn from(t: LbTable) -> Self {
        let mut p = PackedTable {
            format: t.format,
            skipped: t.skipped,
            ..PackedTable::default()
        };
        p.reserve_backends(t.frontends.iter().map(|f| f.backends.len()).sum());
        for f in t.frontends {
            p.frontend(f);
        }
        p
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn packed_keeps_frontends_and_sorted_unique_backends() {
        let mut t = LbTable::new(Format::Iptables);
        let mut f = Frontend::new(
            "10.96.0.10".parse().unwrap(),
            53,
            Protocol::Udp,
            FrontendKind::ClusterIp,
        );
        f.backends
            .push(Backend::active("10.0.0.2".parse().unwrap(), 53));
        f.backends
            .push(Backend::active("10.0.0.1".parse().unwrap(), 53));
        f.backends
            .push(Backend::active("10.0.0.2".parse().unwrap(), 53));
        let mut b = Backend::active("10.0.0.3".parse().unwrap(), 53);
        b.state = BackendState::Terminating;
        f.backends.push(b);
        f.backends
            .push(Backend::active("fd00::7".parse().unwrap(), 8080));
        t.frontends.push(f);
        t.frontends.push(Frontend::new(
            "10.96.0.1".parse().unwrap(),
            443,
            Protocol::Tcp,
            FrontendKind::ClusterIp,
        ));
        let p = PackedTable::from(t);
        assert_eq!(p.frontends.len(), 2);
        assert_eq!(p.backend_count(), 4);
        let first: Vec<String> = p
            .backends(&p.frontends[0])
            .iter()
            .map(|b| format!("{}:{} {}", p.ip(b), b.port(), b.is_active()))
            .collect();
        assert_eq!(
            first,
            [
                "10.0.0.1:53 true",
                "10.0.0.2:53 true",
                "10.0.0.3:53 false",
                "fd00::7:8080 true"
            ]
        );
        assert!(p.backends(&p.frontends[1]).is_empty());
    }

    proptest::proptest! {
        /// IPv4 backends sorted and deduplicated as packed values keep what sorting and
        /// deduplicating the backends themselves keeps: the first of equal ones, state included.
        #[test]
        fn packed_sort_keeps_the_first_of_equal_backends(
            raw in proptest::collection::vec((0u8..4, 0u16..3, proptest::prelude::any::<bool>()), 0..24),
        ) {
            let backends: Vec<Backend> = raw
                .iter()
                .map(|&(host, port, active)| {
                    let mut b = Backend::active(IpAddr::V4(Ipv4Addr::new(10, 0, 0, host)), port);
                    if !active {
                        b.state = BackendState::Terminating;
                    }
                    b
                })
                .collect();
            let mut f = Frontend::new("10.96.0.1".parse().unwrap(), 80, Protocol::Tcp, FrontendKind::ClusterIp);
            f.backends = backends.clone();
            let mut p = PackedTable::new(Format::Iptables);
            p.frontend(f);
            let mut want = backends;
            want.sort_by_key(|b| (b.ip, b.port));
            want.dedup_by(|b, a| a.ip == b.ip && a.port == b.port);
            let got: Vec<(IpAddr, u16, bool)> = p
                .backends(&p.frontends[0])
                .iter()
                .map(|b| (p.ip(b), b.port(), b.is_active()))
                .collect();
            let want: Vec<(IpAddr, u16, bool)> = want
                .iter()
                .map(|b| (b.ip, b.port, b.state == BackendState::Active))
                .collect();
            proptest::prop_assert_eq!(got, want);
        }
    }
}
