//! Generator of kube-proxy-shaped datapath dumps for N services / M endpoints, for tests,
//! benchmarks and loading into a real kernel.
//!
//! See [`GenSpec`] → [`GenModel::generate`], then [`GenModel::write_iptables_save`] (what
//! `iptables-save` prints for kube-proxy ≥ 1.28 in iptables mode, and what
//! `iptables-restore` loads), [`GenModel::write_nft_json`] (what `nft -j list table ip
//! kube-proxy` prints for kube-proxy ≥ 1.31 in nftables mode, as nft 1.0.6 does) and
//! [`GenModel::write_nft_script`] (the same ruleset as an `nft -f` script). The shapes
//! follow real dumps: chain-name hashes, masquerade rules, `-m statistic` probabilities
//! as iptables prints them, `KUBE-EXT`/`KUBE-SVL` for `externalTrafficPolicy: Local`,
//! session affinity, services without endpoints (filter-table REJECT / `no-endpoint-…`
//! maps). [`GenModel::expected`] is the [`LbTable`] a parser must produce from a dump.
//!
//! Pure: writers take any [`std::io::Write`]; nothing here opens files.

use std::io::{self, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddrV4};

use ghostip_core::truth::{
    AddressType, EndpointPort, EndpointRecord, ServicePort, ServiceRecord, SliceRecord,
    TrafficPolicy, Truth,
};
use ghostip_core::{Protocol as CoreProtocol, ServiceKey};

use ghostip_datapath::{Backend, Format, Frontend, FrontendKind, LbTable, Protocol, ServiceRef};

/// Pod CIDR of generated clusters (kube-proxy's `--cluster-cidr`).
pub const POD_CIDR: &str = "100.64.0.0/10";

/// Node IP of generated clusters (the only `nodeport-ips` element).
pub const NODE_IP: Ipv4Addr = Ipv4Addr::new(192, 168, 0, 2);

/// The node the dumps are taken on: the first endpoint of every service runs here (the
/// one `externalTrafficPolicy: Local` frontends keep); the others run on [`OTHER_NODE`].
pub const THIS_NODE: &str = "node-1";

/// The node every endpoint but the first of each service runs on.
pub const OTHER_NODE: &str = "node-2";

/// What to generate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GenSpec {
    /// Number of service ports.
    pub services: usize,
    /// Number of endpoints over all services (spread evenly, remainder first).
    pub endpoints: usize,
    /// Every n-th service has a NodePort (0: none).
    pub nodeport_every: usize,
    /// Every n-th service has a load-balancer IP (0: none).
    pub loadbalancer_every: usize,
    /// Every n-th service has an external IP (0: none).
    pub external_ip_every: usize,
    /// Every n-th service with a NodePort or external address has
    /// `externalTrafficPolicy: Local` (0: none).
    pub local_every: usize,
    /// Every n-th service is UDP (0: none).
    pub udp_every: usize,
    /// Every n-th service has `sessionAffinity: ClientIP` (0: none).
    pub affinity_every: usize,
    /// Every n-th service has no endpoints (0: none).
    pub empty_every: usize,
    /// nftables: the newest kube-proxy layout (`dnat ip to numgen … map { … }` in the
    /// service chain, no endpoint chains) instead of one chain per endpoint.
    pub nft_inline_dnat: bool,
    /// iptables: kube-proxy's large-cluster mode, which leaves the comment out of each
    /// endpoint's rules (`KUBE-SEP-…` and the `KUBE-SVC-…` jumps to them). `None`: as
    /// kube-proxy decides, above [`LARGE_CLUSTER_ENDPOINTS`] endpoints.
    pub large_cluster: Option<bool>,
}

/// kube-proxy's `largeClusterEndpointsThreshold`: above this many endpoints in the
/// cluster, its iptables mode writes no comment on endpoint rules (the lab's kube-proxy
/// 1.36.3 at 150 007 endpoints does exactly that).
pub const LARGE_CLUSTER_ENDPOINTS: usize = 1000;

impl GenSpec {
    /// `services` service ports and `endpoints` endpoints, with a realistic mix of
    /// NodePorts (1 in 10), load balancers (1 in 20), external IPs (1 in 50), local
    /// traffic policy, UDP, affinity and empty services.
    pub fn new(services: usize, endpoints: usize) -> Self {
        Self {
            services,
            endpoints,
            nodeport_every: 10,
            loadbalancer_every: 20,
            external_ip_every: 50,
            local_every: 3,
            udp_every: 7,
            affinity_every: 13,
            empty_every: 0,
            nft_inline_dnat: false,
            large_cluster: None,
        }
    }
}

/// One generated service port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GenService {
    /// `namespace/name:port_name`.
    pub service: ServiceRef,
    /// Protocol.
    pub protocol: Protocol,
    /// Cluster IP.
    pub cluster_ip: Ipv4Addr,
    /// Service port.
    pub port: u16,
    /// NodePort, if any.
    pub node_port: Option<u16>,
    /// `spec.externalIPs`.
    pub external_ips: Vec<Ipv4Addr>,
    /// Load-balancer ingress IPs.
    pub lb_ips: Vec<Ipv4Addr>,
    /// `externalTrafficPolicy: Local`.
    pub local: bool,
    /// `sessionAffinity: ClientIP`.
    pub affinity: bool,
    /// Ready endpoints.
    pub endpoints: Vec<SocketAddrV4>,
}

impl GenService {
    fn has_external(&self) -> bool {
        self.node_port.is_some() || !self.external_ips.is_empty() || !self.lb_ips.is_empty()
    }

