//! Parsers of Cilium's load-balancer views: `service list` (text and JSON), `bpf lb list`
//! (text and JSON), `db/show frontends` and `lb/maps-dump`.
//!
//! See [`parse_any`] when the exact Cilium format is not known, or the function per
//! format. Formats from Cilium 1.7 to 1.19 are read: with or without the `ID` column,
//! the `/TCP` protocol suffix, `(active)`-style backend states, the `(REVNAT_ID) (SLOT)`
//! columns and the `(0)` scope column of `bpf lb list`; CI-log prefixes (`\t `), shell
//! prompts and `kubectl exec` notices are skipped and counted.
//!
//! Backend states: `active`, `terminating`, `quarantined`, `maintenance` (others are kept
//! as [`BackendState::Unknown`]). Outputs without a state column (before Cilium 1.10)
//! list programmed backends, read as active. `bpf lb list` entries `backend N not found`
//! (a service slot pointing at a missing backend) become the frontend flag
//! `backend-id-N-not-found`.
//!
//! # Errors
//! Text without a single row of the format, and invalid JSON, are errors. [`parse_any`]
//! names the supported formats when it recognizes none.

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, SocketAddr};

use serde_json::Value;

use crate::error::ParseError;
use crate::format::Format;
use crate::model::{
    Backend, BackendState, Frontend, FrontendKind, LbTable, Location, Protocol, ServiceRef,
};

/// The Cilium outputs [`parse_any`] reads, for error messages.
pub const SUPPORTED: &str = "cilium-dbg service list (text, Cilium 1.7-1.19), \
cilium-dbg service list -o json, cilium-dbg bpf lb list (text or -o json), \
cilium-dbg shell -- db/show frontends, lb/maps-dump";

/// Parses any supported Cilium output, detecting which one it is.
pub fn parse_any(input: &[u8]) -> Result<LbTable, ParseError> {
    match crate::detect_format(input) {
        Some(Format::CiliumServiceJson) => parse_service_json(input),
        Some(
            f @ (Format::CiliumServiceList
            | Format::CiliumBpfLbList
            | Format::CiliumDbFrontends
            | Format::CiliumLbMaps),
        ) => {
            let text = String::from_utf8_lossy(input);
            match f {
                Format::CiliumServiceList => parse_service_list(&text),
                Format::CiliumBpfLbList => parse_bpf_lb_list(&text),
                Format::CiliumDbFrontends => parse_db_frontends(&text),
                _ => parse_lb_maps(&text),
            }
        }
        other => {
            let first = String::from_utf8_lossy(input)
                .lines()
                .map(str::trim)
                .find(|l| !l.is_empty())
                .map(crate::model::excerpt)
                .unwrap_or_default();
            let detail = match other {
                Some(f) => format!("input looks like {f}, not Cilium"),
                None => format!("first line {first:?}"),
            };
            Err(ParseError::Unsupported {
                family: "cilium",
                detail,
                supported: SUPPORTED.into(),
            })
        }
    }
}

// === shared helpers ===

/// `10.96.0.10:53/UDP`, `10.96.0.10:53`, `[fd00::a]:53/TCP`, `…/i` (internal scope).
fn parse_addr(tok: &str) -> Option<(SocketAddr, Option<Protocol>, bool)> {
    let tok = tok.trim_end_matches(',');
    let mut parts = tok.split('/');
    let sa = crate::text::parse_socket(parts.next()?)?;
    let mut proto = None;
    let mut internal = false;
    for p in parts {
        match p {
            "i" => internal = true,
            _ => proto = Some(Protocol::parse(p)?),
        }
    }
    Some((sa, proto, internal))
}

fn kind_from_type(t: &str) -> Option<FrontendKind> {
    match t {
        "ClusterIP" => Some(FrontendKind::ClusterIp),
        "NodePort" => Some(FrontendKind::NodePort),
        "ExternalIPs" | "ExternalIP" => Some(FrontendKind::ExternalIp),
        "LoadBalancer" => Some(FrontendKind::LoadBalancer),
        "HostPort" | "LocalRedirect" => Some(FrontendKind::Unknown),
        _ => None,
    }
}

const SERVICE_TYPES: [&str; 7] = [
    "ClusterIP",
    "NodePort",
    "ExternalIPs",
    "ExternalIP",
    "LoadBalancer",
    "HostPort",
    "LocalRedirect",
];

