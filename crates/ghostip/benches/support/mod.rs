//! What the benches that run the lab's programs share: where `lab/build` put them.

use std::path::PathBuf;
use std::process::Command;

/// The lab's binaries: `GHOSTIP_LAB_BIN`, else `$LAB_BIN` as `lab/lib.sh` sets it.
pub fn lab_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("GHOSTIP_LAB_BIN") {
        return p.into();
    }
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let out = Command::new("bash")
        .args(["-c", ". lab/lib.sh >/dev/null && printf %s \"$LAB_BIN\""])
        .current_dir(root)
        .output()
        .expect("bash");
    PathBuf::from(String::from_utf8(out.stdout).unwrap())
}
