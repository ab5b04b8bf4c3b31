//! Renders an audit report as a plain-text listing, JSON, or SARIF 2.1.0.
//!
//! The text form groups findings by object, ripgrep-style: a heading with the object and where
//! it was read, then one indented block per finding (severity, rule id, message, fix), then a
//! summary line. SARIF puts the fix in each result's message and properties, the object as a
//! logical location, and unreadable inputs as tool execution notifications.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::{Value, json};

use super::inventory::ObjectRef;
use super::rules::{AuditReport, Finding, RULES, Severity};

/// The SARIF schema URI.
pub const SARIF_SCHEMA: &str = "https://json.schemastore.org/sarif-2.1.0.json";

/// The text listing.
pub fn table(report: &AuditReport) -> String {
    let mut out = String::new();
    // Group by object, keeping the order of first appearance.
    let mut order: Vec<&ObjectRef> = Vec::new();
    let mut groups: BTreeMap<&ObjectRef, Vec<&Finding>> = BTreeMap::new();
    for f in &report.findings {
        if !groups.contains_key(&f.object) {
            order.push(&f.object);
        }
        groups.entry(&f.object).or_default().push(f);
    }
    for obj in order {
        let _ = writeln!(out, "{obj}  ({})", obj.origin);
        for f in groups.get(obj).into_iter().flatten() {
            let _ = writeln!(
                out,
                "  {:<7} {:<14} {}",
                f.severity.as_str(),
                f.rule,
                f.message
            );
            if let Some(s) = &f.service {
                let _ = writeln!(out, "{:<24} service: {s}", "");
            }
            for c in &f.caveats {
                let _ = writeln!(out, "{:<24} caveat: {c}", "");
            }
            let _ = writeln!(out, "{:<24} fix: {}", "", f.fix);
        }
        out.push('\n');
    }
    if !report.services.is_empty() {
        let _ = writeln!(out, "Budgets (headless Services):");
        let mut any = false;
        for b in report.services.iter().filter(|b| b.headless) {
            any = true;
            let dns = b
                .dns_lag_s
                .map_or("dns ?".to_string(), |d| format!("dns {d} s"));
            let client = match b.client_cache_s {
                Some(t) if t < 0 => " + client cache forever".to_string(),
                Some(t) => format!(" + client cache {t} s"),
                None => String::new(),
            };
            let total = b
                .budget_s
                .map_or("unbounded".to_string(), |t| format!("{t} s"));
            let backing = if b.workloads.is_empty() {
                "no workload found".to_string()
            } else {
                b.workloads.join(", ")
            };
            let _ = writeln!(
                out,
                "  {:<32} {dns}{client} = {total}   pods: {backing}",
                b.service.to_string()
            );
        }
        if !any {
            let _ = writeln!(out, "  none");
        }
        if any && report.dns.iter().any(|l| !l.caveats.is_empty()) {
            let _ = writeln!(
                out,
                "  (the DNS figures rest on the caveats shown with the Corefiles above)"
            );
        }
        if any && report.dns.is_empty() {
            let _ = writeln!(
                out,
                "  (dns ?: no usable Corefile was read; add the kube-system/coredns ConfigMap with -f, or use --cluster)"
            );
        }
        out.push('\n');
    }
    for p in &report.problems {
        let _ = writeln!(out, "not read: {p}");
    }
    let objects: usize = report.inputs.objects.values().sum();
    let _ = writeln!(
        out,
        "{} finding{} ({} error{}, {} warning{}, {} note{}) in {objects} object{} from {}{}",
        report.findings.len(),
        plural(report.findings.len()),
        report.count(Severity::Error),
        plural(report.count(Severity::Error)),
        report.count(Severity::Warning),
        plural(report.count(Severity::Warning)),
        report.count(Severity::Note),
        plural(report.count(Severity::Note)),
        plural(objects),
        if report.inputs.files == 0 {
            "the cluster".to_string()
        } else {
            format!(
                "{} file{}",
                report.inputs.files,
                plural(report.inputs.files)
            )
        },
        if report.problems.is_empty() {
            String::new()
        } else {
            format!(
                "; {} input{} not read",
                report.problems.len(),
                plural(report.problems.len())
            )
        }
    );
    out
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// The JSON document.
pub fn json(report: &AuditReport) -> Value {
    json!({
        "inputs": report.inputs,
        "problems": report.problems,
        "dns": report.dns,
        "services": report.services,
        "findings": report.findings,
        "summary": {
            "error": report.count(Severity::Error),
            "warning": report.count(Severity::Warning),
            "note": report.count(Severity::Note),
        },
    })
}

/// The SARIF 2.1.0 log.
pub fn sarif(report: &AuditReport, version: &str) -> Value {
    let rules: Vec<Value> = RULES
        .iter()
        .map(|r| {
            json!({
                "id": r.id,
                "name": r.name,
                "shortDescription": {"text": r.what},
                "fullDescription": {"text": format!("{}: {}", r.what, r.why)},
                "help": {"text": r.why},
                "defaultConfiguration": {"level": r.severity.as_str()},
            })
        })
        .collect();
    let results: Vec<Value> = report
        .findings
        .iter()
        .map(|f| {
            let mut result = json!({
                "ruleId": f.rule,
                "level": f.severity.as_str(),
                "message": {"text": sarif_text(f)},
                "locations": [location(&f.object)],
                "properties": {
                    "fix": f.fix,
                    "figures": f.figures,
                    "service": f.service.as_ref().map(ToString::to_string),
                    "object": {"kind": f.object.kind, "namespace": f.object.namespace, "name": f.object.name},
                },
            });
            if let Some(obj) = result.as_object_mut() {
                obj.insert("ruleIndex".to_string(), json!(f.rule.index()));
            }
            if let Some(props) = result.get_mut("properties").and_then(Value::as_object_mut)
                && !f.caveats.is_empty()
            {
                props.insert("caveats".to_string(), json!(f.caveats));
            }
            result
        })
        .collect();
    let notifications: Vec<Value> = report
        .problems
        .iter()
        .map(|p| {
            let mut phys = json!({"artifactLocation": {"uri": uri(&p.origin.file)}});
            if let (Some(line), Some(obj)) = (p.origin.line, phys.as_object_mut()) {
                obj.insert("region".to_string(), json!({"startLine": line}));
            }
            json!({
                "level": "error",
                "message": {"text": p.message},
                "locations": [{"physicalLocation": phys}],
            })
        })
        .collect();
    json!({
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {
                "name": "ghostip",
                "version": version,
                "informationUri": "https://example.invalid/ghostip/docs/AUDIT.md",
                "rules": rules,
            }},
            "invocations": [{
                "executionSuccessful": report.problems.is_empty(),
                "toolExecutionNotifications": notifications,
            }],
            "results": results,
        }],
    })
}