    /// `ns/name:port` as kube-proxy prints it (no `:` for an unnamed port).
    pub fn port_name(&self) -> String {
        self.service.to_string()
    }

    fn proto_lower(&self) -> &'static str {
        match self.protocol {
            Protocol::Udp => "udp",
            Protocol::Sctp => "sctp",
            _ => "tcp",
        }
    }

    /// The endpoints on "this node" (for `externalTrafficPolicy: Local`): the first one.
    fn local_endpoints(&self) -> &[SocketAddrV4] {
        self.endpoints
            .get(..1.min(self.endpoints.len()))
            .unwrap_or_default()
    }
}

/// A generated cluster: its service ports and endpoints.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GenModel {
    /// Service ports in generation order.
    pub services: Vec<GenService>,
    /// Render the newest nftables layout.
    pub nft_inline_dnat: bool,
    /// iptables: comment each endpoint's rules (kube-proxy below its large-cluster
    /// threshold, see [`GenSpec::large_cluster`]).
    pub endpoint_comments: bool,
}

fn every(n: usize, i: usize) -> bool {
    n != 0 && i % n == n - 1
}

fn v4(base: [u8; 2], i: usize) -> Ipv4Addr {
    let i = i + 1;
    let [a, b] = base;
    Ipv4Addr::new(
        a,
        b.wrapping_add(((i >> 16) & 0xff) as u8),
        ((i >> 8) & 0xff) as u8,
        (i & 0xff) as u8,
    )
}

/// kube-proxy-style 16-character base32 chain suffix.
fn hash16(s: &str) -> String {
    fn fnv(bytes: &[u8], seed: u64) -> u64 {
        let mut h = 0xcbf2_9ce4_8422_2325u64 ^ seed;
        for b in bytes {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x100_0000_01b3);
        }
        h
    }
    const ALPHABET: &[u8; 32] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
    let (a, b) = (
        fnv(s.as_bytes(), 0),
        fnv(s.as_bytes(), 0x9e37_79b9_7f4a_7c15),
    );
    let bits = (u128::from(a) << 64) | u128::from(b);
    (0..16)
        .map(|i| {
            char::from(
                ALPHABET
                    .get(((bits >> (i * 5)) & 31) as usize)
                    .copied()
                    .unwrap_or(b'A'),
            )
        })
        .collect()
}

impl GenModel {
    /// Builds the cluster described by `spec` (deterministic).
    pub fn generate(spec: &GenSpec) -> GenModel {
        const PORTS: [(u16, u16, &str); 6] = [
            (80, 8080, "http"),
            (443, 8443, "https"),
            (9090, 9090, "metrics"),
            (6379, 6379, ""),
            (5432, 5432, "pg"),
            (53, 5353, "dns"),
        ];
        let n = spec.services;
        let empty: usize = (0..n).filter(|i| every(spec.empty_every, *i)).count();
        let filled = n - empty;
        let per = spec.endpoints.checked_div(filled).unwrap_or(0);
        let extra = spec.endpoints.checked_rem(filled).unwrap_or(0);
        let mut next_ep = 0usize;
        let mut filled_idx = 0usize;
        let mut services = Vec::with_capacity(n);
        for i in 0..n {
            let (port, target, pname) = PORTS.get(i % PORTS.len()).copied().unwrap_or((80, 80, ""));
            let protocol = if every(spec.udp_every, i) {
                Protocol::Udp
            } else {
                Protocol::Tcp
            };
            let count = if every(spec.empty_every, i) {
                0
            } else {
                let c = per + usize::from(filled_idx < extra);
                filled_idx += 1;
                c
            };
            let endpoints = (0..count)
                .map(|_| {
                    next_ep += 1;
                    SocketAddrV4::new(v4([100, 64], next_ep - 1), target)
                })
                .collect();
            let node_port = every(spec.nodeport_every, i).then(|| 30000 + (i % 2768) as u16);
            let lb_ips = if every(spec.loadbalancer_every, i) {
                vec![v4([203, 0], i)]
            } else {
                Vec::new()
            };
            let external_ips = if every(spec.external_ip_every, i) {
                vec![v4([198, 18], i)]
            } else {
                Vec::new()
            };
            let mut svc = GenService {
                service: ServiceRef::new(format!("ns-{}", i % 97), format!("svc-{i}"), pname),
                protocol,
                cluster_ip: v4([10, 96], i),
                port,
                node_port,
                external_ips,
                lb_ips,
                local: false,
                affinity: every(spec.affinity_every, i),
                endpoints,
            };
            svc.local = svc.has_external() && every(spec.local_every, i);
            services.push(svc);
        }
        GenModel {
            services,
            nft_inline_dnat: spec.nft_inline_dnat,
            endpoint_comments: !spec
                .large_cluster
                .unwrap_or(spec.endpoints > LARGE_CLUSTER_ENDPOINTS),
        }
    }

