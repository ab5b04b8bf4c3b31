//! deploy/grafana/ghostip.json: a Grafana dashboard whose every PromQL expression (panel
//! targets and template variables) reads only series ghostip exports, with labels those
//! series or their scrape target carry, and that has the panels the docs promise.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::Value;

use crate::exported_metrics;
use exported_metrics::{check_promql, exported};

fn dashboard() -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/grafana/ghostip.json");
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// (panel title, expression) of every query in the dashboard, rows' nested panels included.
fn queries(d: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut panels: Vec<&Value> = d["panels"].as_array().unwrap().iter().collect();
    while let Some(p) = panels.pop() {
        if let Some(nested) = p["panels"].as_array() {
            panels.extend(nested);
        }
        for t in p["targets"].as_array().into_iter().flatten() {
            let expr = t["expr"]
                .as_str()
                .unwrap_or_else(|| panic!("{p}: target without expr"));
            out.push((p["title"].as_str().unwrap().to_string(), expr.to_string()));
        }
    }
    for v in d["templating"]["list"].as_array().unwrap() {
        if v["type"] == "query" {
            let q = v["query"]["query"].as_str().unwrap();
            // label_values(SERIES, LABEL): SERIES is PromQL, LABEL one of its labels.
            let inner = q
                .strip_prefix("label_values(")
                .and_then(|s| s.strip_suffix(')'))
                .unwrap_or_else(|| panic!("variable {}: {q}", v["name"]));
            let (series, label) = inner.rsplit_once(',').unwrap();
            out.push((
                format!("variable {}", v["name"]),
                format!("count by ({}) ({series})", label.trim()),
            ));
        }
    }
    out
}

#[test]
fn every_query_reads_series_ghostip_exports() {
    let series = exported();
    let d = dashboard();
    let qs = queries(&d);
    assert!(qs.len() >= 15, "{} queries", qs.len());
    let mut read = BTreeSet::new();
    for (title, expr) in &qs {
        // Grafana's variables stand for a duration or a regex: substitute plain values.
        let promql = expr
            .replace("$__rate_interval", "5m")
            .replace("$window", "1h");
        read.extend(check_promql(title, &promql, &series));
    }
    // What the dashboard is for: stale windows, stuck paths, stale endpoints per node, the
    // probe budget and the truth.
    for m in [
        "ghostip_stale_window_seconds_bucket",
        "ghostip_stuck_paths",
        "ghostip_stale_endpoints",
        "ghostip_probe_queries_total",
        "ghostip_probe_errors_total",
        "ghostip_truth_synced",
    ] {
        assert!(read.contains(m), "no panel reads {m}");
    }
}

#[test]
fn the_checker_rejects_what_ghostip_does_not_export() {
    let series = exported();
    let bad = [
        "rate(ghostip_probe_queries[5m])", // a counter without _total
        "ghostip_stuck_paths_bucket",      // a gauge has no buckets
        "sum by (service) (ghostip_stale_endpoints_total)",
        "max by (reason) (ghostip_stuck_paths)", // no such label
        "ghostip_truth_synced{path_kind=\"dns-pod\"}", // no such label
        "up",                                    // not ghostip's
    ];
    for e in bad {
        let r = std::panic::catch_unwind(|| check_promql("bad", e, &series));
        assert!(r.is_err(), "accepted: {e}");
    }
    check_promql(
        "good",
        "histogram_quantile(0.9, sum by (le, namespace, service) (rate(ghostip_stale_window_seconds_bucket{layer=\"dns\"}[5m])))",
        &series,
    );
}

#[test]
fn panels_are_laid_out_and_named() {
    let d = dashboard();
    assert_eq!(d["uid"], "ghostip-stale");
    let mut ids = BTreeSet::new();
    for p in d["panels"].as_array().unwrap() {
        assert!(ids.insert(p["id"].as_u64().unwrap()), "duplicate id: {p}");
        let g = &p["gridPos"];
        let (x, w) = (g["x"].as_u64().unwrap(), g["w"].as_u64().unwrap());
        assert!(x + w <= 24, "{}: wider than the grid", p["title"]);
        assert!(!p["title"].as_str().unwrap().is_empty());
        if p["type"] != "row" {
            assert!(
                p["description"].as_str().is_some_and(|s| s.len() > 20),
                "{}: no description",
                p["title"]
            );
            assert_eq!(p["datasource"]["uid"], "${datasource}");
        }
    }
    let vars: Vec<&str> = d["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    for v in ["datasource", "namespace", "service", "window"] {
        assert!(vars.contains(&v), "no ${v} variable");
    }
}
