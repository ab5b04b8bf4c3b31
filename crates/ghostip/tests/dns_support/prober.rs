//! A prober running in the test's runtime, its events collected for the assertions.

use std::sync::{Arc, Mutex};

use ghostip::clock::TokioClock;
use ghostip::layers::dns::prober::{DnsTransport, ProbeEvent, ProbeStats, Prober, ProberConfig};
use ghostip_session::layers::dns::probe::ProbeCommand;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// A running prober: its command channel, every event so far, its counters.
pub struct Running {
    pub commands: mpsc::Sender<ProbeCommand>,
    pub events: Arc<Mutex<Vec<ProbeEvent>>>,
    pub stats: Arc<ProbeStats>,
    pub cancel: CancellationToken,
    pub task: JoinHandle<()>,
    pub clock: TokioClock,
}

impl Running {
    /// Runs a prober over `transport` and `clock` until cancelled.
    pub fn spawn<T: DnsTransport>(config: ProberConfig, transport: T, clock: TokioClock) -> Self {
        let prober = Prober::with_transport(config, transport, clock);
        let stats = prober.stats();
        let (commands, command_rx) = mpsc::channel(16);
        let (event_tx, mut event_rx) = mpsc::channel(256);
        let events = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&events);
        tokio::spawn(async move {
            while let Some(e) = event_rx.recv().await {
                sink.lock().unwrap().push(e);
            }
        });
        let cancel = CancellationToken::new();
        let task = tokio::spawn(prober.run(command_rx, event_tx, cancel.clone()));
        Self {
            commands,
            events,
            stats,
            cancel,
            task,
            clock,
        }
    }
}
