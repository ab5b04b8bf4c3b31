//! Decodes Cilium's pinned load-balancer BPF maps (services, backends, reverse NAT) from their raw key and value bytes into the load-balancer table.
//!
//! The agent reads the maps (`crates/ghostip`, `layers/datapath/cilium_maps.rs`); this module
//! only sees bytes, so every layout is tested from bytes written after the C structs.
//!
//! # Layouts
//! One layout is known: the structs of `bpf/lib/lb.h` (`bpf/lib/common.h` in 1.18) of
//! Cilium 1.18.0, 1.19.0 and 1.20.2, checked field by field in their module sources; the
//! byte order of each field follows the agent's writers (`pkg/loadbalancer/maps/types.go`):
//!
//! | map | key | value |
//! |---|---|---|
//! | `cilium_lb4_services_v2` | `lb4_key`, 12 B: address (BE), dport (BE), backend_slot, proto, scope, pad 2 | `lb4_service`, 12 B: backend_id (or the L7 proxy port, BE, in the master), count, rev_nat_index (BE), flags, flags2, qcount |
//! | `cilium_lb6_services_v2` | `lb6_key`, 24 B: the same with a 16-byte address | `lb6_service`, 12 B |
//! | `cilium_lb4_backends_v3` | backend id, 4 B | `lb4_backend`, 12 B: address (BE), port (BE), proto, flags (the state), cluster_id, zone, pad |
//! | `cilium_lb6_backends_v3` | backend id, 4 B | `lb6_backend`, 24 B |
//! | `cilium_lb4_reverse_nat` | rev_nat_index (BE), 2 B | `lb4_reverse_nat`, 6 B (packed) |
//! | `cilium_lb6_reverse_nat` | rev_nat_index (BE), 2 B | `lb6_reverse_nat`, 18 B (packed) |
//!
//! Fields not marked BE are in host byte order (the agent writes them from Go on the same
//! host). A map whose key or value size differs is refused with [`LayoutError`]: reading a
//! layout this module does not know would produce a wrong table, not a partial one.
//!
//! # Backend states
//! A service's master entry (slot 0) has `count` slots for new connections followed by
//! `qcount` slots Cilium keeps for existing connections only (terminating backends while an
//! active one exists, quarantined, maintenance). The backend's `flags` byte is its state
//! (`BE_STATE_ACTIVE` 0, `TERMINATING` 1, `QUARANTINED` 2, `MAINTENANCE` 3); an active
//! backend in a slot past `count` was taken out by this service's health check and is
//! shown as quarantined. A slot naming a backend id the backends map lacks becomes the
//! frontend flag `backend-id-N-not-found` (as in `cilium-dbg bpf lb list`), a rev-NAT index
//! the reverse-NAT map lacks the flag `rev-nat-N-not-found` (replies are not translated).

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::format::Format;
use crate::model::{
    Backend, BackendState, Frontend, FrontendKind, LbTable, Location, Protocol, SkipStats,
};
use crate::packed::{FrontendSink, PackedTable};

/// The six maps, their family and role, and the key/value sizes of the known layout.
pub const MAPS: [MapSpec; 6] = [
    MapSpec::new("cilium_lb4_services_v2", Family::V4, Role::Services, 12, 12),
    MapSpec::new("cilium_lb4_backends_v3", Family::V4, Role::Backends, 4, 12),
    MapSpec::new("cilium_lb4_reverse_nat", Family::V4, Role::RevNat, 2, 6),
    MapSpec::new("cilium_lb6_services_v2", Family::V6, Role::Services, 24, 12),
    MapSpec::new("cilium_lb6_backends_v3", Family::V6, Role::Backends, 4, 24),
    MapSpec::new("cilium_lb6_reverse_nat", Family::V6, Role::RevNat, 2, 18),
];

/// The Cilium versions whose layout was checked against their sources.
pub const VERIFIED_VERSIONS: &str = "1.18.0, 1.19.0, 1.20.2";

/// IPv4 or IPv6 maps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    /// `cilium_lb4_*`.
    V4,
    /// `cilium_lb6_*`.
    V6,
}

/// What a map holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Frontends (slot 0) and their backend slots.
    Services,
    /// Backend id → address, port, state.
    Backends,
    /// Rev-NAT index → frontend address.
    RevNat,
}

/// One map of the known layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MapSpec {
    /// The pinned name.
    pub name: &'static str,
    /// IPv4 or IPv6.
    pub family: Family,
    /// What it holds.
    pub role: Role,
    /// Key size in bytes.
    pub key_size: usize,
    /// Value size in bytes.
    pub value_size: usize,
}

impl MapSpec {
    const fn new(
        name: &'static str,
        family: Family,
        role: Role,
        key_size: usize,
        value_size: usize,
    ) -> Self {
        Self {
            name,
            family,
            role,
            key_size,
            value_size,
        }
    }

    /// The spec of the map pinned as `name`.
    pub fn of(name: &str) -> Option<&'static MapSpec> {
        MAPS.iter().find(|m| m.name == name)
    }
}

