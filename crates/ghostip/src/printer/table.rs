//! Lays out every command's human output to the terminal's width: tables, prose and the fallback lists.
//!
//! See [`Table`] for the entry point of tables and [`fit_text`] for everything around them; a
//! command picks its [`Layout`] once with [`Layout::detect`] and passes it to its renderers.
//!
//! # Width
//!
//! The width is `COLUMNS` when set to a number, else the terminal's width when stdout is a
//! terminal, else 80. `-o wide` lifts the limit: full columns, nothing abbreviated or wrapped.
//!
//! # Fitting a table
//!
//! Columns are separated by two spaces. When the natural widths exceed the width, the widest
//! shrinkable column gives up one character at a time until the table fits, each column down
//! to its minimum (its header, and at least 6 characters of content; a wrapped column keeps
//! its longest word whole, up to 16). How a cell that no longer
//! fits is shortened is its column's [`Fit`], declared when the table is built
//! ([`Column::path`], [`Column::new`]`("SERVICE")`, [`Table::set_columns`]):
//!
//! - [`Fit::Path`] (`PATH`): the description loses its `dns via ` and namespace (`10.244.1.2 coredn…-krb2q`),
//!   then the middle of the name gives way to `…`; the address stays whole. Once one path of
//!   the column is shortened, every path takes the short form.
//! - [`Fit::Wrap`] (`DETAIL`, `NOTES`, `FAILURES`, `KINDS`, `FLAGS`, `FORMATS`, `PORTS`,
//!   `FIRST`, `LAST`, `CLASS`, ...): wrapped onto more lines (a date and its time of day on two; a
//!   list after a comma, `terminating-target` after its hyphen).
//! - [`Fit::Addr`] (`SOURCE`, `BACKEND`, ...): `ip:port` breaks before the port;
//!   [`Fit::Target`] (`explain`'s `TARGET`): an address so, a name with a middle ellipsis.
//! - [`Fit::Keep`]: numbers, durations, IPs and states (`IP`, `SINCE`, `STATE`, ...): never
//!   shortened.
//! - [`Fit::Name`] (the default of [`Column::new`]): middle ellipsis (`kube-system/cor…-krb2q`).
//!
//! Every view declares its columns' fits; the tests keep the earlier guess from the header
//! text (`Fit::of`) to show the declared fits lay out as it did.
//!
//! When even the minimums do not fit, the columns a table marks [`Table::drop_to_fit`] give
//! way first (`explain`'s `ERRORS`, which its `KINDS` repeat); when they still do not fit, or
//! the width is under [`PLAIN_BELOW`] columns, each row becomes a plain `key: value` list,
//! wrapped to the width.
//!
//! # Column headers
//!
//! One vocabulary across commands; durations carry their unit in the cell (`12.3s`), times in
//! a table are relative to the command's t0 (`+12.3s`) unless `-o wide`. Columns in brackets
//! appear only with `-o wide` ([`Table::wide_only`]); `explain`'s `(…)` ones only when a
//! failure has one:
//!
//! - `rollout`: `PATH EXPECTED LAG CLIENT TTL QUERIES FAILURES`; `PATH IP POD [LEFT AT]
//!   [LAST SEEN] WINDOW [PREDICTED] [EXPECTED] VERDICT EXPOSURE` (stale); `PATH IP POD
//!   [ADDED AT] SERVED FROM WINDOW VERDICT` (missing).
//! - `check`: `SERVICE PATH STATE STALE MISSING TTL DETAIL`.
//! - `whois`: `WHEN POD [UID] NODE OWNER FROM UNTIL NOTES`.
//! - `datapath show` (conntrack): `PROTO STATE [TIMEOUT] SOURCE DESTINATION DNAT TO FLAGS`;
//!   `datapath diff`: `WHAT SERVICE FRONTEND BACKEND STATE SINCE`.
//! - `explain`: `TARGET PORTS (DNS SERVER) CLASS (SERVICE) (WINDOW) ERRORS KINDS FIRST LAST
//!   [FORMATS]`.
//! - `audit` and `datapath show` (load balancers) print listings, wrapped by [`fit_text`].

use std::fmt::Write as _;
use std::io::IsTerminal as _;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use ghostip_core::Time;

use super::sanitize::escape_controls_keep_newlines;

/// Below this many columns, tables print as `key: value` lists.
pub const PLAIN_BELOW: usize = 40;
/// The width when stdout is not a terminal and `COLUMNS` is unset.
pub const DEFAULT_WIDTH: usize = 80;
/// The narrowest width anything is laid out to (a smaller `COLUMNS` is raised to it).
const MIN_WIDTH: usize = 10;
/// Spaces between columns.
const GAP: usize = 2;
/// What a shrinkable column keeps at least, besides its header.
const MIN_CELL: usize = 6;
/// Wrapped columns keep words up to this long whole.
const MAX_WORD: usize = 16;

/// How wide the output may be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Characters per line.
    pub width: usize,
    /// `-o wide`: no limit, nothing abbreviated.
    pub wide: bool,
}

impl Layout {
    /// Full columns, unabbreviated (`-o wide`).
    pub const WIDE: Layout = Layout {
        width: usize::MAX,
        wide: true,
    };

    /// A layout `width` characters wide.
    pub fn fixed(width: usize) -> Self {
        Layout {
            width: width.max(MIN_WIDTH),
            wide: false,
        }
    }

