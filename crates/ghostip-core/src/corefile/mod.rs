//! Parses CoreDNS Corefiles and computes how long the DNS layer is supposed to lag behind Kubernetes.
//!
//! See [`Corefile::parse`] for the entry point and [`Corefile::expected_lag`] for the rules.
//!
//! The parser follows CoreDNS's Caddyfile dialect (the `coredns/caddy` lexer and parser):
//! tokens are separated by whitespace, `"…"` quotes a token (only `\"` is an escape inside),
//! `#` outside quotes starts a comment to the end of the line (even in the middle of a word),
//! `{` and `}` are braces only as tokens of their own, a directive ends at the end of its line
//! unless it opens a block, and `{$VAR}` environment placeholders are kept as they are.
//! `import` lines are recorded, never followed.
//!
//! Corefiles published as templates are read as they are: their placeholders
//! ([`Placeholder`]: `{{ .DNSDomain }}`, `CLUSTER_DOMAIN`, `__PILLAR__DNS__DOMAIN__`,
//! `%{CLUSTER_DOMAIN}%`, `$DNS_DOMAIN`, …) are found and named. One that names a domain and
//! stands where a zone is expected is taken as the domain asked about, and every lag computed
//! through it carries a caveat ([`ExpectedLag::caveats`]) saying so; a Go template action that
//! is not a field (`{{ if … }}`) is refused, since its output cannot be known.
//!
//! # Expected lag
//!
//! For a name in the cluster domain answered by the `kubernetes` plugin with TTL `t`
//! (`kubernetes … { ttl t }`, default 5 s), a `cache` plugin covering the name gives every
//! reply the TTL `D = min(max(t, MINTTL), MAXTTL)` (MINTTL default 5 s, MAXTTL the `cache`/
//! `success` TTL, default 3600 s), cached or not, and keeps a cached answer for `D`. So CoreDNS
//! itself may serve a removed IP for up to `D` (0 with `disable success <domain>`), and clients
//! receive `D` as TTL. Forwarding caches (NodeLocal DNSCache) are computed relative to their
//! upstream, see [`Corefile::expected_lag_behind`].
//!
//! # Errors
//!
//! Syntax errors and plugin arguments CoreDNS would refuse are [`CorefileError`]s carrying the
//! line number. Nothing here panics, whatever the input.
//!
//! # Layout
//!
//! - `lexer`: tokens (quotes, comments, line numbers);
//! - `parser` and `syntax`: server blocks, their keys and directives ([`Corefile`]);
//! - `placeholder`: template placeholders left unrendered;
//! - `zone` and `args`: zone matching, plugin argument values (integers, Go durations);
//! - `lag`: what each plugin implies for the expected lag (the `kubernetes` TTL, the
//!   `cache` caps, MINTTL floor, `disable`, `serve_stale`, `prefetch`, `keepttl`, and
//!   forwarding caches such as NodeLocal DNSCache behind their upstream);
//! - `error`: [`CorefileError`].

mod args;
mod error;
mod lag;
mod lexer;
mod parser;
mod placeholder;
mod syntax;
mod zone;

#[cfg(test)]
mod tests;

use std::time::Duration;

pub use args::parse_go_duration;
pub use error::CorefileError;
pub use lag::{AnswerSource, CacheSummary, ExpectedLag, ListenerLag};
pub use placeholder::{Placeholder, PlaceholderSyntax};
pub use syntax::{Corefile, Directive, Import, ServerBlock, ServerKey};

/// The `kubernetes` plugin's default TTL (seconds).
pub const DEFAULT_KUBERNETES_TTL: u32 = 5;
/// The `cache` plugin's default maximum TTL for successful answers (seconds).
pub const DEFAULT_SUCCESS_MAX_TTL: u64 = 3600;
/// The `cache` plugin's default maximum TTL for denial answers (seconds).
pub const DEFAULT_DENIAL_MAX_TTL: u64 = 1800;
/// The `cache` plugin's default minimum TTL, for both caches (seconds).
pub const DEFAULT_MIN_TTL: u64 = 5;
/// `serve_stale` without a duration.
pub const DEFAULT_SERVE_STALE: Duration = Duration::from_secs(3600);
/// The port CoreDNS listens on when a server address has none.
pub const DEFAULT_PORT: u16 = 53;
/// The zone of a server key or plugin argument that is a template placeholder standing for a
/// domain (`__PILLAR__DNS__DOMAIN__`, `{{ .DNSDomain }}`, `CLUSTER_DOMAIN`): it covers the
/// domain asked about, and the lag computed through it carries a caveat naming it.
pub const DOMAIN_PLACEHOLDER_ZONE: &str = "<domain placeholder>.";
