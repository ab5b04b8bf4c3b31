//! Thin IO adapters that read a node's datapath: run the tool with arguments (never a shell string), stream its output into the pure parser, measure the CPU it cost.
//!
//! See [`read_datapath`]. Each read spawns one program (`iptables-save -t nat`,
//! `nft -j list table ip kube-proxy`, `ipvsadm-save -n`), feeds its stdout line by line to
//! `ghostip_datapath::parse_reader_packed` on a blocking thread (the dump is never held
//! whole in memory, nor the table as an `LbTable`; the pipe is enlarged and read in large
//! gulps, see `Coalescing`), waits for it and measures the CPU of the child (`cutime + cstime` of
//! `/proc/self/stat`) and of the parsing thread (`/proc/thread-self/stat`). Reads are run
//! one at a time by the agent, so the children's CPU is the read's.
//!
//! A read is bounded: the program runs in its own process group, which is killed (`SIGKILL`)
//! at `--read-timeout` or at shutdown, and whatever is left of it once it exited; its output
//! is read only until the deadline (a pipe kept open by a process that left the group does
//! not hold the read), and at most [`MAX_OUTPUT_BYTES`] of it. A killed read reports the CPU
//! it burnt (the group's, read from `/proc` before the kill, and the parse's) so the agent
//! charges it to `--max-cpu`.
//!
//! # Errors
//! [`ReaderError`]: the program is not installed, it lacks a privilege (named: which
//! capability), it failed, timed out, wrote more than [`MAX_OUTPUT_BYTES`], or its output did
//! not parse.

use std::io::{BufReader, Read};
use std::os::fd::AsFd;
use std::os::unix::process::CommandExt as _;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use ghostip_core::PathKind;
use ghostip_datapath::against_truth::Family;
use ghostip_datapath::{AgentRead, Format, PackedTable, ParseError, RunsIn};

use ghostip_session::pacing::CpuTimes;

/// A load-balancer datapath the agent reads: a format of `ghostip_datapath::FORMATS` that has
/// an agent reader ([`ghostip_datapath::AgentRead`]), named by its path kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Datapath(Format);

impl Datapath {
    /// The datapath read as `format`, if the agent reads that format.
    pub fn of(format: Format) -> Option<Datapath> {
        format
            .info()
            .dump
            .agent
            .is_some()
            .then_some(Datapath(format))
    }

    /// Every datapath the agent reads, in the table's order.
    pub fn all() -> impl Iterator<Item = Datapath> {
        Format::all().filter_map(Datapath::of)
    }

    /// The datapaths `--datapath auto` tries, in order.
    pub fn auto_order() -> impl Iterator<Item = Datapath> {
        let mut v: Vec<(u8, Datapath)> = Datapath::all()
            .filter_map(|d| d.auto_rank().map(|r| (r, d)))
            .collect();
        v.sort_unstable();
        v.into_iter().map(|(_, d)| d)
    }

    fn agent(self) -> Option<&'static AgentRead> {
        self.0.info().dump.agent.as_ref()
    }

    /// The dump format its command prints.
    pub fn format(self) -> Format {
        self.0
    }

    /// The engine's path kind.
    pub fn path_kind(self) -> PathKind {
        self.0.info().dump.path_kind
    }

    /// Lower-case name (the path kind's).
    pub fn as_str(self) -> &'static str {
        self.path_kind().as_str()
    }

    /// The address families its command's output holds.
    pub fn family(self) -> Family {
        self.0.info().dump.family
    }

    /// Where its command runs.
    pub fn runs_in(self) -> RunsIn {
        self.agent().map_or(RunsIn::Node, |a| a.runs_in)
    }

    /// Its position in `--datapath auto`'s tries; `None` when never guessed.
    pub fn auto_rank(self) -> Option<u8> {
        self.agent().and_then(|a| a.auto_rank)
    }

    /// One line for `--help`.
    pub fn help(self) -> &'static str {
        self.agent().map_or("", |a| a.help)
    }

    /// The commands that dump it, program then arguments, alternatives in order.
    pub fn argv(self) -> &'static [&'static [&'static str]] {
        self.0.info().dump.argv
    }

    /// The local program and arguments that dump this datapath (`None` for one read
    /// elsewhere, as Cilium through the Kubernetes exec API).
    pub fn command(self) -> Option<(&'static str, &'static [&'static str], Format)> {
        if self.runs_in() != RunsIn::Node {
            return None;
        }
        let (program, args) = self.argv().first()?.split_first()?;
        Some((program, args, self.0))
    }
}

