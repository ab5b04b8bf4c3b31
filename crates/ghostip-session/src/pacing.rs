//! The pacing of node-local reads (the datapath's, conntrack's): measured CPU per read, a CPU-seconds token bucket, the audit period it implies, and re-reads after a change.
//!
//! Pure: the caller measures each read (child and own CPU, see [`CpuTimes`]) and passes
//! the current instant. [`CostCap`] keeps the agent's average CPU spent on datapath reads
//! under `max_cpu` (a fraction of one core): tokens refill at `max_cpu` CPU-seconds per
//! second, a read may start only when the bucket holds its expected cost, and the
//! periodic full audit runs every `clamp(cost / max_cpu, min_period, max_period)`.

use std::time::Duration;

use ghostip_core::Time;

/// Clock ticks per second of `/proc/<pid>/stat` times (`USER_HZ`, 100 on every Linux ABI).
pub const USER_HZ: u64 = 100;

/// Cumulative CPU times of a process, from `/proc/self/stat`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuTimes {
    /// User + system time of the process itself.
    pub own: Duration,
    /// User + system time of its waited-for children (`cutime + cstime`).
    pub children: Duration,
}

impl CpuTimes {
    /// Parses one `/proc/<pid>/stat` (or `/proc/thread-self/stat`) line.
    ///
    /// The command name (field 2) may contain spaces and parentheses, so fields are
    /// counted after its last `)`. Returns `None` when the line is not a stat line.
    pub fn parse_stat(line: &str) -> Option<CpuTimes> {
        let rest = &line[line.rfind(')')? + 1..];
        // After the name: state(3) ppid(4) … utime(14) stime(15) cutime(16) cstime(17).
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let num = |field: usize| -> Option<u64> { fields.get(field - 3)?.parse().ok() };
        let ticks = |t: u64| Duration::from_millis(t.saturating_mul(1000) / USER_HZ);
        Some(CpuTimes {
            own: ticks(num(14)?.saturating_add(num(15)?)),
            children: ticks(num(16)?.saturating_add(num(17)?)),
        })
    }

    /// CPU spent between `earlier` and `self`, own and children.
    pub fn since(self, earlier: CpuTimes) -> CpuTimes {
        CpuTimes {
            own: self.own.saturating_sub(earlier.own),
            children: self.children.saturating_sub(earlier.children),
        }
    }

    /// Own plus children.
    pub fn total(self) -> Duration {
        self.own + self.children
    }
}

/// Settings of the cap.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CostConfig {
    /// Average CPU the reads may use, as a fraction of one core (0.02 = 2 %).
    pub max_cpu: f64,
    /// Shortest period between two full audits.
    pub min_period: Duration,
    /// Longest period between two full audits (a cheap datapath is still audited this often).
    pub max_period: Duration,
    /// Bucket size, in multiples of the last measured cost (allows a short burst of reads).
    pub burst_reads: f64,
}

impl Default for CostConfig {
    fn default() -> Self {
        Self {
            max_cpu: 0.02,
            min_period: Duration::from_secs(10),
            max_period: Duration::from_secs(300),
            burst_reads: 3.0,
        }
    }
}

/// The token bucket and the audit period.
#[derive(Clone, Debug)]
pub struct CostCap {
    cfg: CostConfig,
    /// CPU-seconds available now.
    tokens: f64,
    refilled_at: Option<Time>,
    /// Cost of the last read, in CPU-seconds (`None` before the first one).
    last_cost: Option<f64>,
    /// Largest cost seen, so one cheap read does not hide an expensive datapath.
    max_cost: f64,
    /// CPU-seconds spent on reads in total, and reads done.
    spent: f64,
    reads: u64,
}

impl CostCap {
    /// A cap with a full bucket for the first read.
    pub fn new(cfg: CostConfig) -> Self {
        Self {
            cfg,
            tokens: 0.0,
            refilled_at: None,
            last_cost: None,
            max_cost: 0.0,
            spent: 0.0,
            reads: 0,
        }
    }

    /// The settings.
    pub fn config(&self) -> &CostConfig {
        &self.cfg
    }

    /// Expected cost of the next read: the largest measured so far (0 before any).
    pub fn expected_cost(&self) -> f64 {
        self.max_cost
    }