    /// The Services and EndpointSlices this cluster's dumps come from, as the core's
    /// truth records: one Service per service port (as generated), one slice each, ready
    /// endpoints on [`THIS_NODE`] (the first) and [`OTHER_NODE`] (the rest).
    pub fn truth_records(&self) -> (Vec<ServiceRecord>, Vec<SliceRecord>) {
        let mut services = Vec::with_capacity(self.services.len());
        let mut slices = Vec::with_capacity(self.services.len());
        for s in &self.services {
            let key = ServiceKey::new(&s.service.namespace, &s.service.name);
            let protocol = s.protocol.to_core().unwrap_or(CoreProtocol::Tcp);
            let name = (!s.service.port_name.is_empty()).then(|| s.service.port_name.clone());
            let service_type = if !s.lb_ips.is_empty() {
                "LoadBalancer"
            } else if s.node_port.is_some() {
                "NodePort"
            } else {
                "ClusterIP"
            };
            services.push(ServiceRecord {
                key: key.clone(),
                cluster_ips: vec![IpAddr::V4(s.cluster_ip)],
                headless: false,
                service_type: service_type.to_string(),
                publish_not_ready: false,
                internal_traffic_policy: TrafficPolicy::Cluster,
                external_traffic_policy: if s.local {
                    TrafficPolicy::Local
                } else {
                    TrafficPolicy::Cluster
                },
                ports: vec![ServicePort {
                    name: name.clone(),
                    port: s.port,
                    protocol,
                    node_port: s.node_port,
                }],
                has_selector: true,
                labels: Default::default(),
            });
            slices.push(SliceRecord {
                namespace: key.namespace.clone(),
                name: format!("{}-gen", key.name),
                service: key.name.clone(),
                address_type: AddressType::IPv4,
                endpoints: s
                    .endpoints
                    .iter()
                    .enumerate()
                    .map(|(i, e)| EndpointRecord {
                        ip: IpAddr::V4(*e.ip()),
                        ready: true,
                        serving: true,
                        terminating: false,
                        pod: None,
                        node: Some(if i == 0 { THIS_NODE } else { OTHER_NODE }.to_string()),
                        hostname: None,
                    })
                    .collect(),
                ports: s
                    .endpoints
                    .first()
                    .map(|e| EndpointPort {
                        name,
                        port: e.port(),
                        protocol,
                    })
                    .into_iter()
                    .collect(),
                trigger_time: None,
            });
        }
        (services, slices)
    }

    /// [`GenModel::truth_records`] loaded into a [`Truth`] at `at`.
    pub fn truth(&self, at: ghostip_core::Time) -> Truth {
        let (services, slices) = self.truth_records();
        let mut truth = Truth::new();
        for s in services {
            truth.apply_service(s, at);
        }
        for s in slices {
            truth.apply_slice(s, at);
        }
        truth
    }

    /// The table a parser of `format` must produce from this model's dump.
    pub fn expected(&self, format: Format) -> LbTable {
        let mut t = LbTable::new(format);
        for s in &self.services {
            let backends: Vec<Backend> = s
                .endpoints
                .iter()
                .map(|e| Backend::active(IpAddr::V4(*e.ip()), e.port()))
                .collect();
            let mut push = |ip: Ipv4Addr, port: u16, kind: FrontendKind| {
                let mut fe = Frontend::new(IpAddr::V4(ip), port, s.protocol, kind);
                fe.service = Some(s.service.clone());
                fe.backends.clone_from(&backends);
                if s.endpoints.is_empty() {
                    fe.add_flag("no-endpoints");
                } else if s.affinity && !(format == Format::NftJson && self.nft_inline_dnat) {
                    // The inline-dnat nftables layout has no endpoint chains, so no
                    // affinity sets to see.
                    fe.add_flag("session-affinity");
                }
                t.frontends.push(fe);
            };
            push(s.cluster_ip, s.port, FrontendKind::ClusterIp);
            if s.endpoints.is_empty() {
                continue;
            }
            let (ext_kind, lb_kind) = match format {
                Format::NftJson => (FrontendKind::External, FrontendKind::External),
                _ => (FrontendKind::ExternalIp, FrontendKind::LoadBalancer),
            };
            for ip in &s.external_ips {
                push(*ip, s.port, ext_kind);
            }
            for ip in &s.lb_ips {
                push(*ip, s.port, lb_kind);
            }
            if let Some(np) = s.node_port {
                push(Ipv4Addr::UNSPECIFIED, np, FrontendKind::NodePort);
            }
        }
        t.normalize();
        t
    }

    /// The dump as a `String` (see [`GenModel::write_iptables_save`]).
    pub fn iptables_save(&self) -> String {
        let mut buf = Vec::new();
        // Writing to a Vec cannot fail.
        let _ = self.write_iptables_save(&mut buf);
        String::from_utf8_lossy(&buf).into_owned()
    }

