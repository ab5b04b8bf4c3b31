//! Aggregates classified failures per target, class, service and rollout window, and renders the
//! result as a plain-text table with a one-line headline ("47 errors = 31 refused + 16 reset …").

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use jiff::Timestamp;
use serde::Serialize;

use crate::classify::Class;
use crate::model::{ConnFailure, Format, Kind};

/// Failures of one (peer, class, service, window).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Group {
    /// What the failures aimed at: the target IP, else `dns:NAME`, `host:NAME` or `-`.
    pub peer: String,
    /// The target IP when known.
    pub target_ip: Option<IpAddr>,
    /// For DNS failures: the name looked up (the peer is then `dns:NAME`).
    pub dns_name: Option<String>,
    /// For DNS failures: the DNS servers asked, when the lines name them.
    pub dns_servers: BTreeSet<SocketAddr>,
    /// Target ports seen.
    pub ports: BTreeSet<u16>,
    /// The class.
    pub class: Class,
    /// The Service, when the caller attributed one.
    pub service: Option<String>,
    /// The rollout window, when the caller attributed one.
    pub window: Option<String>,
    /// Number of failures.
    pub errors: u64,
    /// Failures per kind.
    pub by_kind: BTreeMap<Kind, u64>,
    /// Earliest timestamp.
    pub first: Option<Timestamp>,
    /// Latest timestamp.
    pub last: Option<Timestamp>,
    /// Formats seen.
    pub formats: BTreeSet<Format>,
    /// Some timestamps assumed their year or zone.
    pub approximate_time: bool,
}

/// The aggregated result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Report {
    /// Groups, most errors first.
    pub groups: Vec<Group>,
    /// All failures.
    pub total: u64,
    /// All failures per kind.
    pub by_kind: BTreeMap<Kind, u64>,
    /// All failures per class.
    pub by_class: BTreeMap<Class, u64>,
    /// Earliest timestamp.
    pub first: Option<Timestamp>,
    /// Latest timestamp.
    pub last: Option<Timestamp>,
    /// Whether classes came from a ledger join.
    pub with_ledger: bool,
}

/// Collects classified failures.
///
/// Groups are kept in a hash map per peer, each peer's in the order they were made, and put in
/// (peer, class, service, window) order when read: adding a failure writes its peer into a
/// reused buffer and finds the group without allocating (a failure's key used to cost two to
/// four strings, made and dropped, and an ordered-map search comparing them).
#[derive(Debug, Default, Clone)]
pub struct Aggregator {
    groups: HashMap<String, Vec<Group>>,
    /// The peer of the failure being added.
    peer: String,
}

/// Writes what `f` aimed at into `out`: the target IP, else `dns:NAME`, `host:NAME`,
/// `dns-server:IP` or `-`.
fn write_peer(out: &mut String, f: &ConnFailure) {
    let _ = match (f.target, &f.dns_name, &f.host, f.dns_server) {
        (Some(SocketAddr::V4(t)), ..) => {
            write_ipv4(out, *t.ip());
            Ok(())
        }
        (Some(t), ..) => write!(out, "{}", t.ip()),
        (None, Some(n), ..) => write!(out, "dns:{n}"),
        (None, None, Some(h), _) => write!(out, "host:{h}"),
        (None, None, None, Some(s)) => write!(out, "dns-server:{}", s.ip()),
        (None, None, None, None) => write!(out, "-"),
    };
}

/// `ip` in dotted decimal, as its `Display` writes it, without the formatting machinery (which
/// took most of a failure's aggregation).
fn write_ipv4(out: &mut String, ip: Ipv4Addr) {
    for (i, octet) in ip.octets().into_iter().enumerate() {
        if i > 0 {
            out.push('.');
        }
        if octet >= 100 {
            out.push(char::from(b'0' + octet / 100));
        }
        if octet >= 10 {
            out.push(char::from(b'0' + octet / 10 % 10));
        }
        out.push(char::from(b'0' + octet % 10));
    }
}

impl Group {
    /// An empty group of (peer, class, service, window), for failures like `f`.
    fn new(
        peer: String,
        f: &ConnFailure,
        class: Class,
        service: Option<&str>,
        window: Option<&str>,
    ) -> Group {
        Group {
            peer,
            target_ip: f.target.map(|t| t.ip()),
            dns_name: f.target.is_none().then(|| f.dns_name.clone()).flatten(),
            dns_servers: BTreeSet::new(),
            ports: BTreeSet::new(),
            class,
            service: service.map(str::to_owned),
            window: window.map(str::to_owned),
            errors: 0,
            by_kind: BTreeMap::new(),
            first: None,
            last: None,
            formats: BTreeSet::new(),
            approximate_time: false,
        }
    }

