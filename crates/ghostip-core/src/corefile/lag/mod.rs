//! The expected lag of a DNS server for a domain, from what each plugin of its Corefile implies.
//!
//! `Corefile::expected_lags` finds the listeners (port, `bind` addresses) serving the domain
//! and the most specific server block answering it on each; `server_lag` finds the answer
//! source (the `kubernetes` plugin or a `forward`) and the `cache` covering the name, then
//! `kubernetes` or `forward` computes the figures with the `cache` settings.

mod cache;
mod forward;
mod kubernetes;

use std::time::Duration;

use super::CorefileError;
use super::DEFAULT_PORT;
use super::DOMAIN_PLACEHOLDER_ZONE;
use super::args::plugin_zones;
use super::placeholder;
use super::syntax::{Corefile, Directive, ServerBlock};
use super::zone::{best_zone, key_zone_match, normalize_zone, zone_contains};
use cache::cache_settings;
use forward::forward_lag;
use kubernetes::{kubernetes_lag, kubernetes_ttl};

/// How a removed endpoint's IP can linger in one DNS server, from its configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExpectedLag {
    /// How long this server itself may keep answering with an IP its source no longer returns
    /// (0 when it caches nothing for the domain). For a forwarding cache this includes the
    /// upstream's own lag when the upstream is known.
    pub cache_lag: Duration,
    /// The TTL a fresh answer carries to clients (what their own caches may add).
    pub client_ttl: Duration,
    /// How long a negative answer (NXDOMAIN/NODATA) may outlive the record's creation.
    pub denial_lag: Duration,
    /// The TTL negative answers carry to clients.
    pub denial_ttl: Duration,
    /// `serve_stale`: how long after expiry an entry may still be served (TTL 0) once more.
    pub serve_stale: Option<Duration>,
    /// Where answers come from.
    pub source: AnswerSource,
    /// The `cache` plugin covering the domain, as configured; `None` when no cache covers it.
    pub cache: Option<CacheSummary>,
    /// How each figure was computed, one step per line.
    pub notes: Vec<String>,
    /// What the figures assume and the Corefile does not show: template placeholders taken
    /// for the cluster zone or left unknown, `import`s not followed, an unknown upstream,
    /// options ignored. Each is also in `notes`.
    pub caveats: Vec<String>,
}

impl ExpectedLag {
    /// Adds a caveat, also as a note.
    fn caveat(&mut self, text: String) {
        self.notes.push(text.clone());
        self.caveats.push(text);
    }
}

/// The settings of the `cache` plugin that covers a domain, for explaining a lag and its fix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CacheSummary {
    /// Line of the `cache` plugin.
    pub line: usize,
    /// MAXTTL of successful answers (`cache N`, `success CAP N`; default 3600 s).
    pub success_max: Duration,
    /// MINTTL of successful answers (default 5 s).
    pub success_min: Duration,
    /// MAXTTL of denial answers.
    pub denial_max: Duration,
    /// Whether successful answers for the domain are cached (no `disable success` covering it).
    pub success_cached: bool,
    /// Whether denial answers for the domain are cached (no `disable denial` covering it).
    pub denial_cached: bool,
    /// `prefetch` is set.
    pub prefetch: bool,
    /// `keepttl` is set.
    pub keepttl: bool,
}

/// Where a server block gets its answers for the domain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AnswerSource {
    /// The `kubernetes` plugin, with its TTL in seconds.
    Kubernetes {
        /// `ttl` (default 5).
        ttl: u32,
    },
    /// `forward` (or the old `proxy`) to these upstreams.
    Forward {
        /// The upstream addresses as written.
        to: Vec<String>,
    },
}

/// One listener serving the domain and its expected lag.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListenerLag {
    /// Port.
    pub port: u16,
    /// `bind` addresses; empty means every address.
    pub bind: Vec<String>,
    /// Zone of the server block that answers (the most specific one).
    pub zone: String,
    /// Line of that server block.
    pub line: usize,
    /// The lag.
    pub lag: ExpectedLag,
}

