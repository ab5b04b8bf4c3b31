//! Finds template placeholders left in a Corefile by the installers that render it.
//!
//! Distributions ship Corefiles as templates: kubeadm and minikube as Go templates
//! (`{{ .DNSDomain }}`), coredns/deployment for `sed` (`CLUSTER_DOMAIN`, `}STUBDOMAINS`),
//! kube-up and NodeLocal DNSCache with `__PILLAR__DNS__DOMAIN__`-style values, others with
//! `%{CLUSTER_DOMAIN}%`, `$DNS_DOMAIN` / `${DNS_DOMAIN}`, or CoreDNS's own environment
//! variables (`{$VAR}`, `{%VAR%}`). A placeholder is never silently guessed: one that names a
//! domain or zone and stands where a zone is expected is taken as the cluster zone with a
//! caveat saying so; the others are named and match nothing.

use std::fmt;

/// The spelling a placeholder is written in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PlaceholderSyntax {
    /// A Go template field, `{{ .DNSDomain }}` (kubeadm, minikube).
    GoTemplate,
    /// `__PILLAR__DNS__DOMAIN__`, `__DNS__DOMAIN__` (NodeLocal DNSCache, kube-up).
    Underscores,
    /// `%{CLUSTER_DOMAIN}%`.
    Percent,
    /// `$DNS_DOMAIN` or `${DNS_DOMAIN}` (shell, envsubst).
    Dollar,
    /// CoreDNS's own environment substitution, `{$VAR}` or `{%VAR%}`, done when it starts.
    Environment,
    /// A bare upper-case word for `sed`, `CLUSTER_DOMAIN` (coredns/deployment).
    Sed,
}

/// A template placeholder found in a Corefile.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Placeholder {
    /// As written (`%{CLUSTER_DOMAIN}%`, `{{ .DNSDomain }}`).
    pub text: String,
    /// Line it is on.
    pub line: usize,
    /// How it is spelt.
    pub syntax: PlaceholderSyntax,
    /// Its name names a domain or zone (`CLUSTER_DOMAIN`, `.DNSDomain`, `__PILLAR__DNS__DOMAIN__`):
    /// where a zone is expected it is taken as the cluster zone, with a caveat.
    pub domain: bool,
    /// It stands alone where a server block or a plugin would start (`}STUBDOMAINS`,
    /// `}{{ .Federation }}`): the installer puts text there that ghostip does not see.
    pub fills_text: bool,
}

impl fmt::Display for Placeholder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (line {})", self.text, self.line)
    }
}

/// coredns/deployment's `sed` placeholders without an underscore.
const SED_WORDS: &[&str] = &["UPSTREAMNAMESERVER", "STUBDOMAINS", "FEDERATIONS"];

/// The placeholders inside one unquoted token, in order.
pub(super) fn find(token: &str, line: usize) -> Vec<Placeholder> {
    let mut out = Vec::new();
    if let Some(syntax) = whole_sed(token) {
        out.push(make(token, line, syntax));
        return out;
    }
    let b = token.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let rest = &token[i..];
        let found = if rest.starts_with("{{") {
            rest.find("}}")
                .map(|end| (end + 2, PlaceholderSyntax::GoTemplate))
        } else if rest.starts_with("{$") || rest.starts_with("{%") {
            rest.find('}')
                .map(|end| (end + 1, PlaceholderSyntax::Environment))
        } else if rest.starts_with("%{") {
            rest.find("}%")
                .map(|end| (end + 2, PlaceholderSyntax::Percent))
        } else if rest.starts_with("${") {
            rest.find('}')
                .map(|end| (end + 1, PlaceholderSyntax::Dollar))
        } else if let Some(after) = rest.strip_prefix('$') {
            let n = ident_len(after);
            (n > 0).then_some((n + 1, PlaceholderSyntax::Dollar))
        } else if rest.starts_with("__") {
            underscores_len(rest).map(|n| (n, PlaceholderSyntax::Underscores))
        } else if rest.starts_with(|c: char| c.is_ascii_uppercase())
            && (i == 0 || !is_word_byte(b[i - 1]))
        {
            // A `sed` word inside a larger token: `CLUSTER_DOMAIN:53`.
            let n = rest.bytes().take_while(|c| is_word_byte(*c)).count();
            whole_sed(&rest[..n]).map(|s| (n, s))
        } else {
            None
        };
        match found {
            Some((len, syntax)) => {
                out.push(make(&rest[..len], line, syntax));
                i += len;
            }
            None => i += rest.chars().next().map_or(1, char::len_utf8),
        }
    }
    out
}

/// Whether a whole token (a zone, without a port) is a placeholder standing for a domain.
pub(super) fn is_domain(token: &str) -> bool {
    let found = find(token, 0);
    matches!(found.as_slice(), [p] if p.domain && p.text == token)
}

/// Whether a whole token is one placeholder (nothing else around it).
pub(super) fn is_whole(token: &str) -> bool {
    let found = find(token, 0);
    matches!(found.as_slice(), [p] if p.text == token)
}

/// Whether `word` can follow a glued `}` as a `sed` placeholder (`}STUBDOMAINS`).
pub(super) fn is_sed_word(word: &str) -> bool {
    whole_sed(word).is_some()
}

