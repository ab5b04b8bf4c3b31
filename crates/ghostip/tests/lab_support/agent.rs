//! A `ghostip agent` the lab tests run in a node's network namespace: started, its JSON lines
//! waited for, its HTTP endpoints read, stopped.

use std::fs::File;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::{KillOnDrop, lab, run};

/// How an [`Agent`] is started: where it listens, what runs before it, its extra flags.
#[derive(Clone, Copy)]
pub struct AgentOptions<'a> {
    /// The address it listens on in the node (`127.0.0.1`, or the node's address, where it
    /// asks callers for a bearer token).
    pub host: &'a str,
    /// The port it listens on; also names its files, so two agents on one node differ.
    pub port: u16,
    /// Runs before the binary (e.g. `setpriv …`).
    pub wrapper: &'a [&'a str],
    /// Agent flags after the common ones.
    pub extra: &'a [&'a str],
}

impl Default for AgentOptions<'_> {
    fn default() -> Self {
        AgentOptions {
            host: "127.0.0.1",
            port: 9754,
            wrapper: &[],
            extra: &[],
        }
    }
}

/// A [`AgentOptions::wrapper`] that starts the agent without CAP_NET_ADMIN and CAP_NET_RAW
/// (dropped from the bounding and inheritable sets of the root agent with setpriv).
pub const WITHOUT_NET_ADMIN: &[&str] = &[
    "setpriv",
    "--bounding-set=-net_admin,-net_raw",
    "--inh-caps=-net_admin,-net_raw",
];

/// A node's address in the lab (`lab/lib.sh`'s `node_ip`).
pub fn node_ip(node: &str) -> String {
    let n: u8 = node.trim_start_matches("node-").parse().unwrap();
    format!("10.200.0.{}", 10 + n)
}

/// One agent in a node's namespace, its JSON lines going to `NODE-PORT.jsonl`, its log to
/// `NODE-PORT.log` and its ledger to `NODE-PORT.db` in the test's directory. Killed when
/// dropped.
pub struct Agent {
    /// The node it runs on (`node-1`).
    pub node: String,
    /// Its ledger.
    pub db: PathBuf,
    child: KillOnDrop,
    out: PathBuf,
    log: PathBuf,
    host: String,
    port: u16,
}

impl Agent {
    /// An agent on `node` with the default [`AgentOptions`].
    pub fn start(dir: &Path, node: &str) -> Agent {
        Agent::start_with(dir, node, AgentOptions::default())
    }

    /// An agent on `node` listening on `port`, started through [`WITHOUT_NET_ADMIN`] with
    /// `extra` flags.
    pub fn start_without_net_admin(dir: &Path, node: &str, port: u16, extra: &[&str]) -> Agent {
        Agent::start_with(
            dir,
            node,
            AgentOptions {
                port,
                wrapper: WITHOUT_NET_ADMIN,
                extra,
                ..AgentOptions::default()
            },
        )
    }

    /// An agent on `node` started as `opts` say.
    pub fn start_with(dir: &Path, node: &str, opts: AgentOptions<'_>) -> Agent {
        let port = opts.port;
        let out = dir.join(format!("{node}-{port}.jsonl"));
        let log = dir.join(format!("{node}-{port}.log"));
        let db = dir.join(format!("{node}-{port}.db"));
        let listen = format!("{}:{port}", opts.host);
        let child = lab("exec")
            .arg(node)
            .args(opts.wrapper)
            .args([env!("CARGO_BIN_EXE_ghostip"), "-o", "json", "--db"])
            .arg(&db)
            .args([
                "agent",
                "--node-name",
                node,
                "--listen",
                &listen,
                "--min-audit-period",
                "5s",
                "--dns-health-interval",
                "1s",
            ])
            .args(opts.extra)
            .stdin(Stdio::null())
            .stdout(File::create(&out).unwrap())
            .stderr(File::create(&log).unwrap())
            .spawn()
            .expect("spawn the agent");
        Agent {
            node: node.to_string(),
            db,
            child: KillOnDrop(Some(child)),
            out,
            log,
            host: opts.host.to_string(),
            port,
        }
    }

    /// The file its JSON lines go to.
    pub fn out_path(&self) -> &Path {
        &self.out
    }

    /// The JSON lines written so far.
    pub fn lines(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.out)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// Polls the JSON lines until `pred` holds for one of them (at most `limit`); fails the
    /// test with the tails of its output and log otherwise.
    pub fn wait_for(&self, what: &str, limit: Duration, pred: impl Fn(&Value) -> bool) -> Value {
        let start = Instant::now();
        loop {
            if let Some(v) = self.lines().into_iter().find(|v| pred(v)) {
                return v;
            }
            if start.elapsed() > limit {
                self.dump();
                panic!("{}: no {what} within {limit:?}", self.node);
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// `GET path` from inside the node, without a token: the body. Fails the test when curl
    /// fails.
    pub fn http(&self, path: &str) -> String {
        let (code, out, err) = run(lab("exec").args([
            &self.node,
            "curl",
            "-sS",
            "--max-time",
            "5",
            &format!("http://{}:{}{path}", self.host, self.port),
        ]));
        assert_eq!(code, 0, "{}: GET {path}: {err}", self.node);
        out
    }

    /// `GET /status`.
    pub fn status(&self) -> Value {
        serde_json::from_str(&self.http("/status")).unwrap()
    }

    /// `GET /v1/ips/{ip}`: what the node's datapath holds of one IP.
    pub fn ip(&self, ip: IpAddr) -> Value {
        serde_json::from_str(&self.http(&format!("/v1/ips/{ip}"))).unwrap()
    }

    /// The value of the first `/metrics` sample whose line starts with `prefix`.
    pub fn metric(&self, prefix: &str) -> Option<f64> {
        self.http("/metrics")
            .lines()
            .find(|l| l.starts_with(prefix))
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
    }

    /// Prints the last 40 JSON lines and log lines to stderr.
    pub fn dump(&self) {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let out = std::fs::read_to_string(&self.out).unwrap_or_default();
        let tail = |s: &str| {
            let lines: Vec<&str> = s.lines().collect();
            lines[lines.len().saturating_sub(40)..].join("\n")
        };
        eprintln!(
            "--- {} JSON lines (tail)\n{}\n--- {} log (tail)\n{}",
            self.node,
            tail(&out),
            self.node,
            tail(&log)
        );
    }

    /// SIGTERM; the exit code and how long the exit took.
    pub fn terminate(&mut self) -> (Option<i32>, Duration) {
        self.child.terminate()
    }
}
