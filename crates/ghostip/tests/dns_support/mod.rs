//! In-process DNS servers for the DNS tests: fake CoreDNS pods on their own loopback addresses, and a caching front that hands out decreasing TTLs.
//!
//! Built on hickory-server's [`Server`] with hand-written [`RequestHandler`]s, so the
//! code under test talks real DNS over real UDP/TCP sockets.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    dead_code,
    missing_docs
)]

pub mod prober;

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hickory_net::client::{Client, ClientHandle};
use hickory_net::runtime::TokioRuntimeProvider;
use hickory_net::udp::UdpClientStream;
use hickory_net::xfer::Protocol;
use hickory_proto::op::{Header, HeaderCounts, MessageType, Metadata, OpCode, ResponseCode};
use hickory_proto::rr::rdata::{A, AAAA, SRV};
use hickory_proto::rr::{DNSClass, Name, RData, Record, RecordType};
use hickory_server::Server;
use hickory_server::net::runtime::Time;
use hickory_server::server::{Request, RequestHandler, ResponseHandler, ResponseInfo};
use hickory_server::zone_handler::MessageResponseBuilder;
use tokio::net::{TcpListener, UdpSocket};

pub fn name(s: &str) -> Name {
    Name::from_ascii(s).unwrap()
}

pub fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// Records of a fake server, changeable while it runs.
#[derive(Clone, Default)]
pub struct Zone {
    inner: Arc<Mutex<ZoneInner>>,
}

#[derive(Default)]
struct ZoneInner {
    /// (lower-cased name, type) → (answers, additionals).
    records: HashMap<(Name, RecordType), (Vec<Record>, Vec<Record>)>,
}

impl Zone {
    /// Sets the A and AAAA records of `owner` from `ips` (replacing both sets).
    pub fn set_addrs(&self, owner: &str, ips: &[&str], ttl: u32) {
        let n = name(owner);
        let (mut a, mut aaaa) = (Vec::new(), Vec::new());
        for s in ips {
            match ip(s) {
                IpAddr::V4(v4) => a.push(Record::from_rdata(n.clone(), ttl, RData::A(A(v4)))),
                IpAddr::V6(v6) => {
                    aaaa.push(Record::from_rdata(n.clone(), ttl, RData::AAAA(AAAA(v6))))
                }
            }
        }
        let mut z = self.inner.lock().unwrap();
        z.records
            .insert((n.to_lowercase(), RecordType::A), (a, Vec::new()));
        z.records
            .insert((n.to_lowercase(), RecordType::AAAA), (aaaa, Vec::new()));
    }

    /// Sets SRV records of `owner`: one per (target, port, ip), with the targets' A/AAAA
    /// records in the additional section, as CoreDNS answers for headless Services.
    pub fn set_srv(&self, owner: &str, targets: &[(&str, u16, &str)], ttl: u32) {
        let n = name(owner);
        let mut answers = Vec::new();
        let mut additionals = Vec::new();
        for (target, port, addr) in targets {
            let t = name(target);
            answers.push(Record::from_rdata(
                n.clone(),
                ttl,
                RData::SRV(SRV::new(0, 100, *port, t.clone())),
            ));
            let data = match ip(addr) {
                IpAddr::V4(v4) => RData::A(A(v4)),
                IpAddr::V6(v6) => RData::AAAA(AAAA(v6)),
            };
            additionals.push(Record::from_rdata(t, ttl, data));
        }
        self.inner
            .lock()
            .unwrap()
            .records
            .insert((n.to_lowercase(), RecordType::SRV), (answers, additionals));
    }

    /// Removes every record of `owner` (it becomes NXDOMAIN).
    pub fn remove(&self, owner: &str) {
        let n = name(owner).to_lowercase();
        self.inner
            .lock()
            .unwrap()
            .records
            .retain(|(k, _), _| *k != n);
    }

    /// What CoreDNS answers for a headless Service with one named port: A and AAAA of `owner`
    /// from `addrs`, and its SRV name `srv` with one record per address on `port`, each
    /// target a name under `owner` (`10-244-1-5.<owner>`) with its address in the additional
    /// section.
    pub fn set_service(&self, owner: &str, srv: &str, port: u16, addrs: &[&str], ttl: u32) {
        self.set_addrs(owner, addrs, ttl);
        let hosts: Vec<String> = addrs
            .iter()
            .map(|a| format!("{}.{owner}", a.replace(['.', ':'], "-")))
            .collect();
        let targets: Vec<(&str, u16, &str)> = hosts
            .iter()
            .zip(addrs)
            .map(|(h, a)| (h.as_str(), port, *a))
            .collect();
        self.set_srv(srv, &targets, ttl);
    }

