//! Where the ledger lives by default.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use super::error::LedgerError;

/// The system-wide ledger used when running as root.
pub const ROOT_DB_PATH: &str = "/var/lib/ghostip/ghostip.db";

/// The default ledger path, from the process environment. See [`default_db_path_from`].
pub fn default_db_path() -> Result<PathBuf, LedgerError> {
    default_db_path_from(|k| std::env::var_os(k), running_as_root())
}

/// The default ledger path, in this order:
///
/// 1. `$GHOSTIP_DB` when set and not empty;
/// 2. [`ROOT_DB_PATH`] (`/var/lib/ghostip/ghostip.db`) when running as root;
/// 3. `$XDG_STATE_HOME/ghostip/ghostip.db` when `XDG_STATE_HOME` is an absolute path;
/// 4. `$HOME/.local/state/ghostip/ghostip.db`.
///
/// # Errors
/// [`LedgerError::NoDefaultPath`] when none applies.
pub fn default_db_path_from(
    env: impl Fn(&str) -> Option<OsString>,
    is_root: bool,
) -> Result<PathBuf, LedgerError> {
    let var = |k: &str| env(k).filter(|v| !v.is_empty());
    if let Some(p) = var("GHOSTIP_DB") {
        return Ok(PathBuf::from(p));
    }
    if is_root {
        return Ok(PathBuf::from(ROOT_DB_PATH));
    }
    // The XDG spec says relative values are invalid and must be ignored.
    if let Some(state) = var("XDG_STATE_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
    {
        return Ok(state.join("ghostip").join("ghostip.db"));
    }
    if let Some(home) = var("HOME") {
        return Ok(Path::new(&home).join(".local/state/ghostip/ghostip.db"));
    }
    Err(LedgerError::NoDefaultPath)
}

/// Whether the effective user is root, from `/proc/self/status` (false where unreadable).
fn running_as_root() -> bool {
    let Ok(status) = std::fs::read_to_string("/proc/self/status") else {
        return false;
    };
    status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().nth(1))
        .is_some_and(|euid| euid == "0")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use std::collections::HashMap;

    use super::*;

    fn path(vars: &[(&str, &str)], root: bool) -> Result<PathBuf, LedgerError> {
        let map: HashMap<String, OsString> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), OsString::from(v)))
            .collect();
        default_db_path_from(|k| map.get(k).cloned(), root)
    }

    #[test]
    fn ghostip_db_wins() {
        let p = path(&[("GHOSTIP_DB", "/tmp/x.db"), ("HOME", "/home/a")], true).unwrap();
        assert_eq!(p, PathBuf::from("/tmp/x.db"));
    }

    #[test]
    fn root_uses_var_lib() {
        let p = path(&[("HOME", "/root"), ("XDG_STATE_HOME", "/s")], true).unwrap();
        assert_eq!(p, PathBuf::from("/var/lib/ghostip/ghostip.db"));
    }

    #[test]
    fn user_uses_xdg_state_home_then_home() {
        let p = path(
            &[("HOME", "/home/a"), ("XDG_STATE_HOME", "/home/a/st")],
            false,
        )
        .unwrap();
        assert_eq!(p, PathBuf::from("/home/a/st/ghostip/ghostip.db"));
        let p = path(
            &[("HOME", "/home/a"), ("XDG_STATE_HOME", "relative")],
            false,
        )
        .unwrap();
        assert_eq!(p, PathBuf::from("/home/a/.local/state/ghostip/ghostip.db"));
        let p = path(&[("HOME", "/home/a"), ("GHOSTIP_DB", "")], false).unwrap();
        assert_eq!(p, PathBuf::from("/home/a/.local/state/ghostip/ghostip.db"));
    }

    #[test]
    fn nothing_set_is_an_error() {
        assert!(matches!(path(&[], false), Err(LedgerError::NoDefaultPath)));
    }
}
