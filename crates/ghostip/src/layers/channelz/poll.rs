//! `watch`'s channelz schedule: reads each opted-in pod at most once per interval, a bounded number in flight, every request within the shared budget.
//!
//! Runs as its own task ([`Poller::run`]): it starts the next read as soon as one finishes or
//! one falls due, not only when the pipeline steps. The pods come in on a watch channel (the
//! adapter's discovery; a benchmark or a test feeds them directly), each finished read goes
//! out on a bounded channel. Pods are read oldest-due first, so when the budget cannot cover
//! every pod once per interval every pod's reads stretch alike (the effective interval,
//! [`PolledRead::interval`]) and none is skipped.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use ghostip_core::Time;
use ghostip_session::layers::channelz::{ClientPod, ClientRead};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::budget::ReadBudget;
use super::reader::{ReadBounds, ReadError, read_within};
use crate::clock::TokioClock;

/// One read: where, within which bounds, under which budget.
pub type ReadFn = Arc<
    dyn Fn(
            SocketAddr,
            ReadBounds,
            Option<ReadBudget>,
        ) -> BoxFuture<'static, Result<ClientRead, ReadError>>
        + Send
        + Sync,
>;

/// The real read ([`read_within`]).
pub fn grpc_reader() -> ReadFn {
    Arc::new(|addr, bounds, budget| {
        Box::pin(async move { read_within(addr, &bounds, budget.as_ref()).await })
    })
}

/// The schedule's settings.
#[derive(Clone, Debug)]
pub struct PollConfig {
    /// Each pod read at most this often.
    pub interval: Duration,
    /// Reads in flight.
    pub concurrency: usize,
    /// Bounds of one read.
    pub bounds: ReadBounds,
}

/// A finished read.
#[derive(Debug)]
pub struct PolledRead {
    /// The pod.
    pub pod: ClientPod,
    /// When the read started.
    pub at: Time,
    /// Since the pod's previous read started (`None` for its first): the effective interval.
    pub interval: Option<Duration>,
    /// What it read.
    pub result: Result<ClientRead, ReadError>,
}

/// The schedule.
pub struct Poller {
    cfg: PollConfig,
    budget: Option<ReadBudget>,
    reader: ReadFn,
    clock: TokioClock,
    pods: BTreeMap<ClientPod, SocketAddr>,
    next_read: BTreeMap<ClientPod, Instant>,
    last_start: BTreeMap<ClientPod, Instant>,
    reading: BTreeSet<ClientPod>,
    inflight: JoinSet<PolledRead>,
}

impl Poller {
    /// A schedule with no pods yet.
    pub fn new(cfg: PollConfig, budget: Option<ReadBudget>, reader: ReadFn) -> Self {
        Self {
            cfg,
            budget,
            reader,
            clock: TokioClock::new(),
            pods: BTreeMap::new(),
            next_read: BTreeMap::new(),
            last_start: BTreeMap::new(),
            reading: BTreeSet::new(),
            inflight: JoinSet::new(),
        }
    }

    /// Replaces the pods; a pod that left is forgotten (a read in flight still finishes).
    pub fn set_pods(&mut self, pods: BTreeMap<ClientPod, SocketAddr>) {
        self.next_read.retain(|p, _| pods.contains_key(p));
        self.last_start.retain(|p, _| pods.contains_key(p));
        self.pods = pods;
    }

    /// Starts due pods, oldest due first (never read: first of all), up to the concurrency.
    /// Returns when the next pod not in flight falls due.
    fn start_due(&mut self, now: Instant) -> Option<Instant> {
        let mut due: Vec<(Option<Instant>, &ClientPod)> = self
            .pods
            .keys()
            .filter(|p| !self.reading.contains(*p))
            .map(|p| (self.next_read.get(p).copied(), p))
            .collect();
        due.sort();
        let mut started = Vec::new();
        let mut next = None;
        for (at, pod) in due {
            if at.is_some_and(|t| t > now) {
                next = at;
                break;
            }
            if self.inflight.len() + started.len() >= self.cfg.concurrency.max(1) {
                break;
            }
            started.push(pod.clone());
        }
        for pod in started {
            let Some(addr) = self.pods.get(&pod).copied() else {
                continue;
            };
            self.next_read.insert(pod.clone(), now + self.cfg.interval);
            let interval = self
                .last_start
                .insert(pod.clone(), now)
                .map(|t| now.duration_since(t));
            self.reading.insert(pod.clone());
            let fut = (self.reader)(addr, self.cfg.bounds.clone(), self.budget.clone());
            let at = self.clock.at(now);
            self.inflight.spawn(async move {
                PolledRead {
                    pod,
                    at,
                    interval,
                    result: fut.await,
                }
            });
        }
        next
    }

    /// Reads until `cancel`, the pods' sender or the results' receiver goes away.
    pub async fn run(
        mut self,
        mut pods: watch::Receiver<BTreeMap<ClientPod, SocketAddr>>,
        out: mpsc::Sender<PolledRead>,
        cancel: CancellationToken,
    ) {
        self.set_pods(pods.borrow_and_update().clone());
        loop {
            let now = Instant::now();
            let wake = self
                .start_due(now)
                .unwrap_or(now + Duration::from_secs(3600));
            tokio::select! {
                _ = cancel.cancelled() => break,
                changed = pods.changed() => {
                    if changed.is_err() {
                        break;
                    }
                    let next = pods.borrow_and_update().clone();
                    self.set_pods(next);
                }
                Some(done) = self.inflight.join_next(), if !self.inflight.is_empty() => {
                    let Ok(done) = done else { continue };
                    self.reading.remove(&done.pod);
                    if out.send(done).await.is_err() {
                        break;
                    }
                }
                _ = tokio::time::sleep_until(wake) => {}
            }
        }
        self.inflight.abort_all();
    }
}

