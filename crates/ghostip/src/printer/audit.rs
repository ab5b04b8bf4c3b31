//! Renders an audit report as a plain-text listing, JSON, or SARIF 2.1.0.
//!
//! The text form groups findings by object, ripgrep-style: a heading with the object and where
//! it was read, then one indented block per finding (severity, rule id, message, fix), then a
//! summary line. SARIF puts the fix in each result's message and properties, the object as a
//! logical location, and unreadable inputs as tool execution notifications.
//!
//! [`listing`] fits the text form to a terminal: below the width where the other tables turn
//! into `key: value` lists ([`crate::printer::PLAIN_BELOW`] columns), each finding is such a
//! list too, wrapped at spaces only: a word longer than the line stands alone on its line,
//! never cut in the middle (a rule id, a field name or a path is copied as it is).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::{Value, json};

use super::table::{Layout, fit_text};
use ghostip_analysis::audit::inventory::ObjectRef;
use ghostip_analysis::audit::rules::{AuditReport, Finding, RULES, ServiceBudget, Severity};

/// The SARIF schema URI.
pub const SARIF_SCHEMA: &str = "https://json.schemastore.org/sarif-2.1.0.json";

/// Findings grouped by object, in the order objects first appear.
fn by_object(report: &AuditReport) -> Vec<(&ObjectRef, Vec<&Finding>)> {
    let mut order: Vec<&ObjectRef> = Vec::new();
    let mut groups: BTreeMap<&ObjectRef, Vec<&Finding>> = BTreeMap::new();
    for f in &report.findings {
        if !groups.contains_key(&f.object) {
            order.push(&f.object);
        }
        groups.entry(&f.object).or_default().push(f);
    }
    order
        .into_iter()
        .map(|o| (o, groups.remove(o).unwrap_or_default()))
        .collect()
}

/// The text listing fitted to `layout`: [`table`] wrapped to the width, or below
/// [`crate::printer::PLAIN_BELOW`] columns a `key: value` list per finding whose words are
/// never cut.
pub fn listing(report: &AuditReport, layout: &Layout) -> String {
    if !layout.plain() {
        return fit_text(&table(report), layout);
    }
    let mut lines: Vec<String> = Vec::new();
    for (obj, findings) in by_object(report) {
        lines.push(format!("object: {obj}"));
        lines.push(format!("read from: {}", obj.origin));
        for f in findings {
            lines.push(String::new());
            lines.push(format!("severity: {}", f.severity.as_str()));
            lines.push(format!("rule: {}", f.rule));
            lines.push(format!("message: {}", f.message));
            if let Some(s) = &f.service {
                lines.push(format!("service: {s}"));
            }
            for c in &f.caveats {
                lines.push(format!("caveat: {c}"));
            }
            lines.push(format!("fix: {}", f.fix));
        }
        lines.push(String::new());
    }
    for b in report.services.iter().filter(|b| b.headless) {
        let (chain, pods) = budget_text(b);
        lines.push(format!("budget: {} {chain}", b.service));
        lines.push(format!("pods: {pods}"));
        lines.push(String::new());
    }
    for p in &report.problems {
        lines.push(format!("not read: {p}"));
    }
    lines.push(summary(report));
    let mut out = String::new();
    for line in &lines {
        for l in wrap_words(line, layout.width) {
            out.push_str(&l);
            out.push('\n');
        }
    }
    out
}

/// `line` broken at spaces into lines of at most `w` characters, continuation lines indented
/// by two where the part fits beside the indent. A word longer than a line (a path, a list) is broken only after a `/`, `,` or `-`,
/// never inside a run of letters or digits; a part still too long stands alone on its line.
fn wrap_words(line: &str, w: usize) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut len = 0usize;
    let mut has_word = false;
    for word in line.split(' ').filter(|w| !w.is_empty()) {
        for piece in pieces(word, w) {
            let n = piece.text.chars().count();
            if has_word && len + 1 + n > w {
                out.push(std::mem::take(&mut cur));
                // Continuation lines are indented, unless the indent would push the part
                // past the width.
                len = if n + 2 <= w { 2 } else { 0 };
                cur.push_str(&" ".repeat(len));
                has_word = false;
            }
            // The parts of one broken word follow each other without a space.
            if has_word && !piece.joined {
                cur.push(' ');
                len += 1;
            }
            cur.push_str(piece.text);
            len += n;
            has_word = true;
        }
    }
    if has_word || out.is_empty() {
        out.push(cur);
    }
    out
}