    /// Writes what `iptables-save` (1.8, nf_tables) prints for this cluster's kube-proxy
    /// rules: `filter` then `nat`, chains declared and listed in name order.
    pub fn write_iptables_save<W: Write>(&self, w: &mut W) -> io::Result<()> {
        writeln!(
            w,
            "# Generated by iptables-save v1.8.9 (nf_tables) on Thu Jan  1 00:00:00 2026"
        )?;
        writeln!(w, "*filter")?;
        for c in ["INPUT ACCEPT", "FORWARD ACCEPT", "OUTPUT ACCEPT"] {
            writeln!(w, ":{c} [0:0]")?;
        }
        for c in [
            "KUBE-EXTERNAL-SERVICES",
            "KUBE-FORWARD",
            "KUBE-PROXY-FIREWALL",
            "KUBE-SERVICES",
        ] {
            writeln!(w, ":{c} - [0:0]")?;
        }
        writeln!(
            w,
            "-A INPUT -m conntrack --ctstate NEW -m comment --comment \"kubernetes externally-visible service portals\" -j KUBE-EXTERNAL-SERVICES"
        )?;
        writeln!(
            w,
            "-A FORWARD -m comment --comment \"kubernetes forwarding rules\" -j KUBE-FORWARD"
        )?;
        writeln!(
            w,
            "-A FORWARD -m conntrack --ctstate NEW -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES"
        )?;
        writeln!(
            w,
            "-A OUTPUT -m conntrack --ctstate NEW -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES"
        )?;
        writeln!(w, "-A KUBE-FORWARD -m conntrack --ctstate INVALID -j DROP")?;
        writeln!(
            w,
            "-A KUBE-FORWARD -m comment --comment \"kubernetes forwarding rules\" -m mark --mark 0x4000/0x4000 -j ACCEPT"
        )?;
        for s in self.services.iter().filter(|s| s.endpoints.is_empty()) {
            let p = s.proto_lower();
            writeln!(
                w,
                "-A KUBE-SERVICES -d {}/32 -p {p} -m comment --comment \"{} has no endpoints\" -m {p} --dport {} -j REJECT --reject-with icmp-port-unreachable",
                s.cluster_ip,
                s.port_name(),
                s.port
            )?;
        }
        writeln!(w, "COMMIT")?;
        writeln!(w, "# Completed on Thu Jan  1 00:00:00 2026")?;
        writeln!(
            w,
            "# Generated by iptables-save v1.8.9 (nf_tables) on Thu Jan  1 00:00:00 2026"
        )?;
        writeln!(w, "*nat")?;
        for c in [
            "PREROUTING ACCEPT",
            "INPUT ACCEPT",
            "OUTPUT ACCEPT",
            "POSTROUTING ACCEPT",
        ] {
            writeln!(w, ":{c} [0:0]")?;
        }
        let mut chains = self.nat_chains();
        chains.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        for (name, _) in &chains {
            writeln!(w, ":{name} - [0:0]")?;
        }
        writeln!(
            w,
            "-A PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES"
        )?;
        writeln!(
            w,
            "-A OUTPUT -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES"
        )?;
        writeln!(
            w,
            "-A POSTROUTING -m comment --comment \"kubernetes postrouting rules\" -j KUBE-POSTROUTING"
        )?;
        for (name, chain) in &chains {
            self.write_nat_chain(w, name, *chain)?;
        }
        writeln!(w, "COMMIT")?;
        writeln!(w, "# Completed on Thu Jan  1 00:00:00 2026")?;
        Ok(())
    }

    fn nat_chains(&self) -> Vec<(String, NatChain)> {
        let mut v = vec![
            ("KUBE-MARK-MASQ".to_string(), NatChain::MarkMasq),
            ("KUBE-NODEPORTS".to_string(), NatChain::NodePorts),
            ("KUBE-POSTROUTING".to_string(), NatChain::Postrouting),
            ("KUBE-SERVICES".to_string(), NatChain::Services),
        ];
        for (i, s) in self.services.iter().enumerate() {
            if s.endpoints.is_empty() {
                continue;
            }
            let key = format!("{}{}", s.port_name(), s.proto_lower());
            v.push((format!("KUBE-SVC-{}", hash16(&key)), NatChain::Svc(i)));
            if s.has_external() {
                v.push((format!("KUBE-EXT-{}", hash16(&key)), NatChain::Ext(i)));
            }
            if s.local {
                v.push((format!("KUBE-SVL-{}", hash16(&key)), NatChain::Svl(i)));
            }
            for j in 0..s.endpoints.len() {
                v.push((self.sep_name(i, j), NatChain::Sep(i, j)));
            }
        }
        v
    }

    fn svc_hash(&self, i: usize) -> String {
        let s = self.services.get(i);
        hash16(
            &s.map(|s| format!("{}{}", s.port_name(), s.proto_lower()))
                .unwrap_or_default(),
        )
    }

    fn sep_name(&self, i: usize, j: usize) -> String {
        let key = self
            .services
            .get(i)
            .and_then(|s| {
                s.endpoints
                    .get(j)
                    .map(|e| format!("{}{}{e}", s.port_name(), s.proto_lower()))
            })
            .unwrap_or_default();
        format!("KUBE-SEP-{}", hash16(&key))
    }