/// A map whose layout is not the known one.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LayoutError {
    /// Not one of [`MAPS`].
    #[error("{name}: not a Cilium load-balancer map this reader knows")]
    UnknownMap {
        /// The name given.
        name: String,
    },
    /// Key or value size differs from the known layout.
    #[error(
        "{name}: unknown layout: key {key_size} B, value {value_size} B \
         (known: key {want_key} B, value {want_value} B, Cilium {VERIFIED_VERSIONS})"
    )]
    Size {
        /// The map.
        name: &'static str,
        /// Its key size.
        key_size: usize,
        /// Its value size.
        value_size: usize,
        /// The known key size.
        want_key: usize,
        /// The known value size.
        want_value: usize,
    },
}

/// Checks a map's name and key/value sizes (from the kernel's map info) against the layout.
pub fn check_layout(
    name: &str,
    key_size: usize,
    value_size: usize,
) -> Result<&'static MapSpec, LayoutError> {
    let spec = MapSpec::of(name).ok_or_else(|| LayoutError::UnknownMap {
        name: name.to_string(),
    })?;
    if spec.key_size != key_size || spec.value_size != value_size {
        return Err(LayoutError::Size {
            name: spec.name,
            key_size,
            value_size,
            want_key: spec.key_size,
            want_value: spec.value_size,
        });
    }
    Ok(spec)
}

/// The entries of one map, keys and values each in one flat buffer.
#[derive(Clone, Debug)]
pub struct MapDump {
    spec: &'static MapSpec,
    keys: Vec<u8>,
    values: Vec<u8>,
}

impl MapDump {
    /// An empty dump of `name`, after [`check_layout`].
    pub fn new(name: &str, key_size: usize, value_size: usize) -> Result<Self, LayoutError> {
        Ok(Self {
            spec: check_layout(name, key_size, value_size)?,
            keys: Vec::new(),
            values: Vec::new(),
        })
    }

    /// The map's spec.
    pub fn spec(&self) -> &'static MapSpec {
        self.spec
    }

    /// Appends one entry; `false` (and nothing appended) when a size is not the map's.
    pub fn push(&mut self, key: &[u8], value: &[u8]) -> bool {
        if key.len() != self.spec.key_size || value.len() != self.spec.value_size {
            return false;
        }
        self.keys.extend_from_slice(key);
        self.values.extend_from_slice(value);
        true
    }

    /// Appends entries packed as `BPF_MAP_LOOKUP_BATCH` writes them (`n` keys, then `n`
    /// values, each back to back); `false` (and nothing appended) when the two buffers do
    /// not hold the same whole number of this map's entries.
    pub fn extend(&mut self, keys: &[u8], values: &[u8]) -> bool {
        let (k, v) = (self.spec.key_size, self.spec.value_size);
        if k == 0 || v == 0 || !keys.len().is_multiple_of(k) || !values.len().is_multiple_of(v) {
            return false;
        }
        if keys.len() / k != values.len() / v {
            return false;
        }
        self.keys.extend_from_slice(keys);
        self.values.extend_from_slice(values);
        true
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.keys.len() / self.spec.key_size.max(1)
    }

    /// Whether there are no entries.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Bytes held (keys and values).
    pub fn bytes(&self) -> u64 {
        (self.keys.len() + self.values.len()) as u64
    }

    /// The value of entry `i`.
    fn value(&self, i: usize) -> Option<&[u8]> {
        let v = self.spec.value_size;
        self.values
            .get(i.checked_mul(v)?..i.checked_add(1)?.checked_mul(v)?)
    }

    fn entries(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.keys
            .chunks_exact(self.spec.key_size)
            .zip(self.values.chunks_exact(self.spec.value_size))
    }
}

// The flags of `lb{4,6}_service` (`bpf/lib/lb.h`).
const SVC_FLAG_EXTERNAL_IP: u8 = 1 << 0;
const SVC_FLAG_NODEPORT: u8 = 1 << 1;
const SVC_FLAG_EXT_LOCAL_SCOPE: u8 = 1 << 2;
const SVC_FLAG_HOSTPORT: u8 = 1 << 3;
const SVC_FLAG_AFFINITY: u8 = 1 << 4;
const SVC_FLAG_LOADBALANCER: u8 = 1 << 5;
const SVC_FLAG_ROUTABLE: u8 = 1 << 6;
const SVC_FLAG_SOURCE_RANGE: u8 = 1 << 7;
// flags2.
const SVC_FLAG_LOCALREDIRECT: u8 = 1 << 0;
const SVC_FLAG_NAT_46X64: u8 = 1 << 1;
const SVC_FLAG_L7_LOADBALANCER: u8 = 1 << 2;
const SVC_FLAG_LOOPBACK: u8 = 1 << 3;
const SVC_FLAG_INT_LOCAL_SCOPE: u8 = 1 << 4;
const SVC_FLAG_TWO_SCOPES: u8 = 1 << 5;
/// Backend slot: quarantined; master: the source-range check is inverted.
const SVC_FLAG_QUARANTINED: u8 = 1 << 6;
const SVC_FLAG_FWD_MODE_DSR: u8 = 1 << 7;

