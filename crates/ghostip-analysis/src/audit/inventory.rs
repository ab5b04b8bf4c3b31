//! The objects an audit looks at, trimmed from Kubernetes API objects, each with where it came from.
//!
//! [`Inventory::add_value`] takes one parsed document (a `serde_json::Value` from YAML, JSON or
//! the API server) and keeps what the rules need: Services, the pod templates of Deployments,
//! StatefulSets, DaemonSets, ReplicaSets, Jobs, CronJobs and bare Pods, Corefiles held in
//! ConfigMaps, and ConfigMaps with JVM DNS cache settings (a `java.security`, JVM options).
//! `kind: List` documents are unrolled. Objects managed by a controller that is itself audited
//! (a Pod or ReplicaSet with a controller owner reference, a Job owned by a CronJob) are counted
//! and skipped, so a `kubectl get -o json` dump does not report a Deployment once per replica. Everything else is counted as ignored. Nothing here does IO.

use std::collections::BTreeMap;
use std::fmt;

use ghostip_core::ServiceKey;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, PodTemplateSpec, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde::Serialize;
use serde::de::DeserializeOwned;

/// The ConfigMap key CoreDNS and NodeLocal DNSCache read their configuration from.
pub const COREFILE_KEY: &str = "Corefile";

/// Where an object was read: a file and the line its document (or List item) starts on, or
/// the cluster.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct Origin {
    /// File path as given, or `cluster` for objects listed from the API server.
    pub file: String,
    /// 1-based line where the object starts, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<usize>,
}

impl Origin {
    /// An object listed from the API server.
    pub fn cluster() -> Self {
        Self {
            file: "cluster".to_string(),
            line: None,
        }
    }

    /// A place in a file.
    pub fn file(file: impl Into<String>, line: Option<usize>) -> Self {
        Self {
            file: file.into(),
            line,
        }
    }

    /// Whether the object was listed from a cluster rather than read from a file.
    pub fn is_cluster(&self) -> bool {
        self.file == "cluster" && self.line.is_none()
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(l) => write!(f, "{}:{l}", self.file),
            None => f.write_str(&self.file),
        }
    }
}

/// One audited object: kind, namespace, name, origin.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct ObjectRef {
    /// `Deployment`, `Service`, `ConfigMap`, `Corefile` (a raw Corefile file), …
    pub kind: String,
    /// Namespace (empty for a raw Corefile).
    pub namespace: String,
    /// Name (the file name for a raw Corefile).
    pub name: String,
    /// Where it was read.
    pub origin: Origin,
}

impl fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.namespace.is_empty() {
            write!(f, "{} {}", self.kind, self.name)
        } else {
            write!(f, "{} {}/{}", self.kind, self.namespace, self.name)
        }
    }
}

/// A Service port.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ServicePort {
    /// Port name.
    pub name: Option<String>,
    /// Port number.
    pub port: i32,
    /// `appProtocol`.
    pub app_protocol: Option<String>,
}

impl ServicePort {
    /// Whether the port carries gRPC, by `appProtocol` or by the port name (`grpc`, `grpc-*`,
    /// `*-grpc`, the Istio/Kubernetes naming convention).
    pub fn is_grpc(&self) -> bool {
        let app = self
            .app_protocol
            .as_deref()
            .is_some_and(|p| p.to_ascii_lowercase().contains("grpc"));
        let named = self.name.as_deref().is_some_and(|n| {
            let n = n.to_ascii_lowercase();
            n == "grpc" || n.starts_with("grpc-") || n.ends_with("-grpc")
        });
        app || named
    }

    /// Whether the port declares cleartext HTTP/2 (`appProtocol: kubernetes.io/h2c`), which
    /// gRPC without TLS is.
    pub fn is_h2c(&self) -> bool {
        self.app_protocol
            .as_deref()
            .is_some_and(|p| p.eq_ignore_ascii_case("kubernetes.io/h2c"))
    }
}

