//! What the deploy/ tests share: the directory, its YAML documents, the rendering of the
//! Helm chart with a real `helm`, and ghostip's CLI applied to container arguments.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use clap::Parser;
use ghostip::cli::Cli;
use serde_json::Value;

/// The repository's deploy/ directory.
pub fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy")
}

/// The non-empty documents of a multi-document YAML text.
pub fn yaml_documents(what: &str, text: &str) -> Vec<Value> {
    let docs: Vec<Value> =
        serde_saphyr::from_multiple(text).unwrap_or_else(|e| panic!("{what}: not YAML: {e}"));
    docs.into_iter().filter(|d| !d.is_null()).collect()
}

/// Every document of the given deploy/ files, with its file name.
pub fn documents_of(files: &[&str]) -> Vec<(String, Value)> {
    let mut out = Vec::new();
    for name in files {
        let text = std::fs::read_to_string(deploy_dir().join(name)).unwrap();
        for d in yaml_documents(name, &text) {
            out.push((name.to_string(), d));
        }
    }
    out
}

/// The `helm` binary the chart tests run: $GHOSTIP_HELM (scripts/test sets it to the one
/// `lab/build helm` builds from its Go module).
pub fn helm() -> PathBuf {
    PathBuf::from(
        std::env::var_os("GHOSTIP_HELM").unwrap_or_else(|| {
            panic!("set GHOSTIP_HELM to a helm binary (lab/build helm builds one)")
        }),
    )
}

/// Values that turn on every optional part of the chart: Cilium exec and the Prometheus
/// Operator objects.
pub const ALL_OPTIONAL: &[&str] = &[
    "--set",
    "cilium.exec=true",
    "--set",
    "monitoring.serviceMonitor=true",
    "--set",
    "monitoring.prometheusRule=true",
];

/// `helm template ghostip deploy/helm/ghostip ARGS…`: the rendered documents, or helm's
/// error text.
pub fn helm_template(args: &[&str]) -> Result<Vec<Value>, String> {
    let out = Command::new(helm())
        .args(["template", "ghostip"])
        .arg(deploy_dir().join("helm/ghostip"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", helm().display()));
    let stdout = String::from_utf8(out.stdout).unwrap();
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    Ok(yaml_documents("helm template", &stdout))
}

/// Parses a container's arguments with ghostip's CLI (`$(HOST_IP)` expanded as the kubelet would).
pub fn parse_cli(args: &[String], extra: &[&str]) -> Cli {
    // The node's address may be of either family: the arguments parse with both.
    let with = |host_ip: &str| -> Cli {
        let argv: Vec<String> = std::iter::once("ghostip".to_string())
            .chain(args.iter().map(|a| a.replace("$(HOST_IP)", host_ip)))
            .chain(extra.iter().map(|s| s.to_string()))
            .collect();
        Cli::try_parse_from(&argv).unwrap_or_else(|e| panic!("{argv:?}: {e}"))
    };
    with("2001:db8::10");
    with("192.0.2.10")
}