    /// Cost of the last read.
    pub fn last_cost(&self) -> Option<Duration> {
        self.last_cost.map(Duration::from_secs_f64)
    }

    /// Reads done and CPU spent on them.
    pub fn totals(&self) -> (u64, Duration) {
        (self.reads, Duration::from_secs_f64(self.spent.max(0.0)))
    }

    fn capacity(&self) -> f64 {
        // Room for a few reads, and never less than one minute of budget.
        (self.max_cost * self.cfg.burst_reads).max(self.cfg.max_cpu * 60.0)
    }

    fn refill(&mut self, now: Time) {
        match self.refilled_at {
            None => self.tokens = self.capacity(),
            Some(then) => {
                let dt = now.duration_since(then).as_secs_f64().max(0.0);
                self.tokens = (self.tokens + dt * self.cfg.max_cpu).min(self.capacity());
            }
        }
        self.refilled_at = Some(now);
    }

    /// Whether a read may start now (the bucket holds its expected cost).
    pub fn may_read(&mut self, now: Time) -> bool {
        self.refill(now);
        self.tokens + 1e-9 >= self.expected_cost()
    }

    /// How long until a read may start.
    pub fn wait_for_read(&mut self, now: Time) -> Duration {
        self.refill(now);
        let missing = self.expected_cost() - self.tokens;
        if missing <= 0.0 || self.cfg.max_cpu <= 0.0 {
            return Duration::ZERO;
        }
        Duration::from_secs_f64(missing / self.cfg.max_cpu)
    }

    /// Records a finished read and what it cost.
    pub fn record(&mut self, now: Time, cost: Duration) {
        self.refill(now);
        let c = cost.as_secs_f64();
        self.tokens -= c;
        self.last_cost = Some(c);
        self.max_cost = self.max_cost.max(c);
        self.spent += c;
        self.reads += 1;
    }

    /// The period between two full audits the cap chooses from the measured cost.
    pub fn audit_period(&self) -> Duration {
        let by_cost = if self.cfg.max_cpu > 0.0 {
            self.max_cost / self.cfg.max_cpu
        } else {
            f64::INFINITY
        };
        let lo = self.cfg.min_period.as_secs_f64();
        let hi = self.cfg.max_period.as_secs_f64().max(lo);
        Duration::from_secs_f64(by_cost.clamp(lo, hi))
    }
}

/// Why a read is due.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ReadReason {
    /// The first read after start.
    Initial,
    /// A re-read after a truth change, until the datapath converged.
    Reread,
    /// The periodic full audit.
    Audit,
}

impl ReadReason {
    /// Label for metrics and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            ReadReason::Initial => "initial",
            ReadReason::Reread => "reread",
            ReadReason::Audit => "audit",
        }
    }
}

/// When to read: re-reads after truth changes (bounded in time), else the periodic audit.
#[derive(Clone, Debug)]
pub struct ReadSchedule {
    reread_interval: Duration,
    reread_for: Duration,
    next_audit: Option<Time>,
    reread_until: Option<Time>,
    /// A change arrived after the start of the last read: read again at least once.
    change_pending: bool,
    last_start: Option<Time>,
    in_flight: bool,
}

impl ReadSchedule {
    /// Re-reads every `reread_interval` for at most `reread_for` after a change.
    pub fn new(reread_interval: Duration, reread_for: Duration) -> Self {
        Self {
            reread_interval,
            reread_for,
            next_audit: None,
            reread_until: None,
            change_pending: false,
            last_start: None,
            in_flight: false,
        }
    }

    /// The desired backends of some Service changed at `now`.
    pub fn on_change(&mut self, now: Time) {
        self.change_pending = true;
        self.reread_until = now.checked_add(self.reread_for).ok();
    }

    /// The read that is due now, if any. `unconverged`: the datapath still has open,
    /// unconverged trackings (keep re-reading while the re-read window lasts).
    pub fn due(&self, now: Time, unconverged: bool) -> Option<ReadReason> {
        if self.in_flight {
            return None;
        }
        let Some(last) = self.last_start else {
            return Some(ReadReason::Initial);
        };
        let rereading = self.reread_until.is_some_and(|u| now < u)
            && (self.change_pending || unconverged)
            && last
                .checked_add(self.reread_interval)
                .is_ok_and(|t| t <= now);
        if rereading {
            return Some(ReadReason::Reread);
        }
        match self.next_audit {
            Some(t) if now >= t => Some(ReadReason::Audit),
            _ => None,
        }
    }

