//! Reads Cilium's load-balancer table from the Cilium agent pod on this node, through the Kubernetes exec API (opt-in with `--datapath cilium`).
//!
//! Runs the commands of the datapath's format (`cilium-dbg service list -o json`, falling back
//! to `cilium service list -o json` for Cilium before 1.15) in the agent container and parses
//! the output as that format. Needs `get`/`list` on pods and `create` on `pods/exec`,
//! which deploy/ grants only on the Cilium agent pods and only when Cilium is enabled.
//! The CPU the command costs runs in the Cilium pod; the wall time stands in for it in
//! the cost cap.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, AttachParams, ListParams};
use tokio::io::AsyncReadExt as _;

use super::readers::{Datapath, ReadOutcome, ReaderError};

/// Largest output read from the pod (a Cilium service list is far smaller).
const MAX_OUTPUT: u64 = 256 * 1024 * 1024;

/// Where the Cilium agent runs.
#[derive(Clone, Debug)]
pub struct CiliumTarget {
    /// Namespace of the Cilium pods.
    pub namespace: String,
    /// Their label selector.
    pub selector: String,
    /// The agent container.
    pub container: String,
    /// This node.
    pub node: String,
}

/// Finds the Cilium agent pod on this node and reads `dp` there: its commands (in order,
/// until one runs), parsed as its format.
pub async fn read_cilium(
    dp: Datapath,
    client: kube::Client,
    target: &CiliumTarget,
    timeout: Duration,
) -> Result<ReadOutcome, ReaderError> {
    let started = crate::clock::monotonic_now();
    let fut = async {
        let pods: Api<Pod> = Api::namespaced(client, &target.namespace);
        let lp = ListParams::default()
            .labels(&target.selector)
            .fields(&format!("spec.nodeName={}", target.node));
        let list = pods.list(&lp).await.map_err(|e| {
            ReaderError::Other(format!(
                "listing Cilium pods ({}) in {} on {}: {e}",
                target.selector, target.namespace, target.node
            ))
        })?;
        let name = list
            .items
            .iter()
            .find_map(|p| p.metadata.name.clone())
            .ok_or_else(|| {
                ReaderError::Other(format!(
                    "no Cilium agent pod ({}) in {} on node {}",
                    target.selector, target.namespace, target.node
                ))
            })?;
        let mut last_err = None;
        for argv in dp.argv() {
            match exec(&pods, &name, &target.container, argv).await {
                Ok(bytes) => return Ok((argv, bytes)),
                Err(e) => last_err = Some(e),
            }
        }
        Err(last_err.unwrap_or_else(|| ReaderError::Other("no Cilium CLI in the pod".into())))
    };
    let program = dp
        .argv()
        .first()
        .and_then(|a| a.first())
        .copied()
        .unwrap_or("cilium-dbg");
    let (argv, bytes) =
        tokio::time::timeout(timeout, fut)
            .await
            .map_err(|_| ReaderError::Timeout {
                program: format!("{program} (exec)"),
                after: timeout,
                cpu: Duration::ZERO,
            })??;
    let table = match ghostip_datapath::parse(dp.format(), &bytes) {
        Ok(ghostip_datapath::Parsed::Lb(t)) => t,
        Ok(ghostip_datapath::Parsed::Conntrack(_)) => {
            return Err(ReaderError::Other(format!(
                "{} gave no load-balancer table",
                argv.join(" ")
            )));
        }
        Err(e) => {
            return Err(ReaderError::Parse {
                program: argv.join(" "),
                source: e,
            });
        }
    };
    let wall = started.elapsed();
    Ok(ReadOutcome {
        table: table.into(),
        child_cpu: wall,
        parse_cpu: Duration::ZERO,
        wall,
        bytes: bytes.len() as u64,
    })
}

async fn exec(
    pods: &Api<Pod>,
    pod: &str,
    container: &str,
    argv: &[&str],
) -> Result<Vec<u8>, ReaderError> {
    let program = argv.first().copied().unwrap_or_default();
    let params = AttachParams::default()
        .container(container)
        .stdin(false)
        .stdout(true)
        .stderr(true);
    let mut attached = pods
        .exec(pod, argv.iter().copied(), &params)
        .await
        .map_err(|e| ReaderError::Other(format!("exec {program} in {pod}: {e}")))?;
    let mut out = Vec::new();
    if let Some(stdout) = attached.stdout() {
        let mut limited = stdout.take(MAX_OUTPUT);
        limited
            .read_to_end(&mut out)
            .await
            .map_err(|e| ReaderError::Io {
                program: program.to_string(),
                source: e,
            })?;
    }
    let mut err = String::new();
    if let Some(stderr) = attached.stderr() {
        let _ = stderr.take(64 * 1024).read_to_string(&mut err).await;
    }
    let status = match attached.take_status() {
        Some(s) => s.await,
        None => None,
    };
    let _ = attached.join().await;
    if let Some(s) = status
        && s.status.as_deref() == Some("Failure")
    {
        return Err(ReaderError::Failed {
            program: format!("{program} (exec in {pod})"),
            status: s.reason.unwrap_or_else(|| "Failure".into()),
            stderr: s.message.unwrap_or(err),
        });
    }
    Ok(out)
}
