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
//! - its original source is one of the given client addresses (this node's pods). Flows
//!   from the node itself (host-network processes, ghostip's own connect and DNS probes)
//!   and flows that only pass through the node (a remote client's, to a pod here) are
//!   left to the client's node.

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;

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
    /// Longest remaining timeout among them, in seconds.
    pub max_timeout: Option<u32>,
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
    flows: HashMap<FlowKey, FlowCounts>,
    entries: u64,
    counted: u64,
}

/// `CTA_PROTOINFO_TCP_STATE` values of `ESTABLISHED` and `SYN_SENT`.
const TCP_ESTABLISHED: u8 = 3;
const TCP_SYN_SENT: u8 = 1;
const IPPROTO_TCP: u8 = 6;
const IPPROTO_UDP: u8 = 17;

fn protocol(e: &CtEntry) -> Option<Protocol> {
    if e.event.as_deref() == Some("DESTROY") {
        return None;
    }
    match e.proto.as_str() {
        "udp" => Some(Protocol::Udp),
        "tcp" if matches!(e.state.as_deref(), Some("ESTABLISHED" | "SYN_SENT")) => {
            Some(Protocol::Tcp)
        }
        _ => None,
    }
}

fn view_protocol(v: &CtView<'_>) -> Option<Protocol> {
    if v.is_destroy() {
        return None;
    }
    match v.proto {
        IPPROTO_UDP => Some(Protocol::Udp),
        IPPROTO_TCP if matches!(v.tcp_state, Some(TCP_ESTABLISHED | TCP_SYN_SENT)) => {
            Some(Protocol::Tcp)
        }
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
    /// A collector keeping the flows sent by `clients` (this node's pod IPs).
    pub fn new(clients: impl IntoIterator<Item = IpAddr>) -> Self {
        Self {
            clients: clients.into_iter().map(|ip| ip.to_canonical()).collect(),
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
        proto: Option<Protocol>,
        orig: &CtTuple,
        reply: &CtTuple,
        unreplied: bool,
        timeout: Option<u32>,
    ) {
        self.entries += 1;
        let Some(proto) = proto else { return };
        let client = orig.src.to_canonical();
        if !self.clients.contains(&client) {
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
        c.entries = c.entries.saturating_add(1);
        c.unreplied = c.unreplied.saturating_add(u32::from(unreplied));
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
                        max_timeout: Some(431_999)
                    }
                ),
                (
                    Protocol::Tcp,
                    sock("10.244.3.72:9000"),
                    sock("10.244.3.72:9000"),
                    FlowCounts {
                        entries: 1,
                        unreplied: 1,
                        max_timeout: Some(119)
                    }
                ),
                (
                    Protocol::Udp,
                    sock("10.96.0.10:53"),
                    sock("10.244.3.53:53"),
                    FlowCounts {
                        entries: 2,
                        unreplied: 1,
                        max_timeout: Some(29)
                    }
                ),
            ]
        );
        assert!(c.flows[0].key.dnat() && !c.flows[1].key.dnat());
        // The node's own address is never a client, whatever else is.
        assert!(collect(&[]).flows.is_empty());
        assert_eq!(collect(&["10.244.2.9"]).counted, 1);
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