fn service_type_flag(fe: &mut Frontend, t: &str) {
    if matches!(t, "HostPort" | "LocalRedirect") {
        fe.add_flag(format!("type={t}"));
    }
}

/// `(active)` → `active`.
fn paren_word(tok: &str) -> Option<&str> {
    tok.trim_end_matches(',')
        .strip_prefix('(')?
        .strip_suffix(')')
}

fn is_state_word(w: &str) -> bool {
    matches!(
        w,
        "active" | "terminating" | "quarantined" | "maintenance" | "terminating-not-serving"
    )
}

fn no_rows(format: Format, first: Option<(usize, String)>, what: &'static str) -> ParseError {
    match first {
        Some((no, line)) => ParseError::unexpected(format, Location::Line(no), what, &line),
        None => ParseError::unexpected(format, Location::Line(1), what, ""),
    }
}

/// A line with CI-log and prompt noise removed.
fn clean(raw: &str) -> &str {
    raw.trim()
}

// === service list ===

/// Whether `line` is a row of `cilium service list` (with or without the ID column).
pub(crate) fn looks_like_service_list_row(line: &str) -> bool {
    let toks: Vec<&str> = line.split_ascii_whitespace().take(3).collect();
    let (addr, ty) = match toks.as_slice() {
        [id, addr, ty] if id.bytes().all(|b| b.is_ascii_digit()) => (*addr, *ty),
        [addr, ty, ..] => (*addr, *ty),
        _ => return false,
    };
    parse_addr(addr).is_some() && SERVICE_TYPES.contains(&ty)
}

/// Parses `cilium[-dbg] service list` text.
pub fn parse_service_list(input: &str) -> Result<LbTable, ParseError> {
    let mut out = LbTable::new(Format::CiliumServiceList);
    let mut current: Option<Frontend> = None;
    let mut saw = false;
    let mut first_foreign = None;
    for (i, raw) in input.lines().enumerate() {
        let no = i + 1;
        let line = clean(raw);
        if line.is_empty() {
            continue;
        }
        if line.contains("Frontend") && line.contains("Service Type") {
            // The header again after rows: another run of the command; the last is read.
            if current.is_some() || !out.frontends.is_empty() {
                current = None;
                out.frontends.clear();
                out.skipped.new_snapshot(Location::Line(no));
            }
            saw = true;
            continue;
        }
        let toks: Vec<&str> = line.split_ascii_whitespace().collect();
        // Continuation: `2 => 10.0.0.1:80/TCP (active)`.
        if toks.get(1) == Some(&"=>") {
            match current.as_mut() {
                Some(fe) => {
                    if !push_list_backend(fe, toks.get(2..).unwrap_or_default()) {
                        out.skipped
                            .unknown(Location::Line(no), "invalid backend", line);
                    }
                }
                None => {
                    out.skipped
                        .unknown(Location::Line(no), "backend before any frontend", line)
                }
            }
            continue;
        }
        let start = match toks.as_slice() {
            [id, addr, ..]
                if id.bytes().all(|b| b.is_ascii_digit()) && parse_addr(addr).is_some() =>
            {
                1
            }
            [addr, ..] if parse_addr(addr).is_some() => 0,
            _ => {
                if first_foreign.is_none() {
                    first_foreign = Some((no, line.to_string()));
                }
                out.skipped
                    .unknown(Location::Line(no), "not a service list row", line);
                continue;
            }
        };
        let Some((sa, proto, internal)) = toks.get(start).and_then(|a| parse_addr(a)) else {
            continue;
        };
        let ty = toks.get(start + 1).copied().unwrap_or("");
        let Some(kind) = kind_from_type(ty) else {
            out.skipped
                .unknown(Location::Line(no), "unknown service type", line);
            continue;
        };
        saw = true;
        if let Some(fe) = current.take() {
            out.frontends.push(fe);
        }
        let mut fe = Frontend::new(sa.ip(), sa.port(), proto.unwrap_or(Protocol::Any), kind);
        service_type_flag(&mut fe, ty);
        if internal {
            fe.add_flag("scope=internal");
        }
        let mut rest = toks.get(start + 2..).unwrap_or_default();
        if rest.first() == Some(&"(Remote)") {
            fe.add_flag("remote");
            rest = rest.get(1..).unwrap_or_default();
        }
        if rest.get(1) == Some(&"=>")
            && !push_list_backend(&mut fe, rest.get(2..).unwrap_or_default())
        {
            out.skipped
                .unknown(Location::Line(no), "invalid backend", line);
        }
        current = Some(fe);
    }
    if let Some(fe) = current.take() {
        out.frontends.push(fe);
    }
    if !saw {
        return Err(no_rows(
            Format::CiliumServiceList,
            first_foreign,
            "a cilium service list row",
        ));
    }
    out.normalize();
    Ok(out)
}

