//! The conntrack entries that count, aggregated while the dump streams: live TCP and UDP flows whose client is a pod of this node, one record per (protocol, client, destination, backend).
//!
//! Pure: [`FlowCollector::push_view`] takes each flow as the netlink decoder hands it over
//! (a borrowed [`CtView`], nothing allocated per entry; [`FlowCollector::push`] takes an
//! owned [`CtEntry`] of a text dump the same way) and keeps only what the join needs, so memory follows the number of distinct
//! flows of this node's pods, not the size of the table (100 000 entries of a few clients
//! talking to a few backends are a few records).
//!
//! An entry counts when
//! - it is not a `[DESTROY]` event;
//! - it is UDP (any entry: a client still sends), or TCP in `ESTABLISHED` or `SYN_SENT`
//!   (a connection that carries traffic or is being opened; closing states do not count);
//!   a `SYN_SENT` entry only while its last SYN is at most [`SYN_SENT_LIVE_S`] old: a
//!   client that gave up on a connect closes its socket without a packet, and the kernel
//!   keeps the entry for its whole timeout (120 s by default) although nothing is sent;
//! - its original source is one of the given client addresses (this node's pods). Flows
//!   from the node itself (host-network processes, ghostip's own connect and DNS probes)
//!   and flows that only pass through the node (a remote client's, to a pod here) are
//!   left to the client's node.

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::time::Duration;

use ghostip_core::{Protocol, Target};
use ghostip_datapath::conntrack_netlink::CtView;
use ghostip_datapath::{CtEntry, CtTuple};

/// One flow as the join sees it: who sends, where it sent, where it goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FlowKey {
    /// Layer-4 protocol.
    pub proto: Protocol,
    /// Original source address (a pod of this node).
    pub client: IpAddr,
    /// Original destination: a Service address when the flow was DNATed.
    pub dst: Target,
    /// Where the flow goes (the reply's source): the backend a DNATed flow is pinned to;
    /// `dst` itself otherwise.
    pub backend: Target,
}

impl FlowKey {
    /// Whether the flow was DNATed (`dst` is a Service address).
    pub fn dnat(&self) -> bool {
        self.dst != self.backend
    }
}

/// The entries aggregated under one [`FlowKey`] (one per source port).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlowCounts {
    /// Conntrack entries.
    pub entries: u32,
    /// Of which `[UNREPLIED]` (nothing answered).
    pub unreplied: u32,
    /// Of which TCP `SYN_SENT`: connects still being tried.
    pub syn_sent: u32,
    /// Longest remaining timeout among them, in seconds.
    pub max_timeout: Option<u32>,
    /// Time since the newest packet among its entries, in seconds: the state's timeout less
    /// the remaining one (the kernel re-arms the timeout on every packet). `None` when one
    /// of its entries cannot tell: UDP (its timeout depends on whether a reply was ever
    /// seen), or an `ESTABLISHED` entry whose remaining timeout is within the shorter ones
    /// the kernel uses for unacknowledged data or retransmissions.
    pub idle_s: Option<u32>,
}

/// How long a `SYN_SENT` entry counts after its last SYN: a connect in progress sends its
/// SYNs 1 s and 3 s after the first, so a client with a connect timeout up to 3 s is
/// followed exactly; a longer connect waits 4 s, 8 s, … between SYNs and may drop out of
/// one read between two of them.
pub const SYN_SENT_LIVE_S: u32 = 3;

/// The node's TCP conntrack timeouts (`net.netfilter.nf_conntrack_tcp_timeout_*`), in
/// seconds: what a fresh packet re-arms an entry's timeout to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TcpTimeouts {
    /// `nf_conntrack_tcp_timeout_syn_sent`.
    pub syn_sent: u32,
    /// `nf_conntrack_tcp_timeout_established` (kube-proxy sets it to 1 day by default).
    pub established: u32,
    /// The longer of `nf_conntrack_tcp_timeout_unacknowledged` and `_max_retrans`: an
    /// `ESTABLISHED` entry with data in flight or retransmitted is re-armed to that instead.
    pub in_flight: u32,
}