impl std::fmt::Display for Datapath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a datapath could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReaderError {
    /// The program is not on PATH.
    #[error("{program} is not installed (not found on PATH)")]
    NotInstalled {
        /// Program.
        program: String,
    },
    /// The kernel refused: a capability is missing.
    #[error(
        "{program} lacks a privilege: it needs {capability} in the node's network namespace ({stderr})"
    )]
    Privilege {
        /// Program.
        program: String,
        /// The capability it needs.
        capability: &'static str,
        /// First line of its stderr.
        stderr: String,
    },
    /// The datapath is not there (e.g. no `kube-proxy` nftables table).
    #[error("{program} found no {what} ({stderr})")]
    Absent {
        /// Program.
        program: String,
        /// What is absent.
        what: &'static str,
        /// First line of its stderr.
        stderr: String,
    },
    /// The program failed otherwise.
    #[error("{program} exited with {status}: {stderr}")]
    Failed {
        /// Program.
        program: String,
        /// Exit status.
        status: String,
        /// First line of its stderr.
        stderr: String,
    },
    /// Spawning or waiting failed.
    #[error("running {program}: {source}")]
    Io {
        /// Program.
        program: String,
        /// Cause.
        source: std::io::Error,
    },
    /// The program ran longer than allowed (or the agent shut down) and was killed.
    #[error("{program} did not finish within {after:?} and was killed")]
    Timeout {
        /// Program.
        program: String,
        /// The limit.
        after: Duration,
        /// CPU it cost until killed (its process group's and the parse's).
        cpu: Duration,
    },
    /// The program wrote more than the agent reads of one dump, and was killed.
    #[error(
        "{program} wrote more than {} MiB, the most one dump may be, and was killed",
        limit >> 20
    )]
    TooLarge {
        /// Program.
        program: String,
        /// The limit, in bytes.
        limit: u64,
        /// CPU it cost until killed (its process group's and the parse's).
        cpu: Duration,
    },
    /// Its output did not parse.
    #[error("{program} output: {source}")]
    Parse {
        /// Program.
        program: String,
        /// Cause.
        source: ParseError,
    },
    /// Any other problem (e.g. the Cilium agent pod was not found).
    #[error("{0}")]
    Other(String),
}

impl ReaderError {
    /// The capability the reader needs, when that is why it failed.
    pub fn missing_capability(&self) -> Option<&'static str> {
        match self {
            ReaderError::Privilege { capability, .. } => Some(capability),
            _ => None,
        }
    }

    /// CPU a killed read burnt before it was stopped (zero for other errors): charged to the
    /// reader's CPU budget like a finished read's.
    pub fn cpu(&self) -> Duration {
        match self {
            ReaderError::Timeout { cpu, .. } | ReaderError::TooLarge { cpu, .. } => *cpu,
            _ => Duration::ZERO,
        }
    }

    /// A short label for metrics and logs.
    pub fn label(&self) -> &'static str {
        match self {
            ReaderError::NotInstalled { .. } => "not-installed",
            ReaderError::Privilege { .. } => "privilege",
            ReaderError::Absent { .. } => "absent",
            ReaderError::Failed { .. } => "failed",
            ReaderError::Io { .. } => "io",
            ReaderError::Timeout { .. } => "timeout",
            ReaderError::TooLarge { .. } => "too-large",
            ReaderError::Parse { .. } => "parse",
            ReaderError::Other(_) => "other",
        }
    }
}

/// What the kernel says when a capability is missing, and which one the tool needs.
///
/// `iptables-save` (nf_tables backend), `nft`, `ipvsadm` and `conntrack` talk netlink and
/// need `CAP_NET_ADMIN`; `iptables-legacy-save` also opens a raw socket (`CAP_NET_RAW`).
pub fn classify_failure(program: &str, code: Option<i32>, stderr: &str) -> ReaderError {
    let first = stderr
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("")
        .chars()
        .take(300)
        .collect::<String>();
    let lower = stderr.to_ascii_lowercase();
    if lower.contains("permission denied")
        || lower.contains("operation not permitted")
        || lower.contains("you must be root")
    {
        let capability = if program.contains("legacy") {
            "CAP_NET_ADMIN and CAP_NET_RAW"
        } else {
            "CAP_NET_ADMIN"
        };
        return ReaderError::Privilege {
            program: program.to_string(),
            capability,
            stderr: first,
        };
    }
    if program == "nft" && lower.contains("no such file or directory") {
        return ReaderError::Absent {
            program: program.to_string(),
            what: "kube-proxy nftables table",
            stderr: first,
        };
    }
    if program.starts_with("ipvsadm") && lower.contains("protocol not available") {
        return ReaderError::Absent {
            program: program.to_string(),
            what: "IPVS support in this kernel",
            stderr: first,
        };
    }
    ReaderError::Failed {
        program: program.to_string(),
        status: code.map_or_else(|| "a signal".to_string(), |c| format!("code {c}")),
        stderr: first,
    }
}

/// One read: the table and what it cost.
#[derive(Clone, Debug)]
pub struct ReadOutcome {
    /// The table, packed: the audit needs addresses and states, not a full `LbTable`.
    pub table: PackedTable,
    /// CPU of the dumping program.
    pub child_cpu: Duration,
    /// CPU of parsing its output.
    pub parse_cpu: Duration,
    /// Wall time of the whole read.
    pub wall: Duration,
    /// Bytes read from the program.
    pub bytes: u64,
}

impl ReadOutcome {
    /// Total CPU of the read.
    pub fn cpu(&self) -> Duration {
        self.child_cpu + self.parse_cpu
    }
}

fn read_stat(path: &str) -> Option<CpuTimes> {
    let text = std::fs::read_to_string(path).ok()?;
    CpuTimes::parse_stat(&text)
}