/// A Service, trimmed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceInfo {
    /// The object.
    pub obj: ObjectRef,
    /// `namespace/name`.
    pub key: ServiceKey,
    /// `clusterIP: None`.
    pub headless: bool,
    /// `spec.selector` (empty: selector-less, endpoints managed by hand).
    pub selector: BTreeMap<String, String>,
    /// `spec.publishNotReadyAddresses`.
    pub publish_not_ready: bool,
    /// Ports.
    pub ports: Vec<ServicePort>,
    /// Labels (for `-l`).
    pub labels: BTreeMap<String, String>,
    /// Annotations (for the declared client cache TTL).
    pub annotations: BTreeMap<String, String>,
}

/// How a workload replaces its pods.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum Rollout {
    /// Rolling update with absolute surge and unavailability (percentages resolved against
    /// the replica count the way the controllers round them).
    Rolling {
        /// Pods created above the desired count.
        max_surge: i32,
        /// Pods removed before their replacement is ready.
        max_unavailable: i32,
    },
    /// `Recreate`: every old pod is removed before any new one starts.
    Recreate,
    /// `OnDelete`: pods are only replaced when deleted by hand.
    OnDelete,
    /// Not a controller with a rollout (bare Pod, Job, ReplicaSet).
    None,
}

/// A workload's pod template, trimmed.
#[derive(Clone, Debug, PartialEq)]
pub struct Workload {
    /// The object.
    pub obj: ObjectRef,
    /// `spec.replicas` (defaulted to 1 for Deployments and StatefulSets; `None` for kinds
    /// without one).
    pub replicas: Option<i32>,
    /// The update strategy.
    pub rollout: Rollout,
    /// The pod template (for a bare Pod, its metadata and spec).
    pub template: PodTemplateSpec,
    /// Annotations of the workload object itself.
    pub annotations: BTreeMap<String, String>,
}

impl Workload {
    /// Labels of the pods it creates.
    pub fn pod_labels(&self) -> BTreeMap<String, String> {
        self.template
            .metadata
            .as_ref()
            .and_then(|m| m.labels.clone())
            .unwrap_or_default()
    }

    /// An annotation of the pod template, else of the workload.
    pub fn annotation(&self, key: &str) -> Option<&str> {
        self.template
            .metadata
            .as_ref()
            .and_then(|m| m.annotations.as_ref())
            .and_then(|a| a.get(key))
            .or_else(|| self.annotations.get(key))
            .map(String::as_str)
    }
}

/// A Corefile: from a ConfigMap's `Corefile` key or a raw file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CorefileInput {
    /// The ConfigMap, or a `Corefile` pseudo-object for a raw file.
    pub obj: ObjectRef,
    /// The text.
    pub text: String,
}

/// A ConfigMap that holds JVM DNS cache settings (`networkaddress.cache.*` in a
/// `java.security` file, `-Dsun.net.inetaddr.*` options): pods may mount it or read an
/// environment variable from it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigMapData {
    /// The ConfigMap.
    pub obj: ObjectRef,
    /// Its `data`.
    pub data: BTreeMap<String, String>,
}

/// What a ConfigMap value mentions when it holds JVM DNS cache settings.
const JVM_SETTINGS: &[&str] = &[
    "networkaddress.cache.",
    "sun.net.inetaddr.",
    "java.security",
];

/// Something in the input that could not be read: a file that does not parse, an object of
/// a known kind with a malformed field. Named by file and line.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct InputProblem {
    /// Where.
    pub origin: Origin,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for InputProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.origin, self.message)
    }
}

/// Counts of what was read.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct InputCounts {
    /// Files read (0 for `--cluster`).
    pub files: usize,
    /// Objects kept, by kind.
    pub objects: BTreeMap<String, usize>,
    /// Documents or objects of kinds the audit does not look at (or ConfigMaps without a Corefile).
    pub ignored: usize,
    /// Pods, ReplicaSets and Jobs skipped because their controller is audited instead.
    pub owned: usize,
}

/// Everything an audit looks at.
#[derive(Clone, Debug, Default)]
pub struct Inventory {
    /// Services.
    pub services: Vec<ServiceInfo>,
    /// Workloads (pod templates).
    pub workloads: Vec<Workload>,
    /// Corefiles.
    pub corefiles: Vec<CorefileInput>,
    /// ConfigMaps with JVM DNS cache settings.
    pub config_maps: Vec<ConfigMapData>,
    /// What was read.
    pub counts: InputCounts,
    /// What could not be read.
    pub problems: Vec<InputProblem>,
    /// Namespace given to objects that have none (what `kubectl apply -f` would use).
    pub default_namespace: String,
}