impl Default for TcpTimeouts {
    /// The kernel's defaults: 120 s, 5 days, 300 s.
    fn default() -> Self {
        Self {
            syn_sent: 120,
            established: 432_000,
            in_flight: 300,
        }
    }
}

impl TcpTimeouts {
    /// Reads them from the text of the sysctls under `/proc/sys/net/netfilter`, named
    /// without their `nf_conntrack_tcp_timeout_` prefix (`syn_sent`, `established`,
    /// `unacknowledged`, `max_retrans`); one that is missing or not a number keeps the
    /// kernel's default.
    pub fn from_sysctls(read: impl Fn(&str) -> Option<String>) -> Self {
        let d = Self::default();
        let get = |name: &str, default: u32| {
            read(name)
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(default)
        };
        Self {
            syn_sent: get("syn_sent", d.syn_sent),
            established: get("established", d.established),
            in_flight: get("unacknowledged", d.in_flight).max(get("max_retrans", d.in_flight)),
        }
    }

    /// Seconds since an entry's last packet, from its state and remaining timeout, where
    /// they tell.
    fn idle(&self, state: TcpState, remaining: u32) -> Option<u32> {
        match state {
            TcpState::SynSent => Some(self.syn_sent.saturating_sub(remaining)),
            TcpState::Established if remaining > self.in_flight => {
                Some(self.established.saturating_sub(remaining))
            }
            TcpState::Established => None,
        }
    }
}

/// The TCP states that count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TcpState {
    SynSent,
    Established,
}

impl Flow {
    /// When its newest packet was sent, for a read made at `at`: the kernel counts the
    /// remaining timeout in whole seconds, rounded down, so the packet went out in the
    /// second before `at` − idle + 1 s; its middle is within half a second of the truth.
    pub fn last_packet(&self, at: ghostip_core::Time) -> Option<ghostip_core::Time> {
        let idle = match self.counts.idle_s? {
            0 => Duration::ZERO,
            n => Duration::from_secs(u64::from(n)) - Duration::from_millis(500),
        };
        at.checked_sub(idle).ok()
    }

    /// When the client last tried it, where that is not `at` itself: a flow of connects
    /// only (every entry `SYN_SENT`) was last tried at its last SYN; a flow with an
    /// established connection is held by the client at the read, however idle.
    pub fn last_tried(&self, at: ghostip_core::Time) -> Option<ghostip_core::Time> {
        let c = &self.counts;
        if c.entries > 0 && c.syn_sent == c.entries {
            self.last_packet(at)
        } else {
            None
        }
    }
}

/// One aggregated flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Flow {
    /// What it is.
    pub key: FlowKey,
    /// How many entries.
    pub counts: FlowCounts,
}

/// What one complete dump held, reduced to the flows that count.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CollectedFlows {
    /// Aggregated flows, sorted by key.
    pub flows: Vec<Flow>,
    /// Entries seen in the dump.
    pub entries: u64,
    /// Entries that counted (live, from a client of this node).
    pub counted: u64,
}

/// Aggregates a dump's entries, one at a time.
#[derive(Debug, Default)]
pub struct FlowCollector {
    clients: HashSet<IpAddr>,
    timeouts: TcpTimeouts,
    flows: HashMap<FlowKey, FlowCounts>,
    entries: u64,
    counted: u64,
}

/// `CTA_PROTOINFO_TCP_STATE` values of `ESTABLISHED` and `SYN_SENT`.
const TCP_ESTABLISHED: u8 = 3;
const TCP_SYN_SENT: u8 = 1;
const IPPROTO_TCP: u8 = 6;
const IPPROTO_UDP: u8 = 17;

type Counted = Option<(Protocol, Option<TcpState>)>;