/// CPU time the calling thread has used so far, in nanoseconds (`CLOCK_THREAD_CPUTIME_ID`).
///
/// Not `/proc/thread-self/schedstat`: for the thread that reads it, the kernel prints the
/// runtime as of the last scheduler tick or switch, up to 4 ms old at `HZ=250`, so a
/// 15 ms diff read 12 or 16 ms. The clock brings the runtime up to date first.
pub fn thread_cpu() -> Option<Duration> {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    let secs = u64::try_from(t.tv_sec).ok()?;
    let nanos = u32::try_from(t.tv_nsec).ok()?;
    Some(Duration::new(secs, nanos))
}

/// CPU the calling thread used since `before` (a [`thread_cpu`] reading); zero when either
/// reading failed.
pub fn thread_cpu_since(before: Option<Duration>) -> Duration {
    before
        .zip(thread_cpu())
        .map_or(Duration::ZERO, |(b, a)| a.saturating_sub(b))
}

/// The most a dump program may write in one read: 1 GiB. The largest dump benchmarked is the
/// nftables JSON of 126.8 MB; iptables-save at 10 000 Services / 150 000 endpoints writes
/// 48–52 MB (docs/BENCHMARKS.md, "Datapath parsers"): 8 and 20 times less. A program that
/// writes without end is killed there instead of being parsed until the timeout.
pub const MAX_OUTPUT_BYTES: u64 = 1 << 30;

/// How often a read waiting for output looks at the cancel flag.
const POLL_SLICE: Duration = Duration::from_millis(50);

/// Why [`Bounded`] stopped reading.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stop {
    /// The deadline passed.
    Deadline,
    /// The agent is shutting down.
    Cancelled,
    /// More than the byte limit came.
    TooLarge,
}

/// Reads a pipe until a deadline and a byte limit: it waits for data with `poll(2)` in
/// slices of [`POLL_SLICE`] so that a pipe held open without output (by a process that left
/// the dump program's group) does not block past the deadline; counts the bytes.
struct Bounded<R> {
    inner: R,
    n: u64,
    max_bytes: u64,
    deadline: Instant,
    cancel: Arc<AtomicBool>,
    stop: Option<Stop>,
}

impl<R> Bounded<R> {
    fn new(inner: R, max_bytes: u64, deadline: Instant, cancel: &Arc<AtomicBool>) -> Self {
        Self {
            inner,
            n: 0,
            max_bytes,
            deadline,
            cancel: Arc::clone(cancel),
            stop: None,
        }
    }

    fn stopped(&mut self, why: Stop) -> std::io::Error {
        self.stop = Some(why);
        let what = match why {
            Stop::Deadline => "the read's deadline passed",
            Stop::Cancelled => "the read was cancelled",
            Stop::TooLarge => "the output passed its size limit",
        };
        std::io::Error::new(std::io::ErrorKind::TimedOut, what)
    }
}

impl<R: Read + AsFd> Read for Bounded<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        use rustix::event::{PollFd, PollFlags, Timespec, poll};
        if let Some(why) = self.stop {
            return Err(self.stopped(why));
        }
        loop {
            if self.cancel.load(Ordering::Relaxed) {
                return Err(self.stopped(Stop::Cancelled));
            }
            let left = self
                .deadline
                .saturating_duration_since(crate::clock::monotonic_now());
            if left.is_zero() {
                return Err(self.stopped(Stop::Deadline));
            }
            let wait = left.min(POLL_SLICE);
            let timeout = Timespec {
                tv_sec: 0,
                tv_nsec: i64::from(wait.subsec_nanos()),
            };
            let mut fds = [PollFd::new(&self.inner, PollFlags::IN)];
            match poll(&mut fds, Some(&timeout)) {
                Ok(0) | Err(rustix::io::Errno::INTR) => {}
                // Readable, at its end, or an error the read reports.
                Ok(_) => break,
                Err(e) => return Err(e.into()),
            }
        }
        let n = self.inner.read(buf)?;
        self.n += n as u64;
        if self.n > self.max_bytes {
            return Err(self.stopped(Stop::TooLarge));
        }
        Ok(n)
    }
}

/// CPU used so far by the live processes of group `pgid` (their own and their waited-for
/// children's), from `/proc/<pid>/stat`; zombies count as gone.
fn group_cpu(pgid: i32) -> Duration {
    group_members(pgid)
        .iter()
        .filter_map(|text| CpuTimes::parse_stat(text))
        .map(CpuTimes::total)
        .sum()
}

/// The `/proc/<pid>/stat` lines of the processes of group `pgid` that are not zombies.
fn group_members(pgid: i32) -> Vec<String> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
        })
        .filter_map(|e| std::fs::read_to_string(e.path().join("stat")).ok())
        .filter(|text| {
            let Some(rest) = text.rfind(')').map(|i| &text[i + 1..]) else {
                return false;
            };
            // After the name: state(3) ppid(4) pgrp(5).
            let mut f = rest.split_whitespace();
            let state = f.next();
            let pgrp = f.nth(1).and_then(|p| p.parse::<i32>().ok());
            pgrp == Some(pgid) && state != Some("Z") && state != Some("X")
        })
        .collect()
}

/// The pipe size asked for the dump program's stdout (`F_SETPIPE_SZ`; the default
/// `/proc/sys/fs/pipe-max-size` allows it without privileges).
const PIPE_SIZE: usize = 1 << 20;
/// How long [`Coalescing`] waits after a read that drained the pipe.
const COALESCE_PAUSE: Duration = Duration::from_millis(10);