/// `10.0.0.1:80/TCP (active) (preferred)` after the `N =>`.
fn push_list_backend(fe: &mut Frontend, toks: &[&str]) -> bool {
    let Some((sa, _, _)) = toks.first().and_then(|a| parse_addr(a)) else {
        return false;
    };
    let mut state = BackendState::Active;
    for t in toks.get(1..).unwrap_or_default() {
        match paren_word(t) {
            Some("preferred") => fe.add_flag("clustermesh-preferred-backends"),
            Some(w) => state = BackendState::parse(w),
            None => {}
        }
    }
    fe.backends.push(Backend {
        ip: sa.ip(),
        port: sa.port(),
        state,
        weight: None,
    });
    true
}

// === service list -o json ===

/// Parses `cilium[-dbg] service list -o json` (an array) or `service get ID -o json`.
pub fn parse_service_json(input: &[u8]) -> Result<LbTable, ParseError> {
    let v: Value = serde_json::from_slice(input).map_err(|e| {
        ParseError::json(
            Format::CiliumServiceJson,
            &e,
            "a JSON array of Cilium services",
        )
    })?;
    let mut out = LbTable::new(Format::CiliumServiceJson);
    let items: Vec<&Value> = match &v {
        Value::Array(a) => a.iter().collect(),
        Value::Object(_) => vec![&v],
        _ => {
            return Err(ParseError::unexpected(
                Format::CiliumServiceJson,
                Location::JsonPath("$".into()),
                "a JSON array of Cilium services",
                &v.to_string(),
            ));
        }
    };
    let mut saw = false;
    for (i, item) in items.iter().enumerate() {
        let path = format!("$[{i}]");
        let realized = item.get("status").and_then(|s| s.get("realized"));
        let spec = item.get("spec");
        let Some(src) = realized.filter(|r| r.is_object()).or(spec) else {
            out.skipped.unknown(
                Location::JsonPath(path),
                "service without spec or status.realized",
                &item.to_string(),
            );
            continue;
        };
        let flags = src
            .get("flags")
            .or_else(|| spec.and_then(|s| s.get("flags")));
        let fa = src.get("frontend-address");
        let ip = fa
            .and_then(|f| f.get("ip"))
            .and_then(Value::as_str)
            .and_then(crate::text::parse_ip);
        let port = fa
            .and_then(|f| f.get("port"))
            .and_then(Value::as_u64)
            .and_then(|p| u16::try_from(p).ok());
        let (Some(ip), Some(port)) = (ip, port) else {
            out.skipped.unknown(
                Location::JsonPath(format!("{path}.frontend-address")),
                "frontend-address without ip or port",
                &item.to_string(),
            );
            continue;
        };
        saw = true;
        let proto = fa
            .and_then(|f| f.get("protocol"))
            .and_then(Value::as_str)
            .and_then(Protocol::parse)
            .unwrap_or(Protocol::Any);
        let ty = flags
            .and_then(|f| f.get("type"))
            .and_then(Value::as_str)
            .unwrap_or("");
        let kind = kind_from_type(ty).unwrap_or(FrontendKind::Unknown);
        let mut fe = Frontend::new(ip, port, proto, kind);
        service_type_flag(&mut fe, ty);
        if let Some(id) = src.get("id").and_then(Value::as_i64) {
            fe.add_flag(format!("id={id}"));
        }
        if fa.and_then(|f| f.get("scope")).and_then(Value::as_str) == Some("internal") {
            fe.add_flag("scope=internal");
        }
        if let Some(f) = flags {
            let ns = f.get("namespace").and_then(Value::as_str);
            let name = f.get("name").and_then(Value::as_str);
            if let (Some(ns), Some(name)) = (ns, name) {
                fe.service = Some(ServiceRef::new(ns, name, ""));
            }
            for (key, label) in [
                ("trafficPolicy", "traffic-policy"),
                ("extTrafficPolicy", "ext-traffic-policy"),
                ("intTrafficPolicy", "int-traffic-policy"),
            ] {
                if let Some(p) = f.get(key).and_then(Value::as_str)
                    && p != "Cluster"
                {
                    fe.add_flag(format!("{label}={p}"));
                }
            }
            if f.get("cluster")
                .and_then(Value::as_str)
                .is_some_and(|c| !c.is_empty())
            {
                fe.add_flag("remote");
            }
        }
        let bes = src.get("backend-addresses").and_then(Value::as_array);
        for (j, be) in bes
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .enumerate()
        {
            let ip = be
                .get("ip")
                .and_then(Value::as_str)
                .and_then(crate::text::parse_ip);
            let port = be
                .get("port")
                .and_then(Value::as_u64)
                .and_then(|p| u16::try_from(p).ok());
            let (Some(ip), Some(port)) = (ip, port) else {
                out.skipped.unknown(
                    Location::JsonPath(format!("{path}.backend-addresses[{j}]")),
                    "backend without ip or port",
                    &be.to_string(),
                );
                continue;
            };
            let state = be
                .get("state")
                .and_then(Value::as_str)
                .map_or(BackendState::Active, BackendState::parse);
            let weight = be
                .get("weight")
                .and_then(Value::as_u64)
                .and_then(|w| u32::try_from(w).ok());
            fe.backends.push(Backend {
                ip,
                port,
                state,
                weight,
            });
        }
        out.frontends.push(fe);
    }
    if !saw && !items.is_empty() {
        return Err(ParseError::unexpected(
            Format::CiliumServiceJson,
            Location::JsonPath("$[0]".into()),
            "a Cilium service with `frontend-address`",
            &v.to_string(),
        ));
    }
    out.normalize();
    Ok(out)
}

