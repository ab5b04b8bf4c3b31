//! The series ghostip exports and their label names, for checking PromQL written against
//! them (alert rules, the Grafana dashboard).
//!
//! The fixed metrics come from a real [`ghostip::metrics::Metrics`] registry with one sample
//! in every family, encoded by the exporter's own code: the series names (`_total` of
//! counters, `_bucket`/`_sum`/`_count` of histograms) and labels are what a scrape shows.
//! The node-local layers' metrics are each layer's `layers/<name>/metrics.rs` and are read from
//! their source: each `r.register("name", …, a.field.clone())`, the field's type in the struct
//! it registers, and the fields of its label struct.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use ghostip::metrics::{ErrorLabels, Metrics, QueryLabels, StaleLabels, StuckLabels, WindowLabels};

/// Labels Prometheus adds to every series of a target scraped through a ServiceMonitor.
pub const TARGET_LABELS: &[&str] = &[
    "namespace",
    "pod",
    "service",
    "container",
    "endpoint",
    "instance",
    "job",
];

/// Series name → its label names.
pub type Series = BTreeMap<String, BTreeSet<String>>;

/// Every series ghostip (watch and agent) exports.
pub fn exported() -> Series {
    let mut out = fixed_metrics();
    for (name, labels) in agent_metrics() {
        out.entry(name).or_default().extend(labels);
    }
    out
}

/// The fixed metrics, from the encoded exposition of a registry with one sample per family.
fn fixed_metrics() -> Series {
    let m = Metrics::new();
    let s = String::new;
    m.stale_window
        .get_or_create(&WindowLabels {
            layer: s(),
            path_kind: s(),
            namespace: s(),
            service: s(),
        })
        .observe(1.0);
    m.stale_endpoints
        .get_or_create(&StaleLabels {
            layer: s(),
            path_kind: s(),
            node: s(),
        })
        .set(1);
    m.over_lag_endpoints
        .get_or_create(&StaleLabels {
            layer: s(),
            path_kind: s(),
            node: s(),
        })
        .set(1);
    m.stuck_paths
        .get_or_create(&StuckLabels {
            layer: s(),
            node: s(),
        })
        .set(1);
    m.probe_queries
        .get_or_create(&QueryLabels { path_kind: s() })
        .inc();
    m.probe_errors
        .get_or_create(&ErrorLabels {
            path_kind: s(),
            reason: s(),
        })
        .inc();
    m.truth_synced.set(1);
    let text = m.encode();
    let mut out = Series::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let (name, rest) = line
            .split_once(['{', ' '])
            .unwrap_or_else(|| panic!("sample line {line:?}"));
        let labels = out.entry(name.to_string()).or_default();
        if line.as_bytes()[name.len()] == b'{' {
            let inner = &rest[..rest.find('}').unwrap()];
            for pair in inner.split(',').filter(|p| !p.is_empty()) {
                labels.insert(pair.split_once('=').unwrap().0.to_string());
            }
        }
    }
    assert!(
        out.contains_key("ghostip_stale_window_seconds_bucket")
            && out.contains_key("ghostip_probe_queries_total"),
        "{text}"
    );
    out
}

/// The node-local layers' metrics, from each layer's `src/layers/<name>/metrics.rs`.
fn agent_metrics() -> Series {
    let layers = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/layers");
    let mut out = Series::new();
    let mut files = 0;
    for dir in std::fs::read_dir(&layers).unwrap() {
        let file = dir.unwrap().path().join("metrics.rs");
        if !file.is_file() {
            continue;
        }
        files += 1;
        let src = std::fs::read_to_string(&file).unwrap();
        layer_metrics(&src, &mut out);
    }
    assert!(
        files >= 3,
        "no layer metrics found under {}",
        layers.display()
    );
    assert!(out.len() >= 6, "layer metrics found: {out:?}");
    out
}

/// The series one layer's metrics file registers: each `r.register("name", …,
/// a.field.clone())`, the field's type in the struct whose `register` it is, and the fields of
/// its label struct.
fn layer_metrics(src: &str, out: &mut Series) {
    let owner = src
        .split("\nimpl ")
        .find(|i| i.contains("fn register("))
        .and_then(|i| i.split_whitespace().next())
        .unwrap();
    // Field name → type, in the metrics struct.
    let fields = struct_fields(src, owner);
    for call in src.split("r.register(").skip(1) {
        let name = call.split('"').nth(1).unwrap();
        let field = call
            .split("a.")
            .nth(1)
            .and_then(|f| f.split(".clone()").next())
            .unwrap_or_else(|| panic!("register({name}): no a.FIELD.clone()"));
        let ty = fields
            .get(field)
            .unwrap_or_else(|| panic!("{owner} has no field {field}"));
        let labels: BTreeSet<String> = match ty.strip_prefix("Family<") {
            Some(rest) => {
                let label_struct = rest.split(',').next().unwrap().trim();
                struct_fields(src, label_struct).into_keys().collect()
            }
            None => BTreeSet::new(),
        };
        let kind = ty.trim_start_matches("Family<");
        let kind = kind.rsplit(", ").next().unwrap_or(kind);
        let names: Vec<String> = if kind.starts_with("Counter") || ty.starts_with("Counter") {
            vec![format!("{name}_total")]
        } else if kind.starts_with("Histogram") {
            ["_bucket", "_sum", "_count"]
                .iter()
                .map(|s| format!("{name}{s}"))
                .collect()
        } else {
            vec![name.to_string()]
        };
        for n in names {
            out.entry(n).or_default().extend(labels.iter().cloned());
        }
    }
}