/// Reads a pipe in large gulps. `iptables-save` writes its dump 4 KiB at a time, and a
/// parser faster than the writer would otherwise wake up and read after every write, which
/// costs the parsing thread more CPU than reading the same bytes in large blocks. After a
/// read that did not fill the buffer (the pipe is drained), this waits [`COALESCE_PAUSE`]
/// so the writer fills the enlarged pipe meanwhile. It pauses only when the pipe holds
/// [`PIPE_SIZE`] (`pause` is `None` otherwise): at iptables-save's writing speed a pause
/// fills less than the pipe but more than the parser's 256 KiB buffer, so the next read
/// fills the buffer, the writer does not block on a full pipe and the read ends no later
/// than without it. The figures (reads, CPU per pause length) are in docs/BENCHMARKS.md,
/// "Agent".
struct Coalescing<R> {
    inner: R,
    pause: Option<Duration>,
    drained: bool,
}

impl<R: Read> Read for Coalescing<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if let (true, Some(pause)) = (self.drained, self.pause) {
            std::thread::sleep(pause);
        }
        let n = self.inner.read(buf)?;
        self.drained = n > 0 && n < buf.len();
        Ok(n)
    }
}

/// Runs `program args…`, parses its stdout as `format` while it is produced, waits.
/// Blocking: call it from a blocking thread. The program's process group is killed after
/// `timeout`, or as soon as `cancel` is set (shutdown); its output is bounded by
/// [`MAX_OUTPUT_BYTES`].
pub fn run_and_parse(
    program: &str,
    args: &[&str],
    format: Format,
    timeout: Duration,
    cancel: &Arc<AtomicBool>,
) -> Result<ReadOutcome, ReaderError> {
    run_and_parse_bounded(program, args, format, timeout, MAX_OUTPUT_BYTES, cancel)
}

/// The dump program, whether it was reaped, and the CPU its group had used when killed.
struct Guarded {
    child: Child,
    reaped: bool,
    killed_cpu: Duration,
}

impl Guarded {
    /// Kills the program's whole process group (a shell script's children too), measuring
    /// first what the group used when `measure`. Only while the leader is not reaped: its
    /// pid, which is the group's id, stays reserved until then.
    fn kill_group(&mut self, measure: bool) {
        if self.reaped {
            return;
        }
        let Ok(id) = i32::try_from(self.child.id()) else {
            return;
        };
        if measure {
            self.killed_cpu = self.killed_cpu.max(group_cpu(id));
        }
        if let Some(pgid) = rustix::process::Pid::from_raw(id) {
            let _ = rustix::process::kill_process_group(pgid, rustix::process::Signal::KILL);
        }
        let _ = self.child.kill();
    }
}

