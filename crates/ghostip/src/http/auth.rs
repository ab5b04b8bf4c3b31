//! Authentication and authorization of HTTP requests the Kubernetes way, as kube-rbac-proxy does it: a bearer token checked with a TokenReview, the caller authorized with a SubjectAccessReview for the path as a non-resource URL.
//!
//! Every request except `/healthz` and `/readyz` (the kubelet's probes) must carry
//! `Authorization: Bearer <token>`. The API server authenticates the token
//! (`TokenReview`, with the configured audiences) and decides whether its user may `get`
//! the path (`SubjectAccessReview` with `nonResourceAttributes`): `/metrics`, `/status`,
//! and `/v1/ips` for every `/v1/ips/{ip}`, so one decision covers all the IPs a caller
//! asks about. A ClusterRole grants it with `nonResourceURLs: ["/v1/ips", "/v1/ips/*"]`,
//! `verbs: ["get"]`. The answer: `401` without a token or with one the API server does not
//! authenticate, `403` when the user may not, `503` when the API server cannot be asked.
//! Decisions, positive and negative, are cached for 10 s (at most 4096, by token and
//! path), so a caller polling many IPs costs the API server two reviews every 10 s.
//! Denials are logged with the client address, the user and the path, never the token.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::Router;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use futures::future::BoxFuture;
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};
use tokio::time::Instant;

/// Paths served to anyone: the kubelet's probes.
pub const OPEN_PATHS: &[&str] = &["/healthz", "/readyz"];

/// How long a decision is reused.
pub const CACHE_TTL: Duration = Duration::from_secs(10);
/// How many decisions are kept.
pub const CACHE_CAPACITY: usize = 4096;
/// How long one review may take.
const REVIEW_TIMEOUT: Duration = Duration::from_secs(5);

/// Who a token belongs to, as the TokenReview says.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Identity {
    /// The user name, e.g. `system:serviceaccount:ci:drain-wait`.
    pub username: String,
    /// The user's uid.
    pub uid: String,
    /// The user's groups.
    pub groups: Vec<String>,
    /// Extra attributes the authenticator gave.
    pub extra: BTreeMap<String, Vec<String>>,
}

/// What the SubjectAccessReview asks: `verb` on the non-resource URL `path`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Attributes {
    /// The non-resource URL.
    pub path: String,
    /// The verb.
    pub verb: String,
}

impl Attributes {
    /// The attributes of a request: `/v1/ips/{ip}` is asked as `/v1/ips`; the verb follows
    /// the method as kube-rbac-proxy maps it (`GET` and `HEAD`: `get`).
    pub fn of(method: &Method, path: &str) -> Attributes {
        let path = if path == "/v1/ips" || path.starts_with("/v1/ips/") {
            "/v1/ips"
        } else {
            path
        };
        let verb = match *method {
            Method::GET | Method::HEAD => "get".to_string(),
            Method::POST => "create".to_string(),
            Method::PUT => "update".to_string(),
            Method::PATCH => "patch".to_string(),
            Method::DELETE => "delete".to_string(),
            ref other => other.as_str().to_ascii_lowercase(),
        };
        Attributes {
            path: path.to_string(),
            verb,
        }
    }
}

/// The TokenReview's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Authentication {
    /// The token is valid and belongs to this identity.
    Authenticated(Identity),
    /// The token is not valid (the reason, for the log).
    Rejected(String),
}

/// The SubjectAccessReview's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Authorization {
    /// The user may.
    Allowed,
    /// The user may not (the reason, for the log).
    Denied(String),
}

/// The API server could not be asked.
#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    /// The request failed.
    #[error("{review} failed: {cause}")]
    Failed {
        /// `TokenReview` or `SubjectAccessReview`.
        review: &'static str,
        /// Why.
        cause: String,
    },
    /// The request did not finish in time.
    #[error("{review} did not answer within {:?}", REVIEW_TIMEOUT)]
    Timeout {
        /// `TokenReview` or `SubjectAccessReview`.
        review: &'static str,
    },
}

