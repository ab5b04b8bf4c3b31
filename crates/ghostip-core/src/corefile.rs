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

use std::fmt;
use std::time::Duration;

use thiserror::Error;

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
/// NodeLocal DNSCache's placeholder for the cluster domain, replaced when its manifest is rendered.
pub const NODELOCAL_DOMAIN_PLACEHOLDER: &str = "__pillar__dns__domain__.";

/// A Corefile that failed to parse, or a plugin configuration CoreDNS would refuse.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum CorefileError {
    /// A `"` was opened and never closed.
    #[error("line {line}: unterminated quoted string")]
    UnterminatedQuote {
        /// Line of the opening quote.
        line: usize,
    },
    /// A `{` without its `}`.
    #[error("line {line}: '{{' is never closed")]
    UnclosedBlock {
        /// Line of the `{`.
        line: usize,
    },
    /// A `}` without a `{`.
    #[error("line {line}: unexpected '}}' without a matching '{{'")]
    UnexpectedClose {
        /// Line of the `}`.
        line: usize,
    },
    /// A `{` where a plugin name or a server address was expected.
    #[error("line {line}: unexpected '{{'")]
    UnexpectedOpen {
        /// Line of the `{`.
        line: usize,
    },
    /// A trailing comma after a server address with no address following it.
    #[error("line {line}: expected another server address after ','")]
    ExpectedAddress {
        /// Line of the comma.
        line: usize,
    },
    /// A token where a plugin name was expected that cannot be one.
    #[error("line {line}: expected a plugin name, found {token:?}{}", directive_hint(.token))]
    InvalidDirective {
        /// Line of the token.
        line: usize,
        /// The token.
        token: String,
    },
    /// A brace glued to other text (`}FEDERATIONS`, `cluster.local{`): CoreDNS would not see a brace.
    #[error("line {line}: {token:?}: a brace must be separated from other text by whitespace")]
    GluedBrace {
        /// Line of the token.
        line: usize,
        /// The token.
        token: String,
    },
    /// `{{ … }}` outside quotes: a Go template that was not rendered.
    #[error("line {line}: {token:?} looks like an unrendered template; render the Corefile first")]
    Template {
        /// Line of the token.
        line: usize,
        /// The token.
        token: String,
    },
    /// A plugin argument CoreDNS would reject.
    #[error("line {line}: {plugin}: {message}")]
    InvalidPlugin {
        /// Line of the plugin or sub-directive.
        line: usize,
        /// Plugin name.
        plugin: String,
        /// What is wrong.
        message: String,
    },
    /// A plugin that may appear only once per server block appears twice.
    #[error(
        "line {line}: plugin {plugin} can only be used once per server block (first at line {first})"
    )]
    Duplicate {
        /// Line of the second occurrence.
        line: usize,
        /// Line of the first.
        first: usize,
        /// Plugin name.
        plugin: String,
    },
    /// No plain-DNS server block serves the domain.
    #[error("no server block serves {domain}")]
    NotServed {
        /// The domain asked about.
        domain: String,
    },
    /// A server block serves the domain but neither `kubernetes` nor `forward` answers it.
    #[error(
        "line {line}: the server block for {zone} has no kubernetes or forward plugin answering {domain}"
    )]
    NotAnswered {
        /// Line of the server block.
        line: usize,
        /// Zone of the server block.
        zone: String,
        /// The domain asked about.
        domain: String,
    },
}

impl CorefileError {
    /// The Corefile line the error is about, when it has one.
    pub fn line(&self) -> Option<usize> {
        match self {
            Self::UnterminatedQuote { line }
            | Self::UnclosedBlock { line }
            | Self::UnexpectedClose { line }
            | Self::UnexpectedOpen { line }
            | Self::ExpectedAddress { line }
            | Self::InvalidDirective { line, .. }
            | Self::GluedBrace { line, .. }
            | Self::Template { line, .. }
            | Self::InvalidPlugin { line, .. }
            | Self::Duplicate { line, .. }
            | Self::NotAnswered { line, .. } => Some(*line),
            Self::NotServed { .. } => None,
        }
    }
}

fn directive_hint(token: &str) -> &'static str {
    if token.contains(':') || token.starts_with('.') {
        " (a server address? the previous server block may be missing its '{')"
    } else {
        ""
    }
}

/// A parsed Corefile.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Corefile {
    /// Server blocks, in file order.
    pub servers: Vec<ServerBlock>,
    /// Top-level `import` lines (not followed).
    pub imports: Vec<Import>,
}

/// An `import` line, recorded but not followed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Import {
    /// Line number.
    pub line: usize,
    /// The file pattern or snippet name.
    pub pattern: String,
}

/// One server block: `zone:port … { plugins }`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerBlock {
    /// Line of the first address.
    pub line: usize,
    /// The addresses (keys) of the block.
    pub keys: Vec<ServerKey>,
    /// Plugins, in file order (CoreDNS orders them by its plugin list, not by this order).
    pub directives: Vec<Directive>,
}

/// A server block address: `[scheme://]zone[:port]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerKey {
    /// As written.
    pub raw: String,
    /// `dns`, `tls`, `grpc`, `https`, `quic`; `None` when not written (plain DNS).
    pub scheme: Option<String>,
    /// Zone, lower-case and fully qualified (`cluster.local.`, `.`).
    pub zone: String,
    /// Port, when written and numeric.
    pub port: Option<u16>,
}

/// A plugin line or a line inside a plugin's block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Directive {
    /// Plugin or sub-directive name (first token of the line).
    pub name: String,
    /// The other tokens of the line.
    pub args: Vec<String>,
    /// Line number.
    pub line: usize,
    /// The `{ … }` block that follows, if any.
    pub block: Option<Vec<Directive>>,
}

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
    /// Parses a Corefile.
    ///
    /// # Errors
    ///
    /// A [`CorefileError`] with the line of the first syntax problem.
    pub fn parse(text: &str) -> Result<Self, CorefileError> {
        let tokens = lex(text)?;
        Parser { tokens, pos: 0 }.corefile()
    }

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
            if !self.imports.is_empty() {
                let pats: Vec<&str> = self.imports.iter().map(|i| i.pattern.as_str()).collect();
                lag.notes.push(format!(
                    "top-level import {} not followed: imported server blocks may also serve {}",
                    pats.join(", "),
                    name
                ));
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
}

// === impl ServerBlock ===

impl ServerBlock {
    /// The first directive named `name`.
    pub fn directive(&self, name: &str) -> Option<&Directive> {
        self.directives.iter().find(|d| d.name == name)
    }

    /// Addresses given by `bind`, sorted; empty when the block listens everywhere.
    pub fn bind_addresses(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .directives
            .iter()
            .filter(|d| d.name == "bind")
            .flat_map(|d| d.args.iter().cloned())
            .collect();
        out.sort();
        out.dedup();
        out
    }

    /// A Caddy snippet, `(name) { … }`: not a server, only text for `import name` (not followed).
    pub fn is_snippet(&self) -> bool {
        matches!(self.keys.as_slice(), [k] if k.raw.starts_with('(') && k.raw.ends_with(')'))
    }