impl Inventory {
    /// An empty inventory; objects without a namespace are placed in `default_namespace`.
    pub fn new(default_namespace: impl Into<String>) -> Self {
        Self {
            default_namespace: default_namespace.into(),
            ..Self::default()
        }
    }

    /// Adds one parsed document (or List item), started at `origin`. `item_origins` gives the
    /// origins of a List's items in order, when known; items without one share `origin`.
    pub fn add_value(
        &mut self,
        value: serde_json::Value,
        origin: &Origin,
        item_origins: &[Origin],
    ) {
        let kind = value
            .get("kind")
            .and_then(serde_json::Value::as_str)
            .unwrap_or_default()
            .to_string();
        if kind.ends_with("List") && value.get("items").is_some_and(|i| i.is_array()) {
            let items = match value {
                serde_json::Value::Object(mut m) => m.remove("items"),
                _ => None,
            };
            if let Some(serde_json::Value::Array(items)) = items {
                for (i, item) in items.into_iter().enumerate() {
                    let o = item_origins.get(i).unwrap_or(origin).clone();
                    self.add_value(item, &o, &[]);
                }
            }
            return;
        }
        let api_version = value
            .get("apiVersion")
            .and_then(serde_json::Value::as_str)
            .unwrap_or_default()
            .to_string();
        let result = match (api_version.as_str(), kind.as_str()) {
            ("v1", "Service") => self.typed::<Service>(value, origin, Self::add_service),
            ("apps/v1", "Deployment") => {
                self.typed::<Deployment>(value, origin, Self::add_deployment)
            }
            ("apps/v1", "StatefulSet") => {
                self.typed::<StatefulSet>(value, origin, Self::add_statefulset)
            }
            ("apps/v1", "DaemonSet") => self.typed::<DaemonSet>(value, origin, Self::add_daemonset),
            ("apps/v1", "ReplicaSet") => {
                self.typed::<ReplicaSet>(value, origin, Self::add_replicaset)
            }
            ("batch/v1", "Job") => self.typed::<Job>(value, origin, Self::add_job),
            ("batch/v1", "CronJob") => self.typed::<CronJob>(value, origin, Self::add_cronjob),
            ("v1", "Pod") => self.typed::<Pod>(value, origin, Self::add_pod),
            ("v1", "ConfigMap") => self.typed::<ConfigMap>(value, origin, Self::add_configmap),
            // A ConfigMap's `data` pasted without its header (kind, metadata): keep the Corefile.
            (_, "")
                if value
                    .pointer("/data/Corefile")
                    .is_some_and(|c| c.is_string()) =>
            {
                self.add_headless_corefile(&value, origin);
                Ok(())
            }
            _ => {
                self.counts.ignored += 1;
                Ok(())
            }
        };
        if let Err(message) = result {
            self.problems.push(InputProblem {
                origin: origin.clone(),
                message,
            });
        }
    }

    /// Adds a raw Corefile read from a file (counted as a file read).
    pub fn add_corefile_file(&mut self, file: &str, text: String) {
        self.counts.files += 1;
        let name = std::path::Path::new(file)
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or(file)
            .to_string();
        self.count("Corefile");
        self.corefiles.push(CorefileInput {
            obj: ObjectRef {
                kind: "Corefile".to_string(),
                namespace: String::new(),
                name,
                origin: Origin::file(file, Some(1)),
            },
            text,
        });
    }

    fn add_headless_corefile(&mut self, value: &serde_json::Value, origin: &Origin) {
        let text = value
            .pointer("/data/Corefile")
            .and_then(serde_json::Value::as_str)
            .unwrap_or_default()
            .to_string();
        let meta = |k: &str| {
            value
                .pointer(&format!("/metadata/{k}"))
                .and_then(serde_json::Value::as_str)
                .map(String::from)
        };
        self.push_corefile_configmap(meta("namespace"), meta("name"), text, origin);
    }

