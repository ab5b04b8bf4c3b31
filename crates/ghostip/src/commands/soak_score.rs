//! `ghostip soak-score DIR`: reads a soak's ground truth, ledgers and scraped metrics, and prints how trustworthy ghostip was.
//!
//! Only the reading is here; the matching and the chart are in
//! `ghostip_analysis::soak`. The directory's contract is in docs/SOAK.md.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use ghostip_analysis::soak::{
    GroundTruth, MetricSample, ScoreInput, SoakFinding, SoakGap, StalledSample, finding_node,
    score, svg,
};
use ghostip_core::Time;

use super::{Outcome, print_json};
use crate::cli::{GlobalArgs, OutputFormat, SoakScoreArgs};
use crate::ledger::Ledger;
use crate::printer::soak::render_soak_table;

pub(super) fn run(g: &GlobalArgs, args: SoakScoreArgs) -> anyhow::Result<Outcome> {
    let input = read_soak_dir(&args.dir, args.max_input_size, crate::clock::wall_now())?;
    let score = score(&input);
    if let Some(path) = &args.svg {
        std::fs::write(path, svg::render(&score))
            .with_context(|| format!("writing the chart {}", path.display()))?;
    }
    match g.output {
        OutputFormat::Json => print_json(&score)?,
        OutputFormat::Table | OutputFormat::Wide => {
            crate::printer::print_text(&render_soak_table(&score, &g.output.layout()))
        }
        OutputFormat::Sarif => bail!("-o sarif is only written by `ghostip audit`"),
    }
    Ok(if score.clean {
        Outcome::Clean
    } else {
        Outcome::Finding
    })
}

/// Reads a soak directory: `ground-truth.json`, every `ledgers/*.db` (read only) and every
/// `metrics/<source>/<unix-seconds>.prom`. `now` closes the window of the truth gaps read
/// from an interrupted soak. Each file read is at most `limit` bytes.
///
/// # Errors
/// A missing or unreadable file, JSON or exposition text that does not parse (naming the
/// file and line), a `.prom` file whose name is not a Unix time, a ledger that cannot be
/// opened read-only.
pub fn read_soak_dir(dir: &Path, limit: u64, now: Time) -> anyhow::Result<ScoreInput> {
    let truth_path = dir.join("ground-truth.json");
    let bytes = crate::input::read_all(&truth_path, limit)
        .with_context(|| format!("reading {}", truth_path.display()))?;
    let truth: GroundTruth = serde_json::from_slice(&bytes)
        .with_context(|| format!("reading {}", truth_path.display()))?;
    let ledger_dir = dir.join("ledgers");
    let ledgers = sorted_entries(&ledger_dir, "db")?;
    if ledgers.is_empty() {
        bail!("no ledger (*.db) in {}", ledger_dir.display());
    }
    let mut findings = Vec::new();
    let mut gaps = Vec::new();
    let gaps_until = truth.ended.unwrap_or(now).max(truth.started);
    for path in ledgers {
        let name = file_name(&path);
        let ledger_node = name
            .strip_prefix("agent-")
            .and_then(|n| n.strip_suffix(".db"));
        let ledger = Ledger::open_read_only(&path)
            .with_context(|| format!("opening the ledger {}", path.display()))?;
        let read = ledger
            .findings_since(truth.started)
            .with_context(|| format!("reading findings of {}", path.display()))?;
        findings.extend(read.into_iter().map(|f| SoakFinding {
            ledger: name.clone(),
            kind: f.kind.as_str().to_string(),
            node: finding_node(&f.layer, &f.path_id, ledger_node),
            layer: f.layer,
            path_id: f.path_id,
            service: f.service.to_string(),
            target: f.target.ip.to_canonical(),
            t0: f.t0,
            received: f.received,
            converged_by: f.converged_by,
            expected_lag: f.expected_lag,
            window: f.window,
            verdict: f.verdict,
        }));
        let read = ledger
            .truth_gaps(truth.started, gaps_until)
            .with_context(|| format!("reading truth gaps of {}", path.display()))?;
        gaps.extend(read.into_iter().map(|g| SoakGap {
            ledger: name.clone(),
            start: g.start,
            end: g.end,
            reason: g.reason,
        }));
    }
    let samples = read_metrics(&dir.join("metrics"), limit)?;
    let stalled_logged = read_agent_logs(&dir.join("logs"), limit)?;
    Ok(ScoreInput {
        truth,
        findings,
        gaps,
        samples,
        stalled_logged,
    })
}