/// `lb{4,6}_key`: where a frontend or one of its slots is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct SvcKey {
    ip: IpAddr,
    port: u16,
    proto: u8,
    scope: u8,
}

#[derive(Clone, Copy, Debug)]
struct SvcValue {
    backend_id: u32,
    count: u16,
    rev_nat: u16,
    flags: u8,
    flags2: u8,
    qcount: u16,
}

fn ne16(b: &[u8], at: usize) -> u16 {
    u16::from_ne_bytes([byte(b, at), byte(b, at + 1)])
}

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([byte(b, at), byte(b, at + 1)])
}

fn ne32(b: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes([
        byte(b, at),
        byte(b, at + 1),
        byte(b, at + 2),
        byte(b, at + 3),
    ])
}

fn byte(b: &[u8], at: usize) -> u8 {
    b.get(at).copied().unwrap_or(0)
}

/// The address at the start of a key or value: 4 bytes (IPv4) or 16 (IPv6).
fn addr(family: Family, b: &[u8]) -> (IpAddr, usize) {
    match family {
        Family::V4 => {
            let mut a = [0u8; 4];
            for (i, x) in a.iter_mut().enumerate() {
                *x = byte(b, i);
            }
            (IpAddr::V4(Ipv4Addr::from(a)), 4)
        }
        Family::V6 => {
            let mut a = [0u8; 16];
            for (i, x) in a.iter_mut().enumerate() {
                *x = byte(b, i);
            }
            (IpAddr::V6(Ipv6Addr::from(a)), 16)
        }
    }
}

/// `lb{4,6}_key` → (key without slot, slot).
fn svc_key(family: Family, b: &[u8]) -> (SvcKey, u16) {
    let (ip, n) = addr(family, b);
    let key = SvcKey {
        ip,
        port: be16(b, n),
        proto: byte(b, n + 4),
        scope: byte(b, n + 5),
    };
    (key, ne16(b, n + 2))
}

fn svc_value(b: &[u8]) -> SvcValue {
    SvcValue {
        backend_id: ne32(b, 0),
        count: ne16(b, 4),
        rev_nat: be16(b, 6),
        flags: byte(b, 8),
        flags2: byte(b, 9),
        qcount: ne16(b, 10),
    }
}

/// `lb{4,6}_backend` → (ip, port, state byte).
fn backend_value(family: Family, b: &[u8]) -> (IpAddr, u16, u8) {
    let (ip, n) = addr(family, b);
    (ip, be16(b, n), byte(b, n + 3))
}

fn protocol(p: u8) -> Protocol {
    match p {
        6 => Protocol::Tcp,
        17 => Protocol::Udp,
        132 => Protocol::Sctp,
        _ => Protocol::Any,
    }
}

/// `BE_STATE_*` → state.
pub fn backend_state(flags: u8) -> BackendState {
    match flags {
        0 => BackendState::Active,
        1 => BackendState::Terminating,
        2 => BackendState::Quarantined,
        3 => BackendState::Maintenance,
        n => BackendState::Unknown(format!("state-{n}")),
    }
}

/// The service type and the words `cilium-dbg bpf lb list` prints for a master's flags
/// (Go's `ServiceFlags.String`), so the table equals the one parsed from that output.
fn kind_and_flags(fe: &mut Frontend, v: &SvcValue) {
    let (f, f2) = (v.flags, v.flags2);
    let (kind, ty) = if f & SVC_FLAG_EXTERNAL_IP != 0 {
        (FrontendKind::ExternalIp, None)
    } else if f & SVC_FLAG_NODEPORT != 0 {
        (FrontendKind::NodePort, None)
    } else if f & SVC_FLAG_LOADBALANCER != 0 {
        (FrontendKind::LoadBalancer, None)
    } else if f & SVC_FLAG_HOSTPORT != 0 {
        (FrontendKind::Unknown, Some("HostPort"))
    } else if f2 & SVC_FLAG_LOCALREDIRECT != 0 {
        (FrontendKind::Unknown, Some("LocalRedirect"))
    } else {
        (FrontendKind::ClusterIp, None)
    };
    fe.kind = kind;
    if let Some(t) = ty {
        fe.add_flag(format!("type={t}"));
    }
    let mut deny = false;
    let words: [(bool, &str); 7] = [
        (f & SVC_FLAG_EXT_LOCAL_SCOPE != 0, "Local"),
        (f2 & SVC_FLAG_INT_LOCAL_SCOPE != 0, "InternalLocal"),
        (f2 & SVC_FLAG_TWO_SCOPES != 0, "two-scopes"),
        (f & SVC_FLAG_AFFINITY != 0, "sessionAffinity"),
        (f & SVC_FLAG_ROUTABLE == 0, "non-routable"),
        (f & SVC_FLAG_SOURCE_RANGE != 0, "check source-range"),
        (f2 & SVC_FLAG_NAT_46X64 != 0, "46x64"),
    ];
    for (on, w) in words {
        if on {
            fe.add_flag(w);
        }
    }
    if f & SVC_FLAG_SOURCE_RANGE != 0 && f2 & SVC_FLAG_QUARANTINED != 0 {
        deny = true;
        fe.add_flag("deny");
    }
    if f2 & SVC_FLAG_L7_LOADBALANCER != 0 {
        fe.add_flag("l7-load-balancer");
        // The master's backend_id holds the proxy port in network byte order.
        let port = u16::from_be((v.backend_id & 0xffff) as u16);
        fe.add_flag(format!("l7lb-proxy-port={port}"));
    }
    if f2 & SVC_FLAG_LOOPBACK != 0 {
        fe.add_flag(if ty == Some("HostPort") {
            "loopback"
        } else {
            "delegate-if-local"
        });
    }
    if !deny && f2 & SVC_FLAG_QUARANTINED != 0 {
        fe.add_flag("quarantined");
    }
    if f2 & SVC_FLAG_FWD_MODE_DSR != 0 {
        fe.add_flag("dsr");
    }
}