    /// Counts the failure `f` in the group.
    fn count(&mut self, f: &ConnFailure) {
        if let Some(t) = f.target {
            self.ports.insert(t.port());
        }
        if f.kind.is_dns()
            && let Some(s) = f.dns_server
        {
            self.dns_servers.insert(s);
        }
        self.errors += 1;
        *self.by_kind.entry(f.kind).or_default() += 1;
        widen(&mut self.first, &mut self.last, f.timestamp);
        self.formats.insert(f.format);
        self.approximate_time |= f.approximate_time;
    }

    /// Whether the group is the one of (class, service, window) (its peer aside).
    fn is(&self, class: Class, service: Option<&str>, window: Option<&str>) -> bool {
        self.class == class
            && self.service.as_deref() == service
            && self.window.as_deref() == window
    }

    /// Adds the failures of `g` (the same key) to this group.
    fn absorb(&mut self, g: Group) {
        self.ports.extend(g.ports);
        self.dns_servers.extend(g.dns_servers);
        self.errors += g.errors;
        for (k, n) in g.by_kind {
            *self.by_kind.entry(k).or_default() += n;
        }
        widen(&mut self.first, &mut self.last, g.first);
        widen(&mut self.first, &mut self.last, g.last);
        self.formats.extend(g.formats);
        self.approximate_time |= g.approximate_time;
        if self.target_ip.is_none() {
            self.target_ip = g.target_ip;
        }
    }
}

fn widen(first: &mut Option<Timestamp>, last: &mut Option<Timestamp>, t: Option<Timestamp>) {
    if let Some(t) = t {
        *first = Some(first.map_or(t, |f| f.min(t)));
        *last = Some(last.map_or(t, |l| l.max(t)));
    }
}

// === impl Aggregator ===

impl Aggregator {
    /// An empty aggregator.
    pub fn new() -> Aggregator {
        Aggregator::default()
    }

    /// Adds one failure with its class.
    pub fn add(&mut self, f: &ConnFailure, class: Class) {
        self.add_in(f, class, None, None);
    }

    /// Adds one failure with its class and the Service / rollout window the caller attributed it
    /// to (from the ledger or from flags).
    pub fn add_in(
        &mut self,
        f: &ConnFailure,
        class: Class,
        service: Option<&str>,
        window: Option<&str>,
    ) {
        self.peer.clear();
        write_peer(&mut self.peer, f);
        let list = match self.groups.get_mut(self.peer.as_str()) {
            Some(list) => list,
            None => self.groups.entry(self.peer.clone()).or_default(),
        };
        let at = match list.iter().position(|g| g.is(class, service, window)) {
            Some(at) => at,
            None => {
                list.push(Group::new(self.peer.clone(), f, class, service, window));
                list.len() - 1
            }
        };
        if let Some(g) = list.get_mut(at) {
            g.count(f);
        }
    }

    /// The groups in (peer, class, service, window) order.
    fn into_sorted_groups(self) -> impl Iterator<Item = Group> {
        let mut peers: Vec<(String, Vec<Group>)> = self.groups.into_iter().collect();
        peers.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        peers.into_iter().flat_map(|(_, mut list)| {
            list.sort_by(|a, b| {
                (a.class, &a.service, &a.window).cmp(&(b.class, &b.service, &b.window))
            });
            list
        })
    }

    /// Replaces every group's window by `relabel(window)` and merges groups that then share
    /// (peer, class, service, window). For callers that learn the windows only after the scan:
    /// they add failures under a provisional window key (e.g. the removed pod) and map it to a
    /// rollout window once every removal is known.
    pub fn relabel_windows(self, mut relabel: impl FnMut(&str) -> Option<String>) -> Aggregator {
        let mut out = Aggregator::new();
        for mut g in self.into_sorted_groups() {
            g.window = g.window.as_deref().and_then(&mut relabel);
            let list = out.groups.entry(g.peer.clone()).or_default();
            match list
                .iter_mut()
                .find(|m| m.is(g.class, g.service.as_deref(), g.window.as_deref()))
            {
                Some(m) => m.absorb(g),
                None => list.push(g),
            }
        }
        out
    }

