//! Property tests of IP ownership intervals against a simple in-memory model: random
//! pod applies, deletions, IP changes and reuse, relists and restarts (the database is
//! reopened mid-sequence). Checks: no overlap per IP, at most one open interval per IP,
//! reuse opens a new interval, and `history`/`whois` agree with the model.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::HashSet;
use std::net::IpAddr;
use std::path::Path;

use ghostip::ledger::Ledger;
use ghostip_analysis::ownership::{EndReason, Ownership};
use ghostip_core::truth::PodRecord;
use ghostip_core::{PodRef, Time};
use ghostip_testkit::records::pod_record;
use proptest::prelude::*;

const IPS: u8 = 4;
const NAMES: u8 = 4;
const GENERATIONS: u8 = 2;

#[derive(Clone, Debug)]
enum Op {
    /// Apply pod (name, generation) listing `ips`, created `created_ago` seconds before now.
    Apply {
        name: u8,
        generation: u8,
        ips: Vec<u8>,
        created_ago: Option<u8>,
    },
    Gone {
        name: u8,
        generation: u8,
    },
    BeginRelist,
    FinishRelist,
    Reopen,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..NAMES, 0..GENERATIONS, proptest::collection::vec(0..IPS, 0..=2), proptest::option::of(0u8..10))
            .prop_map(|(name, generation, ips, created_ago)| Op::Apply { name, generation, ips, created_ago }),
        2 => (0..NAMES, 0..GENERATIONS).prop_map(|(name, generation)| Op::Gone { name, generation }),
        1 => Just(Op::BeginRelist),
        1 => Just(Op::FinishRelist),
        1 => Just(Op::Reopen),
    ]
}

fn base() -> Time {
    Time::from_second(1_700_000_000).unwrap()
}

fn t(s: i64) -> Time {
    base() + std::time::Duration::from_secs(u64::try_from(s).unwrap())
}

fn ip(i: u8) -> IpAddr {
    IpAddr::V4([10, 0, 0, i].into())
}

fn pod_ref(name: u8, generation: u8) -> PodRef {
    PodRef {
        namespace: "ns".into(),
        name: format!("p{name}"),
        uid: format!("p{name}-g{generation}"),
    }
}

// --- the model ---

#[derive(Clone, Debug, PartialEq)]
struct M {
    pod: PodRef,
    ip: u8,
    start: i64,
    closed: Option<i64>,
    reason: Option<EndReason>,
    approximate: bool,
    gone: Option<i64>,
}

#[derive(Default)]
struct Model {
    intervals: Vec<M>,
    relist: Option<HashSet<usize>>,
}

impl Model {
    fn close(&mut self, i: usize, at: i64, reason: EndReason, gone: Option<i64>) {
        let approximate = self.relist.is_some();
        let m = &mut self.intervals[i];
        m.closed = Some(at.max(m.start));
        m.reason = Some(reason);
        m.gone = m.gone.or(gone);
        m.approximate = approximate;
    }

    fn apply(&mut self, pod: &PodRef, ips: &[u8], created: Option<i64>, at: i64) {
        let mut listed: Vec<u8> = Vec::new();
        for i in ips {
            if !listed.contains(i) {
                listed.push(*i);
            }
        }
        let stale: Vec<usize> = (0..self.intervals.len())
            .filter(|&i| {
                let m = &self.intervals[i];
                m.closed.is_none() && m.pod == *pod && !listed.contains(&m.ip)
            })
            .collect();
        for i in stale {
            self.close(i, at, EndReason::IpChanged, Some(at));
        }
        for &addr in &listed {
            let open = (0..self.intervals.len())
                .find(|&i| self.intervals[i].ip == addr && self.intervals[i].closed.is_none());
            let idx = match open {
                Some(i) if self.intervals[i].pod == *pod => i,
                other => {
                    let wanted = created.map_or(at, |c| c.min(at));
                    let start = match other {
                        Some(prev) => {
                            let start = wanted.max(self.intervals[prev].start);
                            self.close(prev, start, EndReason::Reused, None);
                            start
                        }
                        None => {
                            let last = self.of_ip(addr).last().map(|&i| self.intervals[i].closed);
                            match last.flatten() {
                                Some(end) => wanted.max(end),
                                None => wanted,
                            }
                        }
                    };
                    self.intervals.push(M {
                        pod: pod.clone(),
                        ip: addr,
                        start,
                        closed: None,
                        reason: None,
                        approximate: false,
                        gone: None,
                    });
                    self.intervals.len() - 1
                }
            };
            if let Some(seen) = self.relist.as_mut() {
                seen.insert(idx);
            }
        }
    }