/// The dumps of the maps found; a family whose services map is absent is left out (a node
/// without IPv6 has no `cilium_lb6_*` maps).
#[derive(Clone, Debug, Default)]
pub struct LbMaps {
    /// The dumps, any order; at most one per map name.
    pub maps: Vec<MapDump>,
}

impl LbMaps {
    fn get(&self, family: Family, role: Role) -> Option<&MapDump> {
        self.maps
            .iter()
            .find(|m| m.spec.family == family && m.spec.role == role)
    }

    /// Bytes held over all dumps.
    pub fn bytes(&self) -> u64 {
        self.maps.iter().map(MapDump::bytes).sum()
    }
}

/// Builds the load-balancer table the maps describe (recorded as format
/// `cilium-bpf-lb-list`: the table `cilium-dbg bpf lb list`, a dump of these maps, parses to).
pub fn decode(maps: &LbMaps) -> LbTable {
    let mut out = LbTable::new(Format::CiliumBpfLbList);
    let mut skipped = SkipStats::default();
    decode_into(maps, &mut out, &mut skipped);
    out.skipped = skipped;
    // Already sorted and merged; kept so the table is normalized whatever the sink did.
    out.normalize();
    out
}

/// [`decode`] straight into the compact table the agent keeps, equal to
/// `PackedTable::from(decode(maps))` without the `LbTable` in between (which at 150 000
/// backends is several times the packed table's size).
pub fn decode_packed(maps: &LbMaps) -> PackedTable {
    let mut out = PackedTable::new(Format::CiliumBpfLbList);
    let mut skipped = SkipStats::default();
    decode_into(maps, &mut out, &mut skipped);
    out.skipped = skipped;
    out
}

/// Hands the frontends to `sink` as [`LbTable::normalize`] leaves them: sorted by
/// address, port and protocol, descriptions of one frontend merged (the two scopes of a
/// service), backends sorted without duplicates.
fn decode_into(maps: &LbMaps, sink: &mut impl FrontendSink, skipped: &mut SkipStats) {
    // IPv4 addresses sort before IPv6 ones: family after family is one sorted sequence.
    for family in [Family::V4, Family::V6] {
        let Some(services) = maps.get(family, Role::Services) else {
            continue;
        };
        decode_family(
            family,
            services,
            maps.get(family, Role::Backends),
            maps.get(family, Role::RevNat),
            sink,
            skipped,
        );
    }
}

/// The slot of an `lb{4,6}_key`, without decoding the rest.
fn svc_slot(family: Family, b: &[u8]) -> u16 {
    let n = match family {
        Family::V4 => 4,
        Family::V6 => 16,
    };
    ne16(b, n + 2)
}