/// Who answers the reviews: the API server ([`KubeReviewer`]), or a fake in tests.
pub trait Reviewer: Send + Sync {
    /// Authenticates a bearer token.
    fn authenticate<'a>(
        &'a self,
        token: &'a str,
    ) -> BoxFuture<'a, Result<Authentication, ReviewError>>;
    /// Decides whether `who` may do `attrs`.
    fn authorize<'a>(
        &'a self,
        who: &'a Identity,
        attrs: &'a Attributes,
    ) -> BoxFuture<'a, Result<Authorization, ReviewError>>;
}

/// Reviews with the API server.
pub struct KubeReviewer {
    client: kube::Client,
    audiences: Vec<String>,
}

impl KubeReviewer {
    /// Reviews through `client`; tokens must be issued for one of `audiences` (none: the
    /// API server's own).
    pub fn new(client: kube::Client, audiences: Vec<String>) -> Self {
        KubeReviewer { client, audiences }
    }
}

impl Reviewer for KubeReviewer {
    fn authenticate<'a>(
        &'a self,
        token: &'a str,
    ) -> BoxFuture<'a, Result<Authentication, ReviewError>> {
        Box::pin(async move {
            let review = TokenReview {
                spec: TokenReviewSpec {
                    token: Some(token.to_string()),
                    audiences: (!self.audiences.is_empty()).then(|| self.audiences.clone()),
                },
                ..TokenReview::default()
            };
            let status = create(&self.client, "TokenReview", &review)
                .await?
                .status
                .unwrap_or_default();
            Ok(token_review_result(
                status.authenticated,
                status.error,
                status.audiences,
                status.user.map(|u| Identity {
                    username: u.username.unwrap_or_default(),
                    uid: u.uid.unwrap_or_default(),
                    groups: u.groups.unwrap_or_default(),
                    extra: u.extra.unwrap_or_default(),
                }),
                &self.audiences,
            ))
        })
    }

    fn authorize<'a>(
        &'a self,
        who: &'a Identity,
        attrs: &'a Attributes,
    ) -> BoxFuture<'a, Result<Authorization, ReviewError>> {
        Box::pin(async move {
            let review = SubjectAccessReview {
                spec: SubjectAccessReviewSpec {
                    user: Some(who.username.clone()),
                    uid: (!who.uid.is_empty()).then(|| who.uid.clone()),
                    groups: Some(who.groups.clone()),
                    extra: (!who.extra.is_empty()).then(|| who.extra.clone()),
                    non_resource_attributes: Some(NonResourceAttributes {
                        path: Some(attrs.path.clone()),
                        verb: Some(attrs.verb.clone()),
                    }),
                    resource_attributes: None,
                },
                ..SubjectAccessReview::default()
            };
            let status = create(&self.client, "SubjectAccessReview", &review)
                .await?
                .status
                .unwrap_or_default();
            Ok(if status.allowed {
                Authorization::Allowed
            } else {
                Authorization::Denied(
                    status
                        .reason
                        .or(status.evaluation_error)
                        .filter(|r| !r.is_empty())
                        .unwrap_or_else(|| "no RBAC rule allows it".to_string()),
                )
            })
        })
    }
}