    /// Zones of the block's keys.
    pub fn zones(&self) -> Vec<String> {
        self.keys.iter().map(|k| k.zone.clone()).collect()
    }
}

// === impl ServerKey ===

impl ServerKey {
    /// Parses `[scheme://]zone[:port]`.
    pub fn parse(raw: &str) -> Self {
        let (scheme, rest) = match raw.split_once("://") {
            Some((s, r)) => (Some(s.to_ascii_lowercase()), r),
            None => (None, raw),
        };
        // An IPv6 reverse zone given as a CIDR contains colons: only split off a numeric port
        // when the host part has no colon of its own.
        let (host, port) = match rest.rsplit_once(':') {
            Some((h, p)) if !h.contains(':') => (h, p.parse::<u16>().ok()),
            _ => (rest, None),
        };
        Self {
            raw: raw.to_string(),
            scheme,
            zone: normalize_zone(host),
            port,
        }
    }

    /// Whether the key serves plain DNS (UDP/TCP), the protocol ghostip probes.
    pub fn is_plain_dns(&self) -> bool {
        self.scheme.as_deref().is_none_or(|s| s == "dns")
    }
}

impl fmt::Display for ServerKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.raw)
    }
}

// === impl Directive ===

impl Directive {
    /// Lines of the block, empty when there is none.
    pub fn block_lines(&self) -> &[Directive] {
        self.block.as_deref().unwrap_or(&[])
    }
}

// === lexer ===

#[derive(Clone, Debug, PartialEq, Eq)]
struct Token {
    text: String,
    line: usize,
    /// Line the token ends on (differs for quoted tokens spanning lines).
    end_line: usize,
    quoted: bool,
}

impl Token {
    fn is_open(&self) -> bool {
        !self.quoted && self.text == "{"
    }

    fn is_close(&self) -> bool {
        !self.quoted && self.text == "}"
    }
}

fn lex(text: &str) -> Result<Vec<Token>, CorefileError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut tokens = Vec::new();
    let mut line = 1usize;
    let mut chars = text.chars();
    let mut val = String::new();
    let mut start_line = 1usize;
    let mut comment = false;
    while let Some(ch) = chars.next() {
        if comment {
            if ch == '\n' {
                comment = false;
                line += 1;
                flush(&mut tokens, &mut val, start_line, line - 1);
            }
            continue;
        }
        if val.is_empty() && ch == '"' {
            // Quoted token: only \" is an escape; a backslash before anything else is kept
            // together with the character it precedes (Caddy's lexer).
            let open_line = line;
            let mut quoted = String::new();
            let mut closed = false;
            let mut escaped = false;
            for c in chars.by_ref() {
                if c == '\n' {
                    line += 1;
                }
                if escaped {
                    if c != '"' {
                        quoted.push('\\');
                    }
                    quoted.push(c);
                    escaped = false;
                } else if c == '\\' {
                    escaped = true;
                } else if c == '"' {
                    closed = true;
                    break;
                } else {
                    quoted.push(c);
                }
            }
            if !closed {
                return Err(CorefileError::UnterminatedQuote { line: open_line });
            }
            tokens.push(Token {
                text: quoted,
                line: open_line,
                end_line: line,
                quoted: true,
            });
            continue;
        }
        if ch.is_whitespace() {
            flush(&mut tokens, &mut val, start_line, line);
            if ch == '\n' {
                line += 1;
            }
            continue;
        }
        if ch == '#' {
            comment = true;
            continue;
        }
        if val.is_empty() {
            start_line = line;
        }
        val.push(ch);
    }
    flush(&mut tokens, &mut val, start_line, line);
    Ok(tokens)
}

fn flush(tokens: &mut Vec<Token>, val: &mut String, line: usize, end_line: usize) {
    if !val.is_empty() {
        tokens.push(Token {
            text: std::mem::take(val),
            line,
            end_line: end_line.max(line),
            quoted: false,
        });
    }
}

// === parser ===

struct Parser {
    tokens: Vec<Token>,
    pos: usize,
}

impl Parser {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.pos)
    }

    /// Whether the token at `pos` starts a new line (relative to the token before it).
    fn starts_line(&self, pos: usize) -> bool {
        match (
            pos.checked_sub(1).and_then(|p| self.tokens.get(p)),
            self.tokens.get(pos),
        ) {
            (Some(prev), Some(cur)) => cur.line > prev.end_line,
            _ => true,
        }
    }

    fn corefile(mut self) -> Result<Corefile, CorefileError> {
        let mut out = Corefile::default();
        while let Some(tok) = self.peek().cloned() {
            check_token(&tok)?;
            if !tok.quoted && tok.text == "import" {
                self.pos += 1;
                let args = self.rest_of_line()?;
                out.imports.push(Import {
                    line: tok.line,
                    pattern: args.join(" "),
                });
                continue;
            }
            if tok.is_open() {
                return Err(CorefileError::UnexpectedOpen { line: tok.line });
            }
            if tok.is_close() {
                return Err(CorefileError::UnexpectedClose { line: tok.line });
            }
            let keys = self.keys()?;
            let braced = self.peek().is_some_and(Token::is_open);
            let directives = if braced {
                let open_line = self.peek().map_or(tok.line, |t| t.line);
                self.pos += 1;
                self.block(Some(open_line), true)?
            } else {
                // Single-server Corefiles need no braces: the rest of the file is the block.
                self.block(None, true)?
            };
            out.servers.push(ServerBlock {
                line: tok.line,
                keys,
                directives,
            });
        }
        Ok(out)
    }

    /// Server addresses: tokens on one line, continued on the next after a trailing comma.
    fn keys(&mut self) -> Result<Vec<ServerKey>, CorefileError> {
        let mut keys = Vec::new();
        let mut expecting_another = false;
        let mut comma_line = 0;
        loop {
            let Some(tok) = self.peek().cloned() else {
                if expecting_another {
                    return Err(CorefileError::ExpectedAddress { line: comma_line });
                }
                break;
            };
            if !keys.is_empty() && !expecting_another && self.starts_line(self.pos) {
                break;
            }
            if tok.is_open() {
                if expecting_another {
                    return Err(CorefileError::ExpectedAddress { line: comma_line });
                }
                break;
            }
            if tok.is_close() {
                return Err(CorefileError::UnexpectedClose { line: tok.line });
            }
            check_token(&tok)?;
            self.pos += 1;
            for part in tok.text.split(',') {
                if !part.is_empty() {
                    keys.push(ServerKey::parse(part));
                }
            }
            expecting_another = tok.text.ends_with(',');
            comma_line = tok.line;
        }
        Ok(keys)
    }

    /// Tokens up to the end of the current line, stopping at a brace.
    fn rest_of_line(&mut self) -> Result<Vec<String>, CorefileError> {
        let mut args = Vec::new();
        while let Some(tok) = self.peek() {
            if self.starts_line(self.pos) || tok.is_open() || tok.is_close() {
                break;
            }
            check_token(tok)?;
            args.push(tok.text.clone());
            self.pos += 1;
        }
        Ok(args)
    }

    /// Directives until the matching `}` (when `open_line` is set) or the end of input.
    /// `top` marks a server block's own level, where each line must start with a plugin name.
    fn block(
        &mut self,
        open_line: Option<usize>,
        top: bool,
    ) -> Result<Vec<Directive>, CorefileError> {
        let mut out = Vec::new();
        loop {
            let Some(tok) = self.peek().cloned() else {
                return match open_line {
                    Some(line) => Err(CorefileError::UnclosedBlock { line }),
                    None => Ok(out),
                };
            };
            if tok.is_close() {
                if open_line.is_some() {
                    self.pos += 1;
                    return Ok(out);
                }
                return Err(CorefileError::UnexpectedClose { line: tok.line });
            }
            if tok.is_open() {
                return Err(CorefileError::UnexpectedOpen { line: tok.line });
            }
            check_token(&tok)?;
            if top && (tok.quoted || !is_plugin_name(&tok.text)) {
                return Err(CorefileError::InvalidDirective {
                    line: tok.line,
                    token: tok.text,
                });
            }
            self.pos += 1;
            let args = self.rest_of_line()?;
            // Like Caddy, a '{' right after a directive opens its block even on the next line.
            let block = if self.peek().is_some_and(Token::is_open) {
                let line = self.peek().map_or(tok.line, |t| t.line);
                self.pos += 1;
                Some(self.block(Some(line), false)?)
            } else {
                None
            };
            out.push(Directive {
                name: tok.text,
                args,
                line: tok.line,
                block,
            });
        }
    }
}

