//! Parser of `nft -j list table ip kube-proxy` (and `ip6`, or `nft -j list ruleset`) output
//! of kube-proxy's nftables mode.
//!
//! See [`parse_slice`] and [`parse_reader`]. The top-level `{"nftables": [...]}` array is
//! streamed: each element is deserialized on its own as a [`serde_json::Value`] and walked
//! tolerantly, so memory follows the largest single object (the `service-ips` map), not
//! the dump, and constructs this parser does not model are skipped and counted instead
//! of failing the ruleset (the typed `nftables` crate rejects a whole ruleset on one
//! unknown expression). Several documents in a row (`nft -j list table ip kube-proxy;
//! nft -j list table ip6 kube-proxy`) are read as one dump.
//!
//! What is read, from table `kube-proxy` only (other tables are counted as ignored):
//! - maps `service-ips` (ClusterIP, external and load-balancer IPs) and
//!   `service-nodeports` → frontends and the chain each one jumps to;
//! - sets/maps `cluster-ips` and `firewall-ips` → frontend kinds;
//! - maps `no-endpoint-services` / `no-endpoint-nodeports` → frontends without backends,
//!   flagged `no-endpoints` (reject) or `no-local-endpoints` (drop);
//! - rules of `service-…`, `external-…`, `firewall-…` and `endpoint-…` chains: `jump` /
//!   `goto`, `numgen random mod N vmap { … }`, `dnat to ADDR:PORT` and the newest layout's
//!   `dnat ip to numgen random mod N map { 0 : ADDR . PORT, … }`.
//!
//! # Errors
//! Invalid JSON (with line and column) and JSON without an `nftables` array are errors.

use std::collections::HashSet;
use std::fmt;
use std::hash::BuildHasherDefault;
use std::io::BufRead;
use std::net::{IpAddr, SocketAddr};

use serde::de::{DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

use crate::error::ParseError;
use crate::format::Format;
use crate::model::{
    Backend, Frontend, FrontendKind, LbTable, Location, Protocol, ServiceRef, SkipStats, any_addr,
};
use crate::packed::FrontendSink;
use crate::text::{FxHasher, FxMap};

const EXPECTED: &str = "`nft -j` output: an object with an `nftables` array";

/// Parses `nft -j` output held in memory.
pub fn parse_slice(input: &[u8]) -> Result<LbTable, ParseError> {
    let mut st = State::default();
    let mut de = serde_json::Deserializer::from_slice(input);
    run(&mut st, &mut de)?;
    st.finish()
}

/// Parses `nft -j` output held in a string.
pub fn parse_str(input: &str) -> Result<LbTable, ParseError> {
    parse_slice(input.as_bytes())
}

/// Parses `nft -j` output from a reader, one ruleset object at a time.
pub fn parse_reader<R: BufRead>(reader: R) -> Result<LbTable, ParseError> {
    let mut st = State::default();
    let mut de = serde_json::Deserializer::from_reader(reader);
    run(&mut st, &mut de)?;
    st.finish()
}

/// Parses `nft -j` output from a reader and hands each frontend to `sink` instead of
/// building an [`LbTable`]; returns what was skipped (see [`crate::PackedTable`]).
pub fn parse_reader_into<R: BufRead>(
    reader: R,
    sink: &mut impl FrontendSink,
) -> Result<SkipStats, ParseError> {
    let mut st = State::default();
    let mut de = serde_json::Deserializer::from_reader(reader);
    run(&mut st, &mut de)?;
    st.finish_into(sink)
}

fn run<'de, R: serde_json::de::Read<'de>>(
    st: &mut State,
    de: &mut serde_json::Deserializer<R>,
) -> Result<(), ParseError> {
    loop {
        st.doc_started = false;
        match (DocSeed { st: &mut *st }).deserialize(&mut *de) {
            Ok(()) => st.docs += 1,
            Err(e) if e.is_eof() && !st.doc_started && st.docs > 0 => return Ok(()),
            Err(e) => return Err(ParseError::json(Format::NftJson, &e, EXPECTED)),
        }
    }
}

// === impl the streaming visitors ===

struct DocSeed<'s> {
    st: &'s mut State,
}

impl<'de> DeserializeSeed<'de> for DocSeed<'_> {
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(DocVisitor { st: self.st })
    }
}