/// Creates a review (a cluster-scoped object the API server answers in its status).
async fn create<K>(client: &kube::Client, what: &'static str, review: &K) -> Result<K, ReviewError>
where
    K: kube::Resource<Scope = kube::core::ClusterResourceScope>
        + Clone
        + std::fmt::Debug
        + serde::Serialize
        + serde::de::DeserializeOwned,
    K::DynamicType: Default,
{
    Api::<K>::all(client.clone())
        .create(&PostParams::default(), review)
        .await
        .map_err(|e| ReviewError::Failed {
            review: what,
            cause: e.to_string(),
        })
}

/// A TokenReview status as a result: authenticated, with a user, and (when audiences were
/// asked for) for one of them.
fn token_review_result(
    authenticated: Option<bool>,
    error: Option<String>,
    token_audiences: Option<Vec<String>>,
    user: Option<Identity>,
    wanted: &[String],
) -> Authentication {
    if authenticated != Some(true) {
        return Authentication::Rejected(
            error
                .filter(|e| !e.is_empty())
                .unwrap_or_else(|| "token not authenticated".to_string()),
        );
    }
    if !wanted.is_empty()
        && !token_audiences
            .unwrap_or_default()
            .iter()
            .any(|a| wanted.contains(a))
    {
        return Authentication::Rejected(format!(
            "token not issued for the audience {}",
            wanted.join(", ")
        ));
    }
    match user {
        Some(u) if !u.username.is_empty() => Authentication::Authenticated(u),
        _ => Authentication::Rejected("the TokenReview named no user".to_string()),
    }
}

/// The decision for one token and one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Served.
    Allowed {
        /// Who asked.
        user: String,
    },
    /// 401.
    Unauthenticated {
        /// Why.
        reason: String,
    },
    /// 403.
    Forbidden {
        /// Who asked.
        user: String,
        /// Why.
        reason: String,
    },
}

/// Decisions by token and attributes, each kept for a fixed time, bounded in number.
pub struct VerdictCache {
    ttl: Duration,
    capacity: usize,
    entries: HashMap<(String, Attributes), (Instant, Verdict)>,
}

impl VerdictCache {
    /// An empty cache.
    pub fn new(ttl: Duration, capacity: usize) -> Self {
        VerdictCache {
            ttl,
            capacity: capacity.max(1),
            entries: HashMap::new(),
        }
    }

    /// The decision for `token` and `attrs`, unless it expired.
    pub fn get(&mut self, token: &str, attrs: &Attributes, now: Instant) -> Option<Verdict> {
        let key = (token.to_string(), attrs.clone());
        match self.entries.get(&key) {
            Some((expires, v)) if *expires > now => Some(v.clone()),
            Some(_) => {
                self.entries.remove(&key);
                None
            }
            None => None,
        }
    }

    /// Keeps a decision; when full, expired ones go first, then the oldest.
    pub fn put(&mut self, token: &str, attrs: &Attributes, verdict: Verdict, now: Instant) {
        if self.entries.len() >= self.capacity {
            self.entries.retain(|_, (expires, _)| *expires > now);
        }
        while self.entries.len() >= self.capacity {
            let Some(oldest) = self
                .entries
                .iter()
                .min_by_key(|(_, (expires, _))| *expires)
                .map(|(k, _)| k.clone())
            else {
                break;
            };
            self.entries.remove(&oldest);
        }
        self.entries.insert(
            (token.to_string(), attrs.clone()),
            (now + self.ttl, verdict),
        );
    }