/// The message, its caveats, then the fix.
fn sarif_text(f: &Finding) -> String {
    let mut text = sentence(&f.message);
    if !f.caveats.is_empty() {
        text.push_str(&format!(" Caveats: {}", sentence(&f.caveats.join("; "))));
    }
    text.push_str(&format!(" Fix: {}", f.fix));
    text
}

fn sentence(s: &str) -> String {
    if s.ends_with('.') {
        s.to_string()
    } else {
        format!("{s}.")
    }
}

/// A relative path as a URI reference (forward slashes, spaces and `%` escaped).
fn uri(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for ch in path.chars() {
        match ch {
            '\\' => out.push('/'),
            ' ' => out.push_str("%20"),
            '%' => out.push_str("%25"),
            '#' => out.push_str("%23"),
            '?' => out.push_str("%3F"),
            c => out.push(c),
        }
    }
    out
}

fn location(obj: &ObjectRef) -> Value {
    let qualified = if obj.namespace.is_empty() {
        format!("{}/{}", obj.kind, obj.name)
    } else {
        format!("{}/{}/{}", obj.namespace, obj.kind, obj.name)
    };
    let logical = json!([{"fullyQualifiedName": qualified, "kind": "resource"}]);
    if obj.origin.is_cluster() {
        return json!({"logicalLocations": logical});
    }
    let mut phys = json!({"artifactLocation": {"uri": uri(&obj.origin.file)}});
    if let (Some(line), Some(o)) = (obj.origin.line, phys.as_object_mut()) {
        o.insert("region".to_string(), json!({"startLine": line}));
    }
    json!({"physicalLocation": phys, "logicalLocations": logical})
}