struct DocVisitor<'s> {
    st: &'s mut State,
}

impl<'de> Visitor<'de> for DocVisitor<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object with an `nftables` array")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        self.st.doc_started = true;
        while let Some(key) = map.next_key::<String>()? {
            if key == "nftables" {
                self.st.saw_nftables = true;
                map.next_value_seed(ListSeed { st: &mut *self.st })?;
            } else {
                map.next_value::<IgnoredAny>()?;
                self.st
                    .out
                    .skipped
                    .ignore("top-level key other than `nftables`");
            }
        }
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<(), A::Error> {
        self.st.doc_started = true;
        self.st.saw_nftables = true;
        ListVisitor { st: self.st }.visit_seq(seq)
    }
}

struct ListSeed<'s> {
    st: &'s mut State,
}

impl<'de> DeserializeSeed<'de> for ListSeed<'_> {
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(ListVisitor { st: self.st })
    }
}

struct ListVisitor<'s> {
    st: &'s mut State,
}

impl<'de> Visitor<'de> for ListVisitor<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an array of nftables objects")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while let Some(v) = seq.next_element::<Value>()? {
            let idx = self.st.objects;
            self.st.objects += 1;
            self.st.object(idx, &v);
        }
        Ok(())
    }
}

// === impl State ===

#[derive(Default)]
struct ChainData {
    jumps: Vec<String>,
    dnats: Vec<SocketAddr>,
    affinity: bool,
}

struct Entry {
    v6: bool,
    ip: Option<IpAddr>,
    port: u16,
    proto: Protocol,
    target: String,
    path: String,
}

struct NoEndpoints {
    v6: bool,
    ip: Option<IpAddr>,
    port: u16,
    proto: Protocol,
    service: Option<ServiceRef>,
    flag: &'static str,
}

#[derive(Default)]
struct State {
    out: LbTable,
    doc_started: bool,
    docs: usize,
    saw_nftables: bool,
    objects: usize,
    /// Chains by name, per family (`[ip, ip6]`).
    chains: [FxMap<String, ChainData>; 2],
    entries: Vec<Entry>,
    no_endpoints: Vec<NoEndpoints>,
    cluster_ips: HashSet<IpAddr>,
    firewall_ips: HashSet<IpAddr>,
    /// The tables seen, (family, name): one seen again starts a new snapshot (several runs
    /// of `nft -j list …` in one input).
    tables: Vec<(String, String)>,
}

fn family_v6(obj: &Value) -> bool {
    obj.get("family").and_then(Value::as_str) == Some("ip6")
}

/// Unwraps `{"elem": {"val": X, …}}` into X (and its comment).
fn elem_val(v: &Value) -> (&Value, Option<&str>) {
    match v.get("elem") {
        Some(e) => (
            e.get("val").unwrap_or(e),
            e.get("comment").and_then(Value::as_str),
        ),
        None => (v, None),
    }
}

fn concat(v: &Value) -> Option<&Vec<Value>> {
    v.get("concat").and_then(Value::as_array)
}

fn as_port(v: &Value) -> Option<u16> {
    match v {
        Value::Number(n) => n.as_u64().and_then(|n| u16::try_from(n).ok()),
        Value::String(s) => s.parse().ok(),
        _ => None,
    }
}

fn as_proto(v: &Value) -> Option<Protocol> {
    match v {
        Value::String(s) => Protocol::parse(s),
        Value::Number(n) => Protocol::parse(&n.to_string()),
        _ => None,
    }
}

fn as_ip(v: &Value) -> Option<IpAddr> {
    v.as_str().and_then(crate::text::parse_ip)
}

/// The target of `{"goto": {"target": …}}` / `{"jump": …}`.
fn verdict_target(v: &Value) -> Option<&str> {
    v.get("goto")
        .or_else(|| v.get("jump"))?
        .get("target")?
        .as_str()
}

/// `service-HASH-ns/name/proto/port` (or `external-`, `firewall-`, `endpoint-`).
fn service_from_chain(name: &str) -> Option<ServiceRef> {
    let (_, rest) = name.split_once('-')?;
    let (_, svc) = rest.split_once('-')?;
    let svc = svc.split("__").next().unwrap_or(svc);
    let mut parts = svc.split('/');
    let (ns, n, _proto, port) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    if ns.is_empty() || n.is_empty() {
        return None;
    }
    Some(ServiceRef::new(ns, n, port))
}

