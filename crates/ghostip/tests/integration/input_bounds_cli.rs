//! Input bounds and edge inputs through the binary: `--max-input-size` on datapath dumps (a
//! file, a stream), `--truth` and `audit -f` (a file, standard input, `/dev/zero`); an empty
//! conntrack dump; `audit -R` over symlink loops; the audit listing at narrow widths.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::io::Write as _;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::common::{audit_case, ghostip_wide, spawn_piped, stderr_of};

/// A file one byte past the default bound (512 MiB), sparse: refused from its size, before a
/// byte is read.
fn sparse_past_default(dir: &Path, name: &str) -> PathBuf {
    let p = dir.join(name);
    let f = std::fs::File::create(&p).unwrap();
    f.set_len(512 * 1024 * 1024 + 1).unwrap();
    p
}

fn truth_file(dir: &Path) -> PathBuf {
    let truth = json!({"kind": "List", "items": [
        {"kind": "Service", "metadata": {"namespace": "prod", "name": "stock"},
         "spec": {"clusterIP": "10.96.5.5", "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}},
    ]});
    let p = dir.join("truth.json");
    std::fs::write(&p, truth.to_string()).unwrap();
    p
}

/// Feeds an endless stream (bounded here at 64 MiB so the test ends either way) into
/// `ghostip ARGS` on standard input; returns the output and how many bytes went in before
/// the command stopped reading.
fn feed_endless(args: &[&str], byte: u8) -> (std::process::Output, u64) {
    let mut child = spawn_piped(args);
    let mut stdin = child.stdin.take().unwrap();
    let chunk = vec![byte; 64 * 1024];
    let mut written = 0u64;
    for _ in 0..1024 {
        if stdin.write_all(&chunk).is_err() {
            break;
        }
        written += chunk.len() as u64;
    }
    drop(stdin);
    (child.wait_with_output().unwrap(), written)
}

/// Every dump format, from a stream and from a file, stops at `--max-input-size` with an
/// error naming the input and the bound; a stream is read no further than the bound (plus
/// the pipe's and the reader's buffers), whether the format is streamed (iptables) or read
/// whole (Cilium JSON).
#[test]
fn a_dump_past_the_bound_is_refused_and_read_no_further() {
    for (format, byte) in [("iptables", b'\n'), ("cilium-service-json", b' ')] {
        let (out, written) = feed_endless(
            &[
                "datapath",
                "show",
                "--format",
                format,
                "--max-input-size",
                "4Mi",
                "--from-file",
                "-",
            ],
            byte,
        );
        assert_eq!(out.status.code(), Some(2), "{format}: {}", stderr_of(&out));
        assert!(
            stderr_of(&out).contains("reading standard input: larger than 4 MiB (--max-input-size"),
            "{format}: {}",
            stderr_of(&out)
        );
        assert!(
            written < 12 * 1024 * 1024,
            "{format}: {written} bytes went in"
        );
    }
    // The default bound, from a file's size.
    let dir = tempfile::tempdir().unwrap();
    let big = sparse_past_default(dir.path(), "big.json");
    let out = ghostip_wide()
        .args(["datapath", "show", "--format", "nft-json", "--from-file"])
        .arg(&big)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr_of(&out));
    assert!(
        stderr_of(&out).contains(&format!("reading {}: larger than 512 MiB", big.display())),
        "{}",
        stderr_of(&out)
    );
    // Exactly at the bound is read.
    let exact = dir.path().join("exact.txt");
    std::fs::write(&exact, "*nat\nCOMMIT\n").unwrap();
    ghostip_wide()
        .args([
            "datapath",
            "show",
            "--format",
            "iptables",
            "--max-input-size",
            "12",
        ])
        .arg("--from-file")
        .arg(&exact)
        .assert()
        .code(0);
}

/// `--truth` past the bound: a sparse file at the default, `/dev/zero` at a small one.
#[test]
fn a_truth_past_the_bound_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let dump = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../ghostip-datapath/tests/data/conntrack-L.txt");
    let big = sparse_past_default(dir.path(), "truth.json");
    for (truth, extra, bound) in [
        (big.clone(), vec![], "512 MiB"),
        (
            PathBuf::from("/dev/zero"),
            vec!["--max-input-size", "1Mi"],
            "1 MiB",
        ),
    ] {
        let out = ghostip_wide()
            .args(["datapath", "diff", "--from-file"])
            .arg(&dump)
            .arg("--truth")
            .arg(&truth)
            .args(&extra)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{}", stderr_of(&out));
        assert!(
            stderr_of(&out).contains(&format!(
                "reading the truth file {}: larger than {bound}",
                truth.display()
            )),
            "{}",
            stderr_of(&out)
        );
    }
}

/// An empty `conntrack -L` output judges nothing: exit 2 with why, not a clean report.
#[test]
fn an_empty_conntrack_dump_is_an_error_not_clean() {
    let dir = tempfile::tempdir().unwrap();
    let truth = truth_file(dir.path());
    for text in [
        "",
        "conntrack v1.4.7 (conntrack-tools): 0 flow entries have been shown.\n",
    ] {
        let dump = dir.path().join("ct.txt");
        std::fs::write(&dump, text).unwrap();
        let out = ghostip_wide()
            .args(["datapath", "diff", "--format", "conntrack", "--from-file"])
            .arg(&dump)
            .arg("--truth")
            .arg(&truth)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{text:?}: {}", stderr_of(&out));
        assert!(
            stderr_of(&out).contains("no conntrack entries read"),
            "{}",
            stderr_of(&out)
        );
        assert!(out.stdout.is_empty(), "{:?}", out.stdout);
    }
}

