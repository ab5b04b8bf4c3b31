//! What the CLI tests of terminal output share: the widths a table is run at and the check that every line fits.
#![allow(dead_code, clippy::unwrap_used, clippy::panic)]

/// Every line of `stdout` has at most `width` characters (not bytes); the text, for more checks.
pub fn assert_fits(stdout: &[u8], width: usize) -> String {
    let text = String::from_utf8(stdout.to_vec()).unwrap();
    assert!(!text.is_empty(), "no output");
    for line in text.lines() {
        let n = line.chars().count();
        assert!(n <= width, "{n} > {width} characters: {line:?}\n{text}");
    }
    text
}

/// Some line of `stdout` is wider than `width` characters (`-o wide` does not fit 80).
pub fn assert_wider(stdout: &[u8], width: usize) -> String {
    let text = String::from_utf8(stdout.to_vec()).unwrap();
    assert!(
        text.lines().any(|l| l.chars().count() > width),
        "nothing wider than {width}:\n{text}"
    );
    text
}