fn decode_family(
    family: Family,
    services: &MapDump,
    backends: Option<&MapDump>,
    revnat: Option<&MapDump>,
    sink: &mut impl FrontendSink,
    skipped: &mut SkipStats,
) {
    // Backend id → its entry in the backends map, sorted by id: 8 bytes a backend, decoded
    // only when a slot names it. Ids are unique in a map; of equal ones (a dump pushed by
    // hand) the last wins.
    let mut be: Vec<(u32, u32)> = backends
        .into_iter()
        .flat_map(MapDump::entries)
        .enumerate()
        .map(|(i, (k, _))| (ne32(k, 0), u32::try_from(i).unwrap_or(u32::MAX)))
        .collect();
    be.sort_by_key(|&(id, _)| id);
    be.dedup_by(|later, kept| {
        let same = later.0 == kept.0;
        if same {
            kept.1 = later.1;
        }
        same
    });
    let backend = |id: u32| -> Option<(IpAddr, u16, u8)> {
        let i = be.binary_search_by_key(&id, |&(id, _)| id).ok()?;
        let &(_, at) = be.get(i)?;
        Some(backend_value(family, backends?.value(at as usize)?))
    };
    let rev: std::collections::HashSet<u16> = revnat
        .into_iter()
        .flat_map(MapDump::entries)
        .map(|(k, _)| be16(k, 0))
        .collect();
    // Masters (slot 0) in the order frontends sort, the raw protocol and the scope
    // breaking ties so equal keys merge the same way every time.
    let mut masters: Vec<(SvcKey, SvcValue)> = services
        .entries()
        .filter(|(k, _)| svc_slot(family, k) == 0)
        .map(|(k, v)| (svc_key(family, k).0, svc_value(v)))
        .collect();
    masters.sort_by_key(|(k, _)| (k.ip, k.port, protocol(k.proto), k.proto, k.scope));
    let index: HashMap<SvcKey, usize> = masters
        .iter()
        .enumerate()
        .map(|(i, (k, _))| (*k, i))
        .collect();
    let total = |v: &SvcValue| u32::from(v.count) + u32::from(v.qcount);
    // Each master's slots as (slot, entry in the services map), sized from its counts.
    let mut slots: HashMap<SvcKey, Vec<(u16, u32)>> = HashMap::with_capacity(masters.len());
    for (i, (k, _)) in services.entries().enumerate() {
        let slot = svc_slot(family, k);
        if slot == 0 {
            continue;
        }
        let (key, _) = svc_key(family, k);
        let at = u32::try_from(i).unwrap_or(u32::MAX);
        slots
            .entry(key)
            .or_insert_with(|| {
                let want = index
                    .get(&key)
                    .and_then(|&m| masters.get(m))
                    .map_or(1, |(_, v)| total(v) as usize);
                Vec::with_capacity(want)
            })
            .push((slot, at));
    }
    drop(index);
    sink.expect(masters.len(), services.len().saturating_sub(masters.len()));
    let name = services.spec.name;
    let mut pending: Option<Frontend> = None;
    for (key, master) in &masters {
        let mut fe = Frontend::new(key.ip, key.port, protocol(key.proto), FrontendKind::Unknown);
        kind_and_flags(&mut fe, master);
        if master.rev_nat != 0 && revnat.is_some() && !rev.contains(&master.rev_nat) {
            fe.add_flag(format!("rev-nat-{}-not-found", master.rev_nat));
        }
        let count = master.count;
        let total = total(master);
        let mut mine = slots.remove(key).unwrap_or_default();
        mine.sort_by_key(|(s, _)| *s);
        fe.backends.reserve_exact(mine.len());
        let mut seen = 0u32;
        for (slot, at) in mine {
            if u32::from(slot) > total {
                skipped.unknown(
                    Location::JsonPath(format!("{name}[{}:{}/slot {slot}]", key.ip, key.port)),
                    "backend slot past count + qcount",
                    "",
                );
                continue;
            }
            seen += 1;
            let sv = svc_value(services.value(at as usize).unwrap_or_default());
            let Some((ip, port, state)) = backend(sv.backend_id) else {
                fe.add_flag(format!("backend-id-{}-not-found", sv.backend_id));
                continue;
            };
            let mut state = backend_state(state);
            let out_of_rotation = slot > count || sv.flags2 & SVC_FLAG_QUARANTINED != 0;
            if out_of_rotation && state == BackendState::Active {
                state = BackendState::Quarantined;
            }
            fe.backends.push(Backend {
                ip,
                port,
                state,
                weight: None,
            });
        }
        if seen < total {
            fe.add_flag(format!("backend-slots-missing={}", total - seen));
        }
        match pending.as_mut() {
            Some(p) if p.key() == fe.key() => p.absorb(fe),
            _ => {
                if let Some(mut done) = pending.replace(fe) {
                    done.normalize();
                    sink.frontend(done);
                }
            }
        }
    }
    if let Some(mut done) = pending {
        done.normalize();
        sink.frontend(done);
    }
    for (key, orphans) in slots {
        skipped.unknown(
            Location::JsonPath(format!("{name}[{}:{}]", key.ip, key.port)),
            "backend slots without a service entry",
            &format!("{} slots", orphans.len()),
        );
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// `struct lb4_key`, written field by field.
    pub(crate) fn lb4_key(ip: [u8; 4], port: u16, slot: u16, proto: u8, scope: u8) -> Vec<u8> {
        let mut b = ip.to_vec();
        b.extend(port.to_be_bytes());
        b.extend(slot.to_ne_bytes());
        b.extend([proto, scope, 0, 0]);
        b
    }

    fn lb6_key(ip: Ipv6Addr, port: u16, slot: u16, proto: u8) -> Vec<u8> {
        let mut b = ip.octets().to_vec();
        b.extend(port.to_be_bytes());
        b.extend(slot.to_ne_bytes());
        b.extend([proto, 0, 0, 0]);
        b
    }

    /// `struct lb4_service` / `lb6_service`.
    fn service(backend_id: u32, count: u16, rev: u16, flags: u8, flags2: u8, q: u16) -> Vec<u8> {
        let mut b = backend_id.to_ne_bytes().to_vec();
        b.extend(count.to_ne_bytes());
        b.extend(rev.to_be_bytes());
        b.extend([flags, flags2]);
        b.extend(q.to_ne_bytes());
        b
    }

    /// `struct lb4_backend`.
    fn lb4_backend(ip: [u8; 4], port: u16, state: u8) -> Vec<u8> {
        let mut b = ip.to_vec();
        b.extend(port.to_be_bytes());
        b.extend([17, state]);
        b.extend(7u16.to_ne_bytes()); // cluster_id
        b.extend([0, 0]); // zone, pad
        b
    }

    fn lb6_backend(ip: Ipv6Addr, port: u16, state: u8) -> Vec<u8> {
        let mut b = ip.octets().to_vec();
        b.extend(port.to_be_bytes());
        b.extend([6, state]);
        b.extend(0u16.to_ne_bytes());
        b.extend([0, 0]);
        b
    }

    fn dump(name: &str, entries: &[(Vec<u8>, Vec<u8>)]) -> MapDump {
        let spec = MapSpec::of(name).unwrap();
        let mut d = MapDump::new(name, spec.key_size, spec.value_size).unwrap();
        for (k, v) in entries {
            assert!(d.push(k, v), "{name}: {} / {} bytes", k.len(), v.len());
        }
        d
    }

    const DNS: [u8; 4] = [10, 96, 0, 10];

    fn kube_dns_v4() -> LbMaps {
        let routable = SVC_FLAG_ROUTABLE;
        LbMaps {
            maps: vec![
                dump(
                    "cilium_lb4_services_v2",
                    &[
                        // Master: 2 slots for new flows, 2 for existing ones only.
                        (lb4_key(DNS, 53, 0, 17, 0), service(0, 2, 5, routable, 0, 2)),
                        (lb4_key(DNS, 53, 1, 17, 0), service(11, 0, 5, 0, 0, 0)),
                        (lb4_key(DNS, 53, 2, 17, 0), service(12, 0, 5, 0, 0, 0)),
                        (lb4_key(DNS, 53, 3, 17, 0), service(13, 0, 5, 0, 0, 0)),
                        (lb4_key(DNS, 53, 4, 17, 0), service(14, 0, 5, 0, 0, 0)),
                    ],
                ),
                dump(
                    "cilium_lb4_backends_v3",
                    &[
                        (
                            11u32.to_ne_bytes().to_vec(),
                            lb4_backend([10, 0, 0, 11], 53, 0),
                        ),
                        (
                            12u32.to_ne_bytes().to_vec(),
                            lb4_backend([10, 0, 0, 12], 53, 0),
                        ),
                        (
                            13u32.to_ne_bytes().to_vec(),
                            lb4_backend([10, 0, 0, 13], 53, 1),
                        ),
                        (
                            14u32.to_ne_bytes().to_vec(),
                            lb4_backend([10, 0, 0, 14], 53, 0),
                        ),
                    ],
                ),
                dump(
                    "cilium_lb4_reverse_nat",
                    &[(5u16.to_be_bytes().to_vec(), {
                        let mut v = DNS.to_vec();
                        v.extend(53u16.to_be_bytes());
                        v
                    })],
                ),
            ],
        }
    }

    #[test]
    fn ipv4_services_decode_with_states_from_the_backend_flags_and_slots() {
        let t = decode(&kube_dns_v4());
        assert_eq!(t.frontends.len(), 1);
        let fe = &t.frontends[0];
        assert_eq!(fe.ip, IpAddr::V4(Ipv4Addr::from(DNS)));
        assert_eq!(
            (fe.port, fe.protocol, fe.kind),
            (53, Protocol::Udp, FrontendKind::ClusterIp)
        );
        assert!(fe.flags.is_empty(), "{:?}", fe.flags);
        let states: Vec<(String, &str)> = fe
            .backends
            .iter()
            .map(|b| (format!("{}:{}", b.ip, b.port), b.state.as_str()))
            .collect();
        assert_eq!(
            states,
            [
                ("10.0.0.11:53".into(), "active"),
                ("10.0.0.12:53".into(), "active"),
                ("10.0.0.13:53".into(), "terminating"),
                // Active in the backends map, but past `count`: out of rotation here.
                ("10.0.0.14:53".into(), "quarantined"),
            ]
        );
        assert_eq!(t.skipped.unknown, 0);
    }

    #[test]
    fn the_table_equals_the_one_parsed_from_bpf_lb_list_of_the_same_maps() {
        let json = r#"{"10.96.0.10:53/UDP (0)": [
            "0.0.0.0:0 (5) (0) [ClusterIP]",
            "10.0.0.11:53/UDP (5) (1)",
            "10.0.0.12:53/UDP (5) (2)",
            "10.0.0.13:53/UDP (5) (3) [terminating]",
            "10.0.0.14:53/UDP (5) (4) [quarantined]"]}"#;
        let parsed = crate::cilium::parse_bpf_lb_list(json).unwrap();
        assert_eq!(decode(&kube_dns_v4()), parsed);
    }

    #[test]
    fn a_slot_naming_a_deleted_backend_is_flagged_like_bpf_lb_list() {
        let mut maps = kube_dns_v4();
        // The backend map lost 12 (the stale-slot case after an API-server blip).
        let be = &mut maps.maps[1];
        *be = dump(
            "cilium_lb4_backends_v3",
            &[(
                11u32.to_ne_bytes().to_vec(),
                lb4_backend([10, 0, 0, 11], 53, 0),
            )],
        );
        let t = decode(&maps);
        let fe = &t.frontends[0];
        assert!(
            fe.flags.contains(&"backend-id-12-not-found".to_string()),
            "{:?}",
            fe.flags
        );
        assert_eq!(fe.backends.len(), 1);
    }

    #[test]
    fn maintenance_unknown_states_revnat_and_flags() {
        assert_eq!(backend_state(3), BackendState::Maintenance);
        assert_eq!(backend_state(2), BackendState::Quarantined);
        assert_eq!(backend_state(9), BackendState::Unknown("state-9".into()));
        let ip = [192, 168, 1, 1];
        let maps = LbMaps {
            maps: vec![
                dump(
                    "cilium_lb4_services_v2",
                    &[
                        // NodePort, externalTrafficPolicy=Local, DSR; rev-NAT 9 missing.
                        (
                            lb4_key(ip, 30080, 0, 6, 0),
                            service(
                                0,
                                1,
                                9,
                                SVC_FLAG_NODEPORT | SVC_FLAG_EXT_LOCAL_SCOPE | SVC_FLAG_ROUTABLE,
                                SVC_FLAG_FWD_MODE_DSR,
                                0,
                            ),
                        ),
                        (lb4_key(ip, 30080, 1, 6, 0), service(1, 0, 9, 0, 0, 0)),
                        // L7 load balancer: proxy port 15735 in the master's backend_id.
                        (
                            lb4_key(ip, 80, 0, 6, 0),
                            service(
                                u32::from(15735u16.to_be()),
                                0,
                                0,
                                SVC_FLAG_LOADBALANCER | SVC_FLAG_ROUTABLE,
                                SVC_FLAG_L7_LOADBALANCER,
                                0,
                            ),
                        ),
                        // A slot whose master is gone.
                        (lb4_key(ip, 81, 1, 6, 0), service(1, 0, 0, 0, 0, 0)),
                    ],
                ),
                dump(
                    "cilium_lb4_backends_v3",
                    &[(
                        1u32.to_ne_bytes().to_vec(),
                        lb4_backend([10, 0, 0, 1], 8080, 3),
                    )],
                ),
                dump("cilium_lb4_reverse_nat", &[]),
            ],
        };
        let t = decode(&maps);
        let np = t
            .frontend(IpAddr::V4(Ipv4Addr::from(ip)), 30080, Protocol::Tcp)
            .unwrap();
        assert_eq!(np.kind, FrontendKind::NodePort);
        assert_eq!(np.flags, ["Local", "dsr", "rev-nat-9-not-found"]);
        assert_eq!(np.backends[0].state, BackendState::Maintenance);
        let lb = t
            .frontend(IpAddr::V4(Ipv4Addr::from(ip)), 80, Protocol::Tcp)
            .unwrap();
        assert_eq!(lb.kind, FrontendKind::LoadBalancer);
        assert_eq!(lb.flags, ["l7-load-balancer", "l7lb-proxy-port=15735"]);
        assert_eq!(t.skipped.unknown, 1);
    }

    #[test]
    fn ipv6_services_decode() {
        let vip: Ipv6Addr = "fd00::a".parse().unwrap();
        let pod: Ipv6Addr = "fd00:10::5".parse().unwrap();
        let maps = LbMaps {
            maps: vec![
                dump(
                    "cilium_lb6_services_v2",
                    &[
                        (lb6_key(vip, 443, 0, 6), service(0, 1, 3, 0, 0, 0)),
                        (lb6_key(vip, 443, 1, 6), service(77, 0, 3, 0, 0, 0)),
                    ],
                ),
                dump(
                    "cilium_lb6_backends_v3",
                    &[(77u32.to_ne_bytes().to_vec(), lb6_backend(pod, 8443, 0))],
                ),
            ],
        };
        let t = decode(&maps);
        let fe = t.frontend(IpAddr::V6(vip), 443, Protocol::Tcp).unwrap();
        // Not routable: a ClusterIP's surrogate entry, as bpf lb list prints it.
        assert_eq!(fe.flags, ["non-routable"]);
        assert_eq!(fe.backends, [Backend::active(IpAddr::V6(pod), 8443)]);
    }

    /// Two scopes of one service (merged), a backend id pushed twice (the last wins), an
    /// unknown protocol, IPv6, a missing backend, and an orphan slot.
    fn mixed_maps() -> LbMaps {
        let vip = [10, 96, 0, 20];
        let v6: Ipv6Addr = "fd00::20".parse().unwrap();
        let svc = |c, q| service(0, c, 3, SVC_FLAG_ROUTABLE, SVC_FLAG_TWO_SCOPES, q);
        LbMaps {
            maps: vec![
                dump(
                    "cilium_lb4_services_v2",
                    &[
                        (lb4_key(vip, 80, 0, 6, 1), svc(1, 0)),
                        (lb4_key(vip, 80, 1, 6, 1), service(2, 0, 3, 0, 0, 0)),
                        (lb4_key(vip, 80, 0, 6, 0), svc(2, 1)),
                        (lb4_key(vip, 80, 1, 6, 0), service(1, 0, 3, 0, 0, 0)),
                        (lb4_key(vip, 80, 2, 6, 0), service(2, 0, 3, 0, 0, 0)),
                        (lb4_key(vip, 80, 3, 6, 0), service(9, 0, 3, 0, 0, 0)),
                        (lb4_key(vip, 53, 0, 99, 0), svc(0, 0)),
                        (lb4_key([10, 96, 0, 1], 443, 0, 6, 0), svc(1, 0)),
                        (
                            lb4_key([10, 96, 0, 1], 443, 1, 6, 0),
                            service(1, 0, 3, 0, 0, 0),
                        ),
                        (lb4_key(vip, 81, 1, 6, 0), service(1, 0, 0, 0, 0, 0)),
                    ],
                ),
                dump(
                    "cilium_lb4_backends_v3",
                    &[
                        (
                            1u32.to_ne_bytes().to_vec(),
                            lb4_backend([10, 0, 0, 1], 80, 0),
                        ),
                        (
                            2u32.to_ne_bytes().to_vec(),
                            lb4_backend([10, 0, 0, 9], 80, 0),
                        ),
                        (
                            2u32.to_ne_bytes().to_vec(),
                            lb4_backend([10, 0, 0, 2], 80, 1),
                        ),
                    ],
                ),
                dump("cilium_lb4_reverse_nat", &[]),
                dump(
                    "cilium_lb6_services_v2",
                    &[
                        (lb6_key(v6, 53, 0, 17), svc(1, 0)),
                        (lb6_key(v6, 53, 1, 17), service(4, 0, 3, 0, 0, 0)),
                    ],
                ),
                dump(
                    "cilium_lb6_backends_v3",
                    &[(
                        4u32.to_ne_bytes().to_vec(),
                        lb6_backend("fd00::4".parse().unwrap(), 53, 0),
                    )],
                ),
            ],
        }
    }

    #[test]
    fn the_packed_decode_equals_packing_the_decoded_table() {
        for maps in [kube_dns_v4(), mixed_maps()] {
            assert_eq!(decode_packed(&maps), PackedTable::from(decode(&maps)));
        }
        let t = decode(&mixed_maps());
        let fe = t
            .frontend(IpAddr::V4(Ipv4Addr::new(10, 96, 0, 20)), 80, Protocol::Tcp)
            .unwrap();
        let got: Vec<(IpAddr, BackendState)> = fe
            .backends
            .iter()
            .map(|b| (b.ip, b.state.clone()))
            .collect();
        // Both scopes' slots, one entry per backend, backend 2 as its last push says.
        assert_eq!(
            got,
            [
                (IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)), BackendState::Active),
                (
                    IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
                    BackendState::Terminating
                ),
            ]
        );
        assert!(
            fe.flags.contains(&"backend-id-9-not-found".to_string()),
            "{fe:?}"
        );
        assert_eq!(t.frontends.len(), 4, "{t:?}");
        assert_eq!(t.skipped.unknown, 1);
        let packed = decode_packed(&mixed_maps());
        assert_eq!(packed.frontends.len(), 4);
        assert_eq!(packed.backend_count(), 4);
        assert_eq!(packed.skipped.unknown, 1);
    }

    #[test]
    fn unknown_layouts_and_names_are_refused() {
        let e = check_layout("cilium_lb4_services_v2", 16, 12).unwrap_err();
        assert_eq!(
            e.to_string(),
            "cilium_lb4_services_v2: unknown layout: key 16 B, value 12 B \
             (known: key 12 B, value 12 B, Cilium 1.18.0, 1.19.0, 1.20.2)"
        );
        assert!(check_layout("cilium_lb4_backends_v2", 4, 12).is_err());
        assert!(check_layout("cilium_lb6_backends_v3", 4, 24).is_ok());
        let mut d = MapDump::new("cilium_lb4_backends_v3", 4, 12).unwrap();
        assert!(!d.push(&[0; 4], &[0; 24]));
        assert!(d.is_empty());
    }

    #[test]
    fn a_batch_extends_like_its_entries_pushed_one_by_one() {
        let keys: Vec<u8> = (1u32..=3).flat_map(u32::to_ne_bytes).collect();
        let values: Vec<u8> = (0..36).collect();
        let mut batch = MapDump::new("cilium_lb4_backends_v3", 4, 12).unwrap();
        assert!(batch.extend(&keys, &values));
        let mut one = MapDump::new("cilium_lb4_backends_v3", 4, 12).unwrap();
        for (k, v) in keys.chunks(4).zip(values.chunks(12)) {
            assert!(one.push(k, v));
        }
        assert_eq!(batch.len(), 3);
        assert!(batch.entries().eq(one.entries()));
        // Counts that differ, or a partial entry, append nothing.
        assert!(!batch.extend(&keys, &values[..24]));
        assert!(!batch.extend(&keys[..7], &values[..12]));
        assert!(!batch.extend(&keys, &values[..35]));
        assert_eq!(batch.len(), 3);
    }
}