    /// The layout of this process's stdout: `COLUMNS`, else the terminal's width, else 80.
    pub fn detect(wide: bool) -> Self {
        if wide {
            return Layout::WIDE;
        }
        let columns = std::env::var("COLUMNS").ok();
        let terminal = if std::io::stdout().is_terminal() {
            terminal_size::terminal_size().map(|(w, _)| usize::from(w.0))
        } else {
            None
        };
        Layout::from_sources(columns.as_deref(), terminal)
    }

    /// The width from a `COLUMNS` value and a terminal width (pure part of [`Layout::detect`]).
    pub fn from_sources(columns: Option<&str>, terminal: Option<usize>) -> Self {
        let from_env = columns
            .and_then(|c| c.trim().parse::<usize>().ok())
            .filter(|&c| c > 0);
        Layout::fixed(
            from_env
                .or(terminal.filter(|&t| t > 0))
                .unwrap_or(DEFAULT_WIDTH),
        )
    }

    /// Tables print as `key: value` lists.
    pub fn plain(&self) -> bool {
        !self.wide && self.width < PLAIN_BELOW
    }
}

/// How a column's cells are shortened when the table is too wide.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fit {
    /// Never shortened (numbers, times, IPs, states).
    Keep,
    /// Middle ellipsis.
    Name,
    /// A path description: compacted, then a middle ellipsis after the leading IP.
    Path,
    /// Wrapped onto more lines.
    Wrap,
    /// An address: `ip:port` breaks before the port (`10.244.1.2` / `:8080`).
    Addr,
    /// An address as [`Fit::Addr`], or a name (a host, `dns:` and a query) with a middle
    /// ellipsis: `explain`'s targets.
    Target,
}

impl Fit {
    /// The fit of a column guessed from its header, as views chose it before they declared
    /// it with [`Column`]; the tests compare the two.
    #[cfg(test)]
    pub fn of(header: &str) -> Fit {
        match header {
            "PATH" => Fit::Path,
            "DETAIL" | "NOTES" | "FAILURES" | "KINDS" | "FLAGS" | "STALE" | "MISSING"
            | "FORMATS" | "PORTS" | "FIRST" | "LAST" | "CLASS" => Fit::Wrap,
            "SOURCE" | "DESTINATION" | "DNAT TO" | "FRONTEND" | "BACKEND" | "DNS SERVER" => {
                Fit::Addr
            }
            "WHAT" | "VERDICT" | "WINDOW" | "EXPOSURE" => Fit::Wrap,
            "TARGET" => Fit::Target,
            "IP" | "SINCE" | "STATE" | "WHEN" | "TTL" | "CLIENT TTL" | "QUERIES" | "EXPECTED"
            | "EXPECTED LAG" | "PREDICTED" | "LEFT AT" | "LAST SEEN" | "ADDED AT"
            | "SERVED FROM" | "ERRORS" | "PROTO" | "TIMEOUT" | "UID" | "FROM" | "UNTIL" => {
                Fit::Keep
            }
            _ => Fit::Name,
        }
    }
}

/// A table column: its header and how its cells are shortened when the table is too wide.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Column {
    header: String,
    fit: Fit,
}

impl Column {
    /// A column shortened with a middle ellipsis ([`Fit::Name`]) unless [`Column::fit`] says
    /// otherwise.
    pub fn new(header: impl Into<String>) -> Self {
        Column {
            header: header.into(),
            fit: Fit::Name,
        }
    }

    /// The column with cells shortened as `fit` says.
    #[must_use]
    pub fn fit(mut self, fit: Fit) -> Self {
        self.fit = fit;
        self
    }

    /// A column never shortened ([`Fit::Keep`]): numbers, times, IPs, states.
    pub fn keep(header: impl Into<String>) -> Self {
        Column::new(header).fit(Fit::Keep)
    }

    /// A column of names shortened in the middle ([`Fit::Name`]).
    pub fn name(header: impl Into<String>) -> Self {
        Column::new(header)
    }

    /// A column of path descriptions ([`Fit::Path`]).
    pub fn path(header: impl Into<String>) -> Self {
        Column::new(header).fit(Fit::Path)
    }

    /// A column wrapped onto more lines ([`Fit::Wrap`]).
    pub fn wrap(header: impl Into<String>) -> Self {
        Column::new(header).fit(Fit::Wrap)
    }

    /// A column of addresses broken before the port ([`Fit::Addr`]).
    pub fn addr(header: impl Into<String>) -> Self {
        Column::new(header).fit(Fit::Addr)
    }

    /// A column of addresses or names ([`Fit::Target`]).
    pub fn target(header: impl Into<String>) -> Self {
        Column::new(header).fit(Fit::Target)
    }
}

/// A table: a header and rows of cells, laid out by [`Table::render`].
#[derive(Clone, Debug, Default)]
pub struct Table {
    header: Vec<String>,
    fits: Vec<Fit>,
    rows: Vec<Vec<String>>,
    wide_only: Vec<String>,
    drop_to_fit: Vec<String>,
}

impl Table {
    /// An empty table.
    pub fn new() -> Self {
        Table::default()
    }

    /// Sets the columns, each with its fit.
    pub fn set_columns(&mut self, columns: Vec<Column>) -> &mut Self {
        (self.header, self.fits) = columns.into_iter().map(|c| (c.header, c.fit)).unzip();
        self
    }

    /// Sets the column headers, each fit guessed from its header (`Fit::of`): the tests'
    /// baseline for the declared fits.
    #[cfg(test)]
    pub fn set_header<S: Into<String>>(&mut self, header: Vec<S>) -> &mut Self {
        self.header = header.into_iter().map(Into::into).collect();
        self.fits = self.header.iter().map(|h| Fit::of(h)).collect();
        self
    }

