//! Errors of the Kubernetes adapter, each naming the API server, kubeconfig and context used.

use std::time::Duration;

use thiserror::Error;

use super::client::ClientOrigin;

/// Why the adapter could not reach or read the Kubernetes API.
///
/// One-shot commands report these and exit 2; long-running watches never return them (their
/// failures become [`super::TruthEvent::WatchFailed`] and are retried).
#[derive(Debug, Error)]
pub enum KubeError {
    /// The kubeconfig could not be read or does not define the context.
    #[error("cannot load kubeconfig {kubeconfig} (context {context})")]
    Kubeconfig {
        /// Path(s) tried.
        kubeconfig: String,
        /// Context asked for, or `current-context`.
        context: String,
        /// Cause.
        #[source]
        source: kube::config::KubeconfigError,
    },
    /// Neither a kubeconfig nor an in-cluster service account was found.
    #[error("no Kubernetes configuration: no kubeconfig at {tried} and not running in a cluster")]
    NoConfig {
        /// The kubeconfig locations tried.
        tried: String,
        /// Why in-cluster configuration failed.
        #[source]
        source: kube::config::InClusterError,
    },
    /// The client could not be built (TLS material, proxy).
    #[error("cannot create a Kubernetes client ({origin})")]
    Client {
        /// Where the configuration came from.
        origin: ClientOrigin,
        /// Cause.
        #[source]
        source: kube::Error,
    },
    /// The API server did not answer: connection refused, DNS, TLS, network.
    #[error("Kubernetes API server unreachable ({origin})")]
    Unreachable {
        /// Where the configuration came from.
        origin: ClientOrigin,
        /// Cause.
        #[source]
        source: kube::Error,
    },
    /// The API server did not finish answering in time.
    #[error("Kubernetes API server did not answer within {} s ({origin})", after.as_secs_f64())]
    Timeout {
        /// Where the configuration came from.
        origin: ClientOrigin,
        /// The timeout.
        after: Duration,
    },
    /// Authentication or authorization failed.
    #[error(
        "Kubernetes API refused to list {resource} ({origin}): {code} {message}; ghostip needs list/watch on \
         endpointslices, services and pods (see docs/TRUTH.md, RBAC)"
    )]
    Forbidden {
        /// Resource being listed.
        resource: &'static str,
        /// HTTP status code (401 or 403).
        code: u16,
        /// The API server's message.
        message: String,
        /// Where the configuration came from.
        origin: ClientOrigin,
    },
    /// Any other API error status.
    #[error("Kubernetes API error listing {resource} ({origin}): {code} {message}")]
    Api {
        /// Resource being listed.
        resource: &'static str,
        /// HTTP status code.
        code: u16,
        /// The API server's message.
        message: String,
        /// Where the configuration came from.
        origin: ClientOrigin,
    },
}

impl KubeError {
    /// Classifies a `kube` client error from a request for `resource`.
    pub(crate) fn from_request(
        origin: &ClientOrigin,
        resource: &'static str,
        err: kube::Error,
    ) -> Self {
        match err {
            kube::Error::Api(status) => {
                let (code, message) = (status.code, status.message.clone());
                if code == 401 || code == 403 {
                    KubeError::Forbidden {
                        resource,
                        code,
                        message,
                        origin: origin.clone(),
                    }
                } else {
                    KubeError::Api {
                        resource,
                        code,
                        message,
                        origin: origin.clone(),
                    }
                }
            }
            other => KubeError::Unreachable {
                origin: origin.clone(),
                source: other,
            },
        }
    }
}