fn protocol(e: &CtEntry) -> Counted {
    if e.event.as_deref() == Some("DESTROY") {
        return None;
    }
    match (e.proto.as_str(), e.state.as_deref()) {
        ("udp", _) => Some((Protocol::Udp, None)),
        ("tcp", Some("ESTABLISHED")) => Some((Protocol::Tcp, Some(TcpState::Established))),
        ("tcp", Some("SYN_SENT")) => Some((Protocol::Tcp, Some(TcpState::SynSent))),
        _ => None,
    }
}

fn view_protocol(v: &CtView<'_>) -> Counted {
    if v.is_destroy() {
        return None;
    }
    match (v.proto, v.tcp_state) {
        (IPPROTO_UDP, _) => Some((Protocol::Udp, None)),
        (IPPROTO_TCP, Some(TCP_ESTABLISHED)) => Some((Protocol::Tcp, Some(TcpState::Established))),
        (IPPROTO_TCP, Some(TCP_SYN_SENT)) => Some((Protocol::Tcp, Some(TcpState::SynSent))),
        _ => None,
    }
}

fn target(ip: IpAddr, port: Option<u16>) -> Target {
    let ip = ip.to_canonical();
    match port {
        Some(p) => Target::socket(ip, p),
        None => Target::ip(ip),
    }
}

impl FlowCollector {
    /// A collector keeping the flows sent by `clients` (this node's pod IPs), with the
    /// kernel's default TCP timeouts.
    pub fn new(clients: impl IntoIterator<Item = IpAddr>) -> Self {
        Self::with_timeouts(clients, TcpTimeouts::default())
    }

    /// A collector for a node whose TCP conntrack timeouts are `timeouts`.
    pub fn with_timeouts(clients: impl IntoIterator<Item = IpAddr>, timeouts: TcpTimeouts) -> Self {
        Self {
            clients: clients.into_iter().map(|ip| ip.to_canonical()).collect(),
            timeouts,
            ..Self::default()
        }
    }

    /// Takes one entry of the dump.
    pub fn push(&mut self, e: &CtEntry) {
        self.add(protocol(e), &e.orig, &e.reply, e.unreplied, e.timeout);
    }

    /// Takes one flow of a netlink dump as the decoder hands it over.
    pub fn push_view(&mut self, v: &CtView<'_>) {
        self.add(
            view_protocol(v),
            &v.orig,
            &v.reply,
            v.unreplied(),
            v.timeout,
        );
    }

    fn add(
        &mut self,
        counted: Counted,
        orig: &CtTuple,
        reply: &CtTuple,
        unreplied: bool,
        timeout: Option<u32>,
    ) {
        self.entries += 1;
        let Some((proto, state)) = counted else {
            return;
        };
        let client = orig.src.to_canonical();
        if !self.clients.contains(&client) {
            return;
        }
        let idle = state
            .zip(timeout)
            .and_then(|(state, t)| self.timeouts.idle(state, t));
        if state == Some(TcpState::SynSent) && idle.is_some_and(|i| i > SYN_SENT_LIVE_S) {
            return;
        }
        self.counted += 1;
        let key = FlowKey {
            proto,
            client,
            dst: target(orig.dst, orig.dport),
            backend: target(reply.src, reply.sport),
        };
        let c = self.flows.entry(key).or_default();
        // Known only when every entry of the flow tells.
        c.idle_s = if c.entries == 0 {
            idle
        } else {
            c.idle_s.zip(idle).map(|(a, b)| a.min(b))
        };
        c.entries = c.entries.saturating_add(1);
        c.unreplied = c.unreplied.saturating_add(u32::from(unreplied));
        c.syn_sent = c
            .syn_sent
            .saturating_add(u32::from(state == Some(TcpState::SynSent)));
        c.max_timeout = c.max_timeout.max(timeout);
    }