    /// Decisions kept now.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether nothing is kept.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// The authentication of one server: its reviewer and its cache.
pub struct Auth {
    reviewer: Arc<dyn Reviewer>,
    cache: Mutex<VerdictCache>,
}

impl Auth {
    /// Reviews with `reviewer`, caching decisions for [`CACHE_TTL`].
    pub fn new(reviewer: Arc<dyn Reviewer>) -> Self {
        Auth {
            reviewer,
            cache: Mutex::new(VerdictCache::new(CACHE_TTL, CACHE_CAPACITY)),
        }
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, VerdictCache> {
        self.cache.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The decision for `token` asking `attrs`: from the cache, else reviewed and cached.
    /// Failures to review are not cached.
    pub async fn verdict(&self, token: &str, attrs: &Attributes) -> Result<Verdict, ReviewError> {
        if let Some(v) = self.cache().get(token, attrs, Instant::now()) {
            return Ok(v);
        }
        let authn = tokio::time::timeout(REVIEW_TIMEOUT, self.reviewer.authenticate(token))
            .await
            .map_err(|_| ReviewError::Timeout {
                review: "TokenReview",
            })??;
        let verdict = match authn {
            Authentication::Rejected(reason) => Verdict::Unauthenticated { reason },
            Authentication::Authenticated(who) => {
                let authz =
                    tokio::time::timeout(REVIEW_TIMEOUT, self.reviewer.authorize(&who, attrs))
                        .await
                        .map_err(|_| ReviewError::Timeout {
                            review: "SubjectAccessReview",
                        })??;
                match authz {
                    Authorization::Allowed => Verdict::Allowed { user: who.username },
                    Authorization::Denied(reason) => Verdict::Forbidden {
                        user: who.username,
                        reason,
                    },
                }
            }
        };
        self.cache()
            .put(token, attrs, verdict.clone(), Instant::now());
        Ok(verdict)
    }
}

/// `app` with every request but [`OPEN_PATHS`] authenticated and authorized by `auth`.
pub fn protect(app: Router, auth: Arc<Auth>) -> Router {
    app.layer(middleware::from_fn_with_state(auth, check))
}

/// The bearer token of a request, if it carries one.
fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

async fn check(State(auth): State<Arc<Auth>>, req: Request, next: Next) -> Response {
    let path = req.uri().path();
    if OPEN_PATHS.contains(&path) {
        return next.run(req).await;
    }
    let client = req
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0.to_string())
        .unwrap_or_default();
    let attrs = Attributes::of(req.method(), path);
    let Some(token) = bearer(req.headers()) else {
        tracing::info!(%client, path = %req.uri().path(), "request without a bearer token refused");
        return unauthorized();
    };
    match auth.verdict(token, &attrs).await {
        Ok(Verdict::Allowed { .. }) => next.run(req).await,
        Ok(Verdict::Unauthenticated { reason }) => {
            tracing::info!(%client, path = %req.uri().path(), %reason, "request with an invalid token refused");
            unauthorized()
        }
        Ok(Verdict::Forbidden { user, reason }) => {
            tracing::warn!(%client, %user, path = %req.uri().path(), verb = %attrs.verb, sar_path = %attrs.path, %reason, "request forbidden");
            (
                StatusCode::FORBIDDEN,
                format!(
                    "Forbidden (user={user}, verb={}, path={})\n",
                    attrs.verb, attrs.path
                ),
            )
                .into_response()
        }
        Err(e) => {
            tracing::error!(%client, path = %req.uri().path(), error = %e, "cannot review a request's token");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                "cannot check the token with the API server\n",
            )
                .into_response()
        }
    }
}

fn unauthorized() -> Response {
    (
        StatusCode::UNAUTHORIZED,
        [(header::WWW_AUTHENTICATE, "Bearer")],
        "Unauthorized\n",
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use axum::body::Body;
    use axum::routing::get;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tower::ServiceExt as _;

    /// Tokens `good` (user `alice`, may get /v1/ips and /metrics), `other` (user `bob`, may
    /// not); every other token is invalid; `broken` makes the review fail.
    #[derive(Default)]
    struct Fake {
        authns: AtomicUsize,
        authzs: AtomicUsize,
    }

    impl Reviewer for Fake {
        fn authenticate<'a>(
            &'a self,
            token: &'a str,
        ) -> BoxFuture<'a, Result<Authentication, ReviewError>> {
            self.authns.fetch_add(1, Ordering::SeqCst);
            Box::pin(async move {
                let user = |name: &str| {
                    Authentication::Authenticated(Identity {
                        username: name.to_string(),
                        ..Identity::default()
                    })
                };
                match token {
                    "good" => Ok(user("alice")),
                    "other" => Ok(user("bob")),
                    "broken" => Err(ReviewError::Failed {
                        review: "TokenReview",
                        cause: "connection refused".to_string(),
                    }),
                    _ => Ok(Authentication::Rejected("invalid bearer token".to_string())),
                }
            })
        }

        fn authorize<'a>(
            &'a self,
            who: &'a Identity,
            attrs: &'a Attributes,
        ) -> BoxFuture<'a, Result<Authorization, ReviewError>> {
            self.authzs.fetch_add(1, Ordering::SeqCst);
            Box::pin(async move {
                let allowed = who.username == "alice"
                    && attrs.verb == "get"
                    && ["/v1/ips", "/metrics"].contains(&attrs.path.as_str());
                Ok(if allowed {
                    Authorization::Allowed
                } else {
                    Authorization::Denied("no rule".to_string())
                })
            })
        }
    }

    fn app(fake: Arc<Fake>) -> Router {
        let routes = Router::new()
            .route("/healthz", get(|| async { "ok" }))
            .route("/readyz", get(|| async { "ready" }))
            .route("/metrics", get(|| async { "metrics" }))
            .route("/status", get(|| async { "status" }))
            .route("/v1/ips/{ip}", get(|| async { "ip" }));
        protect(routes, Arc::new(Auth::new(fake)))
    }

    async fn call(app: &Router, path: &str, token: Option<&str>) -> (StatusCode, String) {
        let mut req = Request::builder().uri(path);
        if let Some(t) = token {
            req = req.header(header::AUTHORIZATION, format!("Bearer {t}"));
        }
        let resp = app
            .clone()
            .oneshot(req.body(Body::empty()).unwrap())
            .await
            .unwrap();
        let status = resp.status();
        let body = axum::body::to_bytes(resp.into_body(), 1 << 16)
            .await
            .unwrap();
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    #[tokio::test]
    async fn probes_are_open_and_everything_else_needs_an_allowed_token() {
        let fake = Arc::new(Fake::default());
        let app = app(Arc::clone(&fake));
        assert_eq!(call(&app, "/healthz", None).await.0, StatusCode::OK);
        assert_eq!(call(&app, "/readyz", None).await.0, StatusCode::OK);
        for path in ["/metrics", "/status", "/v1/ips/10.244.1.7", "/nope"] {
            assert_eq!(
                call(&app, path, None).await.0,
                StatusCode::UNAUTHORIZED,
                "{path}"
            );
            assert_eq!(
                call(&app, path, Some("forged")).await.0,
                StatusCode::UNAUTHORIZED,
                "{path}"
            );
            assert_eq!(
                call(&app, path, Some("other")).await.0,
                StatusCode::FORBIDDEN,
                "{path}"
            );
        }
        assert_eq!(
            call(&app, "/v1/ips/10.244.1.7", Some("good")).await,
            (StatusCode::OK, "ip".to_string())
        );
        assert_eq!(call(&app, "/metrics", Some("good")).await.0, StatusCode::OK);
        // alice is not granted /status.
        let (code, body) = call(&app, "/status", Some("good")).await;
        assert_eq!(code, StatusCode::FORBIDDEN);
        assert_eq!(body, "Forbidden (user=alice, verb=get, path=/status)\n");
        // A token the API server cannot review is neither served nor cached.
        assert_eq!(
            call(&app, "/metrics", Some("broken")).await.0,
            StatusCode::SERVICE_UNAVAILABLE
        );
    }

    #[tokio::test]
    async fn the_scheme_is_bearer_only() {
        let app = app(Arc::new(Fake::default()));
        let resp = app
            .clone()
            .oneshot(
                Request::builder()
                    .uri("/metrics")
                    .header(header::AUTHORIZATION, "Basic Z29vZA==")
                    .body(Body::empty())
                    .unwrap(),
            )
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(resp.headers()[header::WWW_AUTHENTICATE], "Bearer");
        let resp = app
            .oneshot(
                Request::builder()
                    .uri("/metrics")
                    .header(header::AUTHORIZATION, "bearer good")
                    .body(Body::empty())
                    .unwrap(),
            )
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
    }

    #[tokio::test(start_paused = true)]
    async fn decisions_are_cached_for_ten_seconds_per_token_and_path() {
        let fake = Arc::new(Fake::default());
        let app = app(Arc::clone(&fake));
        // One review covers every IP: /v1/ips/{ip} is asked as /v1/ips.
        for ip in ["10.244.1.7", "10.244.1.8", "fd00::7"] {
            let path = format!("/v1/ips/{ip}");
            assert_eq!(call(&app, &path, Some("good")).await.0, StatusCode::OK);
            assert_eq!(
                call(&app, &path, Some("other")).await.0,
                StatusCode::FORBIDDEN
            );
            assert_eq!(
                call(&app, &path, Some("forged")).await.0,
                StatusCode::UNAUTHORIZED
            );
        }
        assert_eq!(fake.authns.load(Ordering::SeqCst), 3);
        assert_eq!(fake.authzs.load(Ordering::SeqCst), 2);
        tokio::time::advance(Duration::from_secs(11)).await;
        assert_eq!(
            call(&app, "/v1/ips/10.244.1.7", Some("good")).await.0,
            StatusCode::OK
        );
        assert_eq!(fake.authns.load(Ordering::SeqCst), 4);
        assert_eq!(fake.authzs.load(Ordering::SeqCst), 3);
        // Failures are asked again.
        for _ in 0..2 {
            call(&app, "/metrics", Some("broken")).await;
        }
        assert_eq!(fake.authns.load(Ordering::SeqCst), 6);
    }

    #[test]
    fn the_cache_is_bounded_and_drops_expired_then_oldest() {
        let now = Instant::now();
        let mut c = VerdictCache::new(Duration::from_secs(10), 3);
        let a = Attributes::of(&Method::GET, "/metrics");
        let v = Verdict::Allowed {
            user: "alice".to_string(),
        };
        c.put("t1", &a, v.clone(), now);
        c.put("t2", &a, v.clone(), now + Duration::from_secs(1));
        c.put("t3", &a, v.clone(), now + Duration::from_secs(2));
        c.put("t4", &a, v.clone(), now + Duration::from_secs(3));
        assert_eq!(c.len(), 3);
        assert_eq!(c.get("t1", &a, now + Duration::from_secs(3)), None);
        assert_eq!(
            c.get("t4", &a, now + Duration::from_secs(3)),
            Some(v.clone())
        );
        // t2 and t3 expired by 12.5 s: both go before t4 does.
        c.put("t5", &a, v.clone(), now + Duration::from_millis(12_500));
        assert_eq!(c.len(), 2);
        assert_eq!(c.get("t4", &a, now + Duration::from_secs(13)), None);
        assert!(c.get("t5", &a, now + Duration::from_secs(13)).is_some());
    }

    #[test]
    fn attributes_follow_kube_rbac_proxy() {
        let a = Attributes::of(&Method::GET, "/v1/ips/10.244.1.7");
        assert_eq!((a.path.as_str(), a.verb.as_str()), ("/v1/ips", "get"));
        assert_eq!(Attributes::of(&Method::HEAD, "/status").verb, "get");
        assert_eq!(Attributes::of(&Method::POST, "/status").verb, "create");
        assert_eq!(Attributes::of(&Method::GET, "/v1/ipsx").path, "/v1/ipsx");
    }

    #[test]
    fn token_reviews_need_a_user_and_the_audience() {
        let alice = Some(Identity {
            username: "alice".to_string(),
            ..Identity::default()
        });
        let aud = vec!["ghostip".to_string()];
        assert!(matches!(
            token_review_result(Some(true), None, None, alice.clone(), &[]),
            Authentication::Authenticated(_)
        ));
        assert_eq!(
            token_review_result(Some(false), Some("expired".into()), None, None, &[]),
            Authentication::Rejected("expired".to_string())
        );
        assert!(matches!(
            token_review_result(
                Some(true),
                None,
                Some(vec!["https://kubernetes.default.svc".into()]),
                alice.clone(),
                &aud
            ),
            Authentication::Rejected(_)
        ));
        assert!(matches!(
            token_review_result(Some(true), None, Some(aud.clone()), alice, &aud),
            Authentication::Authenticated(_)
        ));
        assert!(matches!(
            token_review_result(Some(true), None, None, None, &[]),
            Authentication::Rejected(_)
        ));
    }
}
