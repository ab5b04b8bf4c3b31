//! Client construction from `--kubeconfig` / `--context`, and the error a one-shot command
//! gets when the API server is unreachable: it names the server, the kubeconfig and the context.
#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use ghostip::clock::SystemClock;
use ghostip::kube::{ConnectOptions, KubeError, KubeconfigSource, WatchScope, connect, snapshot};

/// Port 1 on loopback: nothing listens, connections are refused at once.
const KUBECONFIG: &str = r#"
apiVersion: v1
kind: Config
clusters:
- name: lab
  cluster:
    server: https://127.0.0.1:1
    insecure-skip-tls-verify: true
contexts:
- name: lab
  context:
    cluster: lab
    user: lab
- name: other
  context:
    cluster: lab
    user: lab
    namespace: shop
current-context: other
users:
- name: lab
  user:
    token: not-a-real-token
"#;

fn write_kubeconfig() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kubeconfig");
    std::fs::write(&path, KUBECONFIG).unwrap();
    (dir, path)
}

#[tokio::test]
async fn unreachable_api_server_error_names_server_kubeconfig_and_context() {
    let (_dir, path) = write_kubeconfig();
    let conn = connect(&ConnectOptions {
        kubeconfig: Some(path.clone()),
        context: Some("lab".into()),
    })
    .await
    .unwrap();
    assert_eq!(conn.origin.kubeconfig, KubeconfigSource::Flag(path.clone()));
    assert_eq!(conn.origin.context.as_deref(), Some("lab"));
    assert!(
        conn.origin.server.starts_with("https://127.0.0.1:1"),
        "{}",
        conn.origin.server
    );

    let err = snapshot(
        &conn,
        &WatchScope::default(),
        Duration::from_secs(20),
        &SystemClock,
    )
    .await
    .unwrap_err();
    assert!(matches!(err, KubeError::Unreachable { .. }), "{err:?}");
    let msg = err.to_string();
    for part in [
        "https://127.0.0.1:1",
        &path.display().to_string(),
        "context lab",
    ] {
        assert!(msg.contains(part), "{part:?} missing from {msg:?}");
    }
    // The cause chain (what the CLI prints with {:#}) says why.
    assert!(std::error::Error::source(&err).is_some());
}

#[tokio::test]
async fn the_current_context_is_used_and_reported_by_default() {
    let (_dir, path) = write_kubeconfig();
    let conn = connect(&ConnectOptions {
        kubeconfig: Some(path),
        context: None,
    })
    .await
    .unwrap();
    assert_eq!(conn.origin.context.as_deref(), Some("other"));
    assert_eq!(conn.client.default_namespace(), "shop");
}

#[tokio::test]
async fn bad_kubeconfig_or_context_errors_name_them() {
    let err = connect(&ConnectOptions {
        kubeconfig: Some("/nonexistent/kubeconfig".into()),
        context: None,
    })
    .await
    .unwrap_err();
    assert!(matches!(err, KubeError::Kubeconfig { .. }), "{err:?}");
    assert!(err.to_string().contains("/nonexistent/kubeconfig"), "{err}");

    let (_dir, path) = write_kubeconfig();
    let err = connect(&ConnectOptions {
        kubeconfig: Some(path.clone()),
        context: Some("nope".into()),
    })
    .await
    .unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("nope") && msg.contains(&path.display().to_string()),
        "{msg}"
    );
}