    /// The flows, sorted by key.
    pub fn finish(self) -> CollectedFlows {
        let mut flows: Vec<Flow> = self
            .flows
            .into_iter()
            .map(|(key, counts)| Flow { key, counts })
            .collect();
        flows.sort_unstable_by_key(|f| f.key);
        CollectedFlows {
            flows,
            entries: self.entries,
            counted: self.counted,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const DUMP: &str = "\
udp      17 29 src=10.244.1.10 dst=10.96.0.10 sport=40001 dport=53 src=10.244.3.53 dst=10.244.1.10 sport=53 dport=40001 mark=0 use=1
udp      17 27 src=10.244.1.10 dst=10.96.0.10 sport=40002 dport=53 [UNREPLIED] src=10.244.3.53 dst=10.244.1.10 sport=53 dport=40002 mark=0 use=1
tcp      6 431999 ESTABLISHED src=10.244.1.10 dst=10.96.5.5 sport=51000 dport=80 src=10.244.3.71 dst=10.244.1.10 sport=8080 dport=51000 [ASSURED] mark=0 use=1
tcp      6 119 SYN_SENT src=10.244.1.10 dst=10.244.3.72 sport=51001 dport=9000 [UNREPLIED] src=10.244.3.72 dst=10.244.1.10 sport=9000 dport=51001 mark=0 use=1
tcp      6 59 CLOSE_WAIT src=10.244.1.10 dst=10.244.3.71 sport=51002 dport=8080 src=10.244.3.71 dst=10.244.1.10 sport=8080 dport=51002 [ASSURED] mark=0 use=1
tcp      6 431999 ESTABLISHED src=10.200.0.11 dst=10.244.3.71 sport=52000 dport=8080 src=10.244.3.71 dst=10.200.0.11 sport=8080 dport=52000 [ASSURED] mark=0 use=1
tcp      6 431999 ESTABLISHED src=10.244.2.9 dst=10.244.1.10 sport=53000 dport=8080 src=10.244.1.10 dst=10.244.2.9 sport=8080 dport=53000 [ASSURED] mark=0 use=1
icmp     1 29 src=10.244.1.10 dst=10.244.3.71 type=8 code=0 id=7 src=10.244.3.71 dst=10.244.1.10 type=0 code=0 id=7 mark=0 use=1
";

    fn collect(clients: &[&str]) -> CollectedFlows {
        let mut c = FlowCollector::new(clients.iter().map(|ip| ip.parse().unwrap()));
        let table = ghostip_datapath::conntrack::parse_str(DUMP).unwrap();
        for e in &table.entries {
            c.push(e);
        }
        c.finish()
    }

    fn sock(s: &str) -> Target {
        let a: std::net::SocketAddr = s.parse().unwrap();
        Target::socket(a.ip(), a.port())
    }

    /// Only live flows of this node's pods count, aggregated across source ports: the
    /// closing TCP state, ICMP, the node's own flow and a remote client's flow to a pod
    /// here do not.
    #[test]
    fn live_flows_of_local_pods_are_aggregated_per_backend() {
        let c = collect(&["10.244.1.10"]);
        assert_eq!(c.entries, 8);
        assert_eq!(c.counted, 4);
        let keys: Vec<(Protocol, Target, Target, FlowCounts)> = c
            .flows
            .iter()
            .map(|f| (f.key.proto, f.key.dst, f.key.backend, f.counts))
            .collect();
        assert_eq!(
            keys,
            vec![
                (
                    Protocol::Tcp,
                    sock("10.96.5.5:80"),
                    sock("10.244.3.71:8080"),
                    FlowCounts {
                        entries: 1,
                        unreplied: 0,
                        syn_sent: 0,
                        max_timeout: Some(431_999),
                        idle_s: Some(1),
                    }
                ),
                (
                    Protocol::Tcp,
                    sock("10.244.3.72:9000"),
                    sock("10.244.3.72:9000"),
                    FlowCounts {
                        entries: 1,
                        unreplied: 1,
                        syn_sent: 1,
                        max_timeout: Some(119),
                        idle_s: Some(1),
                    }
                ),
                (
                    Protocol::Udp,
                    sock("10.96.0.10:53"),
                    sock("10.244.3.53:53"),
                    FlowCounts {
                        entries: 2,
                        unreplied: 1,
                        syn_sent: 0,
                        max_timeout: Some(29),
                        idle_s: None,
                    }
                ),
            ]
        );
        assert!(c.flows[0].key.dnat() && !c.flows[1].key.dnat());
        // The node's own address is never a client, whatever else is.
        assert!(collect(&[]).flows.is_empty());
        assert_eq!(collect(&["10.244.2.9"]).counted, 1);
    }

    /// A connect the client gave up on leaves its `SYN_SENT` entry behind for the state's
    /// whole timeout without a packet: it counts only while its last SYN is at most
    /// [`SYN_SENT_LIVE_S`] old, as the node's own timeout says; an idle `ESTABLISHED`
    /// connection (a pooled one) counts however old its last packet.
    #[test]
    fn a_connect_the_client_gave_up_on_stops_counting() {
        let dump = |syn_timeout: u32, est_timeout: u32| {
            format!(
                "tcp 6 {syn_timeout} SYN_SENT src=10.244.1.10 dst=10.244.3.72 sport=51001 dport=9000 [UNREPLIED] src=10.244.3.72 dst=10.244.1.10 sport=9000 dport=51001 mark=0 use=1\n\
                 tcp 6 {est_timeout} ESTABLISHED src=10.244.1.10 dst=10.244.3.71 sport=51000 dport=8080 src=10.244.3.71 dst=10.244.1.10 sport=8080 dport=51000 [ASSURED] mark=0 use=1\n"
            )
        };
        let collect = |text: &str, timeouts: TcpTimeouts| {
            let mut c = FlowCollector::with_timeouts(["10.244.1.10".parse().unwrap()], timeouts);
            for e in &ghostip_datapath::conntrack::parse_str(text)
                .unwrap()
                .entries
            {
                c.push(e);
            }
            c.finish()
        };
        let defaults = TcpTimeouts::default();
        let c = collect(&dump(117, 400_000), defaults);
        assert_eq!(
            c.counted, 2,
            "a SYN 3 s ago: the connect may still be waiting"
        );
        assert_eq!(c.flows[1].key.backend, sock("10.244.3.72:9000"));
        assert_eq!(c.flows[1].counts.idle_s, Some(3));
        assert_eq!(c.flows[0].counts.idle_s, Some(32_000));
        let c = collect(&dump(116, 400_000), defaults);
        assert_eq!(
            (c.entries, c.counted),
            (2, 1),
            "4 s without a SYN: given up"
        );
        assert_eq!(c.flows[0].key.backend, sock("10.244.3.71:8080"));
        // kube-proxy's one-day established timeout and a shorter SYN_SENT one, as the
        // node's sysctls give them.
        let sysctls = [
            ("syn_sent", "60\n"),
            ("established", "86400\n"),
            ("unacknowledged", "300\n"),
            ("max_retrans", "600\n"),
        ];
        let node = TcpTimeouts::from_sysctls(|name| {
            sysctls
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.to_string())
        });
        assert_eq!(
            (node.syn_sent, node.established, node.in_flight),
            (60, 86_400, 600)
        );
        let c = collect(&dump(58, 86_390), node);
        assert_eq!(c.counted, 2);
        assert_eq!(c.flows[0].counts.idle_s, Some(10));
        let at: ghostip_core::Time = "2026-03-19T08:00:15Z".parse().unwrap();
        assert_eq!(
            c.flows[1].last_packet(at),
            Some("2026-03-19T08:00:13.5Z".parse().unwrap())
        );
        // Connects only: last tried at the last SYN; an established connection is held at
        // the read, its last packet 10 s old or not.
        assert_eq!(c.flows[1].last_tried(at), c.flows[1].last_packet(at));
        assert_eq!(c.flows[0].last_tried(at), None);
        assert_eq!(collect(&dump(50, 86_390), node).counted, 1);
        // An established connection with data in flight (a request to a dead pod) is
        // re-armed to the shorter unacknowledged or retransmission timeout: its last packet
        // is unknown, and so is the flow's when another entry of it is known.
        let c = collect(&dump(58, 599), node);
        assert_eq!(c.counted, 2, "still a live connection");
        assert_eq!(c.flows[0].counts.idle_s, None);
        assert_eq!(c.flows[0].last_packet(at), None);
        let pooled = |timeout: u32, sport: u32| {
            format!(
                "tcp 6 {timeout} ESTABLISHED src=10.244.1.10 dst=10.244.3.71 sport={sport} dport=8080 src=10.244.3.71 dst=10.244.1.10 sport=8080 dport={sport} [ASSURED] mark=0 use=1\n"
            )
        };
        let two = pooled(86_390, 51000) + &pooled(200, 51001);
        assert_eq!(collect(&two, node).flows[0].counts.idle_s, None);
        let two = pooled(86_390, 51000) + &pooled(86_398, 51001);
        assert_eq!(collect(&two, node).flows[0].counts.idle_s, Some(2));
        // Unreadable sysctls keep the kernel's defaults.
        assert_eq!(
            TcpTimeouts::from_sysctls(|name| (name == "established").then(|| "x".into())),
            defaults
        );
    }

    /// The view of an entry as the netlink decoder would hand it over.
    fn view_of(e: &CtEntry) -> CtView<'static> {
        use ghostip_datapath::conntrack_netlink::{CtMessageKind, IPS_ASSURED, IPS_SEEN_REPLY};
        let state = [
            "NONE",
            "SYN_SENT",
            "SYN_RECV",
            "ESTABLISHED",
            "FIN_WAIT",
            "CLOSE_WAIT",
        ];
        CtView {
            kind: if e.event.as_deref() == Some("DESTROY") {
                CtMessageKind::Delete
            } else {
                CtMessageKind::New
            },
            family: 2,
            proto: e.proto_num,
            orig: e.orig.clone(),
            reply: e.reply.clone(),
            tcp_state: e
                .state
                .as_deref()
                .and_then(|s| state.iter().position(|n| *n == s))
                .map(|i| u8::try_from(i).unwrap()),
            status: if e.unreplied { 0 } else { IPS_SEEN_REPLY }
                | if e.assured { IPS_ASSURED } else { 0 },
            timeout: e.timeout,
            mark: e.mark,
            zone: e.zone,
            id: e.id,
            use_count: e.use_count,
            secctx: None,
        }
    }