/// The `component-stalled:` lines of every `logs/agent-<node>.log` (the agent's JSON log, as
/// `kubectl logs` gives it); lines that are not JSON (kubectl's own notes) are skipped; no
/// `logs/` directory reads as no line.
fn read_agent_logs(dir: &Path, limit: u64) -> anyhow::Result<Vec<StalledSample>> {
    if !dir.exists() {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    for path in sorted_entries(dir, "log")? {
        let name = file_name(&path);
        let Some(file_node) = name
            .strip_prefix("agent-")
            .and_then(|n| n.strip_suffix(".log"))
        else {
            continue;
        };
        let bytes = crate::input::read_all(&path, limit)
            .with_context(|| format!("reading {}", path.display()))?;
        for (i, line) in String::from_utf8_lossy(&bytes).lines().enumerate() {
            let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
                continue;
            };
            let message = v["message"].as_str().unwrap_or_default();
            if !message.starts_with("component-stalled:") {
                continue;
            }
            let at: Time = v["timestamp"]
                .as_str()
                .and_then(|t| t.parse().ok())
                .with_context(|| {
                    format!(
                        "reading {}: line {}: a component-stalled line without a timestamp",
                        path.display(),
                        i + 1
                    )
                })?;
            out.push(StalledSample {
                source: name.clone(),
                node: v["node"].as_str().unwrap_or(file_node).to_string(),
                at,
            });
        }
    }
    Ok(out)
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The files of `dir` ending in `.ext`, sorted by name.
fn sorted_entries(dir: &Path, ext: &str) -> anyhow::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let entries = std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))?;
    for e in entries {
        let path = e
            .with_context(|| format!("reading {}", dir.display()))?
            .path();
        if path.extension().is_some_and(|x| x == ext) && path.is_file() {
            out.push(path);
        }
    }
    out.sort();
    Ok(out)
}

/// Every `metrics/<source>/<unix-seconds>.prom`; no `metrics/` directory reads as no scrape.
fn read_metrics(dir: &Path, limit: u64) -> anyhow::Result<Vec<MetricSample>> {
    if !dir.exists() {
        return Ok(Vec::new());
    }
    let mut sources = Vec::new();
    for e in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = e
            .with_context(|| format!("reading {}", dir.display()))?
            .path();
        if path.is_dir() {
            sources.push(path);
        }
    }
    sources.sort();
    let mut out = Vec::new();
    for src in sources {
        let source = file_name(&src);
        for path in sorted_entries(&src, "prom")? {
            let stem = path
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            let at = stem
                .parse::<f64>()
                .ok()
                .filter(|s| s.is_finite())
                .and_then(|s| Time::from_millisecond((s * 1000.0).round() as i64).ok())
                .with_context(|| {
                    format!(
                        "reading {}: the name is not <unix-seconds>.prom",
                        path.display()
                    )
                })?;
            let bytes = crate::input::read_all(&path, limit)
                .with_context(|| format!("reading {}", path.display()))?;
            let text = String::from_utf8(bytes)
                .with_context(|| format!("reading {}: not UTF-8", path.display()))?;
            let parsed = ghostip_session::components::parse_exposition(&text).map_err(|e| {
                anyhow::anyhow!(
                    "reading {}: line {}: {}: `{}`",
                    path.display(),
                    e.line,
                    e.what,
                    e.text
                )
            })?;
            let value = |name: &str| parsed.iter().find(|s| s.name == name).map(|s| s.value);
            out.push(MetricSample {
                source: source.clone(),
                at,
                rss_bytes: value("process_resident_memory_bytes"),
                cpu_seconds: value("process_cpu_seconds_total"),
                component_stalled: {
                    let mut gauges = parsed
                        .iter()
                        .filter(|s| s.name == "ghostip_component_stalled")
                        .peekable();
                    gauges
                        .peek()
                        .is_some()
                        .then(|| gauges.any(|s| s.value >= 1.0))
                },
            });
        }
    }
    Ok(out)
}
