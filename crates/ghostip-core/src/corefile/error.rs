//! The errors of the Corefile parser and of plugin arguments, each with the line it is about.

use thiserror::Error;

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
