//! Turns the text of one input file into inventory objects, keeping the line each object starts on.
//!
//! Manifests are YAML streams (multi-document, Helm-rendered output with `# Source:` comments,
//! KYAML flow style) or JSON (`kubectl get -o json`, including `List`s), both read with
//! serde-saphyr, which reports the line of every document, List item and syntax error. Raw
//! Corefiles are kept as text. Reading files and walking directories is the caller's job;
//! nothing here does IO.

use std::path::Path;

use serde::Deserialize;
use serde_saphyr::Spanned;

use super::inventory::{InputProblem, Inventory, Origin};

/// What a file holds, judged by its name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileKind {
    /// YAML or JSON Kubernetes objects.
    Manifest,
    /// A raw Corefile (`Corefile`, `Corefile.*`, `*.corefile`).
    Corefile,
}

impl FileKind {
    /// The kind of a file found while walking a directory; `None` for files the audit skips.
    pub fn of(path: &Path) -> Option<Self> {
        let name = path.file_name()?.to_str()?;
        let lower = name.to_ascii_lowercase();
        if lower.starts_with("corefile") || lower.ends_with(".corefile") {
            return Some(Self::Corefile);
        }
        match path.extension()?.to_str()?.to_ascii_lowercase().as_str() {
            "yaml" | "yml" | "json" => Some(Self::Manifest),
            _ => None,
        }
    }

    /// The kind of a file named on the command line: a manifest unless it looks like a Corefile.
    pub fn of_named(path: &Path) -> Self {
        Self::of(path).unwrap_or(Self::Manifest)
    }
}

/// The part of a document needed to locate the items of a `List`.
#[derive(Deserialize)]
struct ItemLines {
    #[serde(default)]
    items: Vec<Spanned<serde::de::IgnoredAny>>,
}

/// Parses a manifest file's text into `inv` (counted as a file read), returning how many
/// documents it held.
///
/// # Errors
///
/// An [`InputProblem`] naming `file` and the line of the first syntax error; nothing from the
/// file is added then.
pub fn add_manifest(inv: &mut Inventory, file: &str, text: &str) -> Result<usize, InputProblem> {
    inv.counts.files += 1;
    let docs: Vec<Spanned<serde_json::Value>> =
        serde_saphyr::from_multiple(text).map_err(|e| yaml_problem(file, &e))?;
    // Item lines of Lists need a second, cheap pass; any failure there only loses the lines.
    let item_lines: Vec<Vec<Origin>> = if docs.iter().any(|d| is_list(&d.value)) {
        serde_saphyr::from_multiple::<Spanned<ItemLines>>(text)
            .map(|all| {
                all.into_iter()
                    .map(|d| {
                        d.value
                            .items
                            .iter()
                            .map(|i| Origin::file(file, line_of(i.referenced.line())))
                            .collect()
                    })
                    .collect()
            })
            .unwrap_or_default()
    } else {
        Vec::new()
    };
    let count = docs.len();
    for (i, doc) in docs.into_iter().enumerate() {
        let origin = Origin::file(file, line_of(doc.referenced.line()));
        let items = item_lines.get(i).map(Vec::as_slice).unwrap_or(&[]);
        if doc.value.is_object() {
            inv.add_value(doc.value, &origin, items);
        } else {
            inv.counts.ignored += 1;
        }
    }
    Ok(count)
}

fn is_list(v: &serde_json::Value) -> bool {
    v.get("kind")
        .and_then(serde_json::Value::as_str)
        .is_some_and(|k| k.ends_with("List"))
}

fn line_of(line: u64) -> Option<usize> {
    usize::try_from(line).ok().filter(|l| *l > 0)
}

