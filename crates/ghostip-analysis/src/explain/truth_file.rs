//! `--truth-history FILE`: IP ownership rebuilt from Pod JSON, for people without a ledger.
//!
//! The file holds one or more JSON documents, back to back, each one of:
//! - a Pod, or a List / PodList of Pods (`kubectl get pods -A -o json`);
//! - a watch event `{"type":"ADDED|MODIFIED|DELETED","object":{Pod}}`, one per line, as printed
//!   by `kubectl get pods -A -o json --watch --output-watch-events` (the `DELETED` events are
//!   what tells a removed pod's IP apart from an IP nobody ever had).
//!
//! Each pod owns its IPs from its `creationTimestamp`; a `DELETED` pod until its
//! `deletionTimestamp` (an upper bound: the object goes once its containers stopped), a pod
//! still listed until the next pod with the same IP was created (IP reuse), else to the end.
//! Ends are marked approximate. The file has no Services, so failures are not attributed to
//! one; rollout windows come from the pods' owners as with the ledger.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use ghostip_core::truth::PodRecord;
use k8s_openapi::api::core::v1::Pod;
use serde_json::Value;

use super::history::{HistoryError, HistorySource, IpHistory};
use crate::ownership::{EndReason, Ownership};
use crate::pod::pod_record;

/// The text of a truth-history file could not be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TruthHistoryError {
    /// A document is not JSON, or not a Pod, List or watch event.
    #[error("{path}:{line}: {reason}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// 1-based line where the document (or the syntax error) is.
        line: usize,
        /// What is wrong.
        reason: String,
    },
}

#[derive(Debug)]
struct PodAcc {
    rec: PodRecord,
    deleted: bool,
}

/// IP histories rebuilt from Pod JSON documents.
#[derive(Debug, Default)]
pub struct TruthHistory {
    path: PathBuf,
    by_ip: HashMap<IpAddr, Vec<Ownership>>,
    pods: usize,
}

/// The 1-based line of offsets met in increasing order: each call counts only the newlines
/// since the previous offset, so a whole file costs one pass (counting from the start for each
/// document made a watch stream quadratic).
#[derive(Debug, Default)]
struct LineCounter {
    /// The offset up to which newlines were counted, and how many.
    at: usize,
    newlines: usize,
    /// Bytes examined so far (the work, for the linearity test).
    scanned: usize,
}

impl LineCounter {
    /// The line of `offset` in `text` (an offset before the previous one counts from the start).
    fn line_of(&mut self, text: &str, offset: usize) -> usize {
        let end = offset.min(text.len());
        if end < self.at {
            *self = LineCounter {
                scanned: self.scanned,
                ..LineCounter::default()
            };
        }
        let bytes = &text.as_bytes()[self.at..end];
        self.newlines += bytes.iter().filter(|&&b| b == b'\n').count();
        self.scanned += bytes.len();
        self.at = end;
        self.newlines + 1
    }
}

impl TruthHistory {
    /// Parses the text of a truth-history file (`path` names it in errors).
    ///
    /// # Errors
    /// [`TruthHistoryError::Invalid`] with the line of the first bad document.
    pub fn parse(path: &Path, text: &str) -> Result<TruthHistory, TruthHistoryError> {
        TruthHistory::parse_counting(path, text, &mut LineCounter::default())
    }

