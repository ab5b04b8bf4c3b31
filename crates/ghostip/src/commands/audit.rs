//! `ghostip audit`: reads manifests or lists the cluster, runs the pure audit, prints the findings.
//!
//! Files: each `-f` path is a file, `-` (standard input), or a directory (`.yaml`, `.yml`,
//! `.json` and Corefiles in it; subdirectories with `-R`). Each directory and file is read
//! once, however many links lead to it (a symlink loop is noted on stderr, not followed),
//! and each file up to `--max-input-size`. A file that cannot be read or
//! parsed, or a named directory with no such file, is reported with its line and the others
//! are still audited; the command then exits 2 after printing the findings, because a partial
//! audit must not pass a CI gate. When no file at all could be read there is no report: the
//! command exits 2 naming each path and why. `--cluster` lists the same kinds
//! with get/list only, and reads the `coredns` and `node-local-dns` ConfigMaps in kube-system
//! by name.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::fmt::Debug;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Service};
use kube::Resource;
use kube::api::{Api, ListParams};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{Outcome, kube_connect, print_json, service_filter};
use ghostip_analysis::audit::inventory::InputProblem;
use ghostip_analysis::audit::load::{FileKind, add_manifest};
use ghostip_analysis::audit::{AuditConfig, Inventory, Origin, Severity, audit};

use crate::cli::{AuditArgs, GlobalArgs, OutputFormat};
use crate::kube::{ConfigMapRef, Connection, KubeError};
use crate::printer::audit as render;

const PAGE_SIZE: u32 = 500;

pub(super) async fn run(g: &GlobalArgs, args: AuditArgs) -> anyhow::Result<Outcome> {
    let default_ns = args
        .scope
        .namespace
        .clone()
        .unwrap_or_else(|| "default".to_string());
    let mut inv = Inventory::new(default_ns);
    if args.cluster {
        let conn = kube_connect(g).await?;
        tokio::time::timeout(
            args.request_timeout,
            list_cluster(&conn, args.scope.namespace.as_deref(), &mut inv),
        )
        .await
        .map_err(|_| KubeError::Timeout {
            origin: conn.origin.clone(),
            after: args.request_timeout,
        })
        .context("listing objects to audit")?
        .context("listing objects to audit")?;
    } else {
        let mut walk = Walk::new(args.recursive, args.max_input_size);
        for path in &args.files {
            walk.read_path(path, true, &mut inv);
        }
        for note in &walk.notes {
            eprintln!("ghostip: note: {note}");
        }
        if inv.counts.files == 0 {
            // Nothing was read: no report, only what went wrong with each path.
            let why: Vec<String> = inv.problems.iter().map(ToString::to_string).collect();
            anyhow::bail!("no files to audit: {}", why.join("; "));
        }
    }
    let filter = service_filter(&args.scope);
    let cfg = AuditConfig {
        zone: args.zone.clone(),
        namespace: filter.namespace,
        selector: filter.selector,
    };
    let report = audit(&inv, &cfg);
    match g.output {
        OutputFormat::Table | OutputFormat::Wide => {
            crate::printer::print_text(&render::listing(&report, &g.output.layout()));
        }
        OutputFormat::Json => print_json(&render::json(&report))?,
        OutputFormat::Sarif => print_json(&render::sarif(&report, env!("CARGO_PKG_VERSION")))?,
    }
    if !report.problems.is_empty() {
        let n = report.problems.len();
        let first = report
            .problems
            .first()
            .map(ToString::to_string)
            .unwrap_or_default();
        anyhow::bail!(
            "{n} input{} could not be read, the rest was audited: {first}{}",
            if n == 1 { "" } else { "s" },
            if n > 1 {
                " (and more, listed in the output)"
            } else {
                ""
            }
        );
    }
    Ok(match report.worst() {
        Some(Severity::Warning | Severity::Error) => Outcome::Finding,
        _ => Outcome::Clean,
    })
}

/// Walks the `-f` paths: each directory and file is read once, however many links lead to
/// it (found by device and inode), and each file at most `limit` bytes.
struct Walk {
    recursive: bool,
    limit: u64,
    /// Directories and files read, by (device, inode), with the path first read.
    seen: HashMap<(u64, u64), String>,
    /// Paths not read again, and why (printed as notes: they do not fail the audit).
    notes: Vec<String>,
}

impl Walk {
    fn new(recursive: bool, limit: u64) -> Self {
        Self {
            recursive,
            limit,
            seen: HashMap::new(),
            notes: Vec::new(),
        }
    }

    /// Whether `path` (its target, when a symlink) was read before; records it if not.
    fn first_visit(&mut self, path: &Path, shown: &str) -> bool {
        let Ok(meta) = std::fs::metadata(path) else {
            // Reading it will say why.
            return true;
        };
        match self.seen.entry((meta.dev(), meta.ino())) {
            Entry::Vacant(v) => {
                v.insert(shown.to_string());
                true
            }
            Entry::Occupied(o) => {
                let what = if meta.is_dir() { "directory" } else { "file" };
                self.notes.push(format!(
                    "{shown}: the {what} {} again (a symlink loop or a second link to it): not read twice",
                    o.get()
                ));
                false
            }
        }
    }