    fn write_nat_chain<W: Write>(&self, w: &mut W, name: &str, chain: NatChain) -> io::Result<()> {
        match chain {
            NatChain::MarkMasq => {
                writeln!(w, "-A KUBE-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000")
            }
            NatChain::Postrouting => {
                writeln!(
                    w,
                    "-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN"
                )?;
                writeln!(w, "-A KUBE-POSTROUTING -j MARK --set-xmark 0x4000/0x0")?;
                writeln!(
                    w,
                    "-A KUBE-POSTROUTING -m comment --comment \"kubernetes service traffic requiring SNAT\" -j MASQUERADE --random-fully"
                )
            }
            NatChain::Services => {
                for (i, s) in self.services.iter().enumerate() {
                    if s.endpoints.is_empty() {
                        continue;
                    }
                    let (p, h, n) = (s.proto_lower(), self.svc_hash(i), s.port_name());
                    writeln!(
                        w,
                        "-A KUBE-SERVICES -d {}/32 -p {p} -m comment --comment \"{n} cluster IP\" -m {p} --dport {} -j KUBE-SVC-{h}",
                        s.cluster_ip, s.port
                    )?;
                    for ip in &s.external_ips {
                        writeln!(
                            w,
                            "-A KUBE-SERVICES -d {ip}/32 -p {p} -m comment --comment \"{n} external IP\" -m {p} --dport {} -j KUBE-EXT-{h}",
                            s.port
                        )?;
                    }
                    for ip in &s.lb_ips {
                        writeln!(
                            w,
                            "-A KUBE-SERVICES -d {ip}/32 -p {p} -m comment --comment \"{n} loadbalancer IP\" -m {p} --dport {} -j KUBE-EXT-{h}",
                            s.port
                        )?;
                    }
                }
                writeln!(
                    w,
                    "-A KUBE-SERVICES -m comment --comment \"kubernetes service nodeports; NOTE: this must be the last rule in this chain\" -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS"
                )
            }
            NatChain::NodePorts => {
                for (i, s) in self.services.iter().enumerate() {
                    if let (Some(np), false) = (s.node_port, s.endpoints.is_empty()) {
                        let p = s.proto_lower();
                        writeln!(
                            w,
                            "-A KUBE-NODEPORTS -p {p} -m comment --comment \"{}\" -m {p} --dport {np} -j KUBE-EXT-{}",
                            s.port_name(),
                            self.svc_hash(i)
                        )?;
                    }
                }
                Ok(())
            }
            NatChain::Svc(i) => {
                let Some(s) = self.services.get(i) else {
                    return Ok(());
                };
                let (p, n) = (s.proto_lower(), s.port_name());
                writeln!(
                    w,
                    "-A {name} ! -s {POD_CIDR} -d {}/32 -p {p} -m comment --comment \"{n} cluster IP\" -m {p} --dport {} -j KUBE-MARK-MASQ",
                    s.cluster_ip, s.port
                )?;
                self.write_endpoint_jumps(w, name, i, &s.endpoints)
            }
            NatChain::Svl(i) => {
                let Some(s) = self.services.get(i) else {
                    return Ok(());
                };
                self.write_endpoint_jumps(w, name, i, s.local_endpoints())
            }
            NatChain::Ext(i) => {
                let Some(s) = self.services.get(i) else {
                    return Ok(());
                };
                let (n, h) = (s.port_name(), self.svc_hash(i));
                if s.local {
                    writeln!(
                        w,
                        "-A {name} -s {POD_CIDR} -m comment --comment \"pod traffic for {n} external destinations\" -j KUBE-SVC-{h}"
                    )?;
                    writeln!(
                        w,
                        "-A {name} -m comment --comment \"masquerade LOCAL traffic for {n} external destinations\" -m addrtype --src-type LOCAL -j KUBE-MARK-MASQ"
                    )?;
                    writeln!(
                        w,
                        "-A {name} -m comment --comment \"route LOCAL traffic for {n} external destinations\" -m addrtype --src-type LOCAL -j KUBE-SVC-{h}"
                    )?;
                    writeln!(w, "-A {name} -j KUBE-SVL-{h}")
                } else {
                    writeln!(
                        w,
                        "-A {name} -m comment --comment \"masquerade traffic for {n} external destinations\" -j KUBE-MARK-MASQ"
                    )?;
                    writeln!(w, "-A {name} -j KUBE-SVC-{h}")
                }
            }
            NatChain::Sep(i, j) => {
                let Some(s) = self.services.get(i) else {
                    return Ok(());
                };
                let Some(e) = s.endpoints.get(j) else {
                    return Ok(());
                };
                let p = s.proto_lower();
                let c = self.endpoint_comment(&s.port_name());
                writeln!(w, "-A {name} -s {}/32{c} -j KUBE-MARK-MASQ", e.ip())?;
                if s.affinity {
                    writeln!(
                        w,
                        "-A {name} -p {p}{c} -m recent --set --name {name} --mask 255.255.255.255 --rsource -m {p} -j DNAT --to-destination {e}"
                    )
                } else {
                    writeln!(w, "-A {name} -p {p}{c} -m {p} -j DNAT --to-destination {e}")
                }
            }
        }
    }

    /// ` -m comment --comment "TEXT"` on an endpoint's rule, or nothing in kube-proxy's
    /// large-cluster mode.
    fn endpoint_comment(&self, text: &str) -> String {
        if self.endpoint_comments {
            format!(" -m comment --comment \"{text}\"")
        } else {
            String::new()
        }
    }

    fn write_endpoint_jumps<W: Write>(
        &self,
        w: &mut W,
        name: &str,
        i: usize,
        eps: &[SocketAddrV4],
    ) -> io::Result<()> {
        let Some(s) = self.services.get(i) else {
            return Ok(());
        };
        let n = s.port_name();
        if s.affinity {
            for (j, e) in eps.iter().enumerate() {
                let sep = self.sep_name(i, j);
                let c = self.endpoint_comment(&format!("{n} -> {e}"));
                writeln!(
                    w,
                    "-A {name}{c} -m recent --rcheck --seconds 10800 --reap --name {sep} --mask 255.255.255.255 --rsource -j {sep}"
                )?;
            }
        }
        let count = eps.len();
        for (j, e) in eps.iter().enumerate() {
            let sep = self.sep_name(i, j);
            let c = self.endpoint_comment(&format!("{n} -> {e}"));
            if j + 1 < count {
                // iptables stores the probability as a fraction of 2^31 and prints it so.
                let p = ((1.0 / (count - j) as f64) * 2_147_483_648.0).round() / 2_147_483_648.0;
                writeln!(
                    w,
                    "-A {name}{c} -m statistic --mode random --probability {p:.11} -j {sep}"
                )?;
            } else {
                writeln!(w, "-A {name}{c} -j {sep}")?;
            }
        }
        Ok(())
    }

    fn nft_chain(&self, kind: &str, i: usize) -> String {
        let s = self.services.get(i);
        let (n, p) = s
            .map(|s| {
                let sr = &s.service;
                (
                    format!(
                        "{}/{}/{}/{}",
                        sr.namespace,
                        sr.name,
                        s.proto_lower(),
                        sr.port_name
                    ),
                    s.proto_lower(),
                )
            })
            .unwrap_or_default();
        format!(
            "{kind}-{}-{n}",
            hash16(&format!("{n}{p}")).get(..8).unwrap_or("")
        )
    }