    /// (answers, additionals, rcode) for a question.
    fn lookup(&self, qname: &Name, qtype: RecordType) -> (Vec<Record>, Vec<Record>, ResponseCode) {
        let z = self.inner.lock().unwrap();
        let key = qname.to_lowercase();
        match z.records.get(&(key.clone(), qtype)) {
            Some((ans, add)) => (ans.clone(), add.clone(), ResponseCode::NoError),
            None if z.records.keys().any(|(k, _)| *k == key) => {
                (Vec::new(), Vec::new(), ResponseCode::NoError)
            }
            None => (Vec::new(), Vec::new(), ResponseCode::NXDomain),
        }
    }
}

/// How a fake server answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Behavior {
    /// From its zone (NXDOMAIN for unknown names, NODATA for known names without the type).
    Answer,
    /// Every query: this rcode, no records.
    Rcode(ResponseCode),
    /// UDP: TC bit, no records; TCP: the zone's answer.
    TruncateUdp,
    /// UDP: TC bit, no records; TCP: never answers.
    TruncateUdpSilentTcp,
    /// Never answers.
    Silent,
}

/// A fake CoreDNS pod: answers from a [`Zone`], as told by its [`Behavior`].
#[derive(Clone)]
pub struct FakeDns {
    pub zone: Zone,
    behavior: Arc<Mutex<Behavior>>,
    pub udp_queries: Arc<AtomicUsize>,
    pub tcp_queries: Arc<AtomicUsize>,
}

impl FakeDns {
    pub fn new(zone: Zone) -> Self {
        Self {
            zone,
            behavior: Arc::new(Mutex::new(Behavior::Answer)),
            udp_queries: Arc::default(),
            tcp_queries: Arc::default(),
        }
    }

    pub fn set_behavior(&self, b: Behavior) {
        *self.behavior.lock().unwrap() = b;
    }
}

/// A response header for the cases where nothing is sent.
fn no_response(request: &Request) -> ResponseInfo {
    let mut metadata = Metadata::new(request.metadata.id, MessageType::Response, OpCode::Query);
    metadata.response_code = ResponseCode::ServFail;
    ResponseInfo::from(Header {
        metadata,
        counts: HeaderCounts::default(),
    })
}

async fn respond<R: ResponseHandler>(
    request: &Request,
    mut handle: R,
    metadata: Metadata,
    answers: &[Record],
    additionals: &[Record],
) -> ResponseInfo {
    let builder = MessageResponseBuilder::from_message_request(request);
    let response = builder.build(
        metadata,
        answers.iter(),
        std::iter::empty(),
        std::iter::empty(),
        additionals.iter(),
    );
    match handle.send_response(response).await {
        Ok(info) => info,
        Err(_) => no_response(request),
    }
}

#[async_trait::async_trait]
impl RequestHandler for FakeDns {
    async fn handle_request<R: ResponseHandler, T: Time>(
        &self,
        request: &Request,
        handle: R,
    ) -> ResponseInfo {
        let udp = request.protocol() == Protocol::Udp;
        if udp {
            self.udp_queries.fetch_add(1, Ordering::SeqCst);
        } else {
            self.tcp_queries.fetch_add(1, Ordering::SeqCst);
        }
        let Ok(info) = request.request_info() else {
            return no_response(request);
        };
        let qname: Name = info.query.name().clone().into();
        let qtype = info.query.query_type();
        let mut metadata = Metadata::response_from_request(&request.metadata);
        metadata.authoritative = true;
        let behavior = *self.behavior.lock().unwrap();
        match behavior {
            Behavior::Silent => no_response(request),
            Behavior::Rcode(rcode) => {
                metadata.response_code = rcode;
                respond(request, handle, metadata, &[], &[]).await
            }
            Behavior::TruncateUdpSilentTcp if !udp => no_response(request),
            Behavior::TruncateUdp | Behavior::TruncateUdpSilentTcp if udp => {
                metadata.truncation = true;
                respond(request, handle, metadata, &[], &[]).await
            }
            Behavior::Answer | Behavior::TruncateUdp | Behavior::TruncateUdpSilentTcp => {
                let (answers, additionals, rcode) = self.zone.lookup(&qname, qtype);
                metadata.response_code = rcode;
                respond(request, handle, metadata, &answers, &additionals).await
            }
        }
    }
}

struct CacheEntry {
    stored: Instant,
    ttl: u32,
    answers: Vec<Record>,
    additionals: Vec<Record>,
}

/// A cache in front of an upstream server, like CoreDNS's `cache` plugin: keeps an answer
/// for min(record TTL, cap) seconds and hands it out with the remaining TTL.
#[derive(Clone)]
pub struct CachingFront {
    upstream: SocketAddr,
    cap: u32,
    cache: Arc<Mutex<HashMap<(Name, RecordType), CacheEntry>>>,
    pub upstream_queries: Arc<AtomicUsize>,
}

impl CachingFront {
    pub fn new(upstream: SocketAddr, cap: u32) -> Self {
        Self {
            upstream,
            cap,
            cache: Arc::default(),
            upstream_queries: Arc::default(),
        }
    }