fn is_helper_chain(name: &str) -> bool {
    matches!(
        name,
        "mark-for-masquerade" | "reject-chain" | "masquerading"
    )
}

impl State {
    fn unknown(&mut self, path: String, reason: &'static str, v: &Value) {
        let text = v.to_string();
        self.out
            .skipped
            .unknown(Location::JsonPath(path), reason, &text);
    }

    /// A table seen before starts again at object `idx`: the input holds several snapshots
    /// (runs of `nft -j list …`), and only the last is read. What was read so far is dropped;
    /// the skip counts say so.
    fn new_snapshot(&mut self, idx: usize) {
        let mut skipped = std::mem::take(&mut self.out.skipped);
        skipped.new_snapshot(Location::JsonPath(format!("nftables[{idx}]")));
        self.out = LbTable {
            skipped,
            ..LbTable::default()
        };
        self.chains = Default::default();
        self.entries.clear();
        self.no_endpoints.clear();
        self.cluster_ips.clear();
        self.firewall_ips.clear();
        self.tables.clear();
    }

    fn object(&mut self, idx: usize, v: &Value) {
        let Some(obj) = v.as_object() else {
            return self.unknown(
                format!("nftables[{idx}]"),
                "array element is not an object",
                v,
            );
        };
        let Some((kind, body)) = obj.iter().next() else {
            return self.unknown(format!("nftables[{idx}]"), "empty object", v);
        };
        if kind == "table" {
            let family = body.get("family").and_then(Value::as_str).unwrap_or("");
            let name = body.get("name").and_then(Value::as_str).unwrap_or("");
            let key = (family.to_string(), name.to_string());
            if self.tables.contains(&key) {
                self.new_snapshot(idx);
            }
            self.tables.push(key);
            return;
        }
        if kind == "metainfo" {
            return;
        }
        if body.get("table").and_then(Value::as_str) != Some("kube-proxy") {
            return self
                .out
                .skipped
                .ignore("object of a table other than kube-proxy");
        }
        let name = body.get("name").and_then(Value::as_str).unwrap_or("");
        let path = || format!("nftables[{idx}].{kind}");
        match kind.as_str() {
            "chain" => {}
            "set" | "map" => self.set_or_map(name, body, path()),
            "rule" => self.rule(body, idx),
            "element" => self
                .out
                .skipped
                .ignore("element object (listed inside its set)"),
            "counter" | "quota" | "limit" | "ct helper" | "flowtable" | "ct timeout"
            | "ct expectation" | "synproxy" | "secmark" => {
                self.out.skipped.ignore("stateful object");
            }
            _ => self.unknown(path(), "unknown object type", v),
        }
    }

    fn set_or_map(&mut self, name: &str, body: &Value, path: String) {
        let v6 = family_v6(body);
        let elems = body.get("elem").and_then(Value::as_array);
        let elems: &[Value] = elems.map(Vec::as_slice).unwrap_or_default();
        match name {
            "cluster-ips" => {
                for e in elems {
                    if let Some(ip) = as_ip(elem_val(e).0) {
                        self.cluster_ips.insert(ip);
                    }
                }
            }
            "service-ips"
            | "service-nodeports"
            | "firewall-ips"
            | "no-endpoint-services"
            | "no-endpoint-nodeports" => {
                for (i, e) in elems.iter().enumerate() {
                    let p = format!("{path}({name}).elem[{i}]");
                    self.map_elem(name, v6, e, p);
                }
            }
            _ => self
                .out
                .skipped
                .ignore("set or map not used for load-balancing"),
        }
    }