// === bpf lb list ===

/// Whether `line` is a row of `cilium bpf lb list`.
pub(crate) fn looks_like_bpf_lb_row(line: &str) -> bool {
    let toks: Vec<&str> = line.split_ascii_whitespace().take(4).collect();
    let Some(fe) = toks.first() else { return false };
    if parse_addr(fe).is_none() {
        return false;
    }
    let rest = match toks.get(1) {
        Some(t) if paren_word(t).is_some() => toks.get(2..),
        _ => toks.get(1..),
    };
    let rest = rest.unwrap_or_default();
    matches!(rest, [addr, id, ..] if parse_addr(addr).is_some() && paren_word(id).is_some())
        || matches!(rest, ["backend", id, "not", "found", ..] if id.bytes().all(|b| b.is_ascii_digit()))
}

/// Parses `cilium[-dbg] bpf lb list`, text or `-o json`.
pub fn parse_bpf_lb_list(input: &str) -> Result<LbTable, ParseError> {
    let mut acc = BpfAcc::default();
    if input.trim_start().starts_with('{') {
        let map: HashMap<String, Vec<String>> = serde_json::from_str(input).map_err(|e| {
            ParseError::json(
                Format::CiliumBpfLbList,
                &e,
                "a JSON object of frontend -> entries",
            )
        })?;
        let mut keys: Vec<&String> = map.keys().collect();
        keys.sort();
        for k in keys {
            for (j, entry) in map
                .get(k)
                .map(Vec::as_slice)
                .unwrap_or_default()
                .iter()
                .enumerate()
            {
                let loc = Location::JsonPath(format!("$[{k:?}][{j}]"));
                let toks: Vec<&str> = entry.split_ascii_whitespace().collect();
                acc.entry(k, &toks, loc, entry);
            }
        }
        return Ok(acc.finish());
    }
    let mut current: Option<String> = None;
    let mut first_foreign = None;
    for (i, raw) in input.lines().enumerate() {
        let no = i + 1;
        let line = clean(raw);
        if line.is_empty() {
            continue;
        }
        if line.contains("SERVICE ADDRESS") {
            // The header again after rows: another run of the command; the last is read.
            if !acc.frontends.is_empty() {
                current = None;
                acc.index.clear();
                acc.frontends.clear();
                acc.out.skipped.new_snapshot(Location::Line(no));
            }
            acc.saw = true;
            continue;
        }
        let toks: Vec<&str> = line.split_ascii_whitespace().collect();
        let Some(first) = toks.first() else { continue };
        if looks_like_bpf_lb_row(line) {
            let mut rest = toks.get(1..).unwrap_or_default();
            let mut key = (*first).to_string();
            if let Some(scope) = rest.first().filter(|t| paren_word(t).is_some()) {
                key = format!("{first} {scope}");
                rest = rest.get(1..).unwrap_or_default();
            }
            acc.entry(&key, rest, Location::Line(no), line);
            current = Some(key);
        } else if current.is_some() && (parse_addr(first).is_some() || *first == "backend") {
            if let Some(key) = current.clone() {
                acc.entry(&key, &toks, Location::Line(no), line);
            }
        } else {
            if first_foreign.is_none() {
                first_foreign = Some((no, line.to_string()));
            }
            acc.out
                .skipped
                .unknown(Location::Line(no), "not a bpf lb list row", line);
        }
    }
    if !acc.saw {
        return Err(no_rows(
            Format::CiliumBpfLbList,
            first_foreign,
            "a cilium bpf lb list row",
        ));
    }
    Ok(acc.finish())
}