/// [`run_and_parse`] with a byte limit of its own.
pub fn run_and_parse_bounded(
    program: &str,
    args: &[&str],
    format: Format,
    timeout: Duration,
    max_bytes: u64,
    cancel: &Arc<AtomicBool>,
) -> Result<ReadOutcome, ReaderError> {
    let started = crate::clock::monotonic_now();
    let deadline = started + timeout;
    let proc_before = read_stat("/proc/self/stat");
    let thread_before = thread_cpu();
    let child = Command::new(program)
        .args(args)
        .env("LC_ALL", "C")
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                ReaderError::NotInstalled {
                    program: program.to_string(),
                }
            } else {
                ReaderError::Io {
                    program: program.to_string(),
                    source: e,
                }
            }
        })?;
    let pid = rustix::process::Pid::from_child(&child);
    let mut child = Guarded {
        child,
        reaped: false,
        killed_cpu: Duration::ZERO,
    };
    let stdout = child.child.stdout.take();
    let stderr_pipe = child.child.stderr.take();
    let child = Arc::new(Mutex::new(child));
    // Watchdog: kills the group at the deadline or at shutdown, for a program that closed
    // its stdout and goes on running (the parse, bounded by the same deadline, ends alone).
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let watchdog = {
        let child = Arc::clone(&child);
        let cancel = Arc::clone(cancel);
        std::thread::spawn(move || {
            loop {
                match done_rx.recv_timeout(POLL_SLICE) {
                    Err(std::sync::mpsc::RecvTimeoutError::Timeout)
                        if crate::clock::monotonic_now() < deadline
                            && !cancel.load(Ordering::Relaxed) => {}
                    Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                        lock(&child).kill_group(true);
                        return true;
                    }
                    _ => return false,
                }
            }
        })
    };
    // stderr is drained on its own thread so a chatty program cannot block on it; bounded by
    // the same deadline, 64 KiB kept.
    let stderr_thread = {
        let cancel = Arc::clone(cancel);
        std::thread::spawn(move || {
            let mut s = String::new();
            if let Some(e) = stderr_pipe {
                let _ = Bounded::new(e, u64::MAX, deadline, &cancel)
                    .take(64 * 1024)
                    .read_to_string(&mut s);
            }
            s
        })
    };
    let (parsed, bytes, stop) = match stdout {
        Some(out) => {
            // Without the larger pipe a pause would stall the writer: read as it comes.
            let enlarged = rustix::pipe::fcntl_setpipe_size(&out, PIPE_SIZE)
                .is_ok_and(|size| size >= PIPE_SIZE);
            let mut bounded = Bounded::new(out, max_bytes, deadline, cancel);
            let coalescing = Coalescing {
                inner: &mut bounded,
                pause: enlarged.then_some(COALESCE_PAUSE),
                drained: false,
            };
            let parsed = ghostip_datapath::parse_reader_packed(
                format,
                BufReader::with_capacity(256 * 1024, coalescing),
            );
            // The pipe closes here: a program still writing gets SIGPIPE.
            (Some(parsed), bounded.n, bounded.stop)
        }
        None => (None, 0, None),
    };
    let parse_cpu = thread_cpu_since(thread_before);
    if stop.is_some() {
        // Stopped before the end of the output: the program may still run.
        lock(&child).kill_group(true);
    }
    // The parse ended at EOF: the child closed stdout, but it may go on running (a program
    // that closes stdout and hangs). Its exit is awaited without the lock, which the
    // watchdog needs to kill it, and without reaping it, so its pid (the group's id) stays
    // its own until the lock is taken to reap it; what is left of its group is killed first.
    wait_exited_unreaped(pid);
    let (status, killed_cpu) = {
        let mut g = lock(&child);
        g.kill_group(false);
        let status = g.child.wait();
        g.reaped = true;
        (status, g.killed_cpu)
    };
    let _ = done_tx.send(());
    let killed = watchdog.join().unwrap_or(false);
    let stderr = stderr_thread.join().unwrap_or_default();
    let proc_after = read_stat("/proc/self/stat");
    let child_cpu = match (proc_before, proc_after) {
        (Some(b), Some(a)) => a.since(b).children,
        _ => Duration::ZERO,
    };
    // A killed group's children were not all waited for: the CPU read before the kill.
    let cpu = child_cpu.max(killed_cpu) + parse_cpu;
    match stop {
        Some(Stop::TooLarge) => {
            return Err(ReaderError::TooLarge {
                program: program.to_string(),
                limit: max_bytes,
                cpu,
            });
        }
        Some(Stop::Deadline | Stop::Cancelled) => {
            return Err(ReaderError::Timeout {
                program: program.to_string(),
                after: timeout,
                cpu,
            });
        }
        None if killed => {
            return Err(ReaderError::Timeout {
                program: program.to_string(),
                after: timeout,
                cpu,
            });
        }
        None => {}
    }
    let status = status.map_err(|e| ReaderError::Io {
        program: program.to_string(),
        source: e,
    })?;
    if !status.success() {
        return Err(classify_failure(program, status.code(), &stderr));
    }
    let table = match parsed {
        Some(Ok(Some(t))) => t,
        Some(Ok(None)) | None => {
            return Err(ReaderError::Other(format!(
                "{program} gave no load-balancer table"
            )));
        }
        Some(Err(e)) => {
            return Err(ReaderError::Parse {
                program: program.to_string(),
                source: e,
            });
        }
    };
    Ok(ReadOutcome {
        table,
        child_cpu,
        parse_cpu,
        wall: started.elapsed(),
        bytes,
    })
}

/// Blocks until the child `pid` has exited, leaving it to be reaped (`waitid` with
/// `WNOWAIT`). Returns at once on an error other than an interruption; the caller's `wait`
/// then reports it.
fn wait_exited_unreaped(pid: rustix::process::Pid) {
    use rustix::process::{WaitId, WaitIdOptions, waitid};
    loop {
        match waitid(
            WaitId::Pid(pid),
            WaitIdOptions::EXITED | WaitIdOptions::NOWAIT,
        ) {
            Err(rustix::io::Errno::INTR) => {}
            _ => return,
        }
    }
}

fn lock(child: &Mutex<Guarded>) -> std::sync::MutexGuard<'_, Guarded> {
    child.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Reads a local datapath (not Cilium) on a blocking thread.
pub async fn read_datapath(
    dp: Datapath,
    timeout: Duration,
    cancel: Arc<AtomicBool>,
) -> Result<ReadOutcome, ReaderError> {
    let Some((program, args, format)) = dp.command() else {
        return Err(ReaderError::Other(format!(
            "the {dp} datapath is read through the Kubernetes exec API"
        )));
    };
    tokio::task::spawn_blocking(move || run_and_parse(program, args, format, timeout, &cancel))
        .await
        .map_err(|e| ReaderError::Other(format!("reader thread failed: {e}")))?
}

/// What `--datapath auto` found.
#[derive(Debug)]
pub struct Detection {
    /// The datapath chosen, with its first read.
    pub chosen: Option<(Datapath, ReadOutcome)>,
    /// Why each other candidate was not chosen.
    pub rejected: Vec<(Datapath, String)>,
}

/// Picks the datapath from what each reader returns: the first candidate whose table
/// has kube-proxy frontends. Pure; the caller runs the readers.
pub fn choose(results: Vec<(Datapath, Result<ReadOutcome, ReaderError>)>) -> Detection {
    let mut chosen = None;
    let mut rejected = Vec::new();
    for (dp, r) in results {
        match r {
            Ok(o) if chosen.is_none() && !o.table.frontends.is_empty() => chosen = Some((dp, o)),
            Ok(o) if o.table.frontends.is_empty() => {
                rejected.push((dp, "no service frontends in its output".to_string()));
            }
            Ok(_) => rejected.push((dp, "another datapath was found first".to_string())),
            Err(e) => rejected.push((dp, e.to_string())),
        }
    }
    Detection { chosen, rejected }
}

