//! Which Services a command looks at: a namespace, a fixed set (a rollout's Services) and a `-l` label selector.

use std::collections::BTreeSet;

use ghostip_core::ServiceKey;
use ghostip_core::truth::Truth;

/// Which services a session looks at.
#[derive(Clone, Debug, Default)]
pub struct ServiceFilter {
    /// Only this namespace.
    pub namespace: Option<String>,
    /// Only these services (rollout: the workload's services).
    pub only: Option<BTreeSet<ServiceKey>>,
    /// Label selector terms `(key, Some(value) | None for existence, negated)`.
    pub selector: Vec<(String, Option<String>, bool)>,
}

impl ServiceFilter {
    /// Parses a `-l` selector (`a=b,c!=d,e,!f`).
    pub fn parse_selector(sel: &str) -> Vec<(String, Option<String>, bool)> {
        sel.split(',')
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(|t| {
                if let Some((k, v)) = t.split_once("!=") {
                    (k.trim().to_string(), Some(v.trim().to_string()), true)
                } else if let Some((k, v)) = t.split_once("==").or_else(|| t.split_once('=')) {
                    (k.trim().to_string(), Some(v.trim().to_string()), false)
                } else if let Some(k) = t.strip_prefix('!') {
                    (k.trim().to_string(), None, true)
                } else {
                    (t.to_string(), None, false)
                }
            })
            .collect()
    }

    /// Whether the Service is in scope (it must exist in the truth).
    pub fn matches(&self, truth: &Truth, key: &ServiceKey) -> bool {
        if self
            .namespace
            .as_ref()
            .is_some_and(|ns| ns != &key.namespace)
        {
            return false;
        }
        if self.only.as_ref().is_some_and(|only| !only.contains(key)) {
            return false;
        }
        let Some(svc) = truth.service(key) else {
            return false;
        };
        self.selector.iter().all(|(k, v, neg)| {
            let hit = match v {
                Some(v) => svc.labels.get(k) == Some(v),
                None => svc.labels.contains_key(k),
            };
            hit != *neg
        })
    }
}
