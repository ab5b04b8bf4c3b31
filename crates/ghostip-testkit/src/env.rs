//! What a test does when what it needs lives outside the repository (the fixture corpus beside the clone, the lab cluster, root and network namespaces): it fails, naming what is missing.
//!
//! Such tests carry `#[ignore = "needs …"]`, so a plain `cargo test` does not run them;
//! they run only when asked for with `--ignored` (scripts/test does, per group), and there
//! an absent environment is a broken setup: the test fails with a message saying what is
//! missing and how to provide it. It never passes or skips silently.

use std::path::PathBuf;

/// The environment variable that points the corpus tests at another fixtures folder.
pub const FIXTURES_ENV: &str = "GHOSTIP_FIXTURES";

/// Fails the running test because `why` (e.g. "no fixtures at ../shared/fixtures").
///
/// # Panics
/// Always: the caller is an ignored test that was asked for, and cannot run.
#[allow(clippy::panic)]
pub fn missing(why: &str) -> ! {
    panic!(
        "{why}\n(this test is #[ignore]d because it needs that; run with --ignored, it fails without it)"
    );
}

/// The fixture corpus folder: `$GHOSTIP_FIXTURES`, else `shared/fixtures` beside the clone
/// (`../shared/fixtures` from the repository root).
pub fn fixtures_root() -> PathBuf {
    match std::env::var_os(FIXTURES_ENV) {
        Some(dir) => PathBuf::from(dir),
        // Every crate lives at crates/<name>, this one too: ../../.. is beside the clone.
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/fixtures"),
    }
}

/// The folder `sub` of the fixture corpus (e.g. `"client-errors"`, or `""` for the root).
///
/// # Panics
/// When that folder does not exist, with a message naming it and [`FIXTURES_ENV`].
pub fn fixtures(sub: &str) -> PathBuf {
    let root = fixtures_root();
    let dir = if sub.is_empty() {
        root.clone()
    } else {
        root.join(sub)
    };
    if !dir.is_dir() {
        missing(&format!(
            "the fixture corpus folder {} is absent (the corpus lives in shared/fixtures beside \
             the clone; set {FIXTURES_ENV} to the fixtures folder elsewhere)",
            dir.display()
        ));
    }
    dir
}

/// Fails the running test unless real kernel state was asked for (`GHOSTIP_NETNS_TESTS=1`)
/// and the test runs as root; `what` names what root is needed for (e.g. "network
/// namespaces, nft, conntrack").
///
/// # Panics
/// When `GHOSTIP_NETNS_TESTS` is not set, `id -u` cannot run, or the user is not root.
pub fn require_netns(what: &str) {
    if std::env::var_os("GHOSTIP_NETNS_TESTS").is_none() {
        missing(
            "GHOSTIP_NETNS_TESTS is not set: these tests change real kernel state in network \
             namespaces and need root and GHOSTIP_NETNS_TESTS=1 (scripts/test runs them)",
        );
    }
    let uid = match std::process::Command::new("id").arg("-u").output() {
        Ok(out) => String::from_utf8_lossy(&out.stdout).trim().to_owned(),
        Err(e) => missing(&format!("`id -u` cannot run: {e}")),
    };
    assert_eq!(uid, "0", "GHOSTIP_NETNS_TESTS=1 needs root ({what})");
}
