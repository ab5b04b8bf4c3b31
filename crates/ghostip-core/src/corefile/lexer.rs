//! Splits Corefile text into tokens the way CoreDNS's Caddyfile lexer does.
//!
//! Two departures, for templates that were not rendered: a Go template action (`{{ … }}`,
//! which contains spaces) is kept whole inside its token, and a `}` glued to a `sed`
//! placeholder (`}STUBDOMAINS`) or to an action (`}{{ .Federation }}`) is a token of its own.
//! An action other than a field (`{{ if … }}`, `{{ end }}`) is refused: its output cannot be
//! known without rendering.

use super::error::CorefileError;
use super::placeholder;

#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Token {
    pub(super) text: String,
    pub(super) line: usize,
    /// Line the token ends on (differs for quoted tokens spanning lines).
    pub(super) end_line: usize,
    pub(super) quoted: bool,
    /// Holds a Go template field (`{{ .DNSDomain }}`), checked by the lexer.
    pub(super) template: bool,
}

impl Token {
    pub(super) fn is_open(&self) -> bool {
        !self.quoted && self.text == "{"
    }

    pub(super) fn is_close(&self) -> bool {
        !self.quoted && self.text == "}"
    }
}

pub(super) fn lex(text: &str) -> Result<Vec<Token>, CorefileError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut tokens = Vec::new();
    let mut line = 1usize;
    let mut chars = text.chars().peekable();
    let mut val = String::new();
    let mut template = false;
    let mut start_line = 1usize;
    let mut comment = false;
    while let Some(ch) = chars.next() {
        if comment {
            if ch == '\n' {
                comment = false;
                line += 1;
                flush(&mut tokens, &mut val, &mut template, start_line, line - 1);
            }
            continue;
        }
        if ch == '{' && chars.peek() == Some(&'{') {
            // A Go template action: kept whole, up to its `}}`.
            if val == "}" {
                flush(&mut tokens, &mut val, &mut template, start_line, line);
            }
            let open_line = line;
            let mut action = String::from("{");
            let mut closed = false;
            while let Some(c) = chars.next() {
                if c == '\n' {
                    line += 1;
                }
                action.push(c);
                if c == '}' && chars.peek() == Some(&'}') && action.len() > 2 {
                    chars.next();
                    action.push('}');
                    closed = true;
                    break;
                }
            }
            if !closed {
                return Err(CorefileError::Template {
                    line: open_line,
                    token: "{{".into(),
                });
            }
            if !is_field(&action) {
                return Err(CorefileError::Template {
                    line: open_line,
                    token: action,
                });
            }
            if val.is_empty() {
                start_line = open_line;
            }
            val.push_str(&action);
            template = true;
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
                template: false,
            });
            continue;
        }
        if ch.is_whitespace() {
            flush(&mut tokens, &mut val, &mut template, start_line, line);
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
    flush(&mut tokens, &mut val, &mut template, start_line, line);
    Ok(tokens)
}

fn flush(
    tokens: &mut Vec<Token>,
    val: &mut String,
    template: &mut bool,
    line: usize,
    end_line: usize,
) {
    if val.is_empty() {
        return;
    }
    let text = std::mem::take(val);
    let token = |text: String, template: bool| Token {
        text,
        line,
        end_line: end_line.max(line),
        quoted: false,
        template,
    };
    // `}STUBDOMAINS`: the block ends, then the placeholder.
    if let Some(word) = text.strip_prefix('}')
        && placeholder::is_sed_word(word)
    {
        tokens.push(token("}".to_string(), false));
        tokens.push(token(word.to_string(), false));
    } else {
        tokens.push(token(text, *template));
    }
    *template = false;
}

/// Whether a Go template action only prints a field or variable (`{{ .DNSDomain }}`,
/// `{{- $zone -}}`), which a placeholder can stand for.
fn is_field(action: &str) -> bool {
    let inner = action
        .trim_start_matches('{')
        .trim_end_matches('}')
        .trim_start_matches('-')
        .trim_end_matches('-')
        .trim();
    let mut parts = inner.split_whitespace();
    let first = parts.next().unwrap_or_default();
    parts.next().is_none()
        && (first.starts_with('.') || first.starts_with('$'))
        && first[1..]
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
}