#[derive(Default)]
struct BpfAcc {
    out: LbTable,
    index: HashMap<String, usize>,
    frontends: Vec<Frontend>,
    saw: bool,
}

impl BpfAcc {
    /// One entry (`ADDR (REVNAT) (SLOT) [FLAGS]` or `backend N not found`) of frontend `key`.
    fn entry(&mut self, key: &str, toks: &[&str], loc: Location, line: &str) {
        let fe_addr = key.split(' ').next().unwrap_or(key);
        let Some((fsa, fproto, _)) = parse_addr(fe_addr) else {
            return self
                .out
                .skipped
                .unknown(loc, "invalid frontend address", line);
        };
        self.saw = true;
        let idx = match self.index.get(key) {
            Some(&i) => i,
            None => {
                let fe = Frontend::new(
                    fsa.ip(),
                    fsa.port(),
                    fproto.unwrap_or(Protocol::Any),
                    FrontendKind::Unknown,
                );
                self.frontends.push(fe);
                self.index.insert(key.to_string(), self.frontends.len() - 1);
                self.frontends.len() - 1
            }
        };
        let Some(fe) = self.frontends.get_mut(idx) else {
            return;
        };
        if toks.first() == Some(&"backend") {
            // `backend 42 not found`
            let id = toks.get(1).copied().unwrap_or("?");
            fe.add_flag(format!("backend-id-{id}-not-found"));
            return;
        }
        let Some((sa, proto, _)) = toks.first().and_then(|a| parse_addr(a)) else {
            return self
                .out
                .skipped
                .unknown(loc, "entry without an address", line);
        };
        // Bracketed flags: `[ClusterIP, non-routable]`; L7LB: `(L7LB Proxy Port: 15735)`.
        let joined = toks.get(1..).unwrap_or_default().join(" ");
        let bracket = joined
            .split_once('[')
            .and_then(|(_, r)| r.split_once(']'))
            .map(|(b, _)| b);
        if sa.port() == 0 && sa.ip().is_unspecified() {
            for word in bracket
                .unwrap_or("")
                .split(',')
                .map(str::trim)
                .filter(|w| !w.is_empty())
            {
                match kind_from_type(word) {
                    Some(k) if fe.kind == FrontendKind::Unknown => {
                        fe.kind = k;
                        service_type_flag(fe, word);
                    }
                    _ => fe.add_flag(word.to_string()),
                }
            }
            if let Some((_, p)) = joined.split_once("L7LB Proxy Port:") {
                let port = p.trim().trim_end_matches(')').trim();
                fe.add_flag(format!("l7lb-proxy-port={port}"));
            }
            return;
        }
        let state = bracket
            .map(str::trim)
            .filter(|w| is_state_word(w))
            .map_or(BackendState::Active, BackendState::parse);
        if fe.protocol == Protocol::Any
            && let Some(p) = proto
        {
            fe.protocol = p;
        }
        fe.backends.push(Backend {
            ip: sa.ip(),
            port: sa.port(),
            state,
            weight: None,
        });
    }

    fn finish(mut self) -> LbTable {
        let mut out = std::mem::take(&mut self.out);
        out.format = Some(Format::CiliumBpfLbList);
        out.frontends = std::mem::take(&mut self.frontends);
        out.normalize();
        out
    }
}

// === db/show frontends ===

