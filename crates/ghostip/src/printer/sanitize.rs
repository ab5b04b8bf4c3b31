//! Escapes the control characters of text that came from outside the program (log lines, file
//! names, cluster objects) before it is printed on a terminal.
//!
//! A terminal acts on control characters: `ESC [2J` clears the screen, `ESC ]` sets the window
//! title, a bare `CR` overwrites what was printed, and the bidirectional overrides reorder what
//! the reader sees. Text a log or a cluster supplies is printed with those characters escaped
//! in a visible, unambiguous form: `\t`, `\n`, `\r`, `\x1b` (C0 and DEL), `\u{9b}` (C1 and the
//! bidirectional controls). JSON output needs none of this: serde escapes the C0 controls, and
//! a JSON string is data, not text for a terminal.

use std::borrow::Cow;
use std::fmt::Write as _;

/// Whether `c` is escaped: a C0 control (U+0000–U+001F), DEL (U+007F), a C1 control
/// (U+0080–U+009F), or a bidirectional embedding, override or isolate (U+202A–U+202E,
/// U+2066–U+2069).
pub fn is_escaped(c: char) -> bool {
    c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// `s` with every character of [`is_escaped`] written as an escape (`\x1b`, `\u{9b}`, `\t`,
/// `\n`, `\r`); borrowed when there is none. For one value: a target, a host name, a file name,
/// a log excerpt.
pub fn escape_controls(s: &str) -> Cow<'_, str> {
    escape(s, false)
}

/// [`escape_controls`] for text whose line breaks are the program's own (a rendered table): the
/// line feeds are kept, every other escaped character is escaped.
pub fn escape_controls_keep_newlines(s: &str) -> Cow<'_, str> {
    escape(s, true)
}

fn escape(s: &str, keep_newlines: bool) -> Cow<'_, str> {
    let needs = |c: char| is_escaped(c) && !(keep_newlines && c == '\n');
    let Some(first) = s.find(needs) else {
        return Cow::Borrowed(s);
    };
    let mut out = String::with_capacity(s.len() + 8);
    out.push_str(&s[..first]);
    for c in s[first..].chars() {
        if !needs(c) {
            out.push(c);
            continue;
        }
        let _ = match c {
            '\t' => write!(out, "\\t"),
            '\n' => write!(out, "\\n"),
            '\r' => write!(out, "\\r"),
            c if u32::from(c) < 0x80 => write!(out, "\\x{:02x}", u32::from(c)),
            c => write!(out, "\\u{{{:x}}}", u32::from(c)),
        };
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_text_is_borrowed() {
        let s = "10.244.3.71:8080 host:web.shop.svc — naïve ✓";
        assert!(matches!(escape_controls(s), Cow::Borrowed(x) if x == s));
        assert!(matches!(
            escape_controls_keep_newlines("a\nb\n"),
            Cow::Borrowed("a\nb\n")
        ));
    }

    #[test]
    fn controls_are_escaped_visibly() {
        // Clear the screen, set the title, ring the bell, overwrite the line.
        assert_eq!(
            escape_controls("x\u{1b}[2Jy\u{1b}]0;pwned\u{7}z\rw\u{7f}"),
            "x\\x1b[2Jy\\x1b]0;pwned\\x07z\\rw\\x7f"
        );
        // C1: the one-byte CSI and OSC, NEL.
        assert_eq!(
            escape_controls("a\u{9b}2Jb\u{9d}c\u{85}"),
            "a\\u{9b}2Jb\\u{9d}c\\u{85}"
        );
        assert_eq!(escape_controls("\u{0}\t\n"), "\\x00\\t\\n");
        // Bidirectional override: "txt.exe" would show as "exe.txt".
        assert_eq!(
            escape_controls("a\u{202e}b\u{2066}"),
            "a\\u{202e}b\\u{2066}"
        );
    }

    #[test]
    fn own_line_breaks_can_stay() {
        assert_eq!(
            escape_controls_keep_newlines("row 1\u{1b}[2J\nrow 2\r\n"),
            "row 1\\x1b[2J\nrow 2\\r\n"
        );
    }

    #[test]
    fn each_char_is_kept_or_escaped_to_its_own_visible_text() {
        let mut seen = std::collections::HashSet::new();
        for c in (0u32..0x3100)
            .chain([0x1f600, 0x10ffff])
            .filter_map(char::from_u32)
        {
            let one = c.to_string();
            let out = escape_controls(&one);
            if is_escaped(c) {
                assert!(out.starts_with('\\') && out.len() > 1, "{c:?} -> {out}");
                assert!(out.chars().all(|x| x.is_ascii_graphic()), "{c:?} -> {out}");
                assert!(seen.insert(out.into_owned()), "{c:?} escapes like another");
            } else {
                assert_eq!(out, one);
            }
        }
        assert_eq!(seen.len(), 65 + 9);
    }
}