    fn nft_endpoint_chain(&self, i: usize, e: &SocketAddrV4) -> String {
        let svc = self.nft_chain("service", i);
        let rest = svc.strip_prefix("service-").unwrap_or(&svc);
        let rest = rest.get(9..).unwrap_or(rest);
        let h = hash16(&format!("{rest}{e}"));
        format!(
            "endpoint-{}-{rest}__{}/{}",
            h.get(..8).unwrap_or(""),
            e.ip(),
            e.port()
        )
    }

    /// The dump as a `String` (see [`GenModel::write_nft_json`]).
    pub fn nft_json(&self) -> String {
        let mut buf = Vec::new();
        let _ = self.write_nft_json(&mut buf);
        String::from_utf8_lossy(&buf).into_owned()
    }

    /// Writes what `nft -j list table ip kube-proxy` (nft 1.0.6) prints for this cluster.
    pub fn write_nft_json<W: Write>(&self, w: &mut W) -> io::Result<()> {
        let mut first = true;
        let mut obj = |w: &mut W, v: serde_json::Value| -> io::Result<()> {
            if !first {
                w.write_all(b", ")?;
            }
            first = false;
            serde_json::to_writer(&mut *w, &v).map_err(io::Error::other)
        };
        use serde_json::json;
        w.write_all(b"{\"nftables\": [")?;
        obj(
            w,
            json!({"metainfo": {"version": "1.0.6", "release_name": "Lester Gooch #5", "json_schema_version": 1}}),
        )?;
        obj(
            w,
            json!({"table": {"family": "ip", "name": "kube-proxy", "handle": 1}}),
        )?;
        let cluster_ips: Vec<String> = self
            .services
            .iter()
            .map(|s| s.cluster_ip.to_string())
            .collect();
        obj(
            w,
            json!({"set": {"family": "ip", "name": "cluster-ips", "table": "kube-proxy", "type": "ipv4_addr", "handle": 1, "comment": "Active ClusterIPs", "elem": cluster_ips}}),
        )?;
        obj(
            w,
            json!({"set": {"family": "ip", "name": "nodeport-ips", "table": "kube-proxy", "type": "ipv4_addr", "handle": 2, "comment": "IPs that accept NodePort traffic", "elem": [NODE_IP.to_string()]}}),
        )?;
        let mut no_ep = Vec::new();
        let mut svc_ips = Vec::new();
        let mut nodeports = Vec::new();
        for (i, s) in self.services.iter().enumerate() {
            let p = s.proto_lower();
            if s.endpoints.is_empty() {
                no_ep.push(json!([{"elem": {"val": {"concat": [s.cluster_ip.to_string(), p, s.port]}, "comment": s.port_name()}}, {"goto": {"target": "reject-chain"}}]));
                continue;
            }
            svc_ips.push(json!([{"concat": [s.cluster_ip.to_string(), p, s.port]}, {"goto": {"target": self.nft_chain("service", i)}}]));
            for ip in s.external_ips.iter().chain(&s.lb_ips) {
                svc_ips.push(json!([{"concat": [ip.to_string(), p, s.port]}, {"goto": {"target": self.nft_chain("external", i)}}]));
            }
            if let Some(np) = s.node_port {
                nodeports.push(json!([{"concat": [p, np]}, {"goto": {"target": self.nft_chain("external", i)}}]));
            }
        }
        let map = |name: &str,
                   ty: serde_json::Value,
                   comment: &str,
                   handle: u32,
                   elem: Vec<serde_json::Value>| {
            let mut m = json!({"family": "ip", "name": name, "table": "kube-proxy", "type": ty, "handle": handle, "comment": comment, "map": "verdict"});
            if !elem.is_empty()
                && let Some(o) = m.as_object_mut()
            {
                o.insert("elem".into(), serde_json::Value::Array(elem));
            }
            json!({ "map": m })
        };
        obj(
            w,
            map(
                "no-endpoint-nodeports",
                json!(["inet_proto", "inet_service"]),
                "vmap to drop or reject packets to service nodeports with no endpoints",
                3,
                Vec::new(),
            ),
        )?;
        obj(
            w,
            map(
                "no-endpoint-services",
                json!(["ipv4_addr", "inet_proto", "inet_service"]),
                "vmap to drop or reject packets to services with no endpoints",
                4,
                no_ep,
            ),
        )?;
        obj(
            w,
            map(
                "service-ips",
                json!(["ipv4_addr", "inet_proto", "inet_service"]),
                "ClusterIP, ExternalIP and LoadBalancer IP traffic",
                5,
                svc_ips,
            ),
        )?;
        obj(
            w,
            map(
                "service-nodeports",
                json!(["inet_proto", "inet_service"]),
                "NodePort traffic",
                6,
                nodeports,
            ),
        )?;
        let mut handle = 10u64;
        let mut chain = |w: &mut W,
                         obj: &mut dyn FnMut(&mut W, serde_json::Value) -> io::Result<()>,
                         name: &str| {
            handle += 1;
            obj(
                w,
                json!({"chain": {"family": "ip", "table": "kube-proxy", "name": name, "handle": handle}}),
            )
        };
        for name in [
            "mark-for-masquerade",
            "masquerading",
            "reject-chain",
            "services",
        ] {
            chain(w, &mut obj, name)?;
        }
        let mut rule_handle = 1000u64;
        let mut rule = |w: &mut W,
                        obj: &mut dyn FnMut(&mut W, serde_json::Value) -> io::Result<()>,
                        chain: &str,
                        expr: serde_json::Value| {
            rule_handle += 1;
            obj(
                w,
                json!({"rule": {"family": "ip", "table": "kube-proxy", "chain": chain, "handle": rule_handle, "expr": expr}}),
            )
        };
        rule(
            w,
            &mut obj,
            "mark-for-masquerade",
            json!([{"mangle": {"key": {"meta": {"key": "mark"}}, "value": {"|": [{"meta": {"key": "mark"}}, 16384]}}}]),
        )?;
        rule(w, &mut obj, "reject-chain", json!([{"reject": null}]))?;
        rule(
            w,
            &mut obj,
            "services",
            json!([{"vmap": {"key": {"concat": [{"payload": {"protocol": "ip", "field": "daddr"}}, {"meta": {"key": "l4proto"}}, {"payload": {"protocol": "th", "field": "dport"}}]}, "data": "@service-ips"}}]),
        )?;
        rule(
            w,
            &mut obj,
            "services",
            json!([{"match": {"op": "==", "left": {"payload": {"protocol": "ip", "field": "daddr"}}, "right": "@nodeport-ips"}}, {"vmap": {"key": {"concat": [{"meta": {"key": "l4proto"}}, {"payload": {"protocol": "th", "field": "dport"}}]}, "data": "@service-nodeports"}}]),
        )?;
        let masq_src = json!({"match": {"op": "!=", "left": {"payload": {"protocol": "ip", "field": "saddr"}}, "right": {"prefix": {"addr": "100.64.0.0", "len": 10}}}});
        let jump_masq = json!({"jump": {"target": "mark-for-masquerade"}});
        for (i, s) in self.services.iter().enumerate() {
            if s.endpoints.is_empty() {
                continue;
            }
            let p = s.proto_lower();
            let svc = self.nft_chain("service", i);
            chain(w, &mut obj, &svc)?;
            rule(
                w,
                &mut obj,
                &svc,
                json!([{"match": {"op": "==", "left": {"payload": {"protocol": "ip", "field": "daddr"}}, "right": s.cluster_ip.to_string()}}, masq_src, jump_masq]),
            )?;
            let n = s.endpoints.len();
            if self.nft_inline_dnat {
                let set: Vec<serde_json::Value> = s
                    .endpoints
                    .iter()
                    .enumerate()
                    .map(|(k, e)| json!([k, {"concat": [e.ip().to_string(), e.port()]}]))
                    .collect();
                rule(
                    w,
                    &mut obj,
                    &svc,
                    json!([{"match": {"op": "==", "left": {"meta": {"key": "l4proto"}}, "right": p}}, {"dnat": {"family": "ip", "addr": {"map": {"key": {"numgen": {"mode": "random", "mod": n, "offset": 0}}, "data": {"set": set}}}}}]),
                )?;
            } else {
                let set: Vec<serde_json::Value> = s
                    .endpoints
                    .iter()
                    .enumerate()
                    .map(|(k, e)| json!([k, {"goto": {"target": self.nft_endpoint_chain(i, e)}}]))
                    .collect();
                rule(
                    w,
                    &mut obj,
                    &svc,
                    json!([{"vmap": {"key": {"numgen": {"mode": "random", "mod": n, "offset": 0}}, "data": {"set": set}}}]),
                )?;
                for e in &s.endpoints {
                    let ep = self.nft_endpoint_chain(i, e);
                    chain(w, &mut obj, &ep)?;
                    rule(
                        w,
                        &mut obj,
                        &ep,
                        json!([{"match": {"op": "==", "left": {"payload": {"protocol": "ip", "field": "saddr"}}, "right": e.ip().to_string()}}, jump_masq]),
                    )?;
                    if s.affinity {
                        rule(
                            w,
                            &mut obj,
                            &ep,
                            json!([{"set": {"op": "update", "elem": {"payload": {"protocol": "ip", "field": "saddr"}}, "set": format!("@affinity-{}", ep.strip_prefix("endpoint-").unwrap_or(&ep))}}]),
                        )?;
                    }
                    rule(
                        w,
                        &mut obj,
                        &ep,
                        json!([{"match": {"op": "==", "left": {"meta": {"key": "l4proto"}}, "right": p}}, {"dnat": {"addr": e.ip().to_string(), "port": e.port()}}]),
                    )?;
                }
            }
            if s.has_external() {
                let ext = self.nft_chain("external", i);
                chain(w, &mut obj, &ext)?;
                rule(w, &mut obj, &ext, json!([jump_masq]))?;
                rule(w, &mut obj, &ext, json!([{"goto": {"target": svc}}]))?;
            }
        }
        w.write_all(b"]}\n")
    }