/// Whether `line` is a row of `db/show frontends` (`ADDR/PROTO TYPE ns/name …`).
pub(crate) fn looks_like_db_frontends_row(line: &str) -> bool {
    let toks: Vec<&str> = line.split_ascii_whitespace().take(3).collect();
    match toks.as_slice() {
        [addr, ty, svc] => {
            matches!(parse_addr(addr), Some((_, Some(_), _)))
                && SERVICE_TYPES.contains(ty)
                && svc.contains('/')
        }
        _ => false,
    }
}

const DB_STATUS: [&str; 4] = ["Done", "Pending", "Error", "Deleting"];

/// Parses `cilium-dbg shell -- db/show frontends` (header optional: `grep` output works).
pub fn parse_db_frontends(input: &str) -> Result<LbTable, ParseError> {
    let mut out = LbTable::new(Format::CiliumDbFrontends);
    let mut saw = false;
    let mut first_foreign = None;
    for (i, raw) in input.lines().enumerate() {
        let no = i + 1;
        let line = clean(raw);
        if line.is_empty() {
            continue;
        }
        if line.starts_with("Address") && line.contains("ServiceName") {
            // The header again after rows: another run of the command; the last is read.
            if !out.frontends.is_empty() {
                out.frontends.clear();
                out.skipped.new_snapshot(Location::Line(no));
            }
            saw = true;
            continue;
        }
        if !looks_like_db_frontends_row(line) {
            if first_foreign.is_none() {
                first_foreign = Some((no, line.to_string()));
            }
            out.skipped
                .unknown(Location::Line(no), "not a db/show frontends row", line);
            continue;
        }
        let toks: Vec<&str> = line.split_ascii_whitespace().collect();
        let (Some((sa, proto, _)), Some(ty), Some(svc)) = (
            toks.first().and_then(|a| parse_addr(a)),
            toks.get(1),
            toks.get(2),
        ) else {
            continue;
        };
        saw = true;
        let kind = kind_from_type(ty).unwrap_or(FrontendKind::Unknown);
        let mut fe = Frontend::new(sa.ip(), sa.port(), proto.unwrap_or(Protocol::Any), kind);
        service_type_flag(&mut fe, ty);
        let mut port_name = String::new();
        // Column order differs between versions (`… PortName Backends RedirectTo Status
        // Since Error` or `… Status Backends`): addresses anywhere are backends; words
        // after the status are its age and error text.
        let mut after_status = false;
        for t in toks.get(3..).unwrap_or_default() {
            if !after_status && DB_STATUS.contains(t) {
                if *t != "Done" {
                    fe.add_flag(format!("status={t}"));
                }
                after_status = true;
                continue;
            }
            if let Some((bsa, _, _)) = parse_addr(t) {
                fe.backends.push(Backend::active(bsa.ip(), bsa.port()));
            } else if let Some(w) = paren_word(t) {
                if let Some(last) = fe.backends.last_mut() {
                    last.state = BackendState::parse(w);
                }
            } else if after_status {
                continue;
            } else if fe.backends.is_empty() && port_name.is_empty() {
                port_name = t.to_string();
            } else {
                fe.add_flag(format!("redirect={t}"));
            }
        }
        if let Some((ns, name)) = svc.split_once('/') {
            fe.service = Some(ServiceRef::new(ns, name, port_name));
        }
        out.frontends.push(fe);
    }
    if !saw {
        return Err(no_rows(
            Format::CiliumDbFrontends,
            first_foreign,
            "a db/show frontends row",
        ));
    }
    out.normalize();
    Ok(out)
}

// === lb/maps-dump ===