    /// [`TruthHistory::parse`], counting the documents' lines with `lines`.
    fn parse_counting(
        path: &Path,
        text: &str,
        lines: &mut LineCounter,
    ) -> Result<TruthHistory, TruthHistoryError> {
        let invalid = |line: usize, reason: String| TruthHistoryError::Invalid {
            path: path.to_path_buf(),
            line,
            reason,
        };
        let mut pods: BTreeMap<String, PodAcc> = BTreeMap::new();
        let mut stream = serde_json::Deserializer::from_str(text).into_iter::<Value>();
        let mut docs = 0usize;
        loop {
            let start = stream.byte_offset();
            let doc = match stream.next() {
                None => break,
                Some(Ok(v)) => v,
                Some(Err(e)) => {
                    return Err(invalid(e.line(), format!("not JSON: {e}")));
                }
            };
            docs += 1;
            // Skip whitespace so the line is the document's first.
            let skipped = text
                .get(start..)
                .map_or(0, |rest| rest.len() - rest.trim_start().len());
            let line = lines.line_of(text, start + skipped);
            let mut add = |v: Value, deleted: bool| -> Result<(), TruthHistoryError> {
                let pod: Pod = serde_json::from_value(v)
                    .map_err(|e| invalid(line, format!("not a Pod: {e}")))?;
                let rec = pod_record(&pod).map_err(|e| invalid(line, e.to_string()))?;
                merge(&mut pods, rec, deleted);
                Ok(())
            };
            // The document is taken apart, not copied: a watch stream is mostly Pod objects.
            let mut doc = doc;
            match (&doc["type"], &doc["object"], &doc["items"], &doc["kind"]) {
                (Value::String(t), Value::Object(_), _, _) => {
                    let deleted = t == "DELETED";
                    add(doc["object"].take(), deleted)?;
                }
                (_, _, Value::Array(_), _) => {
                    if let Value::Array(items) = doc["items"].take() {
                        for item in items {
                            add(item, false)?;
                        }
                    }
                }
                (_, _, _, Value::String(k)) if k == "Pod" => add(doc, false)?,
                _ => {
                    return Err(invalid(
                        line,
                        "expected a Pod, a List of Pods or a watch event {\"type\",\"object\"}"
                            .to_owned(),
                    ));
                }
            }
        }
        if docs == 0 {
            return Err(invalid(1, "no JSON document".to_owned()));
        }
        let count = pods.len();
        Ok(TruthHistory {
            path: path.to_path_buf(),
            by_ip: histories(pods.into_values()),
            pods: count,
        })
    }

    /// Pods seen (distinct UIDs).
    pub fn pods(&self) -> usize {
        self.pods
    }
}

fn merge(pods: &mut BTreeMap<String, PodAcc>, rec: PodRecord, deleted: bool) {
    let key = if rec.pod.uid.is_empty() {
        rec.pod.to_string()
    } else {
        rec.pod.uid.clone()
    };
    match pods.get_mut(&key) {
        None => {
            pods.insert(key, PodAcc { rec, deleted });
        }
        Some(acc) => {
            let old = &mut acc.rec;
            for ip in rec.ips {
                if !old.ips.contains(&ip) {
                    old.ips.push(ip);
                }
            }
            old.created = old.created.or(rec.created);
            old.ready_since = old.ready_since.or(rec.ready_since);
            // Keep the grace period that came with the first deletionTimestamp: the kubelet's
            // final delete sets it to 0, and deletionTimestamp - grace is the request time.
            if old.deletion.is_none() {
                old.grace_period_seconds = rec.grace_period_seconds.or(old.grace_period_seconds);
            }
            old.deletion = old.deletion.or(rec.deletion);
            old.node = rec.node.or(old.node.take());
            old.owner_kind = rec.owner_kind.or(old.owner_kind.take());
            old.owner_name = rec.owner_name.or(old.owner_name.take());
            old.prestop_seconds = rec.prestop_seconds.or(old.prestop_seconds);
            acc.deleted |= deleted;
        }
    }
}