    /// The netlink path keeps the same flows as the text path, `[DESTROY]` included.
    #[test]
    fn views_are_collected_like_entries() {
        let destroy = "[DESTROY] udp      17 src=10.244.1.10 dst=10.96.0.10 sport=40001 dport=53 src=10.244.3.53 dst=10.244.1.10 sport=53 dport=40001\n";
        let table = ghostip_datapath::conntrack::parse_str(&format!("{DUMP}{destroy}")).unwrap();
        for clients in [&["10.244.1.10"][..], &["10.244.2.9"], &[]] {
            let ips = || clients.iter().map(|ip| ip.parse::<IpAddr>().unwrap());
            let (mut a, mut b) = (FlowCollector::new(ips()), FlowCollector::new(ips()));
            for e in &table.entries {
                a.push(e);
                b.push_view(&view_of(e));
            }
            let (a, b) = (a.finish(), b.finish());
            assert_eq!(a, b, "{clients:?}");
            assert_eq!(a.entries, 9);
        }
        assert_eq!(collect(&["10.244.1.10"]).counted, 4);
    }

    /// `[DESTROY]` events (a `conntrack -E` capture) are flows that ended.
    #[test]
    fn destroy_events_do_not_count() {
        let line = "[DESTROY] udp      17 src=10.244.1.10 dst=10.96.0.10 sport=40001 dport=53 src=10.244.3.53 dst=10.244.1.10 sport=53 dport=40001\n";
        let table = ghostip_datapath::conntrack::parse_str(line).unwrap();
        let mut c = FlowCollector::new(["10.244.1.10".parse().unwrap()]);
        c.push(&table.entries[0]);
        let c = c.finish();
        assert_eq!((c.entries, c.counted), (1, 0));
    }
}
