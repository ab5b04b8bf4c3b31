//! Builds server blocks and directives from tokens, refusing what CoreDNS would misread.

use std::collections::BTreeSet;

use super::error::CorefileError;
use super::lexer::Token;
use super::placeholder;
use super::syntax::{Corefile, Directive, Import, ServerBlock, ServerKey};

pub(super) struct Parser {
    tokens: Vec<Token>,
    pos: usize,
    /// Tokens skipped as placeholders for text the installer adds (`STUBDOMAINS`).
    fillers: BTreeSet<usize>,
}

impl Parser {
    pub(super) fn new(tokens: Vec<Token>) -> Self {
        Self {
            tokens,
            pos: 0,
            fillers: BTreeSet::new(),
        }
    }

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

    pub(super) fn corefile(mut self) -> Result<Corefile, CorefileError> {
        let mut out = Corefile::default();
        while let Some(tok) = self.peek().cloned() {
            if self.skip_filler() {
                continue;
            }
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
        out.placeholders = self.placeholders();
        Ok(out)
    }

    /// A placeholder alone at the end of its line where a server block or a plugin would
    /// start (`}STUBDOMAINS`, `}{{ .Federation }}`): the installer replaces it with text
    /// (possibly nothing). Skipped, and named as a placeholder that fills in text.
    fn skip_filler(&mut self) -> bool {
        let Some(tok) = self.peek() else {
            return false;
        };
        let alone = self.starts_line(self.pos + 1)
            || self.tokens.get(self.pos + 1).is_some_and(Token::is_close);
        if tok.quoted || !alone || !placeholder::is_whole(&tok.text) {
            return false;
        }
        self.fillers.insert(self.pos);
        self.pos += 1;
        true
    }

    /// Every placeholder of the unquoted tokens, in file order.
    fn placeholders(&self) -> Vec<placeholder::Placeholder> {
        let mut out = Vec::new();
        for (i, tok) in self.tokens.iter().enumerate().filter(|(_, t)| !t.quoted) {
            for mut p in placeholder::find(&tok.text, tok.line) {
                p.fills_text = self.fillers.contains(&i);
                out.push(p);
            }
        }
        out
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
            if top && self.skip_filler() {
                continue;
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
    if !tok.template && (t.contains("{{") || t.contains("}}")) {
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