/// Parses `lb/maps-dump` output: `BE: ID=1 ADDR=… STATE=active`, `SVC: ID=… ADDR=… SLOT=…`.
///
/// One dump holds each backend ID once and each service slot (`ADDR`, `SLOT`) once: a key
/// seen again starts the next snapshot (a transcript of two runs), and only the last is read.
pub fn parse_lb_maps(input: &str) -> Result<LbTable, ParseError> {
    let mut out = LbTable::new(Format::CiliumLbMaps);
    let mut backends: HashMap<String, (IpAddr, u16, BackendState)> = HashMap::new();
    // Frontend address text → (frontend, backend IDs by slot).
    let mut services: Vec<(String, Frontend, Vec<String>)> = Vec::new();
    // The service slots of this snapshot.
    let mut slots: HashSet<(String, String)> = HashSet::new();
    let mut saw = false;
    let mut first_foreign = None;
    for (i, raw) in input.lines().enumerate() {
        let no = i + 1;
        let line = clean(raw);
        if line.is_empty() {
            continue;
        }
        let Some((tag, rest)) = line.split_once(": ") else {
            if first_foreign.is_none() {
                first_foreign = Some((no, line.to_string()));
            }
            out.skipped
                .unknown(Location::Line(no), "not a maps-dump line", line);
            continue;
        };
        let fields: HashMap<&str, &str> = rest
            .split_ascii_whitespace()
            .filter_map(|kv| kv.split_once('='))
            .collect();
        match tag {
            "BE" => {
                saw = true;
                let addr = fields.get("ADDR").and_then(|a| parse_addr(a));
                let (Some(id), Some((sa, _, _))) = (fields.get("ID"), addr) else {
                    out.skipped
                        .unknown(Location::Line(no), "BE line without ID or ADDR", line);
                    continue;
                };
                let state = fields
                    .get("STATE")
                    .map_or(BackendState::Active, |s| BackendState::parse(s));
                if backends.contains_key(*id) {
                    backends.clear();
                    services.clear();
                    slots.clear();
                    out.skipped.new_snapshot(Location::Line(no));
                }
                backends.insert((*id).to_string(), (sa.ip(), sa.port(), state));
            }
            "SVC" => {
                saw = true;
                let Some(addr_text) = fields.get("ADDR") else {
                    out.skipped
                        .unknown(Location::Line(no), "SVC line without ADDR", line);
                    continue;
                };
                let Some((sa, proto, _)) = parse_addr(addr_text) else {
                    out.skipped
                        .unknown(Location::Line(no), "SVC line with an invalid ADDR", line);
                    continue;
                };
                if let Some(slot) = fields.get("SLOT") {
                    let slot = ((*addr_text).to_string(), (*slot).to_string());
                    if slots.contains(&slot) {
                        backends.clear();
                        services.clear();
                        slots.clear();
                        out.skipped.new_snapshot(Location::Line(no));
                    }
                    slots.insert(slot);
                }
                let pos = services.iter().position(|(k, _, _)| k == addr_text);
                let pos = match pos {
                    Some(p) => p,
                    None => {
                        let fe = Frontend::new(
                            sa.ip(),
                            sa.port(),
                            proto.unwrap_or(Protocol::Any),
                            FrontendKind::Unknown,
                        );
                        services.push(((*addr_text).to_string(), fe, Vec::new()));
                        services.len() - 1
                    }
                };
                let Some((_, fe, ids)) = services.get_mut(pos) else {
                    continue;
                };
                if fields.get("SLOT") == Some(&"0") {
                    for word in fields.get("FLAGS").copied().unwrap_or("").split('+') {
                        match kind_from_type(word) {
                            Some(k) if fe.kind == FrontendKind::Unknown => {
                                fe.kind = k;
                                service_type_flag(fe, word);
                            }
                            _ if !word.is_empty() => fe.add_flag(word.to_string()),
                            _ => {}
                        }
                    }
                    if let Some(q) = fields.get("QCOUNT").filter(|q| **q != "0") {
                        fe.add_flag(format!("qcount={q}"));
                    }
                } else if let Some(id) = fields.get("BEID") {
                    ids.push((*id).to_string());
                }
            }
            "REV" | "AFF" | "SRCRANGE" | "MAGLEV" | "SOCK" => {
                saw = true;
                out.skipped
                    .ignore("maps-dump line that is not a service or backend");
            }
            _ => {
                if first_foreign.is_none() {
                    first_foreign = Some((no, line.to_string()));
                }
                out.skipped
                    .unknown(Location::Line(no), "unknown maps-dump line", line);
            }
        }
    }
    if !saw {
        return Err(no_rows(
            Format::CiliumLbMaps,
            first_foreign,
            "a lb/maps-dump BE:/SVC: line",
        ));
    }
    for (_, mut fe, ids) in services {
        for id in ids {
            match backends.get(&id) {
                Some((ip, port, state)) => fe.backends.push(Backend {
                    ip: *ip,
                    port: *port,
                    state: state.clone(),
                    weight: None,
                }),
                None => fe.add_flag(format!("backend-id-{id}-not-found")),
            }
        }
        out.frontends.push(fe);
    }
    out.normalize();
    Ok(out)
}
