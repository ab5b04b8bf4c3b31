//! GIP-ROLL-*: update strategies that empty a headless Service or remove ready pods first.

use std::collections::BTreeMap;

use super::budget::secs_i64;
use super::client::{CallerCache, ttl_text};
use super::{Ctx, Finding, RuleId, Severity};
use crate::audit::inventory::{Rollout, ServiceInfo, Workload};

impl Ctx<'_> {
    /// GIP-ROLL-001: a rollout that leaves a headless Service without a ready endpoint.
    pub(super) fn rollout_finding(
        &mut self,
        svc: &ServiceInfo,
        w: &Workload,
        client: &CallerCache,
    ) {
        let replicas = w.replicas.unwrap_or(1);
        let empties = match w.rollout {
            Rollout::Recreate => {
                Some("strategy Recreate removes every pod before new ones start".to_string())
            }
            Rollout::Rolling {
                max_surge: 0,
                max_unavailable,
            } if max_unavailable >= replicas
                && matches!(w.obj.kind.as_str(), "Deployment" | "StatefulSet") =>
            {
                Some(format!(
                    "replicas {replicas} with maxSurge 0 and maxUnavailable {max_unavailable}: the old pod{} leave{} before a replacement is ready",
                    if replicas == 1 { "" } else { "s" },
                    if replicas == 1 { "s" } else { "" }
                ))
            }
            _ => None,
        };
        let Some(why) = empties else { return };
        let denial = self.chain.denial_lag();
        let neg = client.negative.as_ref();
        let mut msg = format!(
            "{why}, so {} has no ready endpoint and answers NXDOMAIN/NODATA",
            svc.key
        );
        match denial {
            Some(d) if d > 0 => msg.push_str(&format!(
                "; DNS caches keep that denial up to {d} s after the new pod is ready"
            )),
            Some(_) => msg.push_str("; DNS does not cache the denial"),
            None => msg.push_str(" (denial cache not known: no Corefile read)"),
        }
        if let Some((t, src)) = neg {
            msg.push_str(&format!(", and {src} ({})", ttl_text(*t)));
        }
        let mut fix = match w.obj.kind.as_str() {
            "StatefulSet" => "replicas ≥ 2 (a StatefulSet never surges)".to_string(),
            _ => "strategy RollingUpdate with maxSurge ≥ 1 and maxUnavailable 0".to_string(),
        };
        if denial.is_some_and(|d| d > 0) {
            fix.push_str(&format!(
                "; `disable denial {}` in the cache block",
                self.cfg.zone
            ));
        }
        let mut figures = BTreeMap::from([("replicas", i64::from(replicas))]);
        if let Some(d) = denial {
            figures.insert("denial_lag_s", secs_i64(d));
        }
        self.push(Finding {
            rule: RuleId::Roll001,
            severity: Severity::Warning,
            object: w.obj.clone(),
            service: Some(svc.key.clone()),
            caveats: Vec::new(),
            message: msg,
            fix,
            figures,
        });
    }

    /// GIP-ROLL-002: `maxSurge 0` behind a Service.
    pub(super) fn surge_note(&mut self, svc: &ServiceInfo, w: &Workload) {
        let replicas = w.replicas.unwrap_or(1);
        if let Rollout::Rolling {
            max_surge: 0,
            max_unavailable,
        } = w.rollout
            && max_unavailable < replicas
            && matches!(w.obj.kind.as_str(), "Deployment" | "StatefulSet")
        {
            let already = self
                .findings
                .iter()
                .any(|f| f.rule == RuleId::Roll002 && f.object == w.obj);
            if already {
                return;
            }
            self.push(Finding {
                rule: RuleId::Roll002,
                severity: Severity::Note,
                object: w.obj.clone(),
                service: Some(svc.key.clone()),
                caveats: Vec::new(),
                message: format!(
                    "maxSurge 0: each step removes {max_unavailable} of {replicas} ready pods before their replacements are ready, while callers still dial the removed ones"
                ),
                fix: if w.obj.kind == "StatefulSet" {
                    "a preStop sleep covering the DNS budget keeps removed pods serving meanwhile".to_string()
                } else {
                    "maxSurge ≥ 1 (e.g. 25%) with maxUnavailable 0".to_string()
                },
                figures: BTreeMap::from([
                    ("replicas", i64::from(replicas)),
                    ("max_unavailable", i64::from(max_unavailable)),
                ]),
            });
        }
    }
}
