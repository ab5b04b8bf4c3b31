//! `ghostip explain FILES…`: reads client logs, joins every connection failure with who owned its
//! target IP at that instant (ledger or truth-history file) and explains them per rollout.

use std::cell::Cell;
use std::fs::File;
use std::io::Read;
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use anyhow::{Context as _, bail};
use ghostip_analysis::explain::{Explainer, HistorySource, ReadError, TimeFilter};
use ghostip_core::Time;
use ghostip_logs::{
    ConnFailure, ScanError, ScanOptions, ScanStats, Scanner, is_gzip, open_reader_gz,
};
use jiff::tz::{Offset, TimeZone};

use super::{Outcome, print_json};
use crate::cli::{ExplainArgs, GlobalArgs, OutputFormat};
use crate::explain::{Positional, SEGMENT_BYTES, read_truth_history, scan_positional};
use crate::ledger::{Ledger, default_db_path, parse_at};
use crate::printer::sanitize::escape_controls;

pub(super) fn run(g: &GlobalArgs, args: ExplainArgs) -> anyhow::Result<Outcome> {
    let now = crate::clock::wall_now();
    let at = |flag: &str, v: &Option<String>| -> anyhow::Result<Option<Time>> {
        v.as_deref()
            .map(|s| parse_at(s, now).with_context(|| format!("reading {flag} {s}")))
            .transpose()
    };
    let filter = TimeFilter {
        since: at("--since", &args.since)?,
        until: at("--until", &args.until)?,
    };
    if let (Some(since), Some(until)) = (filter.since, filter.until)
        && since > until
    {
        bail!(
            "--since {} is later than --until {}: no failure can be in that window \
             (swap them, or leave one out)",
            escape_controls(args.since.as_deref().unwrap_or_default()),
            escape_controls(args.until.as_deref().unwrap_or_default()),
        );
    }
    let tz = args
        .tz
        .as_deref()
        .map(|s| parse_tz(s).with_context(|| format!("reading --tz {s}")))
        .transpose()?;
    let history = open_history(g, &args)?;
    let mut explainer = Explainer::new(history.as_deref(), filter);

    let inputs: Vec<PathBuf> = if args.files.is_empty() {
        vec![PathBuf::from("-")]
    } else {
        args.files.clone()
    };
    let threads = scan_threads(args.threads);
    let mut stats = ScanStats::default();
    let mut names = Vec::new();
    let mut read_errors = Vec::new();
    let mut shrank = Vec::new();
    for (index, path) in inputs.iter().enumerate() {
        let name = if path == Path::new("-") {
            "<stdin>".to_owned()
        } else {
            path.display().to_string()
        };
        let shown = escape_controls(&name).into_owned();
        explainer.start_input(index);
        // One scanner per input: line numbers and the inferred year are per file.
        let mut scanner = Scanner::new(ScanOptions {
            year: args.year,
            fallback_year: Some(now.to_zoned(TimeZone::UTC).year()),
            tz: tz.clone(),
            skip_binary_check: false,
            target: args.target,
        })
        .context("starting the log scanner")?;
        let sink = &mut |f: ConnFailure| explainer.add(&f);
        let read = if path == Path::new("-") {
            scan_stream(&mut scanner, std::io::stdin(), sink)
        } else {
            let file = File::open(path).with_context(|| format!("opening {shown}"))?;
            scan_file(&mut scanner, file, threads, sink).map(|short| {
                if let Some((len, read)) = short {
                    shrank.push(format!(
                        "{shown}: the file shrank while it was read ({len} bytes when opened, \
                         {read} read; rotated by copytruncate?): failures after byte {read} \
                         were not seen"
                    ));
                }
            })
        };
        // A read that fails part way keeps what was read before it: the report is printed,
        // then the error, and the command exits 2.
        if let Err(e) = read {
            read_errors.push(ReadError {
                input: name.clone(),
                offset: scanner.stats().bytes,
                compressed_offset: e.compressed_offset,
                error: e.cause,
            });
        }
        stats.merge(scanner.stats());
        names.push(name);
    }
    let mut explanation = explainer
        .finish(names, stats)
        .context("joining failures with the history")?;
    explanation.only_target = args.target.map(|t| t.to_string());
    explanation.read_errors = read_errors;
    explanation.warnings.extend(shrank);
    for w in &explanation.warnings {
        eprintln!("warning: {}", escape_controls(w));
    }
    match g.output {
        OutputFormat::Sarif => anyhow::bail!("-o sarif is only written by `ghostip audit`"),
        OutputFormat::Json => print_json(&explanation)?,
        OutputFormat::Table | OutputFormat::Wide => {
            crate::printer::print_text(&crate::printer::explain::explanation_table(
                &explanation,
                &g.output.layout(),
            ));
        }
    }
    if let Some(e) = explanation.read_errors.first() {
        let more = match explanation.read_errors.len() {
            1 => String::new(),
            n => format!(" (and {} more input(s), see the report)", n - 1),
        };
        bail!("reading {}{more}", escape_controls(&e.to_string()));
    }
    Ok(if explanation.is_finding() {
        Outcome::Finding
    } else {
        Outcome::Clean
    })
}

/// A read that failed part way.
struct ReadFailure {
    /// What failed (the innermost cause).
    cause: String,
    /// For gzip: the bytes of the compressed input read before it.
    compressed_offset: Option<u64>,
}

impl From<ScanError> for ReadFailure {
    fn from(e: ScanError) -> ReadFailure {
        let cause = match e {
            ScanError::Io(io) => io.to_string(),
            other => other.to_string(),
        };
        ReadFailure {
            cause,
            compressed_offset: None,
        }
    }
}