    /// Reads a file or a directory into `inv`; failures become input problems, and so does
    /// a directory named on the command line that holds no file to audit. Returns how many
    /// files it tried to read.
    fn read_path(&mut self, path: &Path, named: bool, inv: &mut Inventory) -> usize {
        let shown = path.display().to_string();
        if named && shown == "-" {
            match crate::input::read_all_from(std::io::stdin().lock(), self.limit) {
                Ok(bytes) => match String::from_utf8(bytes) {
                    Ok(text) => {
                        if let Err(p) = add_manifest(inv, "<stdin>", &text) {
                            inv.problems.push(p);
                        }
                    }
                    Err(_) => inv
                        .problems
                        .push(problem("<stdin>", "is not UTF-8 text".to_string())),
                },
                Err(e) => inv
                    .problems
                    .push(problem("<stdin>", format!("cannot read: {e}"))),
            }
            return 1;
        }
        if path.is_dir() {
            if !self.first_visit(path, &shown) {
                return 0;
            }
            let entries = match std::fs::read_dir(path) {
                Ok(e) => e,
                Err(e) => {
                    inv.problems
                        .push(problem(&shown, format!("cannot read directory: {e}")));
                    return 1;
                }
            };
            let mut children: Vec<PathBuf> =
                entries.filter_map(|e| e.ok()).map(|e| e.path()).collect();
            children.sort();
            let mut tried = 0;
            let mut skipped_dirs = false;
            for child in children {
                if child.is_dir() {
                    if self.recursive {
                        tried += self.read_path(&child, false, inv);
                    } else {
                        skipped_dirs = true;
                    }
                } else if FileKind::of(&child).is_some() {
                    tried += self.read_path(&child, false, inv);
                }
            }
            if named && tried == 0 && self.notes.iter().all(|n| !n.starts_with(&shown)) {
                inv.problems.push(problem(
                    &shown,
                    format!(
                        "no .yaml, .yml, .json or Corefile file in this directory{}",
                        if skipped_dirs {
                            " (subdirectories are read with -R)"
                        } else {
                            ""
                        }
                    ),
                ));
            }
            return tried;
        }
        let kind = if named {
            FileKind::of_named(path)
        } else {
            match FileKind::of(path) {
                Some(k) => k,
                None => return 0,
            }
        };
        if !self.first_visit(path, &shown) {
            return 0;
        }
        let text = match crate::input::read_all(path, self.limit) {
            Ok(bytes) => match String::from_utf8(bytes) {
                Ok(t) => t,
                Err(_) => {
                    inv.problems
                        .push(problem(&shown, "is not UTF-8 text".to_string()));
                    return 1;
                }
            },
            Err(e) => {
                inv.problems
                    .push(problem(&shown, format!("cannot read: {e}")));
                return 1;
            }
        };
        match kind {
            FileKind::Corefile => inv.add_corefile_file(&shown, text),
            FileKind::Manifest => {
                if let Err(p) = add_manifest(inv, &shown, &text) {
                    inv.problems.push(p);
                }
            }
        }
        1
    }
}

fn problem(file: &str, message: String) -> InputProblem {
    InputProblem {
        origin: Origin::file(file, None),
        message,
    }
}

/// Lists the audited kinds (in `namespace`, or all) and the Corefile ConfigMaps.
async fn list_cluster(
    conn: &Connection,
    namespace: Option<&str>,
    inv: &mut Inventory,
) -> anyhow::Result<()> {
    list_into::<Service>(conn, namespace, "services", inv).await?;
    list_into::<Deployment>(conn, namespace, "deployments", inv).await?;
    list_into::<StatefulSet>(conn, namespace, "statefulsets", inv).await?;
    list_into::<DaemonSet>(conn, namespace, "daemonsets", inv).await?;
    list_into::<ReplicaSet>(conn, namespace, "replicasets", inv).await?;
    list_into::<Job>(conn, namespace, "jobs", inv).await?;
    list_into::<CronJob>(conn, namespace, "cronjobs", inv).await?;
    list_into::<Pod>(conn, namespace, "pods", inv).await?;
    for cm in [ConfigMapRef::coredns(), ConfigMapRef::node_local_dns()] {
        let api: Api<ConfigMap> = Api::namespaced(conn.client.clone(), &cm.namespace);
        match api.get_opt(&cm.name).await {
            Ok(Some(obj)) => add_typed(inv, &obj)?,
            Ok(None) => {}
            Err(kube::Error::Api(status)) if status.code == 403 || status.code == 401 => {
                tracing::warn!(configmap = %cm, code = status.code, "Cannot read the Corefile ConfigMap; DNS lag is not counted.");
            }
            Err(e) => return Err(KubeError::from_request(&conn.origin, "configmaps", e).into()),
        }
    }
    Ok(())
}

async fn list_into<K>(
    conn: &Connection,
    namespace: Option<&str>,
    resource: &'static str,
    inv: &mut Inventory,
) -> anyhow::Result<()>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + Serialize
        + Debug,
    K::DynamicType: Default,
{
    let api: Api<K> = match namespace {
        Some(ns) => Api::namespaced(conn.client.clone(), ns),
        None => Api::all(conn.client.clone()),
    };
    let mut params = ListParams::default().limit(PAGE_SIZE);
    loop {
        let page = api
            .list(&params)
            .await
            .map_err(|e| KubeError::from_request(&conn.origin, resource, e))?;
        for item in &page.items {
            add_typed(inv, item)?;
        }
        match page.metadata.continue_.as_deref() {
            Some(token) if !token.is_empty() => {
                params = ListParams::default().limit(PAGE_SIZE).continue_token(token);
            }
            _ => return Ok(()),
        }
    }
}

fn add_typed<K: Serialize>(inv: &mut Inventory, obj: &K) -> anyhow::Result<()> {
    let value = serde_json::to_value(obj).context("encoding a listed object")?;
    inv.add_value(value, &Origin::cluster(), &[]);
    Ok(())
}