/// Rejects tokens CoreDNS would misread: glued braces and unrendered templates.
fn check_token(tok: &Token) -> Result<(), CorefileError> {
    if tok.quoted {
        return Ok(());
    }
    let t = &tok.text;
    if t.contains("{{") || t.contains("}}") {
        return Err(CorefileError::Template {
            line: tok.line,
            token: t.clone(),
        });
    }
    let env_placeholder = t.starts_with("{$") || t.starts_with("{%");
    if t.len() > 1 && (t.starts_with('}') || (t.ends_with('{') && !env_placeholder)) {
        return Err(CorefileError::GluedBrace {
            line: tok.line,
            token: t.clone(),
        });
    }
    Ok(())
}

fn is_plugin_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

// === zones ===

/// Lower-case, fully qualified zone (`cluster.local.`); `.` for the root.
fn normalize_zone(z: &str) -> String {
    let z = z.trim().trim_end_matches('.').to_ascii_lowercase();
    if z.is_empty() {
        ".".to_string()
    } else {
        format!("{z}.")
    }
}

/// Whether `zone` contains `name` (both normalized).
fn zone_contains(zone: &str, name: &str) -> bool {
    zone == "." || name == zone || name.ends_with(&format!(".{zone}"))
}

/// The zone a server key matches `name` with; NodeLocal's domain placeholder matches any domain.
fn key_zone_match(zone: &str, name: &str) -> Option<String> {
    if zone == NODELOCAL_DOMAIN_PLACEHOLDER {
        return Some(name.to_string());
    }
    zone_contains(zone, name).then(|| zone.to_string())
}

/// The most specific of `zones` containing `name`.
fn best_zone<'a>(zones: &'a [String], name: &str) -> Option<&'a String> {
    zones
        .iter()
        .filter(|z| zone_contains(z, name))
        .max_by_key(|z| z.len())
}

// === lag computation ===

/// Settings of one `cache` plugin.
#[derive(Clone, Debug, PartialEq, Eq)]
struct CacheSettings {
    line: usize,
    zones: Vec<String>,
    success_max: u64,
    success_min: u64,
    denial_max: u64,
    denial_min: u64,
    disable_success: Vec<String>,
    disable_denial: Vec<String>,
    serve_stale: Option<(Duration, bool)>,
    prefetch: Option<(u64, Duration, u64)>,
    keepttl: bool,
    ignored: Vec<String>,
}