    fn map_elem(&mut self, map: &str, v6: bool, e: &Value, path: String) {
        let pair = e.as_array().map(Vec::as_slice).unwrap_or_default();
        let (Some(key), Some(verdict)) = (pair.first(), pair.get(1)) else {
            return self.unknown(path, "map element is not a [key, value] pair", e);
        };
        let (key, comment) = elem_val(key);
        let parts: &[Value] = concat(key).map(Vec::as_slice).unwrap_or_default();
        let with_ip = matches!(map, "service-ips" | "firewall-ips" | "no-endpoint-services");
        let (ip, proto, port) = if with_ip {
            match parts {
                [ip, proto, port] => (as_ip(ip), as_proto(proto), as_port(port)),
                _ => (None, None, None),
            }
        } else {
            match parts {
                [proto, port] => (Some(any_addr(v6)), as_proto(proto), as_port(port)),
                _ => (None, None, None),
            }
        };
        let (Some(ip), Some(proto), Some(port)) = (ip, proto, port) else {
            return self.unknown(
                path,
                "map key is not `addr . proto . port` / `proto . port`",
                e,
            );
        };
        match map {
            "firewall-ips" => {
                self.firewall_ips.insert(ip);
            }
            "no-endpoint-services" | "no-endpoint-nodeports" => {
                let flag = if verdict.get("drop").is_some() {
                    "no-local-endpoints"
                } else {
                    "no-endpoints"
                };
                self.no_endpoints.push(NoEndpoints {
                    v6,
                    ip: with_ip.then_some(ip),
                    port,
                    proto,
                    service: comment.and_then(ServiceRef::parse_kube_proxy),
                    flag,
                });
            }
            _ => match verdict_target(verdict) {
                Some(t) => self.entries.push(Entry {
                    v6,
                    ip: with_ip.then_some(ip),
                    port,
                    proto,
                    target: t.to_string(),
                    path,
                }),
                None => self.unknown(path, "map value is not a jump/goto verdict", e),
            },
        }
    }

    fn rule(&mut self, body: &Value, idx: usize) {
        let path = || format!("nftables[{idx}].rule");
        let Some(chain) = body.get("chain").and_then(Value::as_str) else {
            return self.unknown(path(), "rule without chain", body);
        };
        let lb_chain = ["service-", "external-", "endpoint-", "firewall-"]
            .iter()
            .any(|p| chain.starts_with(p));
        if !lb_chain {
            return self
                .out
                .skipped
                .ignore("rule in a chain that does not load-balance");
        }
        let Some(exprs) = body.get("expr").and_then(Value::as_array) else {
            return self.unknown(path(), "rule without `expr` array", body);
        };
        let v6 = family_v6(body);
        let mut jumps = Vec::new();
        let mut dnats = Vec::new();
        let mut affinity = false;
        let mut unknown_dnat = false;
        for stmt in exprs {
            if let Some(t) = verdict_target(stmt) {
                if !is_helper_chain(t) {
                    jumps.push(t.to_string());
                }
            } else if let Some(vm) = stmt.get("vmap") {
                let set = vm
                    .get("data")
                    .and_then(|d| d.get("set"))
                    .and_then(Value::as_array);
                for pair in set.map(Vec::as_slice).unwrap_or_default() {
                    if let Some(t) = pair
                        .as_array()
                        .and_then(|p| p.get(1))
                        .and_then(verdict_target)
                    {
                        jumps.push(t.to_string());
                    }
                }
            } else if let Some(d) = stmt.get("dnat") {
                if !dnat_targets(d, &mut dnats) {
                    unknown_dnat = true;
                }
            } else if let Some(s) = stmt.get("set") {
                let set = s.get("set").and_then(Value::as_str).unwrap_or("");
                affinity |= set.starts_with("@affinity-");
            } else if let Some(m) = stmt.get("match") {
                let right = m.get("right").and_then(Value::as_str).unwrap_or("");
                affinity |= right.starts_with("@affinity-");
            }
        }
        if unknown_dnat {
            self.unknown(path(), "dnat statement of an unknown shape", body);
        }
        if jumps.is_empty() && dnats.is_empty() && !affinity {
            return self
                .out
                .skipped
                .ignore("rule without jump or dnat (masquerade, match)");
        }
        let map = &mut self.chains[usize::from(v6)];
        let c = match map.get_mut(chain) {
            Some(c) => c,
            None => map.entry(chain.to_string()).or_default(),
        };
        c.jumps.extend(jumps);
        c.dnats.extend(dnats);
        c.affinity |= affinity;
    }

    fn finish(self) -> Result<LbTable, ParseError> {
        let mut out = LbTable::new(Format::NftJson);
        out.skipped = self.finish_into(&mut out)?;
        out.normalize();
        Ok(out)
    }