/// `audit -f` past the bound: standard input (an endless stream) and a file; the other
/// inputs are still audited.
#[test]
fn audit_inputs_past_the_bound_are_unread_inputs() {
    let (out, written) = feed_endless(&["audit", "--max-input-size", "2Mi", "-f", "-"], b'#');
    assert_eq!(out.status.code(), Some(2), "{}", stderr_of(&out));
    assert!(
        stderr_of(&out).contains("<stdin>: cannot read: larger than 2 MiB"),
        "{}",
        stderr_of(&out)
    );
    assert!(written < 8 * 1024 * 1024, "{written} bytes went in");
    let dir = tempfile::tempdir().unwrap();
    let big = sparse_past_default(dir.path(), "big.yaml");
    let out = ghostip_wide()
        .args(["audit", "-f"])
        .arg(&big)
        .arg("-f")
        .arg(audit_case("GIP-TERM-001-pos.yaml"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr_of(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("GIP-TERM-001"));
    assert!(
        stderr_of(&out).contains(&format!(
            "{}: cannot read: larger than 512 MiB",
            big.display()
        )),
        "{}",
        stderr_of(&out)
    );
}

/// `audit -R` over a directory holding `self -> .` and a deeper loop `a/b/up -> ../..`: each
/// object is read once, each loop is a note on stderr, and the audit's result is the one of
/// the directory without the links.
#[test]
fn audit_follows_no_symlink_loop_and_reads_each_file_once() {
    use std::os::unix::fs::symlink;
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(
        audit_case("GIP-TERM-001-pos.yaml"),
        dir.path().join("app.yaml"),
    )
    .unwrap();
    let json_of = |dir: &Path| {
        let out = ghostip_wide()
            .args(["audit", "-R", "-o", "json", "-f"])
            .arg(dir)
            .output()
            .unwrap();
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        (out, v)
    };
    let (plain_out, plain) = json_of(dir.path());
    assert_eq!(
        plain_out.status.code(),
        Some(1),
        "{}",
        stderr_of(&plain_out)
    );
    symlink(".", dir.path().join("self")).unwrap();
    std::fs::create_dir_all(dir.path().join("a/b")).unwrap();
    symlink("../..", dir.path().join("a/b/up")).unwrap();
    // A second link to the file itself.
    symlink("app.yaml", dir.path().join("link.yaml")).unwrap();
    let (out, looped) = json_of(dir.path());
    assert_eq!(out.status.code(), Some(1), "{}", stderr_of(&out));
    assert_eq!(looped["findings"], plain["findings"]);
    assert_eq!(looped["services"], plain["services"]);
    assert_eq!(looped["inputs"]["files"], json!(1), "{}", looped["inputs"]);
    let err = stderr_of(&out);
    for link in ["self", "a/b/up", "link.yaml"] {
        let shown = dir.path().join(link).display().to_string();
        assert!(
            err.lines()
                .any(|l| l.starts_with(&format!("ghostip: note: {shown}: the "))
                    && l.contains("not read twice")),
            "{link}: {err}"
        );
    }
}

/// Below 40 columns the audit listing is a `key: value` list per finding, and no word of it
/// is cut in the middle: every word is one the wide listing has (a path or a list broken
/// only after a `/`, `,` or `-`), or a key.
#[test]
fn the_audit_listing_at_narrow_widths_never_cuts_a_word() {
    let run = |columns: &str| {
        let out = ghostip_wide()
            .env("COLUMNS", columns)
            .args(["audit", "-f"])
            .arg(audit_case("GIP-DNS-001-pos.yaml"))
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{}", stderr_of(&out));
        String::from_utf8(out.stdout).unwrap()
    };
    let wide = run("1000");
    // Whole words of the wide listing (which puts where an object was read in
    // parentheses), and the parts a path or a list may be broken into: runs of the pieces
    // that end after a `/`, `,` or `-`.
    let mut words = std::collections::BTreeSet::new();
    for w in wide
        .split_whitespace()
        .flat_map(|w| [w, w.trim_start_matches('(').trim_end_matches(')')])
    {
        let ends: Vec<usize> = std::iter::once(0)
            .chain(w.match_indices(['/', ',', '-']).map(|(i, _)| i + 1))
            .chain(std::iter::once(w.len()))
            .collect();
        for (a, from) in ends.iter().enumerate() {
            for to in &ends[a + 1..] {
                words.insert(w[*from..*to].to_string());
            }
        }
    }
    let keys = [
        "object:",
        "read",
        "from:",
        "severity:",
        "rule:",
        "message:",
        "service:",
        "caveat:",
        "fix:",
        "budget:",
        "pods:",
        "not",
    ];
    for columns in [10usize, 20, 25, 39] {
        let narrow = run(&columns.to_string());
        // Keys as the other tables' plain layout writes them.
        let rule = if columns >= 17 {
            "rule: GIP-DNS-001"
        } else {
            "rule:\n"
        };
        assert!(narrow.contains(rule), "{columns}: {narrow}");
        for w in narrow.split_whitespace() {
            assert!(
                words.contains(w) || keys.contains(&w),
                "{columns} columns: `{w}` is not a whole word of the listing:\n{narrow}"
            );
        }
        for line in narrow.lines() {
            assert!(
                line.chars().count() <= columns || !line.trim().contains(' '),
                "{columns} columns: {line:?}"
            );
        }
    }
}