fn server_lag(
    server: &ServerBlock,
    zone: &str,
    name: &str,
    upstream: Option<&ExpectedLag>,
) -> Result<ExpectedLag, CorefileError> {
    // NodeLocal's unrendered domain placeholder stands for the domain asked about.
    let server_zones: Vec<String> = server
        .zones()
        .into_iter()
        .map(|z| {
            if z == NODELOCAL_DOMAIN_PLACEHOLDER {
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
    if server
        .keys
        .iter()
        .any(|k| k.zone == NODELOCAL_DOMAIN_PLACEHOLDER)
    {
        notes.push("the server address is NodeLocal's __PILLAR__DNS__DOMAIN__ placeholder, taken as the cluster domain".into());
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
        AnswerSource::Forward { to } => forward_lag(to, cache.as_ref(), name, upstream, &mut notes),
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
        notes.push(format!(
            "import {} not followed: an imported snippet may add or change plugins",
            imports.join(", ")
        ));
    }
    if let Some(c) = &cache {
        for i in &c.ignored {
            notes.push(format!(
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

    Ok(ExpectedLag {
        cache_lag,
        client_ttl,
        denial_lag,
        denial_ttl,
        serve_stale,
        source,
        cache: cache_summary,
        notes,
    })
}

type LagFigures = (Duration, Duration, Duration, Duration, Option<Duration>);

/// `min(max(ttl, min), max)`, CoreDNS's `computeTTL`.
fn clamp_ttl(ttl: u64, min: u64, max: u64) -> u64 {
    ttl.max(min).min(max)
}

fn kubernetes_lag(
    ttl: u32,
    cache: Option<&CacheSettings>,
    name: &str,
    notes: &mut Vec<String>,
) -> LagFigures {
    let t = u64::from(ttl);
    // Negative answers carry the SOA, whose TTL CoreDNS caps at 300 s.
    let neg = t.min(300);
    notes.push(format!(
        "kubernetes plugin answers with TTL {t} s (negative answers: SOA TTL {neg} s)"
    ));
    let Some(c) = cache else {
        notes.push("no cache plugin covers this name: CoreDNS answers from its informer store, TTL untouched".into());
        return (Duration::ZERO, secs(t), Duration::ZERO, secs(neg), None);
    };
    let d = clamp_ttl(t, c.success_min, c.success_max);
    let n = clamp_ttl(neg, c.denial_min, c.denial_max);
    notes.push(format!(
        "cache (line {}): every reply gets TTL min(max({t}, MINTTL {}), MAXTTL {}) = {d} s, cached or not",
        c.line, c.success_min, c.success_max
    ));
    if t < c.success_min {
        notes.push(format!(
            "the MINTTL floor raises the kubernetes TTL {t} s to {} s",
            c.success_min
        ));
    }
    let cached = success_cached(c, name, notes);
    let cache_lag = if cached {
        notes.push(format!(
            "a cached answer is served until its TTL runs out: up to {d} s after the kubernetes plugin dropped the IP"
        ));
        d
    } else {
        0
    };
    let denial_cached = denial_cached(c, name, notes);
    let denial_lag = if denial_cached { n } else { 0 };
    let stale = stale_window(c, cached, notes);
    prefetch_keepttl_notes(c, d, notes);
    (secs(cache_lag), secs(d), secs(denial_lag), secs(n), stale)
}

fn forward_lag(
    to: &[String],
    cache: Option<&CacheSettings>,
    name: &str,
    upstream: Option<&ExpectedLag>,
    notes: &mut Vec<String>,
) -> LagFigures {
    notes.push(format!("{name} is forwarded to {}", to.join(" ")));
    let (up_lag, up_ttl, up_nlag, up_nttl, up_stale) = match upstream {
        Some(u) => {
            notes.push(format!(
                "upstream lags up to {} s and hands out TTL {} s",
                u.cache_lag.as_secs(),
                u.client_ttl.as_secs()
            ));
            (
                u.cache_lag.as_secs(),
                Some(u.client_ttl.as_secs()),
                u.denial_lag.as_secs(),
                Some(u.denial_ttl.as_secs()),
                u.serve_stale,
            )
        }
        None => {
            notes.push("upstream unknown: assuming its TTLs reach this cache's maximum; add the upstream's own lag".into());
            (0, None, 0, None, None)
        }
    };
    let Some(c) = cache else {
        notes.push(
            "no cache plugin covers this name: answers pass through with the upstream's TTL".into(),
        );
        return (
            secs(up_lag),
            secs(up_ttl.unwrap_or(0)),
            secs(up_nlag),
            secs(up_nttl.unwrap_or(0)),
            up_stale,
        );
    };
    // An answer fetched at t ≤ t0 + up_lag with remaining TTL r is kept for clamp(r, min, max).
    // If r ≥ min it expires no later than the upstream's horizon (t + r) and no later than
    // t + max; if r < min the floor keeps it for min past the upstream's expiry.
    let chained = |up_lag: u64, up_ttl: Option<u64>, min: u64, max: u64| -> (u64, u64) {
        let horizon = up_ttl.map_or(max, |t| t.max(up_lag));
        let lag = horizon
            .min(up_lag.saturating_add(max))
            .max(up_lag.saturating_add(min.min(max)));
        (lag, clamp_ttl(up_ttl.unwrap_or(max), min, max))
    };
    let (lag, ttl) = chained(up_lag, up_ttl, c.success_min, c.success_max);
    let (nlag, nttl) = chained(up_nlag, up_nttl, c.denial_min, c.denial_max);
    notes.push(format!(
        "cache (line {}): keeps an upstream answer with remaining TTL r for min(max(r, MINTTL {}), MAXTTL {}); clients get TTL {ttl} s",
        c.line, c.success_min, c.success_max
    ));
    let cached = success_cached(c, name, notes);
    let cache_lag = if cached {
        if upstream.is_some() && lag > up_lag {
            notes.push(format!(
                "worst case: an answer fetched just before the upstream expired it is kept {} s more (MINTTL floor or own TTL): {lag} s",
                lag - up_lag
            ));
        } else {
            notes.push(format!(
                "a cached answer may be served up to {lag} s after the change"
            ));
        }
        lag
    } else {
        up_lag
    };
    let denial_lag = if denial_cached(c, name, notes) {
        nlag
    } else {
        up_nlag
    };
    let stale = stale_window(c, cached, notes).or(up_stale);
    prefetch_keepttl_notes(c, ttl, notes);
    (
        secs(cache_lag),
        secs(ttl),
        secs(denial_lag),
        secs(nttl),
        stale,
    )
}

fn success_cached(c: &CacheSettings, name: &str, notes: &mut Vec<String>) -> bool {
    disabled_for(&c.disable_success, name, "success", notes)
}

fn denial_cached(c: &CacheSettings, name: &str, notes: &mut Vec<String>) -> bool {
    disabled_for(&c.disable_denial, name, "denial", notes)
}

/// Whether the cache kind still caches `name` given its `disable` zones; notes partial disables.
fn disabled_for(zones: &[String], name: &str, kind: &str, notes: &mut Vec<String>) -> bool {
    if let Some(z) = best_zone(zones, name) {
        notes.push(format!(
            "disable {kind} {z}: {kind} answers for {name} are never cached"
        ));
        return false;
    }
    for z in zones.iter().filter(|z| zone_contains(name, z)) {
        notes.push(format!(
            "disable {kind} {z}: only names under {z} skip the {kind} cache"
        ));
    }
    true
}

fn stale_window(c: &CacheSettings, cached: bool, notes: &mut Vec<String>) -> Option<Duration> {
    let (d, verify) = c.serve_stale?;
    if !cached {
        return None;
    }
    if verify {
        notes.push(format!(
            "serve_stale {}s verify: an expired entry is served (TTL 0) only when the source fails to answer",
            d.as_secs()
        ));
    } else {
        notes.push(format!(
            "serve_stale {}s immediate: the first query after expiry (within {}s) still gets the expired answer with TTL 0 while the entry refreshes",
            d.as_secs(),
            d.as_secs()
        ));
    }
    Some(d)
}

fn prefetch_keepttl_notes(c: &CacheSettings, ttl: u64, notes: &mut Vec<String>) {
    if let Some((amount, dur, pct)) = c.prefetch {
        notes.push(format!(
            "prefetch {amount} {}s {pct}%: popular entries are refreshed early, which never extends the bound (a refreshed entry is at most {ttl} s old)",
            dur.as_secs()
        ));
    }
    if c.keepttl {
        notes.push(format!(
            "keepttl: cache hits carry the full TTL {ttl} s instead of the remaining one, so client caches may keep a removed IP up to the cache lag plus {ttl} s"
        ));
    }
}

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

/// Zones from plugin arguments, or the server block's zones when there are none.
fn plugin_zones(args: &[String], server_zones: &[String]) -> Vec<String> {
    if args.is_empty() {
        server_zones.to_vec()
    } else {
        args.iter().map(|a| normalize_zone(a)).collect()
    }
}

fn plugin_err(line: usize, plugin: &str, message: impl Into<String>) -> CorefileError {
    CorefileError::InvalidPlugin {
        line,
        plugin: plugin.to_string(),
        message: message.into(),
    }
}

fn int_arg(line: usize, plugin: &str, what: &str, s: &str) -> Result<i64, CorefileError> {
    s.parse::<i64>().map_err(|_| {
        plugin_err(
            line,
            plugin,
            format!("{what} must be an integer, got {s:?}"),
        )
    })
}

fn kubernetes_ttl(k: &Directive) -> Result<u32, CorefileError> {
    let mut ttl = DEFAULT_KUBERNETES_TTL;
    for sub in k.block_lines().iter().filter(|s| s.name == "ttl") {
        let Some(arg) = sub.args.first() else {
            return Err(plugin_err(sub.line, "kubernetes", "ttl needs a value"));
        };
        let t = int_arg(sub.line, "kubernetes", "ttl", arg)?;
        ttl = u32::try_from(t)
            .ok()
            .filter(|t| *t <= 3600)
            .ok_or_else(|| {
                plugin_err(
                    sub.line,
                    "kubernetes",
                    format!("ttl must be in range [0, 3600]: {t}"),
                )
            })?;
    }
    Ok(ttl)
}

fn positive_ttl(line: usize, plugin: &str, s: &str) -> Result<u64, CorefileError> {
    let v = int_arg(line, plugin, "TTL", s)?;
    u64::try_from(v).ok().filter(|v| *v > 0).ok_or_else(|| {
        plugin_err(
            line,
            plugin,
            format!("cache TTL can not be zero or negative: {v}"),
        )
    })
}

fn cache_settings(c: &Directive, server_zones: &[String]) -> Result<CacheSettings, CorefileError> {
    let mut s = CacheSettings {
        line: c.line,
        zones: Vec::new(),
        success_max: DEFAULT_SUCCESS_MAX_TTL,
        success_min: DEFAULT_MIN_TTL,
        denial_max: DEFAULT_DENIAL_MAX_TTL,
        denial_min: DEFAULT_MIN_TTL,
        disable_success: Vec::new(),
        disable_denial: Vec::new(),
        serve_stale: None,
        prefetch: None,
        keepttl: false,
        ignored: Vec::new(),
    };
    let mut args: &[String] = &c.args;
    // The first argument is the TTL when it is an integer, otherwise a zone.
    if let Some(first) = args.first()
        && let Ok(v) = first.parse::<i64>()
    {
        let ttl = u64::try_from(v).ok().filter(|v| *v > 0).ok_or_else(|| {
            plugin_err(
                c.line,
                "cache",
                format!("cache TTL can not be zero or negative: {v}"),
            )
        })?;
        s.success_max = ttl;
        s.denial_max = ttl;
        args = &args[1..];
    }
    s.zones = plugin_zones(args, server_zones);
    for sub in c.block_lines() {
        let line = sub.line;
        match sub.name.as_str() {
            "success" | "denial" => {
                let Some(cap) = sub.args.first() else {
                    return Err(plugin_err(
                        line,
                        "cache",
                        format!("{} needs a capacity", sub.name),
                    ));
                };
                int_arg(line, "cache", "capacity", cap)?;
                let (max, min) = if sub.name == "success" {
                    (&mut s.success_max, &mut s.success_min)
                } else {
                    (&mut s.denial_max, &mut s.denial_min)
                };
                if let Some(t) = sub.args.get(1) {
                    *max = positive_ttl(line, "cache", t)?;
                }
                if let Some(m) = sub.args.get(2) {
                    let v = int_arg(line, "cache", "MINTTL", m)?;
                    *min = u64::try_from(v).map_err(|_| {
                        plugin_err(
                            line,
                            "cache",
                            format!("cache min TTL can not be negative: {v}"),
                        )
                    })?;
                }
            }
            "prefetch" => {
                if sub.args.is_empty() || sub.args.len() > 3 {
                    return Err(plugin_err(
                        line,
                        "cache",
                        "prefetch takes AMOUNT [DURATION] [PERCENTAGE%]",
                    ));
                }
                let amount = int_arg(line, "cache", "prefetch amount", &sub.args[0])?;
                let amount = u64::try_from(amount).map_err(|_| {
                    plugin_err(
                        line,
                        "cache",
                        format!("prefetch amount should be positive: {amount}"),
                    )
                })?;
                let dur = match sub.args.get(1) {
                    Some(d) => go_duration(line, "cache", d)?,
                    None => Duration::from_secs(60),
                };
                let pct = match sub.args.get(2) {
                    Some(p) => {
                        let Some(num) = p.strip_suffix('%') else {
                            return Err(plugin_err(
                                line,
                                "cache",
                                format!("percentage must end with '%': {p:?}"),
                            ));
                        };
                        let n = int_arg(line, "cache", "percentage", num)?;
                        u64::try_from(n)
                            .ok()
                            .filter(|n| (10..=90).contains(n))
                            .ok_or_else(|| {
                                plugin_err(
                                    line,
                                    "cache",
                                    format!("percentage should fall in range [10, 90]: {n}"),
                                )
                            })?
                    }
                    None => 10,
                };
                s.prefetch = Some((amount, dur, pct));
            }
            "serve_stale" => {
                if sub.args.len() > 2 {
                    return Err(plugin_err(
                        line,
                        "cache",
                        "serve_stale takes [DURATION] [REFRESH_MODE]",
                    ));
                }
                let d = match sub.args.first() {
                    Some(d) => go_duration(line, "cache", d)?,
                    None => DEFAULT_SERVE_STALE,
                };
                let verify = match sub.args.get(1).map(|m| m.to_ascii_lowercase()) {
                    None => false,
                    Some(m) if m == "immediate" => false,
                    Some(m) if m == "verify" => true,
                    Some(m) => {
                        return Err(plugin_err(
                            line,
                            "cache",
                            format!("invalid value for serve_stale refresh mode: {m}"),
                        ));
                    }
                };
                s.serve_stale = Some((d, verify));
            }
            "servfail" => {
                let [d] = sub.args.as_slice() else {
                    return Err(plugin_err(line, "cache", "servfail takes one DURATION"));
                };
                if go_duration(line, "cache", d)? > Duration::from_secs(300) {
                    return Err(plugin_err(
                        line,
                        "cache",
                        "caching SERVFAIL responses over 5 minutes is not permitted",
                    ));
                }
            }
            "disable" => {
                let Some(kind) = sub.args.first() else {
                    return Err(plugin_err(
                        line,
                        "cache",
                        "disable takes success|denial [ZONES...]",
                    ));
                };
                // No zones means the root; a later `disable` of the same kind replaces an earlier one.
                let zones: Vec<String> = if sub.args.len() > 1 {
                    sub.args[1..].iter().map(|z| normalize_zone(z)).collect()
                } else {
                    vec![".".to_string()]
                };
                match kind.as_str() {
                    "success" => s.disable_success = zones,
                    "denial" => s.disable_denial = zones,
                    other => {
                        return Err(plugin_err(
                            line,
                            "cache",
                            format!(
                                "cache type for disable must be \"success\" or \"denial\", got {other:?}"
                            ),
                        ));
                    }
                }
            }
            "keepttl" => {
                if !sub.args.is_empty() {
                    return Err(plugin_err(line, "cache", "keepttl takes no arguments"));
                }
                s.keepttl = true;
            }
            other => s.ignored.push(other.to_string()),
        }
    }
    Ok(s)
}

/// Parses a Go `time.ParseDuration` string ("300ms", "1h30m", "24h"); negative values are errors.
fn go_duration(line: usize, plugin: &str, s: &str) -> Result<Duration, CorefileError> {
    parse_go_duration(s).ok_or_else(|| plugin_err(line, plugin, format!("invalid duration {s:?}")))
}

fn parse_go_duration(s: &str) -> Option<Duration> {
    let s = s.strip_prefix('+').unwrap_or(s);
    if s.starts_with('-') {
        // Go accepts "-0"; anything else negative is refused by the plugins we read.
        return (s
            .trim_start_matches('-')
            .chars()
            .all(|c| c == '0' || c == '.')
            && s.len() > 1)
            .then_some(Duration::ZERO);
    }
    if s == "0" {
        return Some(Duration::ZERO);
    }
    if s.is_empty() {
        return None;
    }
    let mut total: u128 = 0;
    let mut rest = s;
    while !rest.is_empty() {
        let num_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (num, tail) = rest.split_at(num_end);
        if num.is_empty() || num == "." {
            return None;
        }
        let unit_end = tail
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(unit_end);
        let nanos_per: u128 = match unit {
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            _ => return None,
        };
        let (int, frac) = num.split_once('.').unwrap_or((num, ""));
        let int: u128 = if int.is_empty() { 0 } else { int.parse().ok()? };
        let mut value = int.checked_mul(nanos_per)?;
        let mut scale = nanos_per;
        for d in frac.chars() {
            scale /= 10;
            let digit = u128::from(d.to_digit(10)?);
            value = value.checked_add(digit.checked_mul(scale)?)?;
        }
        total = total.checked_add(value)?;
        rest = tail;
    }
    let secs = u64::try_from(total / 1_000_000_000).ok()?;
    let nanos = u32::try_from(total % 1_000_000_000).ok()?;
    Some(Duration::new(secs, nanos))
}

#[cfg(test)]
#[allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn lag(text: &str) -> ExpectedLag {
        match Corefile::parse(text).and_then(|c| c.expected_lag("cluster.local")) {
            Ok(l) => l,
            Err(e) => panic!("unexpected error: {e}\n{text}"),
        }
    }

    fn s(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    const CLASSIC: &str = ".:53 {
    errors
    kubernetes cluster.local in-addr.arpa ip6.arpa {
       pods insecure
       fallthrough in-addr.arpa ip6.arpa
       ttl 30
    }
    forward . /etc/resolv.conf
    cache 30
}
";

    #[test]
    fn classic_kubeadm_lags_thirty_seconds() {
        let l = lag(CLASSIC);
        assert_eq!(l.cache_lag, s(30));
        assert_eq!(l.client_ttl, s(30));
        assert_eq!(l.denial_lag, s(30));
        assert_eq!(l.serve_stale, None);
        assert_eq!(l.source, AnswerSource::Kubernetes { ttl: 30 });
        assert!(
            l.notes.iter().any(|n| n.contains("= 30 s")),
            "{:?}",
            l.notes
        );
    }

    #[test]
    fn cache_five_caps_at_five() {
        let l = lag(&CLASSIC.replace("cache 30", "cache 5"));
        assert_eq!(l.cache_lag, s(5));
        assert_eq!(l.client_ttl, s(5));
    }

    #[test]
    fn disable_success_keeps_client_ttl() {
        let text = CLASSIC.replace(
            "cache 30\n",
            "cache 30 {\n       disable success cluster.local\n       disable denial cluster.local\n    }\n",
        );
        let l = lag(&text);
        assert_eq!(l.cache_lag, Duration::ZERO);
        assert_eq!(l.client_ttl, s(30));
        assert_eq!(l.denial_lag, Duration::ZERO);
    }

    #[test]
    fn minttl_floor_raises_ttl_zero() {
        let l = lag(&CLASSIC.replace("ttl 30", "ttl 0"));
        assert_eq!(l.cache_lag, s(5));
        assert_eq!(l.client_ttl, s(5));
        // Even with success caching disabled, the floor still rewrites the TTL clients get.
        let l = lag(&CLASSIC
            .replace("ttl 30", "ttl 0")
            .replace("cache 30", "cache 30 {\n disable success\n}"));
        assert_eq!(l.cache_lag, Duration::ZERO);
        assert_eq!(l.client_ttl, s(5));
        // MINTTL 0 lets ttl 0 through.
        let l = lag(&CLASSIC
            .replace("ttl 30", "ttl 0")
            .replace("cache 30", "cache 30 {\n success 9984 30 0\n}"));
        assert_eq!(l.cache_lag, Duration::ZERO);
        assert_eq!(l.client_ttl, Duration::ZERO);
    }

    #[test]
    fn minttl_above_cap_is_capped() {
        let l = lag(&CLASSIC
            .replace("ttl 30", "ttl 1")
            .replace("cache 30", "cache {\n success 9984 3 10\n}"));
        assert_eq!(l.cache_lag, s(3));
    }

    #[test]
    fn default_kubernetes_ttl_and_default_cache() {
        let l = lag(".:53 {\n kubernetes cluster.local\n cache\n}\n");
        assert_eq!(l.cache_lag, s(5));
        assert_eq!(l.client_ttl, s(5));
        let l = lag(".:53 {\n kubernetes cluster.local { ttl 600 }\n cache\n}\n");
        assert_eq!(l.cache_lag, s(600));
        assert_eq!(
            l.denial_ttl,
            s(300),
            "negative answers carry the SOA TTL capped at 300"
        );
    }

    #[test]
    fn cache_summary_reports_the_covering_cache() {
        let l = lag(CLASSIC);
        let c = l.cache.unwrap_or_else(|| panic!("no cache summary"));
        assert_eq!(c.success_max, s(30));
        assert_eq!(c.success_min, s(5));
        assert!(c.success_cached && c.denial_cached);
        assert!(!c.prefetch && !c.keepttl);
        let l = lag(&CLASSIC.replace(
            "cache 30\n",
            "cache 30 {\n disable success cluster.local\n prefetch 10\n}\n",
        ));
        let c = l.cache.unwrap_or_else(|| panic!("no cache summary"));
        assert!(!c.success_cached && c.denial_cached && c.prefetch);
        assert_eq!(
            lag(".:53 {\n kubernetes cluster.local { ttl 30 }\n cache 10 example.org\n}\n").cache,
            None
        );
    }

    #[test]
    fn no_cache_means_no_cache_lag() {
        let l = lag(".:53 {\n kubernetes cluster.local {\n  ttl 30\n }\n}\n");
        assert_eq!(l.cache_lag, Duration::ZERO);
        assert_eq!(l.client_ttl, s(30));
    }

    #[test]
    fn cache_zones_that_exclude_the_domain_do_nothing() {
        let l = lag(".:53 {\n kubernetes cluster.local { ttl 30 }\n cache 10 example.org\n}\n");
        assert_eq!(l.cache_lag, Duration::ZERO);
        assert_eq!(l.client_ttl, s(30));
    }

    #[test]
    fn last_disable_wins_and_no_zone_means_root() {
        let text = ".:53 {\n kubernetes cluster.local { ttl 30 }\n cache 30 {\n  disable success example.org\n  disable success\n }\n}\n";
        assert_eq!(lag(text).cache_lag, Duration::ZERO);
        let text = ".:53 {\n kubernetes cluster.local { ttl 30 }\n cache 30 {\n  disable success\n  disable success example.org\n }\n}\n";
        assert_eq!(lag(text).cache_lag, s(30));
    }

    #[test]
    fn partial_disable_is_noted() {
        let text = ".:53 {\n kubernetes cluster.local { ttl 30 }\n cache 30 {\n  disable success ns1.svc.cluster.local\n }\n}\n";
        let l = lag(text);
        assert_eq!(l.cache_lag, s(30));
        assert!(
            l.notes
                .iter()
                .any(|n| n.contains("only names under ns1.svc.cluster.local.")),
            "{:?}",
            l.notes
        );
    }

    #[test]
    fn serve_stale_and_prefetch() {
        let l = lag(
            ".:53 {\n kubernetes cluster.local { ttl 30 }\n cache 30 {\n  serve_stale\n  prefetch 10 1m 20%\n }\n}\n",
        );
        assert_eq!(l.serve_stale, Some(s(3600)));
        assert_eq!(l.cache_lag, s(30));
        let l =
            lag(".:53 {\n kubernetes cluster.local\n cache {\n  serve_stale 24h verify\n }\n}\n");
        assert_eq!(l.serve_stale, Some(s(86400)));
        assert!(l.notes.iter().any(|n| n.contains("verify")));
    }

    #[test]
    fn nodelocal_behind_classic_upstream() {
        let upstream = lag(CLASSIC);
        let nodelocal = "cluster.local:53 {\n errors\n cache {\n  success 9984 30\n  denial 9984 5\n }\n bind 169.254.20.10\n forward . 10.96.0.10 {\n  force_tcp\n }\n}\n.:53 {\n cache 30\n forward . /etc/resolv.conf\n}\n";
        let c = Corefile::parse(nodelocal).unwrap_or_default();
        let alone = c
            .expected_lag("cluster.local")
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(alone.cache_lag, s(30));
        assert_eq!(alone.client_ttl, s(30));
        assert_eq!(alone.denial_lag, s(5));
        assert!(
            matches!(alone.source, AnswerSource::Forward { ref to } if to == &["10.96.0.10".to_string()])
        );
        let chained = c
            .expected_lag_behind("cluster.local", Some(&upstream))
            .unwrap_or_else(|e| panic!("{e}"));
        // Fetched 1 s before the upstream entry expires, then held for the 5 s MINTTL floor.
        assert_eq!(chained.cache_lag, s(35));
        assert_eq!(chained.client_ttl, s(30));
        // Upstream with success caching disabled: NodeLocal holds the fresh 30 s answer.
        let newest = lag(&CLASSIC.replace(
            "cache 30\n",
            "cache 30 {\n disable success cluster.local\n}\n",
        ));
        let chained = c
            .expected_lag_behind("cluster.local", Some(&newest))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(chained.cache_lag, s(30));
    }

    #[test]
    fn most_specific_block_and_port() {
        let text = ".:53 {\n kubernetes cluster.local { ttl 30 }\n cache 30\n}\ncluster.local:53 {\n kubernetes { ttl 10 }\n}\n.:5353 {\n kubernetes cluster.local\n cache 3600\n}\n";
        let c = Corefile::parse(text).unwrap_or_default();
        let all = c.expected_lags("cluster.local", None).unwrap_or_default();
        assert_eq!(all.len(), 2);
        assert_eq!(all[0].port, 53);
        assert_eq!(all[0].zone, "cluster.local.");
        assert_eq!(all[0].lag.source, AnswerSource::Kubernetes { ttl: 10 });
        assert_eq!(all[0].lag.cache_lag, Duration::ZERO);
        assert_eq!(all[1].port, 5353);
        assert_eq!(all[1].lag.cache_lag, s(5));
        // The overall answer is the listener that lags most.
        assert_eq!(
            c.expected_lag("cluster.local").map(|l| l.cache_lag),
            Ok(s(5))
        );
    }

    #[test]
    fn lexer_semantics() {
        let text = "# header\n.:53 { # trailing\n  template ANY ANY x {\n    match \"^a#b\\\"c$\"\n    answer \"{{ .Name }} 60 IN A 1.2.3.4\"\n  }\n  forward . 1.1.1.1#comment\n  health {$HOST}:8080\n}\n";
        let c = Corefile::parse(text).unwrap_or_else(|e| panic!("{e}"));
        let srv = &c.servers[0];
        assert_eq!(srv.line, 2);
        let tpl = srv
            .directive("template")
            .unwrap_or_else(|| panic!("no template"));
        assert_eq!(tpl.line, 3);
        assert_eq!(tpl.block_lines()[0].args, vec!["^a#b\"c$".to_string()]);
        assert_eq!(
            tpl.block_lines()[1].args,
            vec!["{{ .Name }} 60 IN A 1.2.3.4".to_string()]
        );
        assert_eq!(
            srv.directive("forward").map(|d| d.args.clone()),
            Some(vec![".".into(), "1.1.1.1".into()])
        );
        assert_eq!(
            srv.directive("health").map(|d| d.args.clone()),
            Some(vec!["{$HOST}:8080".into()])
        );
    }

    #[test]
    fn one_line_blocks_and_brace_on_next_line() {
        let c = Corefile::parse(
            ".:53 {\n forward . 1.1.1.1 { expire 10s }\n cache 30\n {\n  success 100\n }\n}\n",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let srv = &c.servers[0];
        assert_eq!(
            srv.directive("forward").map(|d| d.block_lines().len()),
            Some(1)
        );
        assert_eq!(
            srv.directive("cache")
                .map(|d| d.block_lines()[0].name.clone()),
            Some("success".into())
        );
    }

    #[test]
    fn keys_schemes_ports_and_commas() {
        let c = Corefile::parse("dns://Example.ORG:1053, tls://b.org:853\n c.org {\n whoami\n}\n");
        // A newline ends the keys unless the line ended with a comma.
        assert!(c.is_err());
        let c = Corefile::parse("dns://Example.ORG:1053,\n tls://b.org:853 c.org {\n whoami\n}\n")
            .unwrap_or_else(|e| panic!("{e}"));
        let keys = &c.servers[0].keys;
        assert_eq!(keys.len(), 3);
        assert_eq!(keys[0].zone, "example.org.");
        assert_eq!(keys[0].port, Some(1053));
        assert!(keys[0].is_plain_dns());
        assert!(!keys[1].is_plain_dns());
        assert_eq!(keys[2].port, None);
    }

    #[test]
    fn braceless_single_server_and_imports() {
        let c = Corefile::parse(". \nwhoami\nlog\n").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c.servers.len(), 1);
        assert_eq!(c.servers[0].directives.len(), 2);
        let c = Corefile::parse(".:53 {\n kubernetes cluster.local\n import custom/*.override\n}\nimport custom/*.server\n")
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            c.imports,
            vec![Import {
                line: 5,
                pattern: "custom/*.server".into()
            }]
        );
        let l = c
            .expected_lag("cluster.local")
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(l.notes.iter().any(|n| n.contains("custom/*.override")));
        assert!(l.notes.iter().any(|n| n.contains("custom/*.server")));
    }

    #[test]
    fn snippets_are_not_servers() {
        let text = "(common) {\n kubernetes cluster.local\n cache 3600\n}\n.:53 {\n import common\n kubernetes cluster.local { ttl 30 }\n}\n";
        let c = Corefile::parse(text).unwrap();
        assert!(c.servers[0].is_snippet());
        let l = c.expected_lag("cluster.local").unwrap();
        assert_eq!(l.cache_lag, Duration::ZERO);
        assert!(
            l.notes
                .iter()
                .any(|n| n.contains("import common not followed")),
            "{:?}",
            l.notes
        );
    }

    #[test]
    fn syntax_errors_have_lines() {
        let cases: &[(&str, CorefileError)] = &[
            (
                ".:53 {\n cache 30\n",
                CorefileError::UnclosedBlock { line: 1 },
            ),
            (".:53 {\n}\n}\n", CorefileError::UnexpectedClose { line: 3 }),
            (
                ".:53 {\n log \"oops\n}\n",
                CorefileError::UnterminatedQuote { line: 2 },
            ),
            (
                "Corefile\n.:53 {\n}\n",
                CorefileError::InvalidDirective {
                    line: 2,
                    token: ".:53".into(),
                },
            ),
            (
                ".:53 {\n kubernetes x {\n }FEDERATIONS\n}\n",
                CorefileError::GluedBrace {
                    line: 3,
                    token: "}FEDERATIONS".into(),
                },
            ),
            (
                ".:53 {\n kubernetes {{ .DNSDomain }}\n}\n",
                CorefileError::Template {
                    line: 2,
                    token: "{{".into(),
                },
            ),
            ("a.org,\n", CorefileError::ExpectedAddress { line: 1 }),
            ("{\n}\n", CorefileError::UnexpectedOpen { line: 1 }),
        ];
        for (text, want) in cases {
            assert_eq!(Corefile::parse(text).as_ref(), Err(want), "{text}");
            assert!(want.line().is_some());
        }
        assert_eq!(CorefileError::UnclosedBlock { line: 4 }.line(), Some(4));
        assert_eq!(
            CorefileError::NotServed {
                domain: "cluster.local".into()
            }
            .line(),
            None
        );
        let msg = CorefileError::InvalidDirective {
            line: 2,
            token: ".:53".into(),
        }
        .to_string();
        assert!(msg.contains("missing its '{'"), "{msg}");
    }

    #[test]
    fn plugin_errors_have_lines() {
        let cases: &[(&str, usize)] = &[
            (
                ".:53 {\n kubernetes cluster.local {\n  ttl 3601\n }\n}\n",
                3,
            ),
            (".:53 {\n kubernetes cluster.local {\n  ttl -1\n }\n}\n", 3),
            (".:53 {\n kubernetes cluster.local\n cache 0\n}\n", 3),
            (
                ".:53 {\n kubernetes cluster.local\n cache {\n  success 10 0\n }\n}\n",
                4,
            ),
            (
                ".:53 {\n kubernetes cluster.local\n cache {\n  prefetch 1 1m 5%\n }\n}\n",
                4,
            ),
            (
                ".:53 {\n kubernetes cluster.local\n cache {\n  serve_stale 1h later\n }\n}\n",
                4,
            ),
            (
                ".:53 {\n kubernetes cluster.local\n cache {\n  disable both\n }\n}\n",
                4,
            ),
            (
                ".:53 {\n kubernetes cluster.local\n cache {\n  servfail 10m\n }\n}\n",
                4,
            ),
        ];
        for (text, line) in cases {
            match Corefile::parse(text).and_then(|c| c.expected_lag("cluster.local")) {
                Err(CorefileError::InvalidPlugin { line: l, .. }) => assert_eq!(l, *line, "{text}"),
                other => panic!("{text}: {other:?}"),
            }
        }
        let dup = Corefile::parse(".:53 {\n kubernetes cluster.local\n cache 5\n cache 10\n}\n")
            .and_then(|c| c.expected_lag("cluster.local"));
        assert_eq!(
            dup.err(),
            Some(CorefileError::Duplicate {
                line: 4,
                first: 3,
                plugin: "cache".into()
            })
        );
    }

    #[test]
    fn not_served_and_not_answered() {
        let c = Corefile::parse("example.org {\n whoami\n}\n").unwrap_or_default();
        assert!(matches!(
            c.expected_lag("cluster.local"),
            Err(CorefileError::NotServed { .. })
        ));
        let c = Corefile::parse(".:53 {\n whoami\n}\n").unwrap_or_default();
        assert!(matches!(
            c.expected_lag("cluster.local"),
            Err(CorefileError::NotAnswered { line: 1, .. })
        ));
        let c =
            Corefile::parse("tls://.:853 {\n kubernetes cluster.local\n}\n").unwrap_or_default();
        assert!(matches!(
            c.expected_lag("cluster.local"),
            Err(CorefileError::NotServed { .. })
        ));
        assert_eq!(Corefile::parse(""), Ok(Corefile::default()));
    }

    #[test]
    fn go_durations() {
        assert_eq!(parse_go_duration("24h"), Some(s(86400)));
        assert_eq!(parse_go_duration("1h30m"), Some(s(5400)));
        assert_eq!(parse_go_duration("3600s"), Some(s(3600)));
        assert_eq!(parse_go_duration("1.5s"), Some(Duration::from_millis(1500)));
        assert_eq!(parse_go_duration("250ms"), Some(Duration::from_millis(250)));
        assert_eq!(parse_go_duration("0"), Some(Duration::ZERO));
        assert_eq!(parse_go_duration("10"), None);
        assert_eq!(parse_go_duration("-1s"), None);
        assert_eq!(parse_go_duration(""), None);
        assert_eq!(parse_go_duration("1x"), None);
        assert_eq!(parse_go_duration("99999999999999999999999h"), None);
    }

    proptest::proptest! {
        #[test]
        fn never_panics_on_arbitrary_text(text in ".{0,400}") {
            if let Ok(c) = Corefile::parse(&text) {
                let _ = c.expected_lag("cluster.local");
            }
        }

        #[test]
        fn never_panics_on_corefile_like_text(
            parts in proptest::collection::vec(
                proptest::prop_oneof![
                    proptest::strategy::Just("{".to_string()),
                    proptest::strategy::Just("}".to_string()),
                    proptest::strategy::Just("\n".to_string()),
                    proptest::strategy::Just(" ".to_string()),
                    proptest::strategy::Just("\"".to_string()),
                    proptest::strategy::Just("#".to_string()),
                    proptest::strategy::Just(".:53".to_string()),
                    proptest::strategy::Just("cache".to_string()),
                    proptest::strategy::Just("kubernetes".to_string()),
                    proptest::strategy::Just("forward".to_string()),
                    proptest::strategy::Just("ttl".to_string()),
                    proptest::strategy::Just("success".to_string()),
                    proptest::strategy::Just("disable".to_string()),
                    proptest::strategy::Just("serve_stale".to_string()),
                    proptest::strategy::Just("prefetch".to_string()),
                    proptest::strategy::Just("cluster.local".to_string()),
                    "[0-9]{1,6}",
                    "[0-9]{1,3}(ms|s|m|h|%)",
                ],
                0..80,
            )
        ) {
            let text = parts.concat();
            if let Ok(c) = Corefile::parse(&text) {
                let _ = c.expected_lags("cluster.local", None);
                let _ = c.expected_lag("cluster.local");
            }
        }
    }
}
