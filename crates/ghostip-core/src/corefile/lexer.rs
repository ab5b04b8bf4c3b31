//! Splits Corefile text into tokens the way CoreDNS's Caddyfile lexer does.

use super::error::CorefileError;

#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Token {
    pub(super) text: String,
    pub(super) line: usize,
    /// Line the token ends on (differs for quoted tokens spanning lines).
    pub(super) end_line: usize,
    pub(super) quoted: bool,
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