/// `--datapath auto`: tries the local datapaths in their `auto` order (nftables, iptables,
/// then IPVS: kube-proxy in IPVS mode also writes a few iptables rules, but no `KUBE-SVC`
/// chains), keeping the first with frontends.
pub async fn detect(timeout: Duration, cancel: Arc<AtomicBool>) -> Detection {
    let mut results = Vec::new();
    for dp in Datapath::auto_order() {
        let r = read_datapath(dp, timeout, Arc::clone(&cancel)).await;
        let found = r.as_ref().is_ok_and(|o| !o.table.frontends.is_empty());
        results.push((dp, r));
        if found {
            break;
        }
    }
    choose(results)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn the_agent_datapaths_come_from_the_format_table() {
        let names: Vec<&str> = Datapath::all().map(Datapath::as_str).collect();
        assert_eq!(names, ["iptables", "nftables", "ipvs", "cilium"]);
        let auto: Vec<&str> = Datapath::auto_order().map(Datapath::as_str).collect();
        assert_eq!(auto, ["nftables", "iptables", "ipvs"]);
        let ipt = Datapath::of(Format::Iptables).unwrap();
        assert_eq!(
            ipt.command(),
            Some(("iptables-save", &["-t", "nat"][..], Format::Iptables))
        );
        assert_eq!(ipt.family(), Family::V4);
        assert!(Datapath::of(Format::Conntrack).is_none());
        let cilium = Datapath::of(Format::CiliumServiceJson).unwrap();
        assert_eq!(cilium.command(), None);
        assert_eq!(cilium.runs_in(), RunsIn::CiliumAgentPod);
        assert_eq!(
            cilium.argv()[0],
            ["cilium-dbg", "service", "list", "-o", "json"]
        );
    }

    #[test]
    fn privilege_errors_name_the_capability() {
        let e = classify_failure(
            "iptables-save",
            Some(1),
            "iptables-save v1.8.9 (nf_tables): Could not fetch rule set generation id: Permission denied (you must be root)\n",
        );
        assert_eq!(e.missing_capability(), Some("CAP_NET_ADMIN"));
        assert!(e.to_string().contains("needs CAP_NET_ADMIN"), "{e}");
        let e = classify_failure(
            "nft",
            Some(1),
            "Error: Could not process rule: No such file or directory\nlist table ip kube-proxy\n",
        );
        assert_eq!(e.label(), "absent");
        let e = classify_failure(
            "nft",
            Some(1),
            "netlink: Error: cache initialization failed: Operation not permitted",
        );
        assert_eq!(e.missing_capability(), Some("CAP_NET_ADMIN"));
        let e = classify_failure("ipvsadm-save", Some(1), "weird");
        assert_eq!(e.label(), "failed");
    }

    #[test]
    fn real_program_output_is_streamed_into_the_parser() {
        // `printf` is a real program writing a small iptables-save dump to a pipe.
        let dump = "*nat\n:KUBE-SERVICES - [0:0]\n:KUBE-SVC-A - [0:0]\n:KUBE-SEP-A - [0:0]\n\
-A KUBE-SERVICES -d 10.96.0.10/32 -p udp -m comment --comment \"kube-system/kube-dns:dns cluster IP\" -m udp --dport 53 -j KUBE-SVC-A\n\
-A KUBE-SVC-A -m comment --comment \"kube-system/kube-dns:dns -> 10.244.1.2:53\" -j KUBE-SEP-A\n\
-A KUBE-SEP-A -p udp -m comment --comment \"kube-system/kube-dns:dns\" -m udp -j DNAT --to-destination 10.244.1.2:53\nCOMMIT\n";
        let o = run_and_parse(
            "printf",
            &["%s", dump],
            Format::Iptables,
            Duration::from_secs(10),
            &no(),
        )
        .unwrap();
        assert_eq!(o.table.frontends.len(), 1);
        assert_eq!(o.table.backend_count(), 1);
        assert_eq!(o.bytes, dump.len() as u64);
    }

    /// Counts the `read` calls that reach a reader.
    struct Calls<R> {
        inner: R,
        calls: usize,
    }

    impl<R: Read> Read for Calls<R> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            self.calls += 1;
            self.inner.read(buf)
        }
    }

    #[test]
    fn a_drip_fed_pipe_is_read_in_few_large_reads() {
        use std::io::Write;
        let (reader, mut writer) = std::io::pipe().unwrap();
        let size = rustix::pipe::fcntl_setpipe_size(&reader, PIPE_SIZE).unwrap();
        assert!(size >= PIPE_SIZE);
        // A writer like iptables-save: 4 KiB at a time, a little slower than a reader.
        let writes = 256;
        let producer = std::thread::spawn(move || {
            for i in 0..writes {
                writer.write_all(&[(i % 251) as u8; 4096]).unwrap();
                std::thread::sleep(Duration::from_micros(100));
            }
        });
        let mut calls = Calls {
            inner: reader,
            calls: 0,
        };
        let mut got = Vec::new();
        Coalescing {
            inner: &mut calls,
            pause: Some(COALESCE_PAUSE),
            drained: false,
        }
        .read_to_end(&mut got)
        .unwrap();
        producer.join().unwrap();
        let want: Vec<u8> = (0..writes).flat_map(|i| [(i % 251) as u8; 4096]).collect();
        assert!(got == want, "every byte, in order");
        assert!(
            calls.calls <= writes / 4,
            "{} reads for {writes} writes",
            calls.calls
        );
    }

    #[test]
    fn missing_program_and_timeout_are_typed() {
        let e = run_and_parse(
            "ghostip-no-such-tool",
            &[],
            Format::Iptables,
            Duration::from_secs(1),
            &no(),
        )
        .unwrap_err();
        assert!(matches!(e, ReaderError::NotInstalled { .. }), "{e}");
        let started = crate::clock::monotonic_now();
        let e = run_and_parse(
            "sleep",
            &["5"],
            Format::Iptables,
            Duration::from_millis(200),
            &no(),
        )
        .unwrap_err();
        assert!(matches!(e, ReaderError::Timeout { .. }), "{e}");
        assert!(started.elapsed() < Duration::from_secs(2));
        let e = run_and_parse(
            "false",
            &[],
            Format::Iptables,
            Duration::from_secs(5),
            &no(),
        )
        .unwrap_err();
        assert!(matches!(e, ReaderError::Failed { .. }), "{e}");
    }

    /// A program that closes its stdout and goes on running: the parse ends at EOF at once,
    /// and the watchdog must still kill it at the timeout (the child sleeps 3 s at most, so
    /// the test ends either way).
    #[test]
    fn a_child_that_closes_stdout_and_hangs_is_killed_at_the_timeout() {
        times_out_at_300ms("sh", &["-c", "exec >&-; exec sleep 3"]);
    }

    /// Runs `program` with a 300 ms timeout: the read must end in a timeout within 2 s.
    fn times_out_at_300ms(program: &str, args: &[&str]) {
        let started = crate::clock::monotonic_now();
        let e = run_and_parse(
            program,
            args,
            Format::Iptables,
            Duration::from_millis(300),
            &no(),
        )
        .unwrap_err();
        assert!(matches!(e, ReaderError::Timeout { .. }), "{e}");
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "returned after {:?}",
            started.elapsed()
        );
    }

    /// A fake dump program: a shell script in a temp dir that writes its pid (its process
    /// group's id, the reader putting it in a group of its own) to the file `$PIDS`, then
    /// runs `body` (which may add its children's pids to `$PIDS`).
    fn fake_reader(body: &str) -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf) {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("iptables-save");
        let pids = dir.path().join("pids");
        std::fs::write(
            &script,
            format!(
                "#!/bin/sh\nexport PIDS='{}'\necho $$ > \"$PIDS\"\n{body}\n",
                pids.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        (dir, script, pids)
    }

    /// The processes left of a fake reader, after up to 1 s for the kernel to finish them:
    /// the live members of its group (the first pid in `pids`) and the live processes among
    /// the pids it wrote.
    fn left_of(pids: &std::path::Path) -> Vec<String> {
        let listed: Vec<i32> = std::fs::read_to_string(pids)
            .unwrap()
            .split_whitespace()
            .map(|p| p.parse().unwrap())
            .collect();
        let alive = |pid: i32| {
            std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|t| {
                let state = t[t.rfind(')').unwrap() + 1..].split_whitespace().next();
                state != Some("Z") && state != Some("X")
            })
        };
        let mut left = Vec::new();
        for _ in 0..20 {
            left = group_members(listed[0]);
            left.extend(
                listed
                    .iter()
                    .filter(|p| alive(**p))
                    .map(|p| format!("pid {p}")),
            );
            if left.is_empty() {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        left
    }

    /// A reader that writes without end (`yes`: lines the parser skips) and never closes its
    /// stdout, directly or through a child that holds the pipe when the script is killed, or
    /// next to a silent child that holds it too:
    /// a timeout at the deadline (no byte limit here), with the CPU it cost, and nothing left
    /// of its process group.
    #[test]
    fn an_endless_reader_times_out_at_the_deadline_and_its_group_is_killed() {
        for body in [
            "exec yes",
            "yes & echo $! >> \"$PIDS\"; wait",
            "sh -c 'yes & echo $! >> \"$PIDS\"; wait'",
            // A silent child holding the pipe: only the group's kill ends it before 5 s.
            "sleep 5 & echo $! >> \"$PIDS\"; exec yes",
        ] {
            let (_dir, script, pids) = fake_reader(body);
            let timeout = Duration::from_millis(700);
            let started = crate::clock::monotonic_now();
            let e = run_and_parse_bounded(
                script.to_str().unwrap(),
                &[],
                Format::Iptables,
                timeout,
                u64::MAX,
                &no(),
            )
            .unwrap_err();
            let took = started.elapsed();
            assert!(matches!(e, ReaderError::Timeout { .. }), "{body}: {e}");
            assert!(
                took < timeout + Duration::from_secs(2),
                "{body}: returned after {took:?}"
            );
            assert!(
                e.cpu() >= Duration::from_millis(50),
                "{body}: the killed read cost {:?}",
                e.cpu()
            );
            assert_eq!(
                left_of(&pids),
                Vec::<String>::new(),
                "{body}: processes left"
            );
        }
    }

    /// A process that leaves the group (`setsid`) and holds the pipe open without writing:
    /// the read still ends at the deadline, not when that process lets go.
    #[test]
    fn a_pipe_held_open_outside_the_group_does_not_hold_the_read() {
        let (_dir, script, _) = fake_reader("setsid sleep 4 & exec sleep 4");
        times_out_at_300ms(script.to_str().unwrap(), &[]);
    }

    /// Output over the byte limit ends the read with a clear error before the deadline.
    #[test]
    fn output_over_the_byte_limit_is_refused_and_the_group_killed() {
        let (_dir, script, pids) = fake_reader("yes & echo $! >> \"$PIDS\"; wait");
        let started = crate::clock::monotonic_now();
        let e = run_and_parse_bounded(
            script.to_str().unwrap(),
            &[],
            Format::Iptables,
            Duration::from_secs(20),
            1 << 20,
            &no(),
        )
        .unwrap_err();
        assert!(matches!(e, ReaderError::TooLarge { .. }), "{e}");
        assert_eq!(e.label(), "too-large");
        assert!(e.to_string().contains("more than 1 MiB"), "{e}");
        assert!(started.elapsed() < Duration::from_secs(10));
        assert_eq!(left_of(&pids), Vec::<String>::new(), "processes left");
    }

    /// Fails the test unless it runs as root with `programs` on PATH (it is ignored, so it
    /// runs only when asked for).
    fn require_root_with(programs: &[&str]) {
        let root = std::fs::read_to_string("/proc/self/status").is_ok_and(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .is_some_and(|l| l.split_whitespace().nth(2) == Some("0"))
        });
        let found = programs.iter().all(|p| {
            std::env::var_os("PATH")
                .is_some_and(|path| std::env::split_paths(&path).any(|d| d.join(p).is_file()))
        });
        if !(root && found) {
            ghostip_testkit::env::missing(&format!(
                "needs root (network namespaces) and {programs:?} on PATH"
            ));
        }
    }

    #[test]
    #[ignore = "needs network namespaces (root)"]
    fn real_iptables_save_without_net_admin_names_the_capability() {
        require_root_with(&["unshare", "setpriv", "iptables-save"]);
        // In a fresh network namespace: with its capabilities iptables-save reads an empty
        // ruleset; with CAP_NET_ADMIN and CAP_NET_RAW dropped the kernel refuses.
        let with = run_and_parse(
            "unshare",
            &["--net", "iptables-save", "-t", "nat"],
            Format::Iptables,
            Duration::from_secs(20),
            &no(),
        )
        .unwrap();
        assert!(with.table.frontends.is_empty());
        let e = run_and_parse(
            "unshare",
            &[
                "--net",
                "setpriv",
                "--bounding-set=-net_admin,-net_raw",
                "--inh-caps=-net_admin,-net_raw",
                "iptables-save",
                "-t",
                "nat",
            ],
            Format::Iptables,
            Duration::from_secs(20),
            &no(),
        )
        .unwrap_err();
        assert_eq!(e.missing_capability(), Some("CAP_NET_ADMIN"), "{e}");
        eprintln!("{e}");
    }

    #[test]
    fn cancel_kills_a_running_reader() {
        let cancel = Arc::new(AtomicBool::new(false));
        let c = Arc::clone(&cancel);
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            c.store(true, Ordering::Relaxed);
        });
        let started = crate::clock::monotonic_now();
        let e = run_and_parse(
            "sleep",
            &["5"],
            Format::Iptables,
            Duration::from_secs(60),
            &cancel,
        )
        .unwrap_err();
        assert!(matches!(e, ReaderError::Timeout { .. }), "{e}");
        assert!(started.elapsed() < Duration::from_secs(2));
        t.join().unwrap();
    }

    fn no() -> Arc<AtomicBool> {
        Arc::new(AtomicBool::new(false))
    }

    #[test]
    fn choose_keeps_the_first_datapath_with_frontends() {
        let empty = ReadOutcome {
            table: PackedTable::new(Format::NftJson),
            child_cpu: Duration::ZERO,
            parse_cpu: Duration::ZERO,
            wall: Duration::ZERO,
            bytes: 0,
        };
        let mut full = empty.clone();
        full.table = ghostip_datapath::iptables::parse_str(
            "*nat\n:KUBE-SERVICES - [0:0]\n:KUBE-SVC-A - [0:0]\n-A KUBE-SERVICES -d 10.96.0.1/32 -p tcp -m comment --comment \"default/kubernetes:https cluster IP\" -m tcp --dport 443 -j KUBE-SVC-A\nCOMMIT\n",
        )
        .unwrap()
        .into();
        let dp = |f| Datapath::of(f).unwrap();
        let Detection { chosen, rejected } = choose(vec![
            (dp(Format::NftJson), Ok(empty)),
            (dp(Format::Iptables), Ok(full)),
            (
                dp(Format::Ipvsadm),
                Err(ReaderError::NotInstalled {
                    program: "ipvsadm-save".into(),
                }),
            ),
        ]);
        assert_eq!(chosen.map(|c| c.0), Some(dp(Format::Iptables)));
        assert_eq!(rejected.len(), 2);
    }
}