// === impl Corefile ===

impl Corefile {
    /// The expected lag for names in `domain` (e.g. `cluster.local`), for the listener that
    /// lags most when several serve it (different ports or `bind` addresses).
    ///
    /// A forwarding server is computed as if its upstream handed out TTLs as long as its own
    /// cache allows; use [`Corefile::expected_lag_behind`] when the upstream is known.
    ///
    /// # Errors
    ///
    /// [`CorefileError::NotServed`] / [`CorefileError::NotAnswered`] when nothing answers the
    /// domain, or a plugin configuration CoreDNS would refuse.
    pub fn expected_lag(&self, domain: &str) -> Result<ExpectedLag, CorefileError> {
        self.expected_lag_behind(domain, None)
    }

    /// Like [`Corefile::expected_lag`], for a server that forwards to an upstream whose own
    /// lag is `upstream` (NodeLocal DNSCache in front of the cluster's CoreDNS).
    ///
    /// # Errors
    ///
    /// As [`Corefile::expected_lag`].
    pub fn expected_lag_behind(
        &self,
        domain: &str,
        upstream: Option<&ExpectedLag>,
    ) -> Result<ExpectedLag, CorefileError> {
        let all = self.expected_lags(domain, upstream)?;
        let count = all.len();
        let mut worst: Option<ListenerLag> = None;
        for l in all {
            if worst
                .as_ref()
                .is_none_or(|w| l.lag.cache_lag > w.lag.cache_lag)
            {
                worst = Some(l);
            }
        }
        let Some(w) = worst else {
            return Err(CorefileError::NotServed {
                domain: domain.to_string(),
            });
        };
        let mut lag = w.lag;
        if count > 1 {
            lag.notes.push(format!(
                "{count} listeners serve {domain}; this is the one that lags most (port {}, server block line {})",
                w.port, w.line
            ));
        }
        Ok(lag)
    }

    /// The expected lag of every plain-DNS listener that serves `domain`.
    ///
    /// # Errors
    ///
    /// As [`Corefile::expected_lag`]; an error in any listener's block is returned.
    pub fn expected_lags(
        &self,
        domain: &str,
        upstream: Option<&ExpectedLag>,
    ) -> Result<Vec<ListenerLag>, CorefileError> {
        let name = normalize_zone(domain);
        // Listener → (best key zone, server index).
        let mut listeners: Vec<(u16, Vec<String>, String, usize)> = Vec::new();
        for (idx, server) in self
            .servers
            .iter()
            .enumerate()
            .filter(|(_, s)| !s.is_snippet())
        {
            let bind = server.bind_addresses();
            for key in &server.keys {
                if !key.is_plain_dns() {
                    continue;
                }
                let port = key.port.unwrap_or(DEFAULT_PORT);
                let Some(matched) = key_zone_match(&key.zone, &name) else {
                    continue;
                };
                match listeners
                    .iter_mut()
                    .find(|(p, b, _, _)| *p == port && *b == bind)
                {
                    Some(entry) => {
                        if matched.len() > entry.2.len() {
                            entry.2 = matched;
                            entry.3 = idx;
                        }
                    }
                    None => listeners.push((port, bind.clone(), matched, idx)),
                }
            }
        }
        if listeners.is_empty() {
            return Err(CorefileError::NotServed {
                domain: domain.to_string(),
            });
        }
        let mut out = Vec::with_capacity(listeners.len());
        for (port, bind, zone, idx) in listeners {
            let Some(server) = self.servers.get(idx) else {
                continue;
            };
            let mut lag = server_lag(server, &zone, &name, upstream)?;
            for caveat in self.file_caveats(&name) {
                lag.caveat(caveat);
            }
            out.push(ListenerLag {
                port,
                bind,
                zone,
                line: server.line,
                lag,
            });
        }
        Ok(out)
    }

