//! Builds a Kubernetes client from `--kubeconfig` / `--context`, or the default configuration.
//!
//! See [`connect`]. The [`ClientOrigin`] it returns travels with the client so every error can
//! say which server, kubeconfig and context were used.

use std::fmt;
use std::path::PathBuf;

use kube::config::{Config, KubeConfigOptions, Kubeconfig};

use super::error::KubeError;

/// The `--kubeconfig` and `--context` flags.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConnectOptions {
    /// `--kubeconfig PATH`; else `KUBECONFIG`, else `~/.kube/config`, else in-cluster.
    pub kubeconfig: Option<PathBuf>,
    /// `--context NAME`; else the kubeconfig's `current-context`.
    pub context: Option<String>,
}

/// Where the client configuration came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KubeconfigSource {
    /// `--kubeconfig PATH`.
    Flag(PathBuf),
    /// The `KUBECONFIG` environment variable (possibly several paths).
    Env(String),
    /// `~/.kube/config`.
    Default(PathBuf),
    /// The pod's service account.
    InCluster,
    /// Built by hand (tests, embedding).
    Custom(String),
}

impl fmt::Display for KubeconfigSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KubeconfigSource::Flag(p) | KubeconfigSource::Default(p) => {
                write!(f, "{}", p.display())
            }
            KubeconfigSource::Env(v) => write!(f, "{v} (from KUBECONFIG)"),
            KubeconfigSource::InCluster => f.write_str("in-cluster service account"),
            KubeconfigSource::Custom(s) => f.write_str(s),
        }
    }
}

/// The API server, kubeconfig and context a client uses; shown in every error.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientOrigin {
    /// API server URL.
    pub server: String,
    /// Configuration source.
    pub kubeconfig: KubeconfigSource,
    /// Context name (none in-cluster).
    pub context: Option<String>,
}

impl fmt::Display for ClientOrigin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "server {}, kubeconfig {}", self.server, self.kubeconfig)?;
        if let Some(c) = &self.context {
            write!(f, ", context {c}")?;
        }
        Ok(())
    }
}

/// A client and where its configuration came from.
#[derive(Clone)]
pub struct Connection {
    /// The client.
    pub client: kube::Client,
    /// Its origin, for error messages.
    pub origin: ClientOrigin,
    /// The bearer token the client authenticates with, when it uses one (a ServiceAccount's
    /// token file in a pod, a kubeconfig token): `drain-wait` presents it to the agents.
    pub bearer: Option<Bearer>,
}

/// A bearer token, or the file it is read from at each use (projected ServiceAccount tokens
/// are rotated).
#[derive(Clone)]
pub enum Bearer {
    /// A fixed token.
    Token(String),
    /// A file holding the token.
    File(PathBuf),
}

impl Bearer {
    /// The token now.
    pub fn token(&self) -> std::io::Result<String> {
        match self {
            Bearer::Token(t) => Ok(t.clone()),
            Bearer::File(p) => Ok(std::fs::read_to_string(p)?.trim().to_string()),
        }
    }
}

impl fmt::Debug for Connection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connection")
            .field("origin", &self.origin)
            .finish_non_exhaustive()
    }
}

/// Builds a client: `--kubeconfig`, else `KUBECONFIG`, else `~/.kube/config`, else the pod's
/// service account; `--context` or the kubeconfig's current context.
///
/// Nothing is sent to the API server here: an unreachable server shows up on the first request.
///
/// # Errors
///
/// [`KubeError::Kubeconfig`] (unreadable file, unknown context), [`KubeError::NoConfig`],
/// [`KubeError::Client`]; each names the kubeconfig and context.
pub async fn connect(opts: &ConnectOptions) -> Result<Connection, KubeError> {
    let default_path =
        std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".kube").join("config"));
    let env = std::env::var_os("KUBECONFIG").filter(|v| !v.is_empty());
    let (kubeconfig, source) = if let Some(path) = &opts.kubeconfig {
        let kc = Kubeconfig::read_from(path)
            .map_err(|e| kubeconfig_error(path.display().to_string(), opts, e))?;
        (Some(kc), KubeconfigSource::Flag(path.clone()))
    } else if let Some(env) = env {
        let shown = env.to_string_lossy().into_owned();
        match Kubeconfig::from_env() {
            Ok(Some(kc)) => (Some(kc), KubeconfigSource::Env(shown)),
            Ok(None) => (None, KubeconfigSource::InCluster),
            Err(e) => {
                return Err(kubeconfig_error(
                    format!("{shown} (from KUBECONFIG)"),
                    opts,
                    e,
                ));
            }
        }
    } else if let Some(path) = default_path.as_ref().filter(|p| p.exists()) {
        let kc = Kubeconfig::read_from(path)
            .map_err(|e| kubeconfig_error(path.display().to_string(), opts, e))?;
        (Some(kc), KubeconfigSource::Default(path.clone()))
    } else {
        (None, KubeconfigSource::InCluster)
    };

    let (config, context) = match kubeconfig {
        Some(kc) => {
            let context = opts.context.clone().or_else(|| kc.current_context.clone());
            let options = KubeConfigOptions {
                context: opts.context.clone(),
                ..Default::default()
            };
            let config = Config::from_custom_kubeconfig(kc, &options)
                .await
                .map_err(|e| kubeconfig_error(source.to_string(), opts, e))?;
            (config, context)
        }
        None => {
            let tried = default_path
                .map_or_else(|| "~/.kube/config".to_string(), |p| p.display().to_string());
            if let Some(ctx) = &opts.context {
                return Err(KubeError::Kubeconfig {
                    kubeconfig: tried,
                    context: ctx.clone(),
                    source: kube::config::KubeconfigError::FindPath,
                });
            }
            let config =
                Config::incluster().map_err(|source| KubeError::NoConfig { tried, source })?;
            (config, None)
        }
    };
    let origin = ClientOrigin {
        server: config.cluster_url.to_string(),
        kubeconfig: source,
        context,
    };
    let bearer = {
        use secrecy::ExposeSecret as _;
        match (&config.auth_info.token, &config.auth_info.token_file) {
            (Some(t), _) => Some(Bearer::Token(t.expose_secret().to_string())),
            (None, Some(f)) => Some(Bearer::File(PathBuf::from(f))),
            (None, None) => None,
        }
    };
    let client = kube::Client::try_from(config).map_err(|source| KubeError::Client {
        origin: origin.clone(),
        source,
    })?;
    Ok(Connection {
        client,
        origin,
        bearer,
    })
}

fn kubeconfig_error(
    kubeconfig: String,
    opts: &ConnectOptions,
    source: kube::config::KubeconfigError,
) -> KubeError {
    KubeError::Kubeconfig {
        kubeconfig,
        context: opts
            .context
            .clone()
            .unwrap_or_else(|| "current-context".to_string()),
        source,
    }
}