fn make(text: &str, line: usize, syntax: PlaceholderSyntax) -> Placeholder {
    let name = text.to_ascii_uppercase();
    let names_domain = name.contains("DOMAIN") || name.contains("ZONE");
    let extra_blocks = name.contains("STUB") || name.contains("FEDERATION");
    Placeholder {
        text: text.to_string(),
        line,
        syntax,
        domain: names_domain && !extra_blocks,
        fills_text: false,
    }
}

/// `CLUSTER_DOMAIN`, `REVERSE_CIDRS`, `UPSTREAMNAMESERVER`: upper-case words with an
/// underscore, or coredns/deployment's own words. DNS words (`NXDOMAIN`, `HINFO`) have none.
fn whole_sed(token: &str) -> Option<PlaceholderSyntax> {
    let upper = token
        .chars()
        .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_');
    let starts = token.starts_with(|c: char| c.is_ascii_uppercase());
    let underscore = token.contains('_') && !token.starts_with("__") && !token.ends_with('_');
    (upper && starts && (underscore || SED_WORDS.contains(&token)))
        .then_some(PlaceholderSyntax::Sed)
}

fn is_word_byte(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// Length of an identifier (`[A-Za-z_][A-Za-z0-9_]*`) at the start of `s`.
fn ident_len(s: &str) -> usize {
    let mut n = 0;
    for (i, c) in s.char_indices() {
        let ok = c.is_ascii_alphabetic() || c == '_' || (i > 0 && c.is_ascii_digit());
        if !ok {
            break;
        }
        n = i + 1;
    }
    n
}

/// Length of `__UPPER__WORDS__` at the start of `s`: upper-case words joined by `__`, in
/// `__` on both sides.
fn underscores_len(s: &str) -> Option<usize> {
    let body = s.strip_prefix("__")?;
    let end = body
        .find(|c: char| !(c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'))
        .unwrap_or(body.len());
    let inner = body[..end].trim_end_matches('_');
    let closing = body[inner.len()..end].len();
    (!inner.is_empty() && closing >= 2 && inner.starts_with(|c: char| c.is_ascii_uppercase()))
        .then_some(2 + inner.len() + 2)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn texts(token: &str) -> Vec<String> {
        find(token, 1).into_iter().map(|p| p.text).collect()
    }

    #[test]
    fn spellings() {
        assert_eq!(
            texts("__PILLAR__DNS__DOMAIN__:53"),
            ["__PILLAR__DNS__DOMAIN__"]
        );
        assert_eq!(
            texts("__PILLAR__LOCAL__DNS__:8080"),
            ["__PILLAR__LOCAL__DNS__"]
        );
        assert_eq!(texts(":{$NOMAD_PORT_health}"), ["{$NOMAD_PORT_health}"]);
        assert_eq!(
            texts("{$NOMAD_HOST_IP_metrics}:8600"),
            ["{$NOMAD_HOST_IP_metrics}"]
        );
        assert_eq!(texts("%{CLUSTER_DOMAIN}%"), ["%{CLUSTER_DOMAIN}%"]);
        assert_eq!(texts("${DNS_DOMAIN}"), ["${DNS_DOMAIN}"]);
        assert_eq!(texts("$DNS_DOMAIN:53"), ["$DNS_DOMAIN"]);
        assert_eq!(texts("{{ .DNSDomain }}"), ["{{ .DNSDomain }}"]);
        assert_eq!(texts("REVERSE_CIDRS"), ["REVERSE_CIDRS"]);
        assert_eq!(texts("UPSTREAMNAMESERVER"), ["UPSTREAMNAMESERVER"]);
        assert_eq!(texts("dns://CLUSTER_DOMAIN:53"), ["CLUSTER_DOMAIN"]);
        assert!(texts("xCLUSTER_DOMAIN").is_empty());
        for plain in [
            "NXDOMAIN",
            "HINFO",
            "ANY",
            "cluster.local",
            "/etc/resolv.conf",
            "10.0.0.10:53",
            "(.*)\\.foo$",
            "{1}.bar",
            "_dns",
            "__",
            "a__b",
        ] {
            assert!(texts(plain).is_empty(), "{plain}: {:?}", texts(plain));
        }
    }

    #[test]
    fn domains_and_fillers() {
        for d in [
            "CLUSTER_DOMAIN",
            "{{ .DNSDomain }}",
            "{{ .ClusterDomain }}",
            "__PILLAR__DNS__DOMAIN__",
            "%{CLUSTER_DOMAIN}%",
            "$DNS_DOMAIN",
            "{$ZONE}",
        ] {
            assert!(is_domain(d), "{d}");
        }
        for other in [
            "REVERSE_CIDRS",
            "STUBDOMAINS",
            "{{ .StubDomain }}",
            "CLUSTER_DOMAIN:53",
        ] {
            assert!(!is_domain(other), "{other}");
        }
        assert!(is_whole("{{ .Federation }}") && is_whole("STUBDOMAINS"));
        assert!(!is_whole("{$HOST}:8080"));
        assert!(is_sed_word("FEDERATIONS") && !is_sed_word("FOO"));
    }
}
