//! Reads a truth from `kubectl get services,endpointslices -A -o json` (or YAML) output, for offline commands.
//!
//! Accepts a `List` (what `kubectl get … -o json|yaml` prints), a single object, or YAML
//! with several documents (each a `List` or an object). Services and EndpointSlices are
//! converted with the same code the watchers use ([`super::convert`]) and applied to a
//! [`Truth`]; other kinds (Pods, Endpoints, …) are counted and skipped. Any object that
//! cannot be used is an error naming the file and the object's path (`items[3]`,
//! `document 2: items[0]`); invalid JSON or YAML names the line. Pure: the caller reads
//! the file.

use std::collections::BTreeMap;

use ghostip_core::Time;
use ghostip_core::truth::Truth;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use serde_json::Value;
use thiserror::Error;

use super::convert::{service_record, slice_record};

/// Why a truth file could not be read.
#[derive(Debug, Error)]
pub enum TruthFileError {
    /// Not valid JSON.
    #[error("{file}: line {line} column {column}: invalid JSON: {message}")]
    Json {
        /// The file.
        file: String,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// What the parser said.
        message: String,
    },
    /// Not valid YAML.
    #[error("{file}: invalid YAML: {message}")]
    Yaml {
        /// The file.
        file: String,
        /// What the parser said (with its line and column).
        message: String,
    },
    /// An object that is not a usable Service or EndpointSlice.
    #[error("{file}: {path}: {message}")]
    Object {
        /// The file.
        file: String,
        /// Where in the document, e.g. `items[3]`.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// Neither Services nor EndpointSlices in the whole file.
    #[error(
        "{file}: no Service or EndpointSlice found (expected `kubectl get services,endpointslices -A -o json` output)"
    )]
    Empty {
        /// The file.
        file: String,
    },
}

/// A truth read from a file.
#[derive(Debug)]
pub struct TruthFile {
    /// The truth.
    pub truth: Truth,
    /// Services read.
    pub services: usize,
    /// EndpointSlices read.
    pub slices: usize,
    /// Other objects skipped, by kind.
    pub skipped: BTreeMap<String, usize>,
}

/// Parses `text` (JSON or YAML) read from `file`, applying everything at `at`.
pub fn read_truth(text: &str, file: &str, at: Time) -> Result<TruthFile, TruthFileError> {
    let docs: Vec<Value> = if text.trim_start().starts_with(['{', '[']) {
        let v: Value = serde_json::from_str(text).map_err(|e| TruthFileError::Json {
            file: file.to_string(),
            line: e.line(),
            column: e.column(),
            message: e.to_string(),
        })?;
        vec![v]
    } else {
        serde_saphyr::from_multiple::<Value>(text).map_err(|e| TruthFileError::Yaml {
            file: file.to_string(),
            message: e.to_string(),
        })?
    };
    let mut out = TruthFile {
        truth: Truth::new(),
        services: 0,
        slices: 0,
        skipped: BTreeMap::new(),
    };
    let many = docs.len() > 1;
    for (d, doc) in docs.into_iter().enumerate() {
        let prefix = if many {
            format!("document {}: ", d + 1)
        } else {
            String::new()
        };
        walk(doc, &prefix, file, at, &mut out)?;
    }
    if out.services == 0 && out.slices == 0 {
        return Err(TruthFileError::Empty {
            file: file.to_string(),
        });
    }
    Ok(out)
}

