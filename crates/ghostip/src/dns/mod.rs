//! DNS probing: asks every DNS path (each CoreDNS pod, the kube-dns ClusterIP, NodeLocal DNSCache, overrides) what it answers for headless Service names.
//!
//! See [`Prober`] for the entry point. The pieces, each usable alone:
//!
//! - [`query`](mod@query): one uncached query to one server (UDP, no retries, TCP on
//!   truncation), with rcode, records, TTLs, latency and transport, or a failure mapped
//!   onto [`FailureReason`](ghostip_core::FailureReason).
//! - [`paths`]: the DNS paths implied by the truth, and their diff as CoreDNS pods come and go.
//! - [`names`]: the names to ask for a headless Service (A, AAAA, SRV).
//! - [`prober`]: event-driven bursts and a slow sweep within one global [`Budget`].
//! - [`connect`](mod@connect): a TCP connect probe, to measure exposure.
//!
//! How it works, the budget and the paths are described in `docs/DNS.md`.

pub mod budget;
pub mod connect;
pub mod prober;
pub mod query;

pub use budget::{Budget, DEFAULT_QUERIES_PER_SECOND};
pub use connect::{ConnectOutcome, ConnectProbe, ConnectProber, connect};
pub use ghostip_session::layers::dns::names::{
    self, DEFAULT_ZONE, NameConfig, NameError, ProbeName, QueryType, ServiceNames, service_names,
    sweep_names,
};
pub use ghostip_session::layers::dns::paths::{
    self, DnsPath, PathConfig, PathDiff, ServerParseError, diff, diff_with_truth, discover,
    parse_server,
};
pub use ghostip_session::layers::dns::probe::{ProbeCommand, ProbePath};
pub use prober::{
    DnsTransport, HickoryTransport, ProbeEvent, ProbeSource, ProbeStats, Prober, ProberConfig,
    StatsSnapshot,
};
pub use query::{AddrRecord, DnsAnswer, QueryConfig, QueryError, SrvRecord, Transport, query};