    fn gone(&mut self, pod: &PodRef, at: i64) {
        for i in 0..self.intervals.len() {
            if self.intervals[i].pod == *pod && self.intervals[i].closed.is_none() {
                self.close(i, at, EndReason::Gone, Some(at));
            }
        }
        for m in self
            .intervals
            .iter_mut()
            .filter(|m| m.pod == *pod && m.gone.is_none())
        {
            m.gone = Some(at);
        }
    }

    fn finish_relist(&mut self, at: i64) -> usize {
        let Some(seen) = self.relist.clone() else {
            return 0;
        };
        let mut n = 0;
        for i in 0..self.intervals.len() {
            if self.intervals[i].closed.is_none() && !seen.contains(&i) {
                self.close(i, at, EndReason::Relist, Some(at));
                n += 1;
            }
        }
        self.relist = None;
        n
    }

    /// Indices of `ip`'s intervals in (start, insertion) order.
    fn of_ip(&self, addr: u8) -> Vec<usize> {
        let mut v: Vec<usize> = (0..self.intervals.len())
            .filter(|&i| self.intervals[i].ip == addr)
            .collect();
        v.sort_by_key(|&i| (self.intervals[i].start, i));
        v
    }

    /// Who owned `addr` at `at` nanoseconds after the base: (at, before, after).
    fn whois(&self, addr: u8, at: i64) -> (Option<&M>, Option<&M>, Option<&M>) {
        const S: i64 = 1_000_000_000;
        let list = self.of_ip(addr);
        let pos = list
            .iter()
            .rposition(|&i| self.intervals[i].start * S <= at);
        let after = list
            .iter()
            .find(|&&i| self.intervals[i].start * S > at)
            .map(|&i| &self.intervals[i]);
        match pos {
            Some(p) => {
                let cur = &self.intervals[list[p]];
                if cur.closed.is_none_or(|c| c * S > at) {
                    (
                        Some(cur),
                        p.checked_sub(1).map(|q| &self.intervals[list[q]]),
                        after,
                    )
                } else {
                    (None, Some(cur), after)
                }
            }
            None => (None, None, after),
        }
    }
}

fn record(pod: &PodRef, ips: &[u8], created: Option<i64>) -> PodRecord {
    PodRecord {
        node: Some("n".into()),
        created: created.map(t),
        ..pod_record(pod.clone(), ips.iter().map(|&i| ip(i)).collect())
    }
}

/// What the ledger and the model must agree on about one ownership.
type Key = (
    String,
    String,
    Time,
    Option<Time>,
    Option<EndReason>,
    bool,
    Option<Time>,
);

fn key(o: &Ownership) -> Key {
    (
        o.pod.name.clone(),
        o.pod.uid.clone(),
        o.start,
        o.closed,
        o.end_reason,
        o.approximate,
        o.gone,
    )
}

fn mkey(m: &M) -> Key {
    (
        m.pod.name.clone(),
        m.pod.uid.clone(),
        t(m.start),
        m.closed.map(t),
        m.reason,
        m.approximate,
        m.gone.map(t),
    )
}