fn histories(pods: impl Iterator<Item = PodAcc>) -> HashMap<IpAddr, Vec<Ownership>> {
    let mut by_ip: HashMap<IpAddr, Vec<Ownership>> = HashMap::new();
    for PodAcc { rec, deleted } in pods {
        if rec.host_network {
            continue;
        }
        let Some(start) = rec.created.or(rec.ready_since) else {
            continue;
        };
        let end = deleted.then(|| rec.deletion.unwrap_or(start).max(start));
        for ip in &rec.ips {
            by_ip.entry(ip.to_canonical()).or_default().push(Ownership {
                ip: ip.to_canonical(),
                pod: rec.pod.clone(),
                node: rec.node.clone(),
                owner_kind: rec.owner_kind.clone(),
                owner_name: rec.owner_name.clone(),
                start,
                closed: end,
                end_reason: deleted.then_some(EndReason::Gone),
                approximate: deleted,
                created: rec.created,
                ready: rec.ready_since,
                terminating: rec.deletion,
                gone: end,
                opened: start,
                grace_period_seconds: rec.grace_period_seconds,
                prestop_seconds: rec.prestop_seconds,
            });
        }
    }
    for list in by_ip.values_mut() {
        list.sort_by(|a, b| a.start.cmp(&b.start).then(a.pod.uid.cmp(&b.pod.uid)));
        // Intervals of one IP never overlap: a newer owner ends the previous one (reuse).
        for i in 1..list.len() {
            let next_start = list[i].start;
            let prev = &mut list[i - 1];
            if prev.closed.is_none_or(|c| c > next_start) {
                prev.closed = Some(next_start.max(prev.start));
                prev.end_reason = Some(EndReason::Reused);
                prev.approximate = true;
            }
        }
    }
    by_ip
}

impl HistorySource for TruthHistory {
    fn lookup(&self, ip: IpAddr) -> Result<IpHistory, HistoryError> {
        Ok(IpHistory {
            ownerships: self.by_ip.get(&ip).cloned().unwrap_or_default(),
            memberships: Vec::new(),
            flows: Vec::new(),
            held: Vec::new(),
        })
    }

    fn describe(&self) -> String {
        format!("truth history {} ({} pods)", self.path.display(), self.pods)
    }