fn walk(
    doc: Value,
    prefix: &str,
    file: &str,
    at: Time,
    out: &mut TruthFile,
) -> Result<(), TruthFileError> {
    let err = |path: String, message: String| TruthFileError::Object {
        file: file.to_string(),
        path,
        message,
    };
    match doc {
        Value::Null => Ok(()),
        Value::Array(items) => {
            for (i, item) in items.into_iter().enumerate() {
                object(item, format!("{prefix}[{i}]"), file, at, out)?;
            }
            Ok(())
        }
        Value::Object(mut map) => {
            if map.get("items").is_some_and(Value::is_array) {
                let Some(Value::Array(items)) = map.remove("items") else {
                    return Ok(());
                };
                for (i, item) in items.into_iter().enumerate() {
                    object(item, format!("{prefix}items[{i}]"), file, at, out)?;
                }
                Ok(())
            } else {
                let path = if prefix.is_empty() {
                    "(top level)".to_string()
                } else {
                    prefix.trim_end_matches(": ").to_string()
                };
                object(Value::Object(map), path, file, at, out)
            }
        }
        other => Err(err(
            format!("{prefix}(top level)"),
            format!(
                "expected a List or a Kubernetes object, found {}",
                kind_of(&other)
            ),
        )),
    }
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn object(
    item: Value,
    path: String,
    file: &str,
    at: Time,
    out: &mut TruthFile,
) -> Result<(), TruthFileError> {
    let err = |message: String| TruthFileError::Object {
        file: file.to_string(),
        path: path.clone(),
        message,
    };
    let Some(kind) = item.get("kind").and_then(Value::as_str).map(str::to_string) else {
        return Err(err(format!(
            "expected a Kubernetes object with a `kind`, found {}",
            kind_of(&item)
        )));
    };
    match kind.as_str() {
        "Service" => {
            let svc: Service =
                serde_json::from_value(item).map_err(|e| err(format!("invalid Service: {e}")))?;
            let rec = service_record(&svc).map_err(|e| err(e.to_string()))?;
            out.truth.apply_service(rec, at);
            out.services += 1;
        }
        "EndpointSlice" => {
            let slice: EndpointSlice = serde_json::from_value(item)
                .map_err(|e| err(format!("invalid EndpointSlice: {e}")))?;
            let rec = slice_record(&slice).map_err(|e| err(e.to_string()))?;
            out.truth.apply_slice(rec, at);
            out.slices += 1;
        }
        // Without an `items` array, `walk` would hand the List straight back here.
        "List" if item.get("items").is_some_and(Value::is_array) => {
            walk(item, &format!("{path}."), file, at, out)?;
        }
        "List" => return Err(err("a List without an `items` array".to_string())),
        _ => *out.skipped.entry(kind).or_default() += 1,
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;
    use ghostip_core::ServiceKey;

    fn at() -> Time {
        Time::from_second(1_800_000_000).unwrap()
    }

    const SVC: &str = r#"{"apiVersion":"v1","kind":"Service","metadata":{"namespace":"kube-system","name":"kube-dns"},
      "spec":{"clusterIP":"10.96.0.10","clusterIPs":["10.96.0.10"],"type":"ClusterIP",
      "ports":[{"name":"dns","port":53,"protocol":"UDP","targetPort":53}]}}"#;
    const SLICE: &str = r#"{"apiVersion":"discovery.k8s.io/v1","kind":"EndpointSlice",
      "metadata":{"namespace":"kube-system","name":"kube-dns-abc","labels":{"kubernetes.io/service-name":"kube-dns"},
        "annotations":{"endpoints.kubernetes.io/last-change-trigger-time":"2027-01-15T08:00:00Z"}},
      "addressType":"IPv4","endpoints":[{"addresses":["10.244.1.5"],"conditions":{"ready":true},"nodeName":"node-1"}],
      "ports":[{"name":"dns","port":53,"protocol":"UDP"}]}"#;

    #[test]
    fn a_kubectl_list_becomes_a_truth() {
        let text = format!(
            r#"{{"apiVersion":"v1","kind":"List","items":[{SVC},{SLICE},{{"kind":"Pod","metadata":{{"name":"x"}}}}]}}"#
        );
        let f = read_truth(&text, "t.json", at()).unwrap();
        assert_eq!((f.services, f.slices), (1, 1));
        assert_eq!(f.skipped.get("Pod"), Some(&1));
        let key = ServiceKey::new("kube-system", "kube-dns");
        assert_eq!(f.truth.lb_backends(&key, Some("dns"), None, false).len(), 1);
        assert!(f.truth.last_trigger_time(&key).is_some());
    }

    #[test]
    fn yaml_with_several_documents() {
        let svc: Value = serde_json::from_str(SVC).unwrap();
        let slice: Value = serde_json::from_str(SLICE).unwrap();
        let text = format!(
            "{}---\n{}",
            serde_saphyr::to_string(&svc).unwrap(),
            serde_saphyr::to_string(&serde_json::json!({"kind": "List", "items": [slice]}))
                .unwrap()
        );
        let f = read_truth(&text, "t.yaml", at()).unwrap();
        assert_eq!((f.services, f.slices), (1, 1));
    }

    #[test]
    fn bad_input_names_the_file_and_where() {
        let e = read_truth("{\n  \"items\": [\n", "t.json", at()).unwrap_err();
        assert!(matches!(e, TruthFileError::Json { line: 3, .. }), "{e}");
        let text = format!(
            r#"{{"kind":"List","items":[{SVC},{{"kind":"Service","metadata":{{"name":"x"}}}}]}}"#
        );
        let e = read_truth(&text, "t.json", at()).unwrap_err().to_string();
        assert!(e.starts_with("t.json: items[1]: "), "{e}");
        assert!(e.contains("missing namespace or name"), "{e}");
        let e = read_truth(r#"{"kind":"List","items":[42]}"#, "t.json", at())
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "t.json: items[0]: expected a Kubernetes object with a `kind`, found a number"
        );
        let e = read_truth("kind: List\nitems: []\n", "t.yaml", at()).unwrap_err();
        assert!(matches!(e, TruthFileError::Empty { .. }), "{e}");
        let e = read_truth("a: [1,\n", "t.yaml", at()).unwrap_err();
        assert!(matches!(e, TruthFileError::Yaml { .. }), "{e}");
    }

    /// Found by the `truth_file` fuzz target: a List without `items` recursed until the stack
    /// overflowed.
    #[test]
    fn a_list_without_items_is_an_error() {
        let e = read_truth(r#"{"kind":"List"}"#, "t.json", at())
            .unwrap_err()
            .to_string();
        assert_eq!(e, "t.json: (top level): a List without an `items` array");
        let e = read_truth(
            "kind: List\nitems: [{kind: List, kinds: []}]\n",
            "t.yaml",
            at(),
        )
        .unwrap_err()
        .to_string();
        assert_eq!(e, "t.yaml: items[0]: a List without an `items` array");
    }
}
