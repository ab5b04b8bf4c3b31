//! GIP-SVC-*: Service settings that keep terminating pods published.

use std::collections::BTreeMap;

use super::{Ctx, Finding, RuleId, Severity};
use crate::audit::inventory::ServiceInfo;

impl Ctx<'_> {
    /// GIP-SVC-001: `publishNotReadyAddresses`.
    pub(super) fn publish_not_ready(&mut self, svc: &ServiceInfo, budget: Option<i64>) {
        let message = if svc.headless {
            let after = match budget {
                Some(b) if b > 0 => {
                    format!(", so callers may dial a gone pod's IP for up to {b} s after it exits")
                }
                _ => String::new(),
            };
            format!(
                "publishNotReadyAddresses keeps terminating pods in DNS until they are deleted: \
                 no preStop delay covers the DNS lag{after}"
            )
        } else {
            "publishNotReadyAddresses routes traffic to unready and terminating pods".to_string()
        };
        self.push(Finding {
            rule: RuleId::Svc001,
            severity: Severity::Warning,
            object: svc.obj.clone(),
            service: Some(svc.key.clone()),
            caveats: Vec::new(),
            message,
            fix: "publishNotReadyAddresses: false, unless peers must find each other before \
                  they are ready (StatefulSet bootstrap); then use a separate headless Service \
                  for peer discovery"
                .to_string(),
            figures: budget
                .map(|b| BTreeMap::from([("budget_s", b)]))
                .unwrap_or_default(),
        });
    }
}