    /// The report; `with_ledger` says whether the classes came from a ledger join.
    pub fn report(self, with_ledger: bool) -> Report {
        let mut groups: Vec<Group> = self.into_sorted_groups().collect();
        groups.sort_by(|a, b| b.errors.cmp(&a.errors).then_with(|| a.peer.cmp(&b.peer)));
        let mut r = Report {
            groups: Vec::new(),
            total: 0,
            by_kind: BTreeMap::new(),
            by_class: BTreeMap::new(),
            first: None,
            last: None,
            with_ledger,
        };
        for g in &groups {
            r.total += g.errors;
            for (k, n) in &g.by_kind {
                *r.by_kind.entry(*k).or_default() += n;
            }
            *r.by_class.entry(g.class).or_default() += g.errors;
            widen(&mut r.first, &mut r.last, g.first);
            widen(&mut r.first, &mut r.last, g.last);
        }
        r.groups = groups;
        r
    }
}

fn kinds_text(by_kind: &BTreeMap<Kind, u64>) -> String {
    let mut parts: Vec<(u64, Kind)> = by_kind.iter().map(|(k, n)| (*n, *k)).collect();
    parts.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    parts
        .iter()
        .map(|(n, k)| format!("{n} {k}"))
        .collect::<Vec<_>>()
        .join(" + ")
}

fn hms(t: Timestamp) -> String {
    t.strftime("%H:%M:%S").to_string()
}

fn date_hms(t: Timestamp) -> String {
    t.strftime("%Y-%m-%d %H:%M:%S").to_string()
}