    /// Caveats about the whole file: top-level imports, placeholders for text the installer
    /// adds, and the other placeholders (those standing for the domain are named by the
    /// server block they are in).
    fn file_caveats(&self, name: &str) -> Vec<String> {
        let mut out = Vec::new();
        if !self.imports.is_empty() {
            let pats: Vec<&str> = self.imports.iter().map(|i| i.pattern.as_str()).collect();
            out.push(format!(
                "top-level import {} not followed: imported server blocks may also serve {}",
                pats.join(", "),
                name.trim_end_matches('.')
            ));
        }
        // `X (line 9)`, `X (lines 9, 14)`: each placeholder once, in file order.
        let list = |pick: &dyn Fn(&placeholder::Placeholder) -> bool| -> Vec<String> {
            let mut found: Vec<(&str, Vec<usize>)> = Vec::new();
            for p in self.placeholders.iter().filter(|p| pick(p)) {
                match found.iter_mut().find(|(t, _)| *t == p.text) {
                    Some((_, lines)) if !lines.contains(&p.line) => lines.push(p.line),
                    Some(_) => {}
                    None => found.push((&p.text, vec![p.line])),
                }
            }
            found
                .into_iter()
                .map(|(t, lines)| {
                    let lines: Vec<String> = lines.iter().map(ToString::to_string).collect();
                    let s = if lines.len() == 1 { "" } else { "s" };
                    format!("{t} (line{s} {})", lines.join(", "))
                })
                .collect()
        };
        let fillers = list(&|p| p.fills_text);
        if !fillers.is_empty() {
            out.push(format!(
                "template placeholder{} {} stand{} for text the installer adds there (server blocks or plugins, possibly none): not seen",
                plural(fillers.len()),
                fillers.join(", "),
                if fillers.len() == 1 { "s" } else { "" }
            ));
        }
        let others = list(&|p| !(p.fills_text || p.domain));
        if !others.is_empty() {
            out.push(format!(
                "template placeholder{} whose value{} ghostip does not see: {}",
                plural(others.len()),
                plural(others.len()),
                others.join(", ")
            ));
        }
        out
    }
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// The placeholders standing for the domain in a server block's keys and plugin arguments,
/// with their lines.
fn domain_placeholders(server: &ServerBlock) -> Vec<(String, usize)> {
    fn walk(ds: &[Directive], out: &mut Vec<(String, usize)>) {
        for d in ds {
            for a in d.args.iter().filter(|a| placeholder::is_domain(a)) {
                out.push((a.clone(), d.line));
            }
            walk(d.block_lines(), out);
        }
    }
    let mut out: Vec<(String, usize)> = server
        .keys
        .iter()
        .filter(|k| k.zone == DOMAIN_PLACEHOLDER_ZONE)
        .map(|k| (k.host().to_string(), server.line))
        .collect();
    walk(&server.directives, &mut out);
    let mut seen = Vec::new();
    out.retain(|(t, _)| {
        let new = !seen.contains(t);
        seen.push(t.clone());
        new
    });
    out
}

fn server_lag(
    server: &ServerBlock,
    zone: &str,
    name: &str,
    upstream: Option<&ExpectedLag>,
) -> Result<ExpectedLag, CorefileError> {
    // A template placeholder for the domain stands for the domain asked about.
    let server_zones: Vec<String> = server
        .zones()
        .into_iter()
        .map(|z| {
            if z == DOMAIN_PLACEHOLDER_ZONE {
                name.to_string()
            } else {
                z
            }
        })
        .collect();
    let once = |plugin: &str| -> Result<Option<&Directive>, CorefileError> {
        let mut found = server.directives.iter().filter(|d| d.name == plugin);
        let first = found.next();
        if let (Some(a), Some(b)) = (first, found.next()) {
            return Err(CorefileError::Duplicate {
                line: b.line,
                first: a.line,
                plugin: plugin.to_string(),
            });
        }
        Ok(first)
    };
    let mut notes = vec![format!(
        "{name} is served by the server block at line {} ({zone})",
        server.line
    )];
    let mut caveats = Vec::new();
    let shown_name = name.trim_end_matches('.');
    for (text, line) in domain_placeholders(server) {
        caveats.push(format!(
            "zone is the template placeholder {text} (line {line}); lag computed assuming it is the cluster zone {shown_name}"
        ));
    }

    // Source of answers: kubernetes covering the name, else a forward/proxy whose FROM covers it.
    let kube = once("kubernetes")?;
    let kube_ttl = match kube {
        Some(k) => {
            let zones = plugin_zones(&k.args, &server_zones);
            if best_zone(&zones, name).is_some() {
                Some(kubernetes_ttl(k)?)
            } else {
                None
            }
        }
        None => None,
    };
    let source = match kube_ttl {
        Some(ttl) => AnswerSource::Kubernetes { ttl },
        None => {
            let fwd = server.directives.iter().find(|d| {
                (d.name == "forward" || d.name == "proxy")
                    && d.args
                        .first()
                        .is_some_and(|from| zone_contains(&normalize_zone(from), name))
            });
            match fwd {
                Some(f) => AnswerSource::Forward {
                    to: f.args.iter().skip(1).cloned().collect(),
                },
                None => {
                    return Err(CorefileError::NotAnswered {
                        line: server.line,
                        zone: zone.to_string(),
                        domain: name.to_string(),
                    });
                }
            }
        }
    };

    let cache = match once("cache")? {
        Some(c) => {
            let s = cache_settings(c, &server_zones)?;
            best_zone(&s.zones, name).is_some().then_some(s)
        }
        None => None,
    };

    let cache_summary = cache.as_ref().map(|c| CacheSummary {
        line: c.line,
        success_max: secs(c.success_max),
        success_min: secs(c.success_min),
        denial_max: secs(c.denial_max),
        success_cached: best_zone(&c.disable_success, name).is_none(),
        denial_cached: best_zone(&c.disable_denial, name).is_none(),
        prefetch: c.prefetch.is_some(),
        keepttl: c.keepttl,
    });
    let lag = match &source {
        AnswerSource::Kubernetes { ttl } => kubernetes_lag(*ttl, cache.as_ref(), name, &mut notes),
        AnswerSource::Forward { to } => {
            if upstream.is_none() {
                caveats.push(format!(
                    "the upstream of this forwarding cache ({}) was not read: its own lag is not counted",
                    to.join(" ")
                ));
            }
            forward_lag(to, cache.as_ref(), name, upstream, &mut notes)
        }
    };
    let (cache_lag, client_ttl, denial_lag, denial_ttl, serve_stale) = lag;

    let imports: Vec<&str> = server
        .directives
        .iter()
        .filter(|d| d.name == "import")
        .filter_map(|d| d.args.first())
        .map(String::as_str)
        .collect();
    if !imports.is_empty() {
        caveats.push(format!(
            "import {} not followed: an imported snippet may add or change plugins",
            imports.join(", ")
        ));
    }
    if let Some(c) = &cache {
        for i in &c.ignored {
            caveats.push(format!(
                "cache option {i:?} (line {}) is not understood by ghostip and was ignored",
                c.line
            ));
        }
    }
    if matches!(source, AnswerSource::Kubernetes { .. }) {
        notes.push(
            "plus the kubernetes plugin's own informer delay (watch latency, usually well under 1 s)".into(),
        );
    }

    let mut lag = ExpectedLag {
        cache_lag,
        client_ttl,
        denial_lag,
        denial_ttl,
        serve_stale,
        source,
        cache: cache_summary,
        notes,
        caveats: Vec::new(),
    };
    for c in caveats {
        lag.caveat(c);
    }
    Ok(lag)
}

type LagFigures = (Duration, Duration, Duration, Duration, Option<Duration>);

/// `min(max(ttl, min), max)`, CoreDNS's `computeTTL`.
fn clamp_ttl(ttl: u64, min: u64, max: u64) -> u64 {
    ttl.max(min).min(max)
}

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}