    /// A Corefile ConfigMap; a pasted one may lack its metadata (then `kube-system/(unnamed)`).
    fn push_corefile_configmap(
        &mut self,
        namespace: Option<String>,
        name: Option<String>,
        text: String,
        origin: &Origin,
    ) {
        self.count("ConfigMap");
        self.corefiles.push(CorefileInput {
            obj: ObjectRef {
                kind: "ConfigMap".to_string(),
                namespace: namespace
                    .filter(|n| !n.is_empty())
                    .unwrap_or_else(|| "kube-system".to_string()),
                name: name
                    .filter(|n| !n.is_empty())
                    .unwrap_or_else(|| "(unnamed)".to_string()),
                origin: origin.clone(),
            },
            text,
        });
    }

    fn typed<T: DeserializeOwned>(
        &mut self,
        value: serde_json::Value,
        origin: &Origin,
        add: fn(&mut Self, T, &Origin) -> Result<(), String>,
    ) -> Result<(), String> {
        let kind = value
            .get("kind")
            .and_then(serde_json::Value::as_str)
            .unwrap_or("object")
            .to_string();
        let obj: T = serde_json::from_value(value).map_err(|e| format!("malformed {kind}: {e}"))?;
        add(self, obj, origin)
    }

    fn object_ref(
        &self,
        kind: &str,
        meta: &ObjectMeta,
        origin: &Origin,
    ) -> Result<ObjectRef, String> {
        let name = meta
            .name
            .clone()
            .filter(|n| !n.is_empty())
            .ok_or_else(|| format!("{kind} without metadata.name"))?;
        Ok(ObjectRef {
            kind: kind.to_string(),
            namespace: meta
                .namespace
                .clone()
                .filter(|n| !n.is_empty())
                .unwrap_or_else(|| self.default_namespace.clone()),
            name,
            origin: origin.clone(),
        })
    }

    fn count(&mut self, kind: &str) {
        *self.counts.objects.entry(kind.to_string()).or_default() += 1;
    }

    fn add_service(&mut self, svc: Service, origin: &Origin) -> Result<(), String> {
        let obj = self.object_ref("Service", &svc.metadata, origin)?;
        let spec = svc.spec.unwrap_or_default();
        let headless = spec.cluster_ip.as_deref() == Some("None");
        let ports = spec
            .ports
            .unwrap_or_default()
            .into_iter()
            .map(|p| ServicePort {
                name: p.name,
                port: p.port,
                app_protocol: p.app_protocol,
            })
            .collect();
        self.count("Service");
        self.services.push(ServiceInfo {
            key: ServiceKey::new(obj.namespace.clone(), obj.name.clone()),
            obj,
            headless,
            selector: spec.selector.unwrap_or_default(),
            publish_not_ready: spec.publish_not_ready_addresses.unwrap_or(false),
            ports,
            labels: svc.metadata.labels.unwrap_or_default(),
            annotations: svc.metadata.annotations.unwrap_or_default(),
        });
        Ok(())
    }

    fn push_workload(
        &mut self,
        kind: &str,
        meta: ObjectMeta,
        origin: &Origin,
        replicas: Option<i32>,
        rollout: Rollout,
        template: PodTemplateSpec,
    ) -> Result<(), String> {
        let obj = self.object_ref(kind, &meta, origin)?;
        self.count(kind);
        self.workloads.push(Workload {
            obj,
            replicas,
            rollout,
            template,
            annotations: meta.annotations.unwrap_or_default(),
        });
        Ok(())
    }

    fn add_deployment(&mut self, d: Deployment, origin: &Origin) -> Result<(), String> {
        let spec = d.spec.unwrap_or_default();
        let replicas = spec.replicas.unwrap_or(1);
        let strategy = spec.strategy.unwrap_or_default();
        let rollout = match strategy.type_.as_deref() {
            Some("Recreate") => Rollout::Recreate,
            _ => {
                let ru = strategy.rolling_update.unwrap_or_default();
                let surge = resolve(ru.max_surge.as_ref(), replicas, true, false)
                    .map_err(|e| format!("maxSurge: {e}"))?;
                let unavailable = resolve(ru.max_unavailable.as_ref(), replicas, false, true)
                    .map_err(|e| format!("maxUnavailable: {e}"))?;
                // The controller never lets both be 0: it removes one pod at a time.
                let unavailable = if surge == 0 && unavailable == 0 {
                    1
                } else {
                    unavailable
                };
                Rollout::Rolling {
                    max_surge: surge,
                    max_unavailable: unavailable,
                }
            }
        };
        self.push_workload(
            "Deployment",
            d.metadata,
            origin,
            Some(replicas),
            rollout,
            spec.template,
        )
    }