/// `field: Type` pairs of `struct NAME { … }` in `src`.
fn struct_fields(src: &str, name: &str) -> BTreeMap<String, String> {
    let start = src
        .find(&format!("struct {name} {{"))
        .unwrap_or_else(|| panic!("no struct {name}"));
    let body = &src[start..];
    let body = &body[body.find('{').unwrap() + 1..body.find("\n}").unwrap()];
    body.lines()
        .map(str::trim)
        .filter(|l| !l.starts_with("//") && !l.starts_with('#') && l.contains(':'))
        .map(|l| {
            let (f, t) = l.split_once(':').unwrap();
            (
                f.trim().trim_start_matches("pub ").to_string(),
                t.trim().trim_end_matches(',').to_string(),
            )
        })
        .collect()
}

/// Checks one PromQL expression against `series`: every `ghostip_*` name is exported, every
/// label it matches on or groups by is a label of one of its series or of the target. Returns
/// the series it reads.
pub fn check_promql(what: &str, expr: &str, series: &Series) -> Vec<String> {
    let mut used = Vec::new();
    let mut labels = BTreeSet::new();
    for w in idents(expr) {
        if w.starts_with("ghostip_") {
            let l = series
                .get(&w)
                .unwrap_or_else(|| panic!("{what}: {w} is not exported by ghostip\n  {expr}"));
            labels.extend(l.iter().cloned());
            used.push(w);
        }
    }
    assert!(!used.is_empty(), "{what}: reads no ghostip metric: {expr}");
    labels.extend(TARGET_LABELS.iter().map(|s| s.to_string()));
    for l in label_names(expr) {
        assert!(
            labels.contains(&l),
            "{what}: label {l} is on none of {used:?}\n  {expr}"
        );
    }
    used
}

/// Identifiers of an expression (metric names, functions, keywords, labels).
fn idents(expr: &str) -> Vec<String> {
    without_strings(expr)
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
        .filter(|w| !w.is_empty())
        .map(str::to_string)
        .collect()
}

/// The expression with the contents of quoted strings blanked out.
fn without_strings(expr: &str) -> String {
    let mut out = String::with_capacity(expr.len());
    let mut quote = None;
    for c in expr.chars() {
        match quote {
            Some(q) if c == q => {
                quote = None;
                out.push(c);
            }
            Some(_) => out.push(' '),
            None => {
                if c == '"' || c == '\'' || c == '`' {
                    quote = Some(c);
                }
                out.push(c);
            }
        }
    }
    out
}

/// Label names in `{…}` matchers and in `by (…)`, `without (…)`, `on (…)`, `ignoring (…)`.
fn label_names(expr: &str) -> Vec<String> {
    let e = without_strings(expr);
    let mut out = Vec::new();
    // Matchers: NAME op "…" inside braces.
    for part in e.split('{').skip(1) {
        let inner = part.split('}').next().unwrap_or("");
        for m in inner.split(',') {
            let name = m
                .split(['=', '!', '~'])
                .next()
                .unwrap_or("")
                .trim()
                .to_string();
            if !name.is_empty() {
                out.push(name);
            }
        }
    }
    // Grouping clauses.
    for kw in ["by", "without", "on", "ignoring"] {
        let mut rest = e.as_str();
        while let Some(i) = find_word(rest, kw) {
            let after = rest[i + kw.len()..].trim_start();
            if let Some(list) = after.strip_prefix('(') {
                let list = &list[..list.find(')').unwrap()];
                out.extend(
                    list.split(',')
                        .map(|s| s.trim().to_string())
                        .filter(|s| !s.is_empty()),
                );
            }
            rest = &rest[i + kw.len()..];
        }
    }
    out
}

/// Position of `word` as a whole word in `s`.
fn find_word(s: &str, word: &str) -> Option<usize> {
    let b = s.as_bytes();
    let is_ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let mut from = 0;
    while let Some(i) = s[from..].find(word).map(|i| i + from) {
        let before = i == 0 || !is_ident(b[i - 1]);
        let after = i + word.len() >= b.len() || !is_ident(b[i + word.len()]);
        if before && after {
            return Some(i);
        }
        from = i + word.len();
    }
    None
}