/// The items joined by commas, or `-` when there is none (a table cell).
fn list_or_dash<T: std::fmt::Display>(items: &BTreeSet<T>) -> String {
    if items.is_empty() {
        return "-".to_owned();
    }
    items
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// Whether `a` and `b` fall on the same UTC date.
fn same_date(a: Timestamp, b: Timestamp) -> bool {
    a.strftime("%Y-%m-%d").to_string() == b.strftime("%Y-%m-%d").to_string()
}

// === impl Report ===

impl Report {
    /// "47 errors = 31 refused + 16 reset, between 2024-05-01 15:42:10 and 15:43:22 UTC (72 s)".
    pub fn headline(&self) -> String {
        let mut s = format!(
            "{} error{}",
            self.total,
            if self.total == 1 { "" } else { "s" }
        );
        if self.by_kind.len() > 1 {
            let _ = write!(s, " = {}", kinds_text(&self.by_kind));
        } else if let Some(k) = self.by_kind.keys().next() {
            let _ = write!(s, " ({k})");
        }
        if let (Some(a), Some(b)) = (self.first, self.last) {
            let end = if same_date(a, b) { hms(b) } else { date_hms(b) };
            let secs = b.as_second() - a.as_second();
            let _ = write!(s, ", between {} and {end} UTC ({secs} s)", date_hms(a));
        }
        s
    }

    /// What a ledger join would add, when the report was made without one.
    pub fn ledger_note(&self) -> Option<&'static str> {
        (!self.with_ledger).then_some(
            "classes come from the error kind only. With a ledger (--db or --truth-history), each \
             target IP is checked against who owned it at the error time: no pod -> stale client \
             cache/registry/DNS; terminating or gone -> pooled connection (reset) or clients still \
             sent to a terminating pod; a live ready pod -> not staleness (app-level); a different \
             pod now -> IP reuse; and errors are grouped per Service and rollout window.",
        )
    }

    /// The table's cells, header first, for a printer to lay out (this crate returns data, not
    /// formatted tables).
    pub fn table_cells(&self) -> Vec<Vec<String>> {
        let with_service = self.groups.iter().any(|g| g.service.is_some());
        let with_window = self.groups.iter().any(|g| g.window.is_some());
        let with_dns_server = self.groups.iter().any(|g| !g.dns_servers.is_empty());
        let mut header = vec!["TARGET", "PORTS"];
        if with_dns_server {
            header.push("DNS SERVER");
        }
        header.push("CLASS");
        if with_service {
            header.push("SERVICE");
        }
        if with_window {
            header.push("WINDOW");
        }
        header.extend(["ERRORS", "KINDS", "FIRST", "LAST", "FORMATS"]);
        let mut rows: Vec<Vec<String>> = vec![header.iter().map(|h| (*h).to_owned()).collect()];
        for g in &self.groups {
            let approx = if g.approximate_time { "~" } else { "" };
            let mut row = vec![g.peer.clone(), list_or_dash(&g.ports)];
            if with_dns_server {
                row.push(list_or_dash(&g.dns_servers));
            }
            row.push(g.class.as_str().to_owned());
            if with_service {
                row.push(g.service.clone().unwrap_or_else(|| "-".into()));
            }
            if with_window {
                row.push(g.window.clone().unwrap_or_else(|| "-".into()));
            }
            row.push(g.errors.to_string());
            row.push(kinds_text(&g.by_kind));
            row.push(
                g.first
                    .map_or("-".into(), |t| format!("{approx}{}", date_hms(t))),
            );
            // The time of day only when FIRST shows the same date.
            row.push(g.last.map_or("-".into(), |t| {
                let same_day = g.first.is_some_and(|f| same_date(f, t));
                let at = if same_day { hms(t) } else { date_hms(t) };
                format!("{approx}{at}")
            }));
            row.push(
                g.formats
                    .iter()
                    .map(|f| f.as_str())
                    .collect::<Vec<_>>()
                    .join(","),
            );
            rows.push(row);
        }
        rows
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;
    use crate::classify::classify;

    /// The table's cells, a line a row, for assertions on whole rows.
    fn cells_text(r: &Report) -> String {
        r.table_cells()
            .iter()
            .map(|row| row.join("  "))
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn f(kind: Kind, target: &str, t: &str) -> ConnFailure {
        ConnFailure::at(kind, Format::Java, target.parse().ok(), t.parse().ok())
    }

    #[test]
    fn relabeled_windows_merge_groups() {
        let mut agg = Aggregator::new();
        for (t, pod) in [
            ("2024-05-01T15:42:10Z", "uid-a"),
            ("2024-05-01T15:42:30Z", "uid-b"),
            ("2024-05-01T15:50:00Z", "uid-c"),
        ] {
            let x = f(Kind::Refused, "10.244.3.71:8080", t);
            agg.add_in(&x, classify(&x), Some("shop/web"), Some(pod));
        }
        let r = agg
            .relabel_windows(|w| (w != "uid-c").then(|| "rollout 15:42".to_owned()))
            .report(true);
        assert_eq!(r.groups.len(), 2);
        assert_eq!(r.groups[0].errors, 2);
        assert_eq!(r.groups[0].window.as_deref(), Some("rollout 15:42"));
        assert_eq!(r.groups[0].first, "2024-05-01T15:42:10Z".parse().ok());
        assert_eq!(r.groups[0].last, "2024-05-01T15:42:30Z".parse().ok());
        assert_eq!(r.groups[1].window, None);
        assert_eq!(r.total, 3);
    }

    #[test]
    fn headline_counts_kinds_and_span() {
        let mut agg = Aggregator::new();
        for x in [
            f(Kind::Refused, "10.244.3.71:8080", "2024-05-01T15:42:10Z"),
            f(Kind::Refused, "10.244.3.71:8080", "2024-05-01T15:42:30Z"),
            f(Kind::Reset, "10.244.3.71:8080", "2024-05-01T15:43:22Z"),
        ] {
            agg.add(&x, classify(&x));
        }
        let r = agg.report(false);
        assert_eq!(
            r.headline(),
            "3 errors = 2 refused + 1 reset, between 2024-05-01 15:42:10 and 15:43:22 UTC (72 s)"
        );
        assert_eq!(r.groups.len(), 2);
        let table = cells_text(&r);
        assert!(table.starts_with("TARGET"), "{table}");
        assert!(r.ledger_note().is_some());
    }

    #[test]
    fn last_shows_its_date_when_first_has_another() {
        let mut agg = Aggregator::new();
        for x in [
            f(Kind::Refused, "10.244.3.71:8080", "2024-05-01T23:59:50Z"),
            f(Kind::Refused, "10.244.3.71:8080", "2024-05-02T00:00:10Z"),
            f(Kind::Reset, "10.244.3.72:8080", "2024-05-02T10:00:00Z"),
            f(Kind::Reset, "10.244.3.72:8080", "2024-05-02T10:00:05Z"),
        ] {
            agg.add(&x, classify(&x));
        }
        let table = cells_text(&agg.report(false));
        let row = |peer: &str| {
            table
                .lines()
                .find(|l| l.starts_with(peer))
                .unwrap()
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
        };
        assert!(
            row("10.244.3.71").ends_with("2024-05-01 23:59:50 2024-05-02 00:00:10 java"),
            "{table}"
        );
        assert!(
            row("10.244.3.72").ends_with("2024-05-02 10:00:00 10:00:05 java"),
            "{table}"
        );
    }

    #[test]
    fn dns_failures_keep_their_name_and_servers() {
        let mut agg = Aggregator::new();
        let mut a = f(Kind::DnsTimeout, "", "2024-05-01T15:42:10Z");
        a.dns_name = Some("argocd-redis".to_owned());
        let mut b = a.clone();
        b.dns_server = "10.96.0.10:53".parse().ok();
        let mut c = b.clone();
        c.dns_server = "169.254.20.10:53".parse().ok();
        let mut other = f(Kind::Refused, "10.244.3.71:8080", "2024-05-01T15:42:11Z");
        other.dns_server = "10.96.0.10:53".parse().ok();
        for x in [&a, &b, &c, &other] {
            agg.add(x, classify(x));
        }
        let r = agg.report(false);
        let g = r
            .groups
            .iter()
            .find(|g| g.peer == "dns:argocd-redis")
            .unwrap();
        assert_eq!(g.errors, 3);
        assert_eq!(g.dns_name.as_deref(), Some("argocd-redis"));
        let servers: Vec<String> = g.dns_servers.iter().map(ToString::to_string).collect();
        assert_eq!(servers, ["10.96.0.10:53", "169.254.20.10:53"]);
        let refused = r.groups.iter().find(|g| g.peer == "10.244.3.71").unwrap();
        assert!(refused.dns_servers.is_empty() && refused.dns_name.is_none());
        let table = cells_text(&r);
        assert!(table.contains("DNS SERVER"), "{table}");
        let row = table
            .lines()
            .find(|l| l.starts_with("dns:argocd-redis"))
            .unwrap();
        assert!(row.contains("10.96.0.10:53,169.254.20.10:53"), "{table}");
        let json = serde_json::to_value(g).unwrap();
        assert_eq!(json["dns_name"], "argocd-redis");
        assert_eq!(json["dns_servers"][0], "10.96.0.10:53");
    }

    /// The aggregation as it was first written: one ordered map keyed by (peer, class,
    /// service, window), a key built for every failure.
    fn reference(items: &[(ConnFailure, Class, Option<String>, Option<String>)]) -> Vec<Group> {
        let mut map: BTreeMap<(String, Class, Option<String>, Option<String>), Group> =
            BTreeMap::new();
        for (x, class, service, window) in items {
            let mut peer = String::new();
            write_peer(&mut peer, x);
            map.entry((peer.clone(), *class, service.clone(), window.clone()))
                .or_insert_with(|| {
                    Group::new(peer, x, *class, service.as_deref(), window.as_deref())
                })
                .count(x);
        }
        let mut groups: Vec<Group> = map.into_values().collect();
        groups.sort_by(|a, b| b.errors.cmp(&a.errors).then_with(|| a.peer.cmp(&b.peer)));
        groups
    }

    proptest::proptest! {
        #[test]
        fn ipv4_is_written_as_display_writes_it(ip in proptest::prelude::any::<u32>()) {
            let ip = Ipv4Addr::from(ip);
            let mut s = String::new();
            write_ipv4(&mut s, ip);
            proptest::prop_assert_eq!(s, ip.to_string());
        }

        /// Groups, their order (ties included) and their contents are those of the reference.
        #[test]
        fn groups_as_one_map_of_whole_keys_would_make_them(
            items in proptest::collection::vec(
                (0..6usize, 0..4usize, 0..3usize, 0..3usize, 0..4usize, 0..600i64),
                0..200,
            ),
        ) {
            let targets = ["10.244.3.71:8080", "10.244.3.71:9090", "10.244.12.5:53", "[fd00::1]:443"];
            let classes = [Class::StaleTarget, Class::PooledConnection, Class::Blackholed, Class::DnsPath];
            let names = [None, Some("shop/web".to_owned()), Some("shop/api".to_owned())];
            let kinds = [Kind::Refused, Kind::Reset, Kind::Timeout, Kind::DnsTimeout];
            let items: Vec<_> = items
                .into_iter()
                .map(|(peer, class, service, window, kind, secs)| {
                    let mut x = f(kinds[kind], targets.get(peer).copied().unwrap_or("-"), "");
                    x.timestamp = Some(Timestamp::from_second(1_714_578_000 + secs).unwrap());
                    match peer {
                        4 => x.dns_name = Some("api.shop.svc".to_owned()),
                        5 => x.host = Some("db.example.com".to_owned()),
                        _ => {}
                    }
                    (x, classes[class], names[service].clone(), names[window].clone())
                })
                .collect();
            let mut agg = Aggregator::new();
            for (x, class, service, window) in &items {
                agg.add_in(x, *class, service.as_deref(), window.as_deref());
            }
            proptest::prop_assert_eq!(agg.report(false).groups, reference(&items));
        }
    }
}