impl From<std::io::Error> for ReadFailure {
    fn from(e: std::io::Error) -> ReadFailure {
        ReadFailure {
            cause: e.to_string(),
            compressed_offset: None,
        }
    }
}

/// A reader that counts the bytes read through it (the compressed offset of a gzip input).
struct Counting<R> {
    inner: R,
    read: Rc<Cell<u64>>,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read.set(self.read.get() + n as u64);
        Ok(n)
    }
}

/// Scans a stream (stdin, a pipe, a gzip file) to its end or its first read error.
fn scan_stream<R: Read + 'static>(
    scanner: &mut Scanner,
    input: R,
    sink: &mut dyn FnMut(ConnFailure),
) -> Result<(), ReadFailure> {
    let read = Rc::new(Cell::new(0));
    let counting = Counting {
        inner: input,
        read: Rc::clone(&read),
    };
    let mut gzip = false;
    let result = open_reader_gz(counting)
        .map_err(ReadFailure::from)
        .and_then(|(reader, is_gz)| {
            gzip = is_gz;
            scanner.scan(reader, sink).map_err(ReadFailure::from)
        });
    result.map_err(|e| ReadFailure {
        compressed_offset: gzip.then(|| read.get()),
        ..e
    })
}

/// Scans one opened file: a regular, uncompressed file with positional reads on `threads`
/// threads (also for one thread: the stream's `BufReader`, there to sniff the gzip magic, would
/// copy every byte a second time), else as a stream (counting the compressed bytes of gzip).
/// `Some((length when opened, bytes read))` when the file shrank while it was read.
fn scan_file(
    scanner: &mut Scanner,
    file: File,
    threads: NonZeroUsize,
    sink: &mut dyn FnMut(ConnFailure),
) -> Result<Option<(u64, u64)>, ReadFailure> {
    let Some(len) = positional_len(&file)? else {
        return scan_stream(scanner, file, sink).map(|()| None);
    };
    let scan = scan_positional(scanner, &file, len, threads, SEGMENT_BYTES, sink)?;
    Ok(scan.shrank().then_some((scan.len, scan.read)))
}

/// `--threads`, else the available cores, at most 8.
fn scan_threads(flag: Option<u16>) -> NonZeroUsize {
    let n = match flag {
        Some(n) => usize::from(n),
        None => std::thread::available_parallelism()
            .map_or(1, NonZeroUsize::get)
            .min(8),
    };
    NonZeroUsize::new(n).unwrap_or(NonZeroUsize::MIN)
}

/// The length to scan `file` with positional reads (on one thread or more): `None` (read it
/// as a stream) for anything but a regular file (a pipe, a FIFO, a device) and for gzip.
fn positional_len(file: &File) -> std::io::Result<Option<u64>> {
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Ok(None);
    }
    let mut head = [0u8; 2];
    let mut n = 0;
    while n < head.len() {
        match Positional::read_at(file, &mut head[n..], n as u64) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok((!is_gzip(&head[..n])).then_some(meta.len()))
}

/// The history to join with: `--truth-history`, else the ledger at `--db` or the default path,
/// opened read-only; a missing ledger is reported and the run continues without it.
fn open_history(
    g: &GlobalArgs,
    args: &ExplainArgs,
) -> anyhow::Result<Option<Box<dyn HistorySource>>> {
    if let Some(file) = &args.truth_history {
        let h =
            read_truth_history(file, args.max_input_size).context("reading the truth history")?;
        return Ok(Some(Box::new(h)));
    }
    let path = match &g.db {
        Some(p) => p.clone(),
        None => match default_db_path() {
            Ok(p) => p,
            Err(_) => {
                eprintln!(
                    "warning: no ledger path (GHOSTIP_DB, HOME unset); classifying by error kind only"
                );
                return Ok(None);
            }
        },
    };
    if !path.exists() {
        eprintln!(
            "warning: no ledger at {}; classifying by error kind only (pass --db PATH or --truth-history FILE)",
            escape_controls(&path.display().to_string())
        );
        return Ok(None);
    }
    let ledger = Ledger::open_read_only(&path).context("opening the history database")?;
    Ok(Some(Box::new(ledger)))
}

/// `UTC`, `Z`, `+02:00`, `-0530`, or an IANA name.
fn parse_tz(s: &str) -> anyhow::Result<TimeZone> {
    let s = s.trim();
    if s.eq_ignore_ascii_case("utc") || s == "Z" {
        return Ok(TimeZone::UTC);
    }
    if let Some(sign) = s.chars().next().filter(|c| *c == '+' || *c == '-') {
        let digits: String = s[1..].chars().filter(|c| *c != ':').collect();
        if digits.len() != 4 || !digits.bytes().all(|b| b.is_ascii_digit()) {
            bail!("`{s}` is not an offset like +02:00");
        }
        let h: i32 = digits[..2].parse().context("hours")?;
        let m: i32 = digits[2..].parse().context("minutes")?;
        let secs = (h * 3600 + m * 60) * if sign == '-' { -1 } else { 1 };
        let off = Offset::from_seconds(secs).context("offset out of range")?;
        return Ok(TimeZone::fixed(off));
    }
    TimeZone::get(s).with_context(|| {
        format!("`{s}` is not a time zone (use UTC, an offset like +02:00, or a name like Europe/Berlin)")
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn zones() {
        assert_eq!(parse_tz("UTC").unwrap(), TimeZone::UTC);
        assert_eq!(
            parse_tz("+02:00").unwrap(),
            TimeZone::fixed(Offset::from_seconds(7200).unwrap())
        );
        assert_eq!(
            parse_tz("-0530").unwrap(),
            TimeZone::fixed(Offset::from_seconds(-19800).unwrap())
        );
        assert!(parse_tz("+2").is_err());
        assert!(parse_tz("Nowhere/Special").is_err());
    }
}
