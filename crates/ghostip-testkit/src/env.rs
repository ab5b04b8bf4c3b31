//! What a test does when what it needs lives outside the repository and is absent (the shared fixtures beside the clone, the lab cluster, root and network namespaces): skip with a message locally, fail under CI.
//!
//! CI is recognised by the `CI` environment variable (set, and not `0` or `false`), which
//! `.ci/run` sets: there a missing fixtures folder or lab is a broken setup, not a reason to
//! pass.

/// Whether the tests run under CI.
pub fn under_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "0" && v != "false")
}

/// Reports that a test cannot run because `why` (e.g. "no fixtures at ../shared/fixtures"):
/// prints `skipped: {why}` and returns, so the caller returns early; under CI it fails.
///
/// # Panics
/// Under CI, always.
#[allow(clippy::panic)]
pub fn skip(why: &str) {
    if under_ci() {
        panic!("{why}: required under CI (CI is set)");
    }
    eprintln!("skipped: {why}");
}