    fn has_services(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    fn pod(name: &str, uid: &str, ip: &str, created: &str, deletion: Option<&str>) -> Value {
        let mut meta = serde_json::json!({
            "name": name, "namespace": "shop", "uid": uid, "creationTimestamp": created,
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                "name": "web-7c9d8f5b4", "uid": "rs", "controller": true}]
        });
        if let Some(d) = deletion {
            meta["deletionTimestamp"] = d.into();
            meta["deletionGracePeriodSeconds"] = 30.into();
        }
        serde_json::json!({
            "apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"containers": [{"name": "app"}], "nodeName": "node-1"},
            "status": {"podIP": ip, "podIPs": [{"ip": ip}], "conditions": [
                {"type": "Ready", "status": "True", "lastTransitionTime": created}]}
        })
    }

    #[test]
    fn watch_events_and_lists_build_intervals() {
        let a = pod("web-a", "a", "10.244.1.5", "2024-05-01T15:00:00Z", None);
        let a_del = pod(
            "web-a",
            "a",
            "10.244.1.5",
            "2024-05-01T15:00:00Z",
            Some("2024-05-01T15:42:30Z"),
        );
        let b = pod("web-b", "b", "10.244.1.5", "2024-05-01T16:00:00Z", None);
        let text = format!(
            "{}\n{}\n{}\n",
            serde_json::json!({"type": "ADDED", "object": a}),
            serde_json::json!({"type": "DELETED", "object": a_del}),
            serde_json::json!({"apiVersion": "v1", "kind": "List", "items": [b]}),
        );
        let h = TruthHistory::parse(Path::new("pods.json"), &text).unwrap();
        assert_eq!(h.pods(), 2);
        let ip: IpAddr = "10.244.1.5".parse().unwrap();
        let got = h.lookup(ip).unwrap().ownerships;
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].pod.name, "web-a");
        assert_eq!(got[0].closed, Some("2024-05-01T15:42:30Z".parse().unwrap()));
        assert_eq!(got[0].end_reason, Some(EndReason::Gone));
        assert_eq!(got[1].closed, None);
        assert!(
            h.lookup("10.9.9.9".parse().unwrap())
                .unwrap()
                .ownerships
                .is_empty()
        );
    }

    proptest::proptest! {
        /// Any text, and any truncation or byte change of a real watch stream: an error or a
        /// history, never a panic.
        #[test]
        fn never_panics(
            junk in ".{0,200}",
            cut in 0usize..4000,
            flip in 0usize..4000,
            byte in proptest::prelude::any::<u8>(),
        ) {
            let _ = TruthHistory::parse(Path::new("x"), &junk);
            let a = pod("web-a", "a", "10.244.1.5", "2024-05-01T15:00:00Z", Some("2024-05-01T15:42:30Z"));
            let text = format!(
                "{}\n{}\n",
                serde_json::json!({"type": "MODIFIED", "object": a}),
                serde_json::json!({"type": "DELETED", "object": a})
            );
            let mut bytes = text.into_bytes();
            let n = bytes.len();
            bytes[flip % n] = byte;
            bytes.truncate(cut % (n + 1));
            let s = String::from_utf8_lossy(&bytes);
            let _ = TruthHistory::parse(Path::new("x"), &s);
        }
    }

    /// A watch stream of `events` events (pods created, then deleted, IPs reused).
    fn watch_stream(events: usize) -> String {
        let mut text = String::new();
        for i in 0..events {
            let ip = format!("10.244.{}.{}", i / 200 % 250, i % 200);
            let created = "2024-05-01T15:00:00Z";
            let (kind, deletion) = if i % 2 == 0 {
                ("ADDED", None)
            } else {
                ("DELETED", Some("2024-05-01T15:42:30Z"))
            };
            let p = pod(
                &format!("web-{}", i / 2),
                &format!("u{}", i / 2),
                &ip,
                created,
                deletion,
            );
            text.push_str(&serde_json::json!({"type": kind, "object": p}).to_string());
            text.push('\n');
        }
        text
    }

    #[test]
    fn a_watch_stream_is_read_in_one_pass() {
        // The work of finding each document's line: one pass over the text, whatever the
        // number of events (counting from the start for each was quadratic: 8 000 events 60 s).
        for events in [2_000, 16_000] {
            let text = watch_stream(events);
            let mut lines = LineCounter::default();
            let h = TruthHistory::parse_counting(Path::new("w.json"), &text, &mut lines).unwrap();
            assert_eq!(h.pods(), events / 2);
            assert!(
                lines.scanned <= text.len(),
                "{events} events: {} bytes examined for a text of {}",
                lines.scanned,
                text.len()
            );
            assert_eq!(lines.newlines, events - 1);
        }
    }

    #[test]
    fn the_line_counter_counts_from_the_start_when_sent_back() {
        let text = "a\nb\n\nc";
        let mut l = LineCounter::default();
        assert_eq!(l.line_of(text, 0), 1);
        assert_eq!(l.line_of(text, 2), 2);
        assert_eq!(l.line_of(text, 5), 4);
        assert_eq!(l.line_of(text, 1), 1);
        assert_eq!(l.line_of(text, 100), 4);
    }

    #[test]
    fn bad_documents_name_the_file_and_line() {
        let good = pod("web-a", "a", "10.244.1.5", "2024-05-01T15:00:00Z", None);
        let text = format!("{good}\n\n{{\"kind\": \"Service\"}}\n");
        let e = TruthHistory::parse(Path::new("h.json"), &text).unwrap_err();
        assert!(e.to_string().starts_with("h.json:3: expected a Pod"), "{e}");
        let e = TruthHistory::parse(Path::new("h.json"), &format!("{good}\n{{oops")).unwrap_err();
        assert!(e.to_string().starts_with("h.json:2: not JSON"), "{e}");
        let e = TruthHistory::parse(Path::new("h.json"), "  \n").unwrap_err();
        assert!(e.to_string().contains("no JSON document"), "{e}");
    }
}