#[cfg(test)]
mod tests {
    use std::num::NonZeroU32;
    use std::sync::Mutex;

    use super::*;

    /// A reader that sends `requests` requests per read through the budget as the real one
    /// does (one page alone, then the rest as one batch) and notes when each was sent.
    fn counting_reader(requests: u32, sent: Arc<Mutex<Vec<Instant>>>) -> ReadFn {
        Arc::new(move |_addr, _bounds, budget| {
            let sent = Arc::clone(&sent);
            Box::pin(async move {
                for n in [1, requests.saturating_sub(1)] {
                    if let Some(b) = &budget {
                        b.acquire_many(n).await;
                    }
                    if let Ok(mut s) = sent.lock() {
                        s.extend(std::iter::repeat_n(Instant::now(), n as usize));
                    }
                    // The client's answers.
                    tokio::time::sleep(Duration::from_micros(200)).await;
                }
                Ok(ClientRead::default())
            })
        })
    }

    fn pods(n: usize) -> BTreeMap<ClientPod, SocketAddr> {
        (0..n)
            .map(|i| {
                let pod = ClientPod {
                    namespace: "demo".into(),
                    name: format!("client-{i:03}"),
                };
                (pod, SocketAddr::from(([127, 0, 0, 1], 9901)))
            })
            .collect()
    }

    /// Runs a poller over `n` pods for `run` of tokio's paused time; returns the requests'
    /// send instants and the finished reads.
    async fn poll(
        n: usize,
        requests: u32,
        qps: Option<u32>,
        run: Duration,
    ) -> (Vec<Instant>, Vec<PolledRead>) {
        let sent = Arc::new(Mutex::new(Vec::new()));
        let cfg = PollConfig {
            interval: Duration::from_secs(10),
            concurrency: 4,
            bounds: ReadBounds::default(),
        };
        let budget = qps.map(|q| ReadBudget::new(NonZeroU32::new(q).unwrap_or(NonZeroU32::MIN)));
        let poller = Poller::new(cfg, budget, counting_reader(requests, Arc::clone(&sent)));
        let (_pods_tx, pods_rx) = watch::channel(pods(n));
        let (out, mut rx) = mpsc::channel(16);
        let cancel = CancellationToken::new();
        let task = tokio::spawn(poller.run(pods_rx, out, cancel.clone()));
        let end = Instant::now() + run;
        let mut reads = Vec::new();
        while let Ok(Some(r)) = tokio::time::timeout_at(end, rx.recv()).await {
            reads.push(r);
        }
        cancel.cancel();
        let _ = task.await;
        let sent = sent.lock().map(|s| s.clone()).unwrap_or_default();
        (sent, reads)
    }

    /// 500 clients of 20 subchannels (21 requests a read) at 200 requests/s need 1 050/s
    /// at a 10 s interval: the budget holds (every one-second window within 200 plus one
    /// batch of 20, the whole run within 200/s), every pod is read, and each pod's interval
    /// stretches to 500 × 21 / 200 = 52.5 s, the same for all.
    #[tokio::test(start_paused = true)]
    async fn the_budget_holds_and_reads_stretch_alike_for_every_pod() {
        let run = Duration::from_secs(120);
        let (sent, reads) = poll(500, 21, Some(200), run).await;
        assert!(sent.len() > 20_000, "only {} requests", sent.len());
        assert!(sent.len() <= 200 * 120 + 20, "{} requests", sent.len());
        for w in sent.windows(200 + 20 + 1) {
            if let (Some(a), Some(b)) = (w.first(), w.last()) {
                assert!(
                    b.duration_since(*a) >= Duration::from_secs(1),
                    "221 requests within {:?}",
                    b.duration_since(*a)
                );
            }
        }
        let read: BTreeSet<&ClientPod> = reads.iter().map(|r| &r.pod).collect();
        assert_eq!(read.len(), 500, "every pod is read");
        let intervals: Vec<Duration> = reads.iter().filter_map(|r| r.interval).collect();
        assert!(intervals.len() > 400, "{} second reads", intervals.len());
        for i in intervals {
            assert!(
                i >= Duration::from_millis(52_000) && i <= Duration::from_millis(53_500),
                "effective interval {i:?}"
            );
        }
    }

    /// The same pods without a budget: the rate is what the interval asks for, above the
    /// budget of the test above (so that test's bound is the budget's doing).
    #[tokio::test(start_paused = true)]
    async fn without_a_budget_the_interval_alone_sets_the_rate() {
        let (sent, reads) = poll(500, 21, None, Duration::from_secs(30)).await;
        // 500 × 21 requests every 10 s: 1 050/s.
        let per_second = sent.len() as f64 / 30.0;
        assert!(per_second > 1000.0, "{per_second:.0} requests/s");
        for i in reads.iter().filter_map(|r| r.interval) {
            assert!(i >= Duration::from_secs(10) && i < Duration::from_millis(10_100));
        }
    }

    /// A budget that covers every pod keeps the interval as set.
    #[tokio::test(start_paused = true)]
    async fn a_budget_that_covers_every_pod_keeps_the_interval() {
        let (_, reads) = poll(20, 21, Some(200), Duration::from_secs(60)).await;
        let intervals: Vec<Duration> = reads.iter().filter_map(|r| r.interval).collect();
        assert!(intervals.len() >= 80);
        for i in intervals {
            assert!(
                i >= Duration::from_secs(10) && i < Duration::from_millis(10_500),
                "{i:?}"
            );
        }
    }
}