fn check_against_model(ledger: &Ledger, model: &Model, times: &[i64]) -> Result<(), TestCaseError> {
    for addr in 0..IPS {
        let history = ledger.history(ip(addr)).unwrap();
        let expected: Vec<_> = model
            .of_ip(addr)
            .into_iter()
            .map(|i| mkey(&model.intervals[i]))
            .collect();
        let got: Vec<_> = history.iter().map(key).collect();
        prop_assert_eq!(&got, &expected, "history of {}", ip(addr));
        // No overlap, at most one open interval, and only the last may be open.
        for pair in history.windows(2) {
            prop_assert!(
                pair[0].closed.is_some_and(|c| c <= pair[1].start),
                "overlap on {}: {:?}",
                ip(addr),
                pair
            );
        }
        for &s in times {
            // Just before, at and just after each instant something happened.
            for at in [
                s * 1_000_000_000 - 1,
                s * 1_000_000_000,
                s * 1_000_000_000 + 1,
            ] {
                let w = ledger
                    .whois(
                        ip(addr),
                        base()
                            .checked_add(jiff::SignedDuration::from_nanos(at))
                            .unwrap(),
                    )
                    .unwrap();
                let (a, b, c) = model.whois(addr, at);
                let got = (
                    w.at_time.as_ref().map(key),
                    w.before.as_ref().map(key),
                    w.after.as_ref().map(key),
                );
                prop_assert_eq!(
                    got,
                    (a.map(mkey), b.map(mkey), c.map(mkey)),
                    "whois {} at {}ns",
                    ip(addr),
                    at
                );
            }
        }
    }
    Ok(())
}

fn run(path: &Path, ops: &[(Op, u8)]) -> Result<(), TestCaseError> {
    let mut ledger = Ledger::open(path).unwrap();
    let mut model = Model::default();
    let mut now: i64 = 20;
    let mut times = vec![0, now];
    for (op, dt) in ops {
        now += i64::from(*dt);
        times.push(now);
        match op {
            Op::Apply {
                name,
                generation,
                ips,
                created_ago,
            } => {
                let p = pod_ref(*name, *generation);
                let created = created_ago.map(|a| now - i64::from(a));
                let reused: Vec<(u8, usize)> = ips
                    .iter()
                    .filter_map(|&a| {
                        let h = ledger.history(ip(a)).unwrap();
                        h.last()
                            .filter(|o| o.closed.is_none() && o.pod != p)
                            .map(|_| (a, h.len()))
                    })
                    .collect();
                ledger.apply_pod(&record(&p, ips, created), t(now)).unwrap();
                model.apply(&p, ips, created, now);
                // IP reuse opens a new interval for the new owner.
                for (a, before) in reused {
                    let h = ledger.history(ip(a)).unwrap();
                    prop_assert_eq!(h.len(), before + 1);
                    prop_assert_eq!(&h[h.len() - 1].pod, &p);
                    prop_assert_eq!(h[h.len() - 2].end_reason, Some(EndReason::Reused));
                }
            }
            Op::Gone { name, generation } => {
                let p = pod_ref(*name, *generation);
                ledger.pod_gone(&p, t(now)).unwrap();
                model.gone(&p, now);
            }
            Op::BeginRelist => {
                ledger.begin_pod_relist().unwrap();
                model.relist = Some(HashSet::new());
            }
            Op::FinishRelist => {
                let n = ledger.finish_pod_relist(t(now)).unwrap();
                prop_assert_eq!(n, model.finish_relist(now));
            }
            Op::Reopen => {
                drop(ledger);
                ledger = Ledger::open(path).unwrap();
                model.relist = None;
            }
        }
        for addr in 0..IPS {
            let open = ledger
                .history(ip(addr))
                .unwrap()
                .iter()
                .filter(|o| o.closed.is_none())
                .count();
            prop_assert!(open <= 1, "{} open intervals on {}", open, ip(addr));
        }
    }
    times.push(now + 5);
    times.dedup();
    check_against_model(&ledger, &model, &times)?;
    let report = ledger.verify().unwrap();
    prop_assert!(report.is_ok(), "{:?}", report);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn intervals_match_the_model(ops in proptest::collection::vec((op(), 0u8..4), 1..40)) {
        let dir = tempfile::tempdir().unwrap();
        run(&dir.path().join("p.db"), &ops)?;
    }
}
