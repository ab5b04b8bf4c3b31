//! How ghostip is installed and called: `--version`, the shell completion scripts, and the
//! kubectl plugin name (`kubectl-ghostip`, a symlink to the binary) through the real binary.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use clap::CommandFactory;
use ghostip::cli::{Cli, KUBECTL_PLUGIN};

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_ghostip"))
}

fn run(program: &Path, args: &[&str]) -> Output {
    Command::new(program)
        .args(args)
        .env_remove("KUBECONFIG")
        .env_remove("GHOSTIP_DB")
        .env("HOME", "/nonexistent-home")
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", program.display()))
}

fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).unwrap()
}

/// The names of every subcommand, as the CLI defines them.
fn subcommands() -> Vec<String> {
    let names: Vec<String> = Cli::command()
        .get_subcommands()
        .map(|c| c.get_name().to_string())
        .collect();
    assert!(names.len() >= 9, "{names:?}");
    names
}

/// A symlink named `kubectl-ghostip` to the built binary, as the install instructions make it.
fn plugin_link(dir: &Path) -> PathBuf {
    let link = dir.join(KUBECTL_PLUGIN);
    std::os::unix::fs::symlink(bin(), &link).unwrap();
    link
}

#[test]
fn version_names_the_package_version() {
    let want = format!("ghostip {}\n", env!("CARGO_PKG_VERSION"));
    let o = run(bin(), &["--version"]);
    assert!(o.status.success(), "{o:?}");
    assert_eq!(stdout(&o), want);
    // Every subcommand answers --version too (clap names it `ghostip-whois`).
    let o = run(bin(), &["whois", "--version"]);
    assert!(o.status.success(), "{o:?}");
    assert_eq!(
        stdout(&o),
        format!("ghostip-whois {}\n", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn completion_scripts_name_every_subcommand() {
    for shell in ["bash", "zsh", "fish"] {
        let o = run(bin(), &["completions", shell]);
        assert!(o.status.success(), "{shell}: {o:?}");
        let script = stdout(&o);
        assert!(script.len() > 1000, "{shell}: {} bytes", script.len());
        for sub in subcommands() {
            assert!(script.contains(&sub), "{shell}: no {sub} in the script");
        }
        // Flags of subcommands are completed too.
        assert!(script.contains("node-name"), "{shell}: agent's --node-name");
    }
    // Each shell gets its own syntax.
    let bash = stdout(&run(bin(), &["completions", "bash"]));
    let zsh = stdout(&run(bin(), &["completions", "zsh"]));
    let fish = stdout(&run(bin(), &["completions", "fish"]));
    assert!(bash.contains("complete -F _ghostip"), "bash");
    assert!(zsh.starts_with("#compdef ghostip"), "zsh");
    assert!(fish.contains("complete -c ghostip"), "fish");
    let o = run(bin(), &["completions", "tcsh"]);
    assert_eq!(
        o.status.code(),
        Some(2),
        "an unknown shell is a usage error"
    );
}

#[test]
fn kubectl_plugin_symlink_behaves_as_ghostip() {
    let dir = tempfile::tempdir().unwrap();
    let plugin = plugin_link(dir.path());

    // The same version, and usage naming the plugin the way kubectl users type it.
    assert_eq!(
        stdout(&run(&plugin, &["--version"])),
        stdout(&run(bin(), &["--version"]))
    );
    let help = stdout(&run(&plugin, &["whois", "--help"]));
    assert!(
        help.contains("Usage: kubectl ghostip whois"),
        "plugin usage:\n{help}"
    );
    assert!(stdout(&run(bin(), &["whois", "--help"])).contains("Usage: ghostip whois"));
    let bad = run(&plugin, &["no-such-command"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("kubectl ghostip"));

    // A real command gives the same output and exit code through either name.
    let dump = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../ghostip-datapath/tests/data/iptables-save_gen-12svc-40ep_iptables-1.8.9-nft.txt");
    let dump = dump.to_str().unwrap();
    let args = ["-o", "json", "datapath", "show", "--from-file", dump];
    let (direct, through) = (run(bin(), &args), run(&plugin, &args));
    assert!(direct.status.success(), "{direct:?}");
    assert_eq!(through.status.code(), direct.status.code());
    assert!(stdout(&direct).contains("10.96.0.1"));
    assert_eq!(stdout(&through), stdout(&direct));
}

#[test]
fn only_the_plugin_file_name_switches_the_usage_name() {
    let usage = |argv0: &str| {
        let err = Cli::try_parse_invoked([argv0, "--help"]).unwrap_err();
        err.to_string()
    };
    assert!(usage("/usr/local/bin/kubectl-ghostip").contains("Usage: kubectl ghostip"));
    assert!(usage("kubectl-ghostip.exe").contains("Usage: kubectl ghostip"));
    assert!(usage("/usr/local/bin/ghostip").contains("Usage: ghostip"));
    assert!(!usage("/opt/kubectl-ghostip-old").contains("kubectl ghostip"));
    // Parsing itself is the same.
    let cli = Cli::try_parse_invoked(["kubectl-ghostip", "whois", "10.0.0.1"]).unwrap();
    assert!(matches!(cli.command, ghostip::cli::Command::Whois(_)));
}