    /// A read starts.
    pub fn started(&mut self, now: Time) {
        self.in_flight = true;
        self.change_pending = false;
        self.last_start = Some(now);
    }

    /// The read ended (successfully or not); the next audit is `period` later.
    pub fn finished(&mut self, now: Time, period: Duration) {
        self.in_flight = false;
        self.next_audit = now.checked_add(period).ok();
    }

    /// When the next audit is due.
    pub fn next_audit(&self) -> Option<Time> {
        self.next_audit
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn t(s: i64) -> Time {
        Time::from_second(1_800_000_000 + s).unwrap()
    }

    #[test]
    fn parses_proc_stat_with_odd_command_names() {
        let line = "4242 (ghost ip (x)) S 1 4242 4242 0 -1 4194560 1000 0 0 0 250 50 120 30 20 0 9 0 100 0 0";
        let c = CpuTimes::parse_stat(line).unwrap();
        assert_eq!(c.own, Duration::from_secs(3));
        assert_eq!(c.children, Duration::from_millis(1500));
        assert_eq!(CpuTimes::parse_stat("garbage"), None);
        assert_eq!(CpuTimes::parse_stat("1 (x) S 1 2"), None);
    }

    #[test]
    fn period_follows_cost_within_bounds() {
        let mut cap = CostCap::new(CostConfig::default());
        assert_eq!(cap.audit_period(), Duration::from_secs(10));
        cap.record(t(0), Duration::from_millis(30));
        // 0.03 s / 2 % = 1.5 s, raised to the 10 s floor.
        assert_eq!(cap.audit_period(), Duration::from_secs(10));
        cap.record(t(1), Duration::from_millis(1500));
        // 1.5 s / 2 % = 75 s.
        assert_eq!(cap.audit_period(), Duration::from_secs(75));
        cap.record(t(2), Duration::from_secs(20));
        assert_eq!(cap.audit_period(), Duration::from_secs(300));
    }

    #[test]
    fn average_cpu_stays_under_the_budget() {
        // Reads cost 1 s each; read whenever allowed for one hour.
        let mut cap = CostCap::new(CostConfig::default());
        let mut spent = 0.0;
        for s in 0..3600 {
            if cap.may_read(t(s)) {
                cap.record(t(s), Duration::from_secs(1));
                spent += 1.0;
            }
        }
        // 2 % of 3600 s is 72 s, plus the initial bucket (3 reads).
        assert!(spent <= 72.0 + 3.0, "spent {spent}");
        assert!(spent >= 60.0, "the cap should not starve reads: {spent}");
        assert!(cap.wait_for_read(t(3600)) <= Duration::from_secs(50));
    }

    #[test]
    fn rereads_follow_a_change_until_converged_then_audits() {
        let mut s = ReadSchedule::new(Duration::from_secs(1), Duration::from_secs(60));
        assert_eq!(s.due(t(0), false), Some(ReadReason::Initial));
        s.started(t(0));
        assert_eq!(s.due(t(0), false), None, "one read at a time");
        s.finished(t(0), Duration::from_secs(30));
        assert_eq!(s.due(t(10), false), None);
        s.on_change(t(10));
        assert_eq!(s.due(t(10), false), Some(ReadReason::Reread));
        s.started(t(10));
        s.finished(t(10), Duration::from_secs(30));
        // Still unconverged: read again every second.
        assert_eq!(s.due(t(10), true), None);
        assert_eq!(s.due(t(11), true), Some(ReadReason::Reread));
        // Converged: no more re-reads, the audit comes at its period.
        assert_eq!(s.due(t(11), false), None);
        assert_eq!(s.due(t(40), false), Some(ReadReason::Audit));
        // The re-read window is bounded.
        assert_eq!(s.due(t(71), true), Some(ReadReason::Audit));
        s.started(t(71));
        s.finished(t(71), Duration::from_secs(30));
        assert_eq!(s.due(t(72), true), None);
    }

    #[test]
    fn first_read_is_always_allowed() {
        let mut cap = CostCap::new(CostConfig {
            max_cpu: 0.0001,
            ..CostConfig::default()
        });
        assert!(cap.may_read(t(0)));
    }
}
