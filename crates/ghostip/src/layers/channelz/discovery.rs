//! Which pods opted in to having their channelz read, and where: the annotation `ghostip.io/channelz-port`, else a container port named `channelz`.
//!
//! A pod opts in explicitly; ghostip never scans ports. A pod that opted in with a value
//! that is not a port, or without an IP yet, is listed with why it cannot be read, so
//! `/status` names it.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};

/// Pages of 500 pods listed at most per discovery (50 000 pods).
pub const MAX_LIST_PAGES: usize = 100;

/// The annotation naming the channelz port.
pub const PORT_ANNOTATION: &str = "ghostip.io/channelz-port";
/// The annotation overriding the expected lag of the pod's channels (`30s`, `1m`).
pub const LAG_ANNOTATION: &str = "ghostip.io/channelz-expected-lag";
/// The container port name that opts a pod in.
pub const PORT_NAME: &str = "channelz";

/// An opted-in pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OptedIn {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Where its channelz is served, or why it cannot be read.
    pub channelz: Result<SocketAddr, String>,
    /// Its channels' expected lag, when the pod sets one.
    pub expected_lag: Option<Duration>,
}

/// Whether `pod` opted in, and where its channelz is. `None`: not opted in (or finished).
pub fn opted_in(pod: &Pod) -> Option<OptedIn> {
    let meta = &pod.metadata;
    let annotations = meta.annotations.as_ref();
    let by_annotation = annotations.and_then(|a| a.get(PORT_ANNOTATION));
    let by_name = pod.spec.as_ref().and_then(|s| {
        s.containers
            .iter()
            .flat_map(|c| c.ports.iter().flatten())
            .find(|p| p.name.as_deref() == Some(PORT_NAME))
            .map(|p| p.container_port)
    });
    if by_annotation.is_none() && by_name.is_none() {
        return None;
    }
    let status = pod.status.as_ref();
    if status
        .and_then(|s| s.phase.as_deref())
        .is_some_and(|p| p == "Succeeded" || p == "Failed")
    {
        return None;
    }
    let port: Result<u16, String> = match (by_annotation, by_name) {
        (Some(v), _) => v
            .trim()
            .parse::<u16>()
            .ok()
            .filter(|p| *p > 0)
            .ok_or_else(|| format!("annotation {PORT_ANNOTATION}={v:?} is not a port (1-65535)")),
        (None, Some(p)) => u16::try_from(p)
            .ok()
            .filter(|p| *p > 0)
            .ok_or_else(|| format!("container port {PORT_NAME} is {p}, not a port")),
        (None, None) => return None,
    };
    let ip = status
        .and_then(|s| s.pod_ip.as_deref())
        .map(|ip| {
            ip.parse::<IpAddr>()
                .map_err(|e| format!("pod IP {ip:?}: {e}"))
        })
        .unwrap_or_else(|| Err("the pod has no IP yet".into()));
    let channelz = port.and_then(|port| Ok(SocketAddr::new(ip?, port)));
    let expected_lag = annotations
        .and_then(|a| a.get(LAG_ANNOTATION))
        .and_then(|v| parse_duration(v));
    Some(OptedIn {
        namespace: meta.namespace.clone().unwrap_or_default(),
        name: meta.name.clone().unwrap_or_default(),
        channelz,
        expected_lag,
    })
}

/// Why the opted-in pods could not be listed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ListError {
    /// RBAC does not allow listing pods there.
    pub forbidden: bool,
    /// What failed.
    pub message: String,
}

/// Lists the running pods (of `namespace`, else of every namespace), page by page, and
/// keeps those that opted in.
pub async fn list_opted_in(
    client: kube::Client,
    namespace: Option<String>,
) -> Result<Vec<OptedIn>, ListError> {
    let api: Api<Pod> = match &namespace {
        Some(ns) => Api::namespaced(client, ns),
        None => Api::all(client),
    };
    let mut out = Vec::new();
    let mut token: Option<String> = None;
    for _ in 0..MAX_LIST_PAGES {
        let mut lp = ListParams::default()
            .fields("status.phase=Running")
            .limit(500);
        if let Some(t) = &token {
            lp = lp.continue_token(t);
        }
        let list = api.list(&lp).await.map_err(|e| ListError {
            forbidden: matches!(&e, kube::Error::Api(r) if r.code == 403),
            message: format!("listing pods for channelz: {e}"),
        })?;
        out.extend(list.items.iter().filter_map(opted_in));
        token = list.metadata.continue_.filter(|t| !t.is_empty());
        if token.is_none() {
            break;
        }
    }
    Ok(out)
}

/// `30s`, `2m`, `1500ms`, or plain seconds.
fn parse_duration(v: &str) -> Option<Duration> {
    let v = v.trim();
    let (n, unit) = v
        .find(|c: char| !c.is_ascii_digit())
        .map_or((v, ""), |i| v.split_at(i));
    let n: u64 = n.parse().ok()?;
    match unit {
        "" | "s" => Some(Duration::from_secs(n)),
        "ms" => Some(Duration::from_millis(n)),
        "m" => Some(Duration::from_secs(n.checked_mul(60)?)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn pod(annotations: &[(&str, &str)], port_name: Option<&str>, ip: Option<&str>) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {
                "namespace": "demo", "name": "client-0",
                "annotations": annotations.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<std::collections::BTreeMap<_, _>>(),
            },
            "spec": {"containers": [{"name": "c", "ports": port_name.map(|n| vec![serde_json::json!({"name": n, "containerPort": 9901})]).unwrap_or_default()}]},
            "status": {"podIP": ip, "phase": "Running"},
        }))
        .unwrap()
    }

    #[test]
    fn pods_opt_in_by_annotation_or_named_port_only() {
        assert_eq!(opted_in(&pod(&[], None, Some("10.244.1.5"))), None);
        assert_eq!(
            opted_in(&pod(&[], Some("metrics"), Some("10.244.1.5"))),
            None
        );
        let by_name = opted_in(&pod(&[], Some("channelz"), Some("10.244.1.5"))).unwrap();
        assert_eq!(by_name.channelz, Ok("10.244.1.5:9901".parse().unwrap()));
        let by_annotation = opted_in(&pod(
            &[(PORT_ANNOTATION, "9911"), (LAG_ANNOTATION, "90s")],
            Some("channelz"),
            Some("10.244.1.5"),
        ))
        .unwrap();
        assert_eq!(
            by_annotation.channelz,
            Ok("10.244.1.5:9911".parse().unwrap())
        );
        assert_eq!(by_annotation.expected_lag, Some(Duration::from_secs(90)));
        assert_eq!(
            (
                by_annotation.namespace.as_str(),
                by_annotation.name.as_str()
            ),
            ("demo", "client-0")
        );
    }

    #[test]
    fn a_bad_opt_in_is_listed_with_why() {
        let bad = opted_in(&pod(&[(PORT_ANNOTATION, "http")], None, Some("10.244.1.5"))).unwrap();
        assert!(bad.channelz.unwrap_err().contains("not a port"));
        let no_ip = opted_in(&pod(&[(PORT_ANNOTATION, "9901")], None, None)).unwrap();
        assert!(no_ip.channelz.unwrap_err().contains("no IP"));
        assert_eq!(parse_duration("2m"), Some(Duration::from_secs(120)));
        assert_eq!(parse_duration("1500ms"), Some(Duration::from_millis(1500)));
        assert_eq!(parse_duration("soon"), None);
    }
}