    fn add_statefulset(&mut self, s: StatefulSet, origin: &Origin) -> Result<(), String> {
        let spec = s.spec.unwrap_or_default();
        let replicas = spec.replicas.unwrap_or(1);
        let strategy = spec.update_strategy.unwrap_or_default();
        let rollout = match strategy.type_.as_deref() {
            Some("OnDelete") => Rollout::OnDelete,
            _ => {
                // A StatefulSet deletes a pod before it creates its replacement (no surge).
                let ru = strategy.rolling_update.unwrap_or_default();
                let unavailable = match ru.max_unavailable.as_ref() {
                    None => 1,
                    Some(v) => resolve(Some(v), replicas, false, true)
                        .map_err(|e| format!("maxUnavailable: {e}"))?
                        .max(1),
                };
                Rollout::Rolling {
                    max_surge: 0,
                    max_unavailable: unavailable,
                }
            }
        };
        self.push_workload(
            "StatefulSet",
            s.metadata,
            origin,
            Some(replicas),
            rollout,
            spec.template,
        )
    }

    fn add_daemonset(&mut self, d: DaemonSet, origin: &Origin) -> Result<(), String> {
        let spec = d.spec.unwrap_or_default();
        let strategy = spec.update_strategy.unwrap_or_default();
        let rollout = match strategy.type_.as_deref() {
            Some("OnDelete") => Rollout::OnDelete,
            _ => {
                // Per node: one pod; percentages resolve against 1.
                let ru = strategy.rolling_update.unwrap_or_default();
                let surge = resolve(
                    ru.max_surge.as_ref().or(Some(&IntOrString::Int(0))),
                    1,
                    true,
                    true,
                )
                .map_err(|e| format!("maxSurge: {e}"))?;
                let unavailable = if surge == 0 { 1 } else { 0 };
                Rollout::Rolling {
                    max_surge: surge,
                    max_unavailable: unavailable,
                }
            }
        };
        self.push_workload(
            "DaemonSet",
            d.metadata,
            origin,
            None,
            rollout,
            spec.template,
        )
    }

    fn add_replicaset(&mut self, r: ReplicaSet, origin: &Origin) -> Result<(), String> {
        if controlled(&r.metadata) {
            self.counts.owned += 1;
            return Ok(());
        }
        let spec = r.spec.unwrap_or_default();
        let template = spec.template.unwrap_or_default();
        self.push_workload(
            "ReplicaSet",
            r.metadata,
            origin,
            spec.replicas.or(Some(1)),
            Rollout::None,
            template,
        )
    }

    fn add_job(&mut self, j: Job, origin: &Origin) -> Result<(), String> {
        if controlled(&j.metadata) {
            self.counts.owned += 1;
            return Ok(());
        }
        let spec = j.spec.unwrap_or_default();
        self.push_workload(
            "Job",
            j.metadata,
            origin,
            None,
            Rollout::None,
            spec.template,
        )
    }

    fn add_cronjob(&mut self, c: CronJob, origin: &Origin) -> Result<(), String> {
        let template = c
            .spec
            .map(|s| s.job_template)
            .and_then(|t| t.spec)
            .map(|s| s.template)
            .unwrap_or_default();
        self.push_workload("CronJob", c.metadata, origin, None, Rollout::None, template)
    }

    fn add_pod(&mut self, p: Pod, origin: &Origin) -> Result<(), String> {
        if controlled(&p.metadata) {
            self.counts.owned += 1;
            return Ok(());
        }
        let template = PodTemplateSpec {
            metadata: Some(ObjectMeta {
                labels: p.metadata.labels.clone(),
                annotations: p.metadata.annotations.clone(),
                ..ObjectMeta::default()
            }),
            spec: p.spec,
        };
        let mut meta = p.metadata;
        // Pod annotations are already the template's.
        meta.annotations = None;
        self.push_workload("Pod", meta, origin, None, Rollout::None, template)
    }