/// A part of a word ([`pieces`]); `joined`: it goes on the word's previous part.
struct Piece<'a> {
    text: &'a str,
    joined: bool,
}

/// `word` whole when it fits `w`, else cut after its `/`, `,` and `-` into parts of at most
/// `w` characters where the separators allow.
fn pieces(word: &str, w: usize) -> Vec<Piece<'_>> {
    if word.chars().count() <= w {
        return vec![Piece {
            text: word,
            joined: false,
        }];
    }
    // Segments end after each separator.
    let mut segments = Vec::new();
    let mut start = 0;
    for (i, c) in word.char_indices() {
        if matches!(c, '/' | ',' | '-') {
            let end = i + c.len_utf8();
            segments.push(word.get(start..end).unwrap_or_default());
            start = end;
        }
    }
    if start < word.len() {
        segments.push(word.get(start..).unwrap_or_default());
    }
    let mut out: Vec<Piece<'_>> = Vec::new();
    let (mut from, mut to, mut n) = (0usize, 0usize, 0usize);
    for seg in segments {
        let m = seg.chars().count();
        if n > 0 && n + m > w {
            out.push(Piece {
                text: word.get(from..to).unwrap_or_default(),
                joined: !out.is_empty(),
            });
            from = to;
            n = 0;
        }
        to += seg.len();
        n += m;
    }
    if to > from {
        out.push(Piece {
            text: word.get(from..to).unwrap_or_default(),
            joined: !out.is_empty(),
        });
    }
    out
}

/// A headless Service's budget chain (`dns 30 s + client cache 30 s = 60 s`) and the pods
/// backing it.
fn budget_text(b: &ServiceBudget) -> (String, String) {
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
    (format!("{dns}{client} = {total}"), backing)
}

/// The text listing.
pub fn table(report: &AuditReport) -> String {
    let mut out = String::new();
    for (obj, findings) in by_object(report) {
        let _ = writeln!(out, "{obj}  ({})", obj.origin);
        for f in findings {
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
            let (chain, backing) = budget_text(b);
            let _ = writeln!(
                out,
                "  {:<32} {chain}   pods: {backing}",
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
    let _ = writeln!(out, "{}", summary(report));
    out
}

/// The last line: findings by severity, objects and files read, inputs not read.
fn summary(report: &AuditReport) -> String {
    let objects: usize = report.inputs.objects.values().sum();
    format!(
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
    )
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn narrow_lines_break_at_spaces_and_separators_only() {
        // Words that fit are kept whole and packed; continuation lines are indented.
        assert_eq!(
            wrap_words("fix: set terminationGracePeriodSeconds to 70", 20),
            ["fix: set", "terminationGracePeriodSeconds", "  to 70"]
        );
        // A path is broken after its slashes, the parts joined without spaces (a part that
        // fits the width but not beside the indent goes without it).
        assert_eq!(
            wrap_words("read from: /srv/manifests/app/deploy.yaml:3", 16),
            ["read from:", "/srv/manifests/", "  app/", "  deploy.yaml:3"]
        );
        // A part with no separator longer than the line stands alone, whole.
        assert_eq!(
            wrap_words("rule: GIP-DNS-001", 10),
            ["rule:", "  GIP-DNS-", "  001"]
        );
        assert_eq!(wrap_words("", 10), [""]);
        // Every line fits, or is one part that cannot be cut.
        let text = "message: expect up to 60 s of dials to dead IPs per rollout of demo/web-7c9d8f";
        for w in 10..40 {
            let lines = wrap_words(text, w);
            let joined: String = lines.iter().map(|l| l.trim()).collect::<Vec<_>>().join(" ");
            for word in text.split(' ').filter(|w| !w.contains(['/', '-', ','])) {
                assert!(
                    joined.split(' ').any(|j| j == word),
                    "{w}: {word} in {lines:?}"
                );
            }
            for l in &lines {
                assert!(
                    l.chars().count() <= w || !l.trim().contains(' '),
                    "{w}: {l:?}"
                );
            }
        }
    }
}