fn yaml_problem(file: &str, e: &serde_saphyr::Error) -> InputProblem {
    let line = e.location().and_then(|l| line_of(l.line()));
    // The error's own text may repeat the position and quote the source; keep its first line.
    let text = e.to_string();
    let mut first = text.lines().next().unwrap_or("invalid YAML").trim();
    // Drop the "error: line N column M:" prefix; the line is in the origin.
    first = first.strip_prefix("error:").unwrap_or(first).trim_start();
    if first.starts_with("line ")
        && let Some((_, rest)) = first.split_once(": ")
    {
        first = rest;
    }
    InputProblem {
        origin: Origin::file(file, line),
        message: format!("does not parse as YAML or JSON: {first}"),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn documents_and_list_items_keep_their_lines() {
        let text = "# Source: chart/templates/svc.yaml\n---\napiVersion: v1\nkind: Service\nmetadata:\n  name: web\nspec:\n  clusterIP: None\n---\n---\napiVersion: v1\nkind: List\nitems:\n- apiVersion: apps/v1\n  kind: Deployment\n  metadata: {name: a}\n- apiVersion: apps/v1\n  kind: Deployment\n  metadata: {name: b}\n";
        let mut inv = Inventory::new("default");
        let n = add_manifest(&mut inv, "m.yaml", text).unwrap();
        assert_eq!(n, 2);
        assert_eq!(inv.services[0].obj.origin.to_string(), "m.yaml:3");
        assert!(inv.services[0].headless);
        let lines: Vec<String> = inv
            .workloads
            .iter()
            .map(|w| w.obj.origin.to_string())
            .collect();
        assert_eq!(lines, ["m.yaml:14", "m.yaml:17"]);
    }

    #[test]
    fn json_lists_parse() {
        let text = "{\n  \"apiVersion\": \"v1\",\n  \"kind\": \"List\",\n  \"items\": [\n    {\n      \"apiVersion\": \"v1\",\n      \"kind\": \"Service\",\n      \"metadata\": {\"name\": \"web\", \"namespace\": \"shop\"}\n    }\n  ]\n}\n";
        let mut inv = Inventory::new("default");
        add_manifest(&mut inv, "l.json", text).unwrap();
        assert_eq!(inv.services[0].key.to_string(), "shop/web");
        assert_eq!(inv.services[0].obj.origin.line, Some(5));
    }

    #[test]
    fn syntax_errors_name_file_and_line() {
        let text = "apiVersion: v1\nkind: Service\nmetadata:\n  name: web\n spec: [\n";
        let mut inv = Inventory::new("default");
        let e = add_manifest(&mut inv, "bad.yaml", text).unwrap_err();
        assert_eq!(e.origin.file, "bad.yaml");
        assert!(e.origin.line.is_some_and(|l| (4..=6).contains(&l)), "{e}");
        assert!(inv.services.is_empty());
    }

    proptest::proptest! {
        #[test]
        fn never_panics_on_arbitrary_text(text in ".{0,300}") {
            let mut inv = Inventory::new("default");
            let _ = add_manifest(&mut inv, "fuzz.yaml", &text);
            let _ = super::super::audit(&inv, &super::super::AuditConfig::default());
        }

        #[test]
        fn never_panics_on_manifest_like_text(
            parts in proptest::collection::vec(
                proptest::prop_oneof![
                    proptest::strategy::Just("apiVersion: apps/v1\n".to_string()),
                    proptest::strategy::Just("kind: Deployment\n".to_string()),
                    proptest::strategy::Just("kind: Service\n".to_string()),
                    proptest::strategy::Just("kind: List\nitems:\n".to_string()),
                    proptest::strategy::Just("metadata: {name: web}\n".to_string()),
                    proptest::strategy::Just("spec:\n".to_string()),
                    proptest::strategy::Just("  replicas: -3\n".to_string()),
                    proptest::strategy::Just("  clusterIP: None\n".to_string()),
                    proptest::strategy::Just("  strategy: {rollingUpdate: {maxSurge: '250%'}}\n".to_string()),
                    proptest::strategy::Just("  template: {spec: {containers: [{name: c, lifecycle: {preStop: {sleep: {seconds: -1}}}}]}}\n".to_string()),
                    proptest::strategy::Just("data:\n  Corefile: \".:53 {\\n cache 30\\n}\"\n".to_string()),
                    proptest::strategy::Just("---\n".to_string()),
                    proptest::strategy::Just("- ".to_string()),
                    proptest::strategy::Just("  ".to_string()),
                    "[a-z{}:\\[\\],\n -]{0,12}",
                ],
                0..30,
            )
        ) {
            let text = parts.concat();
            let mut inv = Inventory::new("default");
            let _ = add_manifest(&mut inv, "fuzz.yaml", &text);
            let _ = super::super::audit(&inv, &super::super::AuditConfig::default());
        }
    }

    #[test]
    fn file_kinds() {
        assert_eq!(
            FileKind::of(Path::new("a/x.YAML")),
            Some(FileKind::Manifest)
        );
        assert_eq!(
            FileKind::of(Path::new("Corefile")),
            Some(FileKind::Corefile)
        );
        assert_eq!(
            FileKind::of(Path::new("d/eks.corefile")),
            Some(FileKind::Corefile)
        );
        assert_eq!(FileKind::of(Path::new("README.md")), None);
        assert_eq!(
            FileKind::of_named(Path::new("dump.txt")),
            FileKind::Manifest
        );
    }
}