    /// Writes the same ruleset as [`GenModel::write_nft_json`] as an `nft -f` script
    /// (chains declared before the rules and elements that reference them), for loading
    /// into a real kernel and reading back with `nft -j`.
    pub fn write_nft_script<W: Write>(&self, w: &mut W) -> io::Result<()> {
        let t = "ip kube-proxy";
        writeln!(w, "add table {t} {{ comment \"rules for kube-proxy\" ; }}")?;
        writeln!(
            w,
            "add set {t} cluster-ips {{ type ipv4_addr ; comment \"Active ClusterIPs\" ; }}"
        )?;
        writeln!(
            w,
            "add set {t} nodeport-ips {{ type ipv4_addr ; comment \"IPs that accept NodePort traffic\" ; }}"
        )?;
        writeln!(
            w,
            "add map {t} no-endpoint-nodeports {{ type inet_proto . inet_service : verdict ; comment \"vmap to drop or reject packets to service nodeports with no endpoints\" ; }}"
        )?;
        writeln!(
            w,
            "add map {t} no-endpoint-services {{ type ipv4_addr . inet_proto . inet_service : verdict ; comment \"vmap to drop or reject packets to services with no endpoints\" ; }}"
        )?;
        writeln!(
            w,
            "add map {t} service-ips {{ type ipv4_addr . inet_proto . inet_service : verdict ; comment \"ClusterIP, ExternalIP and LoadBalancer IP traffic\" ; }}"
        )?;
        writeln!(
            w,
            "add map {t} service-nodeports {{ type inet_proto . inet_service : verdict ; comment \"NodePort traffic\" ; }}"
        )?;
        for c in [
            "mark-for-masquerade",
            "masquerading",
            "reject-chain",
            "services",
        ] {
            writeln!(w, "add chain {t} {c}")?;
        }
        for (i, s) in self.services.iter().enumerate() {
            if s.endpoints.is_empty() {
                continue;
            }
            writeln!(w, "add chain {t} {}", self.nft_chain("service", i))?;
            if s.has_external() {
                writeln!(w, "add chain {t} {}", self.nft_chain("external", i))?;
            }
            if !self.nft_inline_dnat {
                for e in &s.endpoints {
                    writeln!(w, "add chain {t} {}", self.nft_endpoint_chain(i, e))?;
                    if s.affinity {
                        let ep = self.nft_endpoint_chain(i, e);
                        let aff = ep.strip_prefix("endpoint-").unwrap_or(&ep);
                        writeln!(
                            w,
                            "add set {t} affinity-{aff} {{ type ipv4_addr ; flags dynamic,timeout ; timeout 10800s ; }}"
                        )?;
                    }
                }
            }
        }
        writeln!(
            w,
            "add rule {t} mark-for-masquerade mark set mark or 0x4000"
        )?;
        writeln!(w, "add rule {t} reject-chain reject")?;
        writeln!(
            w,
            "add rule {t} services ip daddr . meta l4proto . th dport vmap @service-ips"
        )?;
        writeln!(
            w,
            "add rule {t} services ip daddr @nodeport-ips meta l4proto . th dport vmap @service-nodeports"
        )?;
        writeln!(w, "add element {t} nodeport-ips {{ {NODE_IP} }}")?;
        for (i, s) in self.services.iter().enumerate() {
            let p = s.proto_lower();
            writeln!(w, "add element {t} cluster-ips {{ {} }}", s.cluster_ip)?;
            if s.endpoints.is_empty() {
                writeln!(
                    w,
                    "add element {t} no-endpoint-services {{ {} . {p} . {} comment \"{}\" : goto reject-chain }}",
                    s.cluster_ip,
                    s.port,
                    s.port_name()
                )?;
                continue;
            }
            let svc = self.nft_chain("service", i);
            writeln!(
                w,
                "add rule {t} {svc} ip daddr {} ip saddr != {POD_CIDR} jump mark-for-masquerade",
                s.cluster_ip
            )?;
            let n = s.endpoints.len();
            if self.nft_inline_dnat {
                let m: Vec<String> = s
                    .endpoints
                    .iter()
                    .enumerate()
                    .map(|(k, e)| format!("{k} : {} . {}", e.ip(), e.port()))
                    .collect();
                writeln!(
                    w,
                    "add rule {t} {svc} meta l4proto {p} dnat ip to numgen random mod {n} map {{ {} }}",
                    m.join(", ")
                )?;
            } else {
                let m: Vec<String> = s
                    .endpoints
                    .iter()
                    .enumerate()
                    .map(|(k, e)| format!("{k} : goto {}", self.nft_endpoint_chain(i, e)))
                    .collect();
                writeln!(
                    w,
                    "add rule {t} {svc} numgen random mod {n} vmap {{ {} }}",
                    m.join(" , ")
                )?;
                for e in &s.endpoints {
                    let ep = self.nft_endpoint_chain(i, e);
                    writeln!(
                        w,
                        "add rule {t} {ep} ip saddr {} jump mark-for-masquerade",
                        e.ip()
                    )?;
                    if s.affinity {
                        let aff = ep.strip_prefix("endpoint-").unwrap_or(&ep);
                        writeln!(w, "add rule {t} {ep} update @affinity-{aff} {{ ip saddr }}")?;
                    }
                    writeln!(w, "add rule {t} {ep} meta l4proto {p} dnat to {e}")?;
                }
            }
            writeln!(
                w,
                "add element {t} service-ips {{ {} . {p} . {} : goto {svc} }}",
                s.cluster_ip, s.port
            )?;
            if s.has_external() {
                let ext = self.nft_chain("external", i);
                writeln!(w, "add rule {t} {ext} jump mark-for-masquerade")?;
                writeln!(w, "add rule {t} {ext} goto {svc}")?;
                for ip in s.external_ips.iter().chain(&s.lb_ips) {
                    writeln!(
                        w,
                        "add element {t} service-ips {{ {ip} . {p} . {} : goto {ext} }}",
                        s.port
                    )?;
                }
                if let Some(np) = s.node_port {
                    writeln!(
                        w,
                        "add element {t} service-nodeports {{ {p} . {np} : goto {ext} }}"
                    )?;
                }
            }
        }
        Ok(())
    }
}

#[derive(Clone, Copy, Debug)]
enum NatChain {
    MarkMasq,
    NodePorts,
    Postrouting,
    Services,
    Svc(usize),
    Svl(usize),
    Ext(usize),
    Sep(usize, usize),
}
