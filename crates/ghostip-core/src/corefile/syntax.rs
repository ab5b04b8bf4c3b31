//! The parsed form of a Corefile: server blocks, their addresses (keys), and directives.

use std::fmt;

use super::error::CorefileError;
use super::lexer::lex;
use super::parser::Parser;
use super::placeholder::Placeholder;
use super::zone::normalize_zone;

/// A parsed Corefile.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Corefile {
    /// Server blocks, in file order.
    pub servers: Vec<ServerBlock>,
    /// Top-level `import` lines (not followed).
    pub imports: Vec<Import>,
    /// Template placeholders left unrendered, in file order.
    pub placeholders: Vec<Placeholder>,
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
    /// Zone, lower-case and fully qualified (`cluster.local.`, `.`), or
    /// [`DOMAIN_PLACEHOLDER_ZONE`](super::DOMAIN_PLACEHOLDER_ZONE) for a template placeholder
    /// standing for the domain.
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

// === impl Corefile ===

impl Corefile {
    /// Parses a Corefile.
    ///
    /// # Errors
    ///
    /// A [`CorefileError`] with the line of the first syntax problem.
    pub fn parse(text: &str) -> Result<Self, CorefileError> {
        let tokens = lex(text)?;
        Parser::new(tokens).corefile()
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

    /// The zone part as written, without scheme and port.
    pub fn host(&self) -> &str {
        let rest = self
            .raw
            .split_once("://")
            .map_or(self.raw.as_str(), |(_, r)| r);
        match rest.rsplit_once(':') {
            Some((h, _)) if !h.contains(':') => h,
            _ => rest,
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