    /// Adds a row; missing cells are empty, cells beyond the header are dropped.
    pub fn add_row<S: Into<String>>(&mut self, row: Vec<S>) -> &mut Self {
        let mut row: Vec<String> = row.into_iter().map(Into::into).collect();
        row.resize(self.header.len(), String::new());
        self.rows.push(row);
        self
    }

    /// Columns shown only with `-o wide` (as `kubectl get -o wide` adds columns).
    pub fn wide_only(&mut self, headers: &[&str]) -> &mut Self {
        self.wide_only = headers.iter().map(|h| (*h).to_string()).collect();
        self
    }

    /// Columns that give way, in this order, when even the other columns' minimums do not
    /// fit the width: a column whose content another one repeats (`explain`'s `ERRORS`, the
    /// sum of its `KINDS`). Shown whenever the table fits with them, and always with `-o wide`.
    pub fn drop_to_fit(&mut self, headers: &[&str]) -> &mut Self {
        self.drop_to_fit = headers.iter().map(|h| (*h).to_string()).collect();
        self
    }

    /// Whether the table has no rows.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The table as lines of at most `layout.width` characters (trailing spaces trimmed).
    pub fn render(&self, layout: &Layout) -> String {
        if !layout.wide && !self.wide_only.is_empty() {
            return self.without_wide_only().render(layout);
        }
        let cols = self.header.len();
        if cols == 0 {
            return String::new();
        }
        if layout.plain() {
            return self.render_plain(layout);
        }
        let fits = &self.fits;
        let natural: Vec<usize> = (0..cols)
            .map(|c| {
                self.rows
                    .iter()
                    .map(|r| width(&r[c]))
                    .chain(std::iter::once(width(&self.header[c])))
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let mut widths = natural.clone();
        if !layout.wide {
            let avail = layout.width.saturating_sub(GAP * (cols - 1));
            let min: Vec<usize> = (0..cols)
                .map(|c| match fits[c] {
                    Fit::Keep => natural[c],
                    Fit::Addr => self
                        .rows
                        .iter()
                        .flat_map(|r| split_addr(&r[c]))
                        .chain(std::iter::once(self.header[c].clone()))
                        .map(|s| width(&s))
                        .max()
                        .unwrap_or(0),
                    // Wrapped text keeps its words whole, up to a limit; a list such as
                    // `9003,9004` breaks after a comma, a compound (`terminating-target`)
                    // after its hyphen.
                    Fit::Wrap => {
                        let word = self
                            .rows
                            .iter()
                            .flat_map(|r| r[c].split([' ', '\n']))
                            .flat_map(breaks)
                            .map(|w| w.chars().count())
                            .max()
                            .unwrap_or(0);
                        natural[c].min(width(&self.header[c]).max(word.min(MAX_WORD)))
                    }
                    // Addresses keep their parts, names a few characters of each end.
                    Fit::Target => self
                        .rows
                        .iter()
                        .map(|r| {
                            if is_addr(&r[c]) {
                                split_addr(&r[c])
                                    .iter()
                                    .map(|s| width(s))
                                    .max()
                                    .unwrap_or(0)
                            } else {
                                width(&r[c]).min(MIN_CELL)
                            }
                        })
                        .chain(std::iter::once(width(&self.header[c])))
                        .max()
                        .unwrap_or(0),
                    // A path keeps its IP and a few characters of its name.
                    Fit::Path => {
                        let ip = self
                            .rows
                            .iter()
                            .map(|r| {
                                let short = abbreviate_path(&r[c], usize::MAX);
                                short.split(' ').next().map_or(0, |w| w.chars().count())
                            })
                            .max()
                            .unwrap_or(0);
                        natural[c].min(width(&self.header[c]).max(ip + 1 + MIN_CELL))
                    }
                    _ => natural[c].min(width(&self.header[c]).max(MIN_CELL)),
                })
                .collect();
            if min.iter().sum::<usize>() > avail {
                if let Some(c) = (0..cols).find(|&c| self.drop_to_fit.contains(&self.header[c])) {
                    return self.without(c).render(layout);
                }
                return self.render_plain(layout);
            }
            let mut total: usize = widths.iter().sum();
            while total > avail {
                // The widest column that can still give up a character.
                let Some(c) = (0..cols)
                    .filter(|&c| widths[c] > min[c])
                    .max_by_key(|&c| (widths[c], c))
                else {
                    break;
                };
                widths[c] -= 1;
                total -= 1;
            }
        }
        let mut out = String::new();
        // A path column with one shortened cell shows every path in the short form.
        let short_paths: Vec<bool> = (0..cols)
            .map(|c| fits[c] == Fit::Path && widths[c] < natural[c])
            .collect();
        let rows: Vec<Vec<Vec<String>>> = self
            .rows
            .iter()
            .map(|r| {
                r.iter()
                    .zip(&widths)
                    .zip(fits)
                    .zip(&short_paths)
                    .map(|(((cell, &w), &fit), &short)| {
                        if short {
                            vec![abbreviate_path(cell, w)]
                        } else if width(cell) <= w {
                            vec![cell.clone()]
                        } else {
                            match fit {
                                Fit::Keep => vec![cell.clone()],
                                Fit::Name => vec![middle_ellipsis(cell, w)],
                                Fit::Path => vec![abbreviate_path(cell, w)],
                                Fit::Wrap => wrap(cell, w, 0),
                                Fit::Addr => split_addr(cell),
                                Fit::Target if is_addr(cell) => split_addr(cell),
                                Fit::Target => vec![middle_ellipsis(cell, w)],
                            }
                        }
                    })
                    .collect()
            })
            .collect();
        // Shortened columns give back what their shortened cells do not use.
        for (c, w) in widths.iter_mut().enumerate() {
            *w = rows
                .iter()
                .flat_map(|r| r[c].iter())
                .chain(std::iter::once(&self.header[c]))
                .map(|s| width(s))
                .max()
                .unwrap_or(0);
        }
        let header: Vec<Vec<String>> = self.header.iter().map(|h| vec![h.clone()]).collect();
        push_row(&mut out, &header, &widths);
        for cells in &rows {
            push_row(&mut out, cells, &widths);
        }
        out
    }

    /// The table without column `c`.
    fn without(&self, c: usize) -> Table {
        self.keep_columns(|i, _| i != c)
    }

    /// The table without its wide-only columns.
    fn without_wide_only(&self) -> Table {
        let mut t = self.keep_columns(|_, h| !self.wide_only.iter().any(|w| w == h));
        t.wide_only.clear();
        t
    }

    /// The table with only the columns `keep(index, header)` accepts.
    fn keep_columns(&self, keep: impl Fn(usize, &str) -> bool) -> Table {
        let cols: Vec<usize> = (0..self.header.len())
            .filter(|&c| keep(c, &self.header[c]))
            .collect();
        let pick = |r: &Vec<String>| cols.iter().map(|&c| r[c].clone()).collect();
        Table {
            header: pick(&self.header),
            fits: cols.iter().map(|&c| self.fits[c]).collect(),
            rows: self.rows.iter().map(pick).collect(),
            wide_only: self.wide_only.clone(),
            drop_to_fit: self.drop_to_fit.clone(),
        }
    }

    /// Each row as `key: value` lines (empty cells left out), rows separated by a blank line.
    fn render_plain(&self, layout: &Layout) -> String {
        let mut out = String::new();
        for (i, r) in self.rows.iter().enumerate() {
            if i > 0 {
                out.push('\n');
            }
            for (h, cell) in self.header.iter().zip(r) {
                if cell.is_empty() {
                    continue;
                }
                let line = format!("{}: {cell}", h.to_lowercase());
                for l in wrap(&line, layout.width, 2) {
                    out.push_str(&l);
                    out.push('\n');
                }
            }
        }
        out
    }
}

/// Writes one row whose cells may span several lines.
fn push_row(out: &mut String, cells: &[Vec<String>], widths: &[usize]) {
    let height = cells.iter().map(Vec::len).max().unwrap_or(1).max(1);
    for i in 0..height {
        let mut line = String::new();
        for (c, (cell, &w)) in cells.iter().zip(widths).enumerate() {
            if c > 0 {
                line.push_str(&" ".repeat(GAP));
            }
            let text = cell.get(i).map_or("", String::as_str);
            line.push_str(text);
            line.push_str(&" ".repeat(w.saturating_sub(width(text))));
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
}

/// Each word of `s` on its line, `ip:port` as `ip` and `:port` (`[v6]:port` alike).
/// An IP, or an IP with a port (`10.244.1.2:8080`, `[fd00::1]:53`).
fn is_addr(s: &str) -> bool {
    s.parse::<std::net::IpAddr>().is_ok() || s.parse::<std::net::SocketAddr>().is_ok()
}

fn split_addr(s: &str) -> Vec<String> {
    s.split(' ')
        .flat_map(|w| w.split_inclusive(','))
        .flat_map(split_word)
        .collect()
}

fn split_word(s: &str) -> Vec<String> {
    let port = |p: &str| {
        let digits = p.split('/').next().unwrap_or(p);
        !digits.is_empty() && digits.chars().all(|c| c.is_ascii_digit())
    };
    match s.rfind(':') {
        Some(i) if i > 0 && port(&s[i + 1..]) => {
            let host = &s[..i];
            // A bare IPv6 address has colons but no port.
            if host.contains(':') && !host.ends_with(']') {
                return vec![s.to_string()];
            }
            vec![host.to_string(), s[i..].to_string()]
        }
        _ => vec![s.to_string()],
    }
}

/// Characters (not bytes) of the longest line of `s`.
fn width(s: &str) -> usize {
    s.lines().map(|l| l.chars().count()).max().unwrap_or(0)
}

/// `s` in at most `w` characters, its middle replaced by `…` (`kube-system/cor…-krb2q`).
pub fn middle_ellipsis(s: &str, w: usize) -> String {
    let chars: Vec<char> = s.chars().collect();
    if chars.len() <= w {
        return s.to_string();
    }
    if w == 0 {
        return String::new();
    }
    let keep = w - 1;
    let tail = keep / 2;
    let head = keep - tail;
    let mut out: String = chars[..head].iter().collect();
    out.push('…');
    out.extend(&chars[chars.len() - tail..]);
    out
}

/// A path description in at most `w` characters: `dns via 10.244.1.2 (kube-system/coredns-x)`
/// reads `10.244.1.2 coredns-x`, ` from node-2` becomes `@node-2`, then the name after the
/// leading IP takes a middle ellipsis.
pub fn abbreviate_path(desc: &str, w: usize) -> String {
    let mut s = desc.strip_prefix("dns via ").unwrap_or(desc).to_string();
    for (long, short) in [
        ("ClusterIP ", "cip "),
        ("NodeLocal DNSCache ", "nodelocal "),
        (" from ", "@"),
    ] {
        s = s.replace(long, short);
    }
    // `(ns/name)` -> `name`.
    if let Some(open) = s.find(" (")
        && let Some(close) = s[open..].find(')').map(|c| c + open)
    {
        let inner = &s[open + 2..close];
        let name = inner.rsplit('/').next().unwrap_or(inner);
        s = format!("{} {name}{}", &s[..open], &s[close + 1..]);
    }
    if s.chars().count() <= w {
        return s;
    }
    // The lead is everything up to the first word that is an address (`cip 10.96.0.10`).
    let mut lead_end = None;
    let mut at = 0;
    for word in s.split(' ') {
        at += word.len();
        if word.starts_with(|c: char| c.is_ascii_digit() || c == '[') {
            lead_end = Some(at);
            break;
        }
        at += 1;
    }
    match lead_end.filter(|&e| e < s.len()) {
        Some(e) if s[..e].chars().count() + 2 < w => {
            let (lead, rest) = (&s[..e], &s[e + 1..]);
            let room = w - lead.chars().count() - 1;
            format!("{lead} {}", middle_ellipsis(rest, room))
        }
        _ => middle_ellipsis(&s, w),
    }
}

/// Whether a word may break after `head` (its characters so far): after a comma (`9003,`), or
/// after a hyphen that follows a letter (`terminating-`, not the `2026-` of a date).
fn break_after(head: &[char]) -> bool {
    match head {
        [.., ','] => true,
        [.., before, '-'] => before.is_alphabetic(),
        _ => false,
    }
}

/// The pieces of `word` between the places [`break_after`] allows.
fn breaks(word: &str) -> Vec<&str> {
    let mut pieces = Vec::new();
    let mut start = 0;
    let mut head: Vec<char> = Vec::new();
    for (i, c) in word.char_indices() {
        head.push(c);
        if break_after(&head) {
            let end = i + c.len_utf8();
            pieces.push(&word[start..end]);
            start = end;
        }
    }
    if start < word.len() || pieces.is_empty() {
        pieces.push(&word[start..]);
    }
    pieces
}

/// `text` broken into lines of at most `w` characters at spaces (words longer than a line
/// are cut), continuation lines indented by `indent` more than the first line's own indent.
pub fn wrap(text: &str, w: usize, indent: usize) -> Vec<String> {
    let w = w.max(1);
    if text.chars().count() <= w {
        return vec![text.to_string()];
    }
    let lead = text.chars().take_while(|c| *c == ' ').count();
    let cont = (lead + indent).min(w / 2);
    let mut lines = Vec::new();
    let mut line = " ".repeat(lead);
    let mut len = lead;
    let mut fresh = true;
    for word in text[lead..].split(' ') {
        let mut word: Vec<char> = word.chars().collect();
        loop {
            let sep = usize::from(!fresh);
            if len + sep + word.len() <= w {
                if sep == 1 {
                    line.push(' ');
                }
                line.extend(&word);
                len += sep + word.len();
                fresh = false;
                break;
            }
            if !fresh {
                lines.push(std::mem::take(&mut line));
                line = " ".repeat(cont);
                len = cont;
                fresh = true;
                continue;
            }
            // A word longer than a whole line: cut it, after a comma or a hyphen where one
            // fits.
            let room = w.saturating_sub(len).max(1).min(word.len());
            let cut = (1..=room)
                .rev()
                .find(|&i| break_after(&word[..i]))
                .unwrap_or(room);
            let rest = word.split_off(cut);
            line.extend(&word);
            lines.push(std::mem::take(&mut line));
            line = " ".repeat(cont);
            len = cont;
            word = rest;
            if word.is_empty() {
                break;
            }
        }
    }
    if !fresh || lines.is_empty() {
        lines.push(line);
    }
    lines.iter().map(|l| l.trim_end().to_string()).collect()
}

/// Writes a command's human output to stdout, every control character that is not one of its
/// own line breaks escaped ([`escape_controls_keep_newlines`]): names, log excerpts and Corefile
/// text come from outside the program, and a terminal would act on an `ESC [2J` in them. Every
/// table and text output goes through here; JSON does not need it.
pub fn print_text(text: &str) {
    write_stdout(escape_controls_keep_newlines(text).as_bytes());
}

/// Whether a write to stdout found its reader gone (EPIPE): the rest of the output is dropped
/// without a word, as `ghostip … | head` expects of a Unix tool.
static STDOUT_CLOSED: AtomicBool = AtomicBool::new(false);

/// The first write to stdout that failed for another reason (a full disk behind `> file`),
/// reported by `main` as an error (exit 2) once the command is done.
static STDOUT_FAILED: Mutex<Option<String>> = Mutex::new(None);

/// Writes `bytes` to stdout and flushes them. Never panics, unlike `println!`: a reader that
/// went away (EPIPE, `| head -c 100`) ends the output quietly, and any other failure is kept
/// for [`stdout_failure`], so that output lost to a full disk is not a silent success. Every
/// command's stdout goes through here (tables, text, JSON, JSON lines).
pub fn write_stdout(bytes: &[u8]) {
    use std::io::Write as _;
    if STDOUT_CLOSED.load(Ordering::Relaxed) {
        return;
    }
    let mut out = std::io::stdout().lock();
    let result = out.write_all(bytes).and_then(|()| out.flush());
    record_stdout_result(result);
}

/// Writes one line (the text and a newline) to stdout, as [`write_stdout`] does.
pub fn write_stdout_line(line: &str) {
    let mut bytes = Vec::with_capacity(line.len() + 1);
    bytes.extend_from_slice(line.as_bytes());
    bytes.push(b'\n');
    write_stdout(&bytes);
}

fn record_stdout_result(result: std::io::Result<()>) {
    let Err(e) = result else { return };
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        STDOUT_CLOSED.store(true, Ordering::Relaxed);
        return;
    }
    let mut failed = STDOUT_FAILED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if failed.is_none() {
        *failed = Some(e.to_string());
    }
}

/// The first failed write to stdout other than a closed pipe, if any (`main` turns it into
/// `ghostip: writing to stdout: <cause>` and exit 2).
pub fn stdout_failure() -> Option<String> {
    STDOUT_FAILED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone()
}

/// Writes a message to stderr; never panics, unlike `eprintln!`, when stderr is a pipe whose
/// reader went away (`ghostip … 2>&1 | head`).
pub fn write_stderr(text: &str) {
    use std::io::Write as _;
    let mut err = std::io::stderr().lock();
    let _ = err.write_all(text.as_bytes());
    let _ = err.flush();
}

/// Every line of `text` wrapped to the layout's width (unchanged with `-o wide`): the safety
/// net for prose around tables (headlines, notes, listings).
pub fn fit_text(text: &str, layout: &Layout) -> String {
    if layout.wide {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        for l in wrap(line, layout.width, 2) {
            out.push_str(&l);
            out.push('\n');
        }
    }
    out
}

/// A time relative to `t0`: `+12.3s`, `-0.4s`, `+2m05s`, `+3h07m`, `-2d04h`; `-` for none.
pub fn offset(t: Option<Time>, t0: Time) -> String {
    let Some(t) = t else {
        return "-".to_string();
    };
    let ms = t.as_millisecond() - t0.as_millisecond();
    let sign = if ms < 0 { '-' } else { '+' };
    let ms = ms.unsigned_abs();
    let mut s = String::new();
    if ms >= 86_400_000 {
        let _ = write!(
            s,
            "{sign}{}d{:02}h",
            ms / 86_400_000,
            ms % 86_400_000 / 3_600_000
        );
    } else if ms >= 3_600_000 {
        let _ = write!(
            s,
            "{sign}{}h{:02}m",
            ms / 3_600_000,
            ms % 3_600_000 / 60_000
        );
    } else if ms >= 60_000 {
        let _ = write!(s, "{sign}{}m{:02}s", ms / 60_000, ms % 60_000 / 1000);
    } else {
        let _ = write!(s, "{sign}{}.{}s", ms / 1000, ms % 1000 / 100);
    }
    s
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    fn longest(s: &str) -> usize {
        s.lines().map(|l| l.chars().count()).max().unwrap_or(0)
    }

    fn sample() -> Table {
        let mut t = Table::new();
        t.set_header(vec!["PATH", "IP", "POD", "WINDOW", "DETAIL"]);
        t.add_row(vec![
            "dns via 10.244.1.2 (kube-system/coredns-7db6d8ff4d-krb2q) from node-2",
            "10.244.3.71",
            "default/web-6c9f8d7b5-abcde",
            "12.30–13.10s",
            "the path answered with a removed endpoint long after the expected lag ran out",
        ]);
        t.add_row(vec!["dns via 127.0.0.1:5353", "fd00::1", "-", "-", ""]);
        t
    }

    #[test]
    fn width_comes_from_columns_then_the_terminal_then_80() {
        assert_eq!(Layout::from_sources(Some("120"), Some(200)).width, 120);
        assert_eq!(Layout::from_sources(Some("x"), Some(200)).width, 200);
        assert_eq!(Layout::from_sources(None, None).width, 80);
        assert_eq!(Layout::from_sources(Some("0"), None).width, 80);
        assert_eq!(Layout::from_sources(Some("3"), None).width, MIN_WIDTH);
        assert!(Layout::from_sources(Some("39"), None).plain());
        assert!(!Layout::from_sources(Some("40"), None).plain());
    }

    #[test]
    fn a_table_fits_80_columns_by_abbreviating_and_wrapping() {
        let out = sample().render(&Layout::fixed(80));
        assert!(longest(&out) <= 80, "{out}");
        assert!(out.starts_with("PATH"), "{out}");
        // The IP columns stay whole, the path keeps its IP, the detail wraps.
        assert!(out.contains("10.244.3.71"), "{out}");
        assert!(out.contains("10.244.1.2 "), "{out}");
        assert!(out.contains('…'), "{out}");
        assert!(out.lines().count() > 3, "{out}");
    }

    /// [`sample`] with its columns declared, fits as [`Fit::of`] guesses them.
    fn sample_typed() -> Table {
        let mut typed = Table::new();
        typed.set_columns(vec![
            Column::path("PATH"),
            Column::keep("IP"),
            Column::name("POD"),
            Column::wrap("WINDOW"),
            Column::wrap("DETAIL"),
        ]);
        for r in sample().rows {
            typed.add_row(r);
        }
        typed
    }

    #[test]
    fn declared_columns_lay_out_as_the_guessed_ones() {
        for w in [30, 60, 80, 100, 120, 200] {
            let layout = Layout::fixed(w);
            assert_eq!(
                sample_typed().render(&layout),
                sample().render(&layout),
                "{w}"
            );
        }
        assert_eq!(
            sample_typed().render(&Layout::WIDE),
            sample().render(&Layout::WIDE)
        );
    }

    #[test]
    fn a_column_is_shortened_as_declared_whatever_its_header() {
        let cell = "the path answered with a removed endpoint long after the lag";
        let table = |col: Column| {
            let mut t = Table::new();
            t.set_columns(vec![Column::keep("IP"), col]);
            t.add_row(vec!["10.244.3.71", cell]);
            t.render(&Layout::fixed(50))
        };
        // `POD` would be guessed a name (middle ellipsis); declared wrapped, it wraps.
        let wrapped = table(Column::wrap("POD"));
        assert!(!wrapped.contains('…'), "{wrapped}");
        assert!(wrapped.lines().count() > 2, "{wrapped}");
        assert!(
            wrapped.lines().all(|l| l.chars().count() <= 50),
            "{wrapped}"
        );
        // `DETAIL` would be guessed wrapped; declared a name, it loses its middle.
        let named = table(Column::name("DETAIL"));
        assert!(named.contains('…'), "{named}");
        assert_eq!(named.lines().count(), 2, "{named}");
        // Dropping a column keeps the others' fits.
        let mut t = Table::new();
        t.set_columns(vec![
            Column::keep("IP"),
            Column::wrap("X"),
            Column::name("Y"),
        ]);
        t.wide_only(&["X"]);
        t.add_row(vec!["10.244.3.71", "", cell]);
        let out = t.render(&Layout::fixed(40));
        assert!(out.contains('…'), "{out}");
    }

    #[test]
    fn wide_keeps_every_value_whole_on_one_line() {
        let out = sample().render(&Layout::WIDE);
        assert!(
            out.contains("dns via 10.244.1.2 (kube-system/coredns-7db6d8ff4d-krb2q) from node-2"),
            "{out}"
        );
        assert!(out.contains("long after the expected lag ran out"), "{out}");
        assert_eq!(out.lines().count(), 3, "{out}");
    }

    #[test]
    fn narrow_terminals_get_key_value_lists() {
        let out = sample().render(&Layout::fixed(30));
        assert!(longest(&out) <= 30, "{out}");
        assert!(out.starts_with("path: "), "{out}");
        assert!(out.contains("ip: 10.244.3.71"), "{out}");
        assert!(!out.contains("detail: \n"), "{out}");
    }

    #[test]
    fn columns_that_cannot_shrink_fall_back_to_lists() {
        let mut t = Table::new();
        t.set_header(vec!["IP", "SINCE", "WINDOW", "STATE", "TTL", "QUERIES"]);
        t.add_row(vec!["2001:db8:aaaa:bbbb:cccc:dddd:eeee:ffff"; 6]);
        let out = t.render(&Layout::fixed(80));
        assert!(longest(&out) <= 80, "{out}");
        assert!(out.starts_with("ip: "), "{out}");
    }

    #[test]
    fn comma_lists_wrap_after_a_comma() {
        assert_eq!(
            wrap("9003,9004,9006,9007,9009", 10, 0),
            vec!["9003,9004,", "9006,9007,", "9009"]
        );
        let mut t = Table::new();
        t.set_header(vec!["TARGET", "PORTS", "CLASS", "ERRORS"]);
        t.add_row(vec![
            "172.26.144.225",
            "9003,9004,9006,9007,9009",
            "stale-target",
            "5",
        ]);
        let out = t.render(&Layout::fixed(44));
        assert!(longest(&out) <= 44, "{out}");
        assert!(out.lines().nth(1).unwrap().contains("9003,"), "{out}");
    }

    #[test]
    fn targets_that_are_names_take_an_ellipsis_and_addresses_stay_whole() {
        let mut t = Table::new();
        t.set_header(vec!["TARGET", "DNS SERVER", "CLASS", "ERRORS", "KINDS"]);
        t.add_row(vec![
            "dns:7994225720195620561.3842098355147683469",
            "213.186.33.99:53",
            "dns-path",
            "6",
            "6 dns-timeout",
        ]);
        t.add_row(vec![
            "10.244.1.17:8080",
            "-",
            "stale",
            "31",
            "31 connection-refused",
        ]);
        let out = t.render(&Layout::fixed(70));
        assert!(longest(&out) <= 70, "{out}");
        assert!(!out.contains("target:"), "a table, not lists: {out}");
        assert!(out.contains("dns:"), "{out}");
        assert!(out.contains('…'), "{out}");
        assert!(out.contains("10.244.1.17"), "{out}");
        let wide = t.render(&Layout::WIDE);
        assert!(wide.contains("dns:7994225720195620561.3842098355147683469"));
    }

    #[test]
    fn addresses_break_before_the_port_and_wide_only_columns_hide() {
        assert_eq!(split_addr("10.244.1.2:8080"), vec!["10.244.1.2", ":8080"]);
        assert_eq!(split_addr("[fd00::1]:53"), vec!["[fd00::1]", ":53"]);
        assert_eq!(split_addr("fd00::1"), vec!["fd00::1"]);
        assert_eq!(split_addr("(3 backends)"), vec!["(3", "backends)"]);
        assert_eq!(
            split_addr("10.96.0.10:53,132.120.200.49:53"),
            vec!["10.96.0.10:53,", "132.120.200.49", ":53"]
        );
        assert_eq!(
            split_addr("10.96.0.2:443/TCP ClusterIP"),
            vec!["10.96.0.2", ":443/TCP", "ClusterIP"]
        );
        let mut t = Table::new();
        t.set_header(vec!["SOURCE", "DESTINATION", "DNAT TO", "TIMEOUT"]);
        t.wide_only(&["TIMEOUT"]);
        t.add_row(vec![
            "10.244.100.200:45678",
            "10.96.100.200:80",
            "10.244.100.201:8080",
            "117s",
        ]);
        let out = t.render(&Layout::fixed(50));
        assert!(longest(&out) <= 50, "{out}");
        let lines: Vec<&str> = out.lines().collect();
        assert!(lines[1].starts_with("10.244.100.200  "), "{out}");
        assert!(lines[2].starts_with(":45678"), "{out}");
        assert!(!out.contains("117s"), "{out}");
        let out = t.render(&Layout::WIDE);
        assert!(
            out.contains("10.244.100.200:45678  10.96.100.200:80  10.244.100.201:8080  117s"),
            "{out}"
        );
    }

    #[test]
    fn paths_abbreviate_around_their_ip() {
        let d = "dns via 10.244.1.2 (kube-system/coredns-7db6d8ff4d-krb2q)";
        assert_eq!(
            abbreviate_path(d, 80),
            "10.244.1.2 coredns-7db6d8ff4d-krb2q"
        );
        assert_eq!(abbreviate_path(d, 24), "10.244.1.2 coredn…-krb2q");
        assert_eq!(
            abbreviate_path("dns via ClusterIP fd00::a from node-2", 80),
            "cip fd00::a@node-2"
        );
        assert_eq!(
            abbreviate_path("dns via 10.0.0.1 (ns/pod) from node-2", 80),
            "10.0.0.1 pod@node-2"
        );
        assert!(abbreviate_path(d, 5).chars().count() <= 5);
        assert_eq!(
            abbreviate_path("dns via ClusterIP 10.96.0.10 (kube-system/kube-dns)", 20),
            "cip 10.96.0.10 ku…ns"
        );
    }

    #[test]
    fn middle_ellipsis_keeps_both_ends() {
        assert_eq!(middle_ellipsis("abcdefghij", 5), "ab…ij");
        assert_eq!(middle_ellipsis("abc", 5), "abc");
        assert_eq!(middle_ellipsis("abc", 0), "");
    }

    #[test]
    fn wrap_breaks_at_spaces_and_cuts_long_words() {
        assert_eq!(wrap("aaa bbb ccc", 7, 0), vec!["aaa bbb", "ccc"]);
        assert_eq!(wrap("abcdefghij", 4, 0), vec!["abcd", "efgh", "ij"]);
        assert_eq!(
            wrap("  key: a b c d", 8, 2),
            vec!["  key: a", "    b c", "    d"]
        );
        for w in 1..20 {
            for l in wrap("é ünïcödé wörds ønly, ånd a løngwørdthåtnevérends", w, 2) {
                assert!(l.chars().count() <= w, "{w}: {l:?}");
            }
        }
    }

    #[test]
    fn long_words_break_after_a_comma_or_a_hyphen_between_letters() {
        assert_eq!(
            wrap("terminating-target", 14, 0),
            ["terminating-", "target"]
        );
        assert_eq!(wrap("9003,9004,9005", 10, 0), ["9003,9004,", "9005"]);
        // A date keeps its hyphens: it is cut where the width ends, not at `2026-`.
        assert_eq!(wrap("2026-11-30", 8, 0), ["2026-11-", "30"]);
        assert_eq!(breaks("terminating-target"), ["terminating-", "target"]);
        assert_eq!(breaks("2026-11-30"), ["2026-11-30"]);
        assert_eq!(breaks("a,b"), ["a,", "b"]);
        assert_eq!(breaks(""), [""]);
    }

    #[test]
    fn a_column_marked_drop_to_fit_gives_way_before_the_table_becomes_lists() {
        let mut t = Table::new();
        t.set_header(vec!["TARGET", "CLASS", "ERRORS", "KINDS"]);
        t.drop_to_fit(&["ERRORS"]);
        t.add_row(vec!["10.244.1.4", "terminating-target", "17", "17 timeout"]);
        let fits = t.render(&Layout::fixed(80));
        assert!(
            fits.starts_with("TARGET") && fits.contains("ERRORS"),
            "{fits}"
        );
        // 10 + 12 + 6 + 7 and three gaps do not fit 40; without ERRORS they do.
        let narrow = t.render(&Layout::fixed(40));
        assert!(
            narrow.starts_with("TARGET") && !narrow.contains("ERRORS"),
            "{narrow}"
        );
        assert!(narrow.lines().any(|l| l.trim() == "target"), "{narrow}");
        assert!(narrow.lines().all(|l| l.chars().count() <= 40), "{narrow}");
    }

    proptest::proptest! {
        /// Whatever the cells and the width, no line is longer than the width.
        #[test]
        fn every_line_fits(
            header in proptest::sample::subsequence(
                vec!["PATH", "IP", "POD", "WINDOW", "DETAIL", "SOURCE", "STATE", "NOTES"],
                1..8,
            ),
            cells in proptest::collection::vec("[a-z0-9 ./:()…é-]{0,60}", 0..40),
            width in 0usize..160,
        ) {
            let mut t = Table::new();
            t.set_header(header.clone());
            for row in cells.chunks(header.len()) {
                t.add_row(row.to_vec());
            }
            let layout = Layout::fixed(width);
            let out = fit_text(&format!("{}\n{}", cells.join(" "), t.render(&layout)), &layout);
            proptest::prop_assert!(longest(&out) <= layout.width, "{}:\n{}", layout.width, out);
        }
    }

    #[test]
    fn offsets_are_relative_to_t0() {
        let t0: Time = "2026-01-02T15:04:05Z".parse().unwrap();
        let t: Time = "2026-01-02T15:04:17.345Z".parse().unwrap();
        assert_eq!(offset(Some(t), t0), "+12.3s");
        assert_eq!(offset(Some(t0), t), "-12.3s");
        let t: Time = "2026-01-02T15:06:10Z".parse().unwrap();
        assert_eq!(offset(Some(t), t0), "+2m05s");
        assert_eq!(offset(None, t0), "-");
        let t: Time = "2026-01-02T18:11:05Z".parse().unwrap();
        assert_eq!(offset(Some(t), t0), "+3h07m");
        let t: Time = "2025-12-31T11:00:00Z".parse().unwrap();
        assert_eq!(offset(Some(t), t0), "-2d04h");
    }
}