    /// Cached (answers, additionals) with TTLs rewritten to what remains, if fresh.
    fn cached(&self, key: &(Name, RecordType)) -> Option<(Vec<Record>, Vec<Record>)> {
        let cache = self.cache.lock().unwrap();
        let e = cache.get(key)?;
        let age = u32::try_from(e.stored.elapsed().as_secs()).unwrap_or(u32::MAX);
        if age >= e.ttl {
            return None;
        }
        let remaining = e.ttl - age;
        let rewrite = |rs: &[Record]| {
            rs.iter()
                .map(|r| {
                    let mut r = r.clone();
                    r.ttl = remaining;
                    r
                })
                .collect::<Vec<_>>()
        };
        Some((rewrite(&e.answers), rewrite(&e.additionals)))
    }

    async fn fetch(
        &self,
        qname: &Name,
        qtype: RecordType,
    ) -> Option<(Vec<Record>, Vec<Record>, ResponseCode)> {
        self.upstream_queries.fetch_add(1, Ordering::SeqCst);
        let stream = UdpClientStream::builder(self.upstream, TokioRuntimeProvider::default())
            .with_timeout(Some(Duration::from_secs(1)))
            .with_max_retries(0)
            .build();
        let (mut client, bg) = Client::<TokioRuntimeProvider>::from_sender(stream);
        let bg = tokio::spawn(bg);
        let resp = client.query(qname.clone(), DNSClass::IN, qtype).await;
        bg.abort();
        let resp = resp.ok()?;
        Some((
            resp.answers.clone(),
            resp.additionals.clone(),
            resp.metadata.response_code,
        ))
    }
}

#[async_trait::async_trait]
impl RequestHandler for CachingFront {
    async fn handle_request<R: ResponseHandler, T: Time>(
        &self,
        request: &Request,
        handle: R,
    ) -> ResponseInfo {
        let Ok(info) = request.request_info() else {
            return no_response(request);
        };
        let qname: Name = info.query.name().clone().into();
        let qtype = info.query.query_type();
        let key = (qname.to_lowercase(), qtype);
        let mut metadata = Metadata::response_from_request(&request.metadata);
        metadata.recursion_available = true;
        if let Some((answers, additionals)) = self.cached(&key) {
            return respond(request, handle, metadata, &answers, &additionals).await;
        }
        let Some((answers, additionals, rcode)) = self.fetch(&qname, qtype).await else {
            metadata.response_code = ResponseCode::ServFail;
            return respond(request, handle, metadata, &[], &[]).await;
        };
        metadata.response_code = rcode;
        // Like CoreDNS: only positive answers are cached here (denial caching is not needed by the tests).
        if let Some(min_ttl) = answers.iter().map(|r| r.ttl).min() {
            let ttl = min_ttl.min(self.cap);
            self.cache.lock().unwrap().insert(
                key,
                CacheEntry {
                    stored: Instant::now(),
                    ttl,
                    answers: answers.clone(),
                    additionals: additionals.clone(),
                },
            );
        }
        respond(request, handle, metadata, &answers, &additionals).await
    }
}

/// A running in-process server; shuts down when dropped.
pub struct TestServer<H: RequestHandler> {
    pub addr: SocketAddr,
    server: Server<H>,
}

impl<H: RequestHandler> TestServer<H> {
    /// Serves `handler` over UDP and TCP on the same ephemeral port of `ip`.
    pub async fn start(ip: IpAddr, handler: H) -> Self {
        for _ in 0..20 {
            let udp = UdpSocket::bind(SocketAddr::new(ip, 0)).await.unwrap();
            let addr = udp.local_addr().unwrap();
            let Ok(tcp) = TcpListener::bind(addr).await else {
                continue;
            };
            let mut server = Server::new(handler);
            server.register_socket(udp);
            server.register_listener(tcp, Duration::from_secs(5), 64);
            return Self { addr, server };
        }
        panic!("no free port on {ip}");
    }

    /// Serves `handler` over UDP only (TCP connections are refused).
    pub async fn start_udp_only(ip: IpAddr, handler: H) -> Self {
        let udp = UdpSocket::bind(SocketAddr::new(ip, 0)).await.unwrap();
        let addr = udp.local_addr().unwrap();
        let mut server = Server::new(handler);
        server.register_socket(udp);
        Self { addr, server }
    }

    pub async fn stop(mut self) {
        let _ = self.server.shutdown_gracefully().await;
    }
}

impl<H: RequestHandler> Drop for TestServer<H> {
    fn drop(&mut self) {
        self.server.shutdown_token().cancel();
    }
}

/// A UDP socket that receives queries and never answers (a hung DNS pod).
pub async fn blackhole_udp(ip: IpAddr) -> UdpSocket {
    UdpSocket::bind(SocketAddr::new(ip, 0)).await.unwrap()
}