    /// Resolves every frontend and hands it to `sink`; returns what was skipped.
    fn finish_into(mut self, sink: &mut impl FrontendSink) -> Result<SkipStats, ParseError> {
        if !self.saw_nftables {
            return Err(ParseError::unexpected(
                Format::NftJson,
                Location::JsonPath("$".into()),
                EXPECTED,
                "a JSON document without an `nftables` array",
            ));
        }
        let mut skipped = std::mem::take(&mut self.out.skipped);
        for e in std::mem::take(&mut self.entries) {
            let ip = e.ip.unwrap_or_else(|| any_addr(e.v6));
            let kind = if e.ip.is_none() {
                FrontendKind::NodePort
            } else if e.target.starts_with("service-") {
                FrontendKind::ClusterIp
            } else if e.target.starts_with("firewall-") || self.firewall_ips.contains(&ip) {
                FrontendKind::LoadBalancer
            } else if self.cluster_ips.contains(&ip) {
                FrontendKind::ClusterIp
            } else if e.target.starts_with("external-") {
                FrontendKind::External
            } else {
                FrontendKind::Unknown
            };
            let mut fe = Frontend::new(ip, e.port, e.proto, kind);
            fe.service = service_from_chain(&e.target);
            if self.firewall_ips.contains(&ip) {
                fe.add_flag("source-ranges");
            }
            self.resolve(&mut fe, e.v6, &e.target, &e.path, &mut skipped);
            sink.frontend(fe);
        }
        for ne in std::mem::take(&mut self.no_endpoints) {
            let ip = ne.ip.unwrap_or_else(|| any_addr(ne.v6));
            let kind = match ne.ip {
                None => FrontendKind::NodePort,
                Some(ip) if self.cluster_ips.contains(&ip) => FrontendKind::ClusterIp,
                Some(_) => FrontendKind::External,
            };
            let mut fe = Frontend::new(ip, ne.port, ne.proto, kind);
            fe.service = ne.service;
            fe.add_flag(ne.flag);
            sink.frontend(fe);
        }
        Ok(skipped)
    }

    /// Follows jumps from `target` to every reachable dnat.
    fn resolve(
        &self,
        fe: &mut Frontend,
        v6: bool,
        target: &str,
        path: &str,
        skipped: &mut SkipStats,
    ) {
        let mut seen: HashSet<&str, BuildHasherDefault<FxHasher>> = HashSet::default();
        let mut stack = vec![target];
        seen.insert(target);
        while let Some(name) = stack.pop() {
            let Some(c) = self.chains[usize::from(v6)].get(name) else {
                skipped.unknown(
                    Location::JsonPath(path.to_string()),
                    "jump to a chain without rules in the dump",
                    name,
                );
                continue;
            };
            if c.affinity {
                fe.add_flag("session-affinity");
            }
            for sa in &c.dnats {
                fe.backends.push(Backend::active(sa.ip(), sa.port()));
            }
            for j in &c.jumps {
                if seen.insert(j.as_str()) {
                    stack.push(j.as_str());
                }
            }
        }
    }
}

/// Collects the targets of a `dnat` statement; `false` when its shape is unknown.
fn dnat_targets(d: &Value, out: &mut Vec<SocketAddr>) -> bool {
    let addr = d.get("addr");
    if let Some(ip) = addr.and_then(as_ip) {
        return match d.get("port").and_then(as_port) {
            Some(port) => {
                out.push(SocketAddr::new(ip, port));
                true
            }
            None => false,
        };
    }
    // dnat ip to numgen random mod N map { 0 : ADDR . PORT, … }
    let Some(set) = addr
        .and_then(|a| a.get("map"))
        .and_then(|m| m.get("data"))
        .and_then(|d| d.get("set"))
        .and_then(Value::as_array)
    else {
        return false;
    };
    let mut ok = true;
    for pair in set {
        let target = pair.as_array().and_then(|p| p.get(1));
        let parts = target
            .and_then(concat)
            .map(Vec::as_slice)
            .unwrap_or_default();
        match parts {
            [ip, port] => match (as_ip(ip), as_port(port)) {
                (Some(ip), Some(port)) => out.push(SocketAddr::new(ip, port)),
                _ => ok = false,
            },
            _ => ok = false,
        }
    }
    ok
}