    fn add_configmap(&mut self, cm: ConfigMap, origin: &Origin) -> Result<(), String> {
        let data = cm.data.unwrap_or_default();
        let jvm = data
            .values()
            .any(|v| JVM_SETTINGS.iter().any(|s| v.contains(s)));
        let corefile = data.get(COREFILE_KEY).cloned();
        if jvm {
            let obj = self.object_ref("ConfigMap", &cm.metadata, origin)?;
            if corefile.is_none() {
                self.count("ConfigMap");
            }
            self.config_maps.push(ConfigMapData { obj, data });
        }
        match corefile {
            Some(text) => {
                self.push_corefile_configmap(cm.metadata.namespace, cm.metadata.name, text, origin);
            }
            None if !jvm => self.counts.ignored += 1,
            None => {}
        }
        Ok(())
    }
}

/// Whether a controller owns the object (it is audited through its controller).
fn controlled(meta: &ObjectMeta) -> bool {
    meta.owner_references
        .as_ref()
        .is_some_and(|o| o.iter().any(|r| r.controller == Some(true)))
}

/// Resolves `maxSurge`/`maxUnavailable` against `replicas`: percentages round up for surge
/// and down for unavailability, as the Deployment controller does; the default is 25%.
/// `capped` refuses percentages above 100% the way the API server's validation does
/// (`maxUnavailable` always, a DaemonSet's `maxSurge` too; a Deployment may surge by 200%).
fn resolve(
    v: Option<&IntOrString>,
    replicas: i32,
    round_up: bool,
    capped: bool,
) -> Result<i32, String> {
    let v = v.cloned().unwrap_or(IntOrString::String("25%".to_string()));
    match v {
        IntOrString::Int(i) if i >= 0 => Ok(i),
        IntOrString::Int(i) => Err(format!("must not be negative: {i}")),
        IntOrString::String(s) => {
            let Some(pct) = s.trim().strip_suffix('%') else {
                return s
                    .trim()
                    .parse::<i32>()
                    .ok()
                    .filter(|i| *i >= 0)
                    .ok_or_else(|| format!("{s:?} is neither a count nor a percentage"));
            };
            let pct: u64 = pct
                .trim()
                .parse()
                .map_err(|_| format!("{s:?} is not a percentage of 0% or more"))?;
            if capped && pct > 100 {
                return Err(format!("{s:?} is more than 100%"));
            }
            let scaled = u64::try_from(replicas.max(0))
                .ok()
                .and_then(|r| r.checked_mul(pct))
                .ok_or_else(|| format!("{s:?} is out of range"))?;
            let n = if round_up {
                scaled.div_ceil(100)
            } else {
                scaled / 100
            };
            i32::try_from(n).map_err(|_| format!("{s:?} is out of range"))
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::panic)]
mod tests {
    use super::*;
    use serde_json::json;

    fn add(v: serde_json::Value) -> Inventory {
        let mut inv = Inventory::new("default");
        inv.add_value(v, &Origin::file("x.yaml", Some(1)), &[]);
        inv
    }

    #[test]
    fn deployment_strategy_resolves_like_the_controller() {
        let inv = add(json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web"},
            "spec": {"replicas": 1, "selector": {}, "template": {}}}));
        assert_eq!(
            inv.workloads[0].rollout,
            Rollout::Rolling {
                max_surge: 1,
                max_unavailable: 0
            }
        );
        assert_eq!(inv.workloads[0].obj.namespace, "default");
        let inv = add(json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "shop"},
            "spec": {"replicas": 10, "selector": {}, "template": {},
                     "strategy": {"rollingUpdate": {"maxSurge": 0, "maxUnavailable": "25%"}}}}));
        assert_eq!(
            inv.workloads[0].rollout,
            Rollout::Rolling {
                max_surge: 0,
                max_unavailable: 2
            }
        );
    }

    #[test]
    fn surge_may_exceed_100_percent_but_unavailability_may_not() {
        // Kubernetes validates only maxUnavailable against 100% for a Deployment.
        let inv = add(json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web"},
            "spec": {"replicas": 3, "selector": {}, "template": {},
                     "strategy": {"rollingUpdate": {"maxSurge": "200%", "maxUnavailable": 0}}}}));
        assert!(inv.problems.is_empty(), "{:?}", inv.problems);
        assert_eq!(
            inv.workloads[0].rollout,
            Rollout::Rolling {
                max_surge: 6,
                max_unavailable: 0
            }
        );
        let inv = add(json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web"},
            "spec": {"replicas": 3, "selector": {}, "template": {},
                     "strategy": {"rollingUpdate": {"maxUnavailable": "150%"}}}}));
        assert!(
            inv.problems
                .first()
                .is_some_and(|p| p.message.contains("maxUnavailable")),
            "{:?}",
            inv.problems
        );
        // A DaemonSet caps both at 100%.
        let inv = add(json!({"apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": "agent"},
            "spec": {"selector": {}, "template": {},
                     "updateStrategy": {"rollingUpdate": {"maxSurge": "200%", "maxUnavailable": 0}}}}));
        assert!(
            inv.problems
                .first()
                .is_some_and(|p| p.message.contains("maxSurge")),
            "{:?}",
            inv.problems
        );
    }

    #[test]
    fn statefulsets_never_surge_and_daemonsets_replace_per_node() {
        let inv = add(json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": "db"},
            "spec": {"selector": {}, "serviceName": "db", "template": {}}}));
        assert_eq!(inv.workloads[0].replicas, Some(1));
        assert_eq!(
            inv.workloads[0].rollout,
            Rollout::Rolling {
                max_surge: 0,
                max_unavailable: 1
            }
        );
        let inv = add(json!({"apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": "agent"},
            "spec": {"selector": {}, "template": {},
                     "updateStrategy": {"rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}}}));
        assert_eq!(
            inv.workloads[0].rollout,
            Rollout::Rolling {
                max_surge: 1,
                max_unavailable: 0
            }
        );
        let inv = add(json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web"},
            "spec": {"selector": {}, "template": {}, "strategy": {"type": "Recreate"}}}));
        assert_eq!(inv.workloads[0].rollout, Rollout::Recreate);
        let inv = add(json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web"},
            "spec": {"selector": {}, "template": {},
                     "strategy": {"rollingUpdate": {"maxSurge": "lots"}}}}));
        assert!(
            inv.problems
                .first()
                .is_some_and(|p| p.message.contains("maxSurge")),
            "{:?} {:?}",
            inv.problems,
            inv.workloads.first().map(|w| w.rollout)
        );
    }

    #[test]
    fn lists_are_unrolled_and_owned_objects_skipped() {
        let inv = add(json!({"apiVersion": "v1", "kind": "List", "items": [
            {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "a",
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "u", "controller": true}]}},
            {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "b"}},
            {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}},
        ]}));
        assert_eq!(inv.workloads.len(), 1);
        assert_eq!(inv.counts.owned, 1);
        assert_eq!(inv.counts.ignored, 1);
    }

    #[test]
    fn malformed_objects_are_problems_with_their_origin() {
        let inv = add(json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "web"}, "spec": {"ports": "eighty"}}));
        assert_eq!(inv.problems.len(), 1);
        assert_eq!(inv.problems[0].origin.to_string(), "x.yaml:1");
        assert!(inv.problems[0].message.contains("malformed Service"));
    }

    #[test]
    fn grpc_ports_by_name_or_app_protocol() {
        let p = |name: Option<&str>, app: Option<&str>| ServicePort {
            name: name.map(String::from),
            port: 9090,
            app_protocol: app.map(String::from),
        };
        assert!(p(Some("grpc"), None).is_grpc());
        assert!(p(Some("grpc-api"), None).is_grpc());
        assert!(p(None, Some("kubernetes.io/h2c+grpc")).is_grpc());
        assert!(!p(Some("http"), None).is_grpc());
        assert!(!p(Some("grpcweb"), Some("http")).is_grpc());
    }
}
