//! One uncached DNS query to one server: UDP without retries, asked again once over TCP when truncated.
//!
//! See [`query`] for the entry point. The query goes to exactly the address given (no
//! cache, search list, server rotation or retry), so what comes back is what that one
//! path holds right now. NXDOMAIN and NODATA are answers (an empty set with its rcode);
//! timeouts, SERVFAIL, REFUSED, other rcodes and network errors are [`QueryError`]s that
//! map onto [`FailureReason`].
//!
//! # Errors
//! Every failure is a value ([`QueryError`]); nothing here panics or retries.

use std::fmt;
use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use ghostip_core::{FailureReason, HeldTarget, Target};
use ghostip_session::layers::dns::names::QueryType;
use hickory_net::NetError;
use hickory_net::client::{Client, ClientHandle};
use hickory_net::runtime::TokioRuntimeProvider;
use hickory_net::tcp::TcpClientStream;
use hickory_net::udp::UdpClientStream;
use hickory_proto::op::{DnsResponse, ResponseCode};
use hickory_proto::rr::{DNSClass, Name, RData, Record};
use tokio::time::Instant;

/// Extra time allowed past the per-query timeout before our own guard gives up.
///
/// hickory enforces the timeout itself; the guard only catches a background task that
/// never completes, so it must not race hickory's timer.
const GUARD_SLACK: Duration = Duration::from_millis(250);

/// Transport that carried the answer (or the failure).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Transport {
    /// UDP, the first attempt.
    Udp,
    /// TCP, after a truncated UDP answer.
    Tcp,
}

impl Transport {
    /// Lower-case name (`udp`, `tcp`).
    pub fn as_str(self) -> &'static str {
        match self {
            Transport::Udp => "udp",
            Transport::Tcp => "tcp",
        }
    }
}

impl fmt::Display for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How one query is made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueryConfig {
    /// Time allowed for each attempt (the UDP one, then the TCP one if truncated).
    pub timeout: Duration,
    /// Ask again over TCP when the UDP answer has the TC bit set.
    pub tcp_on_truncation: bool,
}

impl Default for QueryConfig {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(1),
            tcp_on_truncation: true,
        }
    }
}

/// An A or AAAA record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AddrRecord {
    /// Owner name.
    pub name: Name,
    /// Address.
    pub ip: IpAddr,
    /// TTL in seconds, as the server handed it out (a cache hands out the remaining TTL).
    pub ttl: u32,
}

/// An SRV record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SrvRecord {
    /// Owner name (`_port._proto.service…`).
    pub name: Name,
    /// Target host (a per-pod name for headless Services).
    pub target: Name,
    /// Port.
    pub port: u16,
    /// Priority.
    pub priority: u16,
    /// Weight.
    pub weight: u16,
    /// TTL in seconds.
    pub ttl: u32,
}

/// A response with a success rcode (NOERROR, or NXDOMAIN which is an empty answer).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DnsAnswer {
    /// Server asked.
    pub server: SocketAddr,
    /// Name asked.
    pub name: Name,
    /// Type asked.
    pub qtype: QueryType,
    /// Response code: `NoError` or `NXDomain`.
    pub rcode: ResponseCode,
    /// A/AAAA records of the answer section (for A/AAAA queries).
    pub addrs: Vec<AddrRecord>,
    /// SRV records of the answer section (for SRV queries).
    pub srv: Vec<SrvRecord>,
    /// A/AAAA records of the additional section (the addresses of SRV targets).
    pub additional_addrs: Vec<AddrRecord>,
    /// The AA bit.
    pub authoritative: bool,
    /// Transport of the answer used.
    pub transport: Transport,
    /// The answer used still had TC set (TCP disabled, or the TCP answer was truncated too).
    pub truncated: bool,
    /// From sending the first (UDP) query to receiving the answer used.
    pub latency: Duration,
}

impl DnsAnswer {
    /// The set this answer holds, as the engine compares it.
    ///
    /// A/AAAA: one bare IP per address record, with its TTL. SRV: one `ip:port` per SRV
    /// record whose target has an address in the additional section, with the SRV TTL;
    /// SRV targets without an address are left out.
    pub fn held(&self) -> Vec<HeldTarget> {
        match self.qtype {
            QueryType::A | QueryType::Aaaa => self
                .addrs
                .iter()
                .map(|a| HeldTarget {
                    target: Target::ip(a.ip),
                    ttl: Some(a.ttl),
                    last_used: None,
                })
                .collect(),
            QueryType::Srv => self
                .srv
                .iter()
                .flat_map(|s| {
                    self.additional_addrs
                        .iter()
                        .filter(move |a| a.name == s.target)
                        .map(move |a| HeldTarget {
                            target: Target::socket(a.ip, s.port),
                            ttl: Some(s.ttl),
                            last_used: None,
                        })
                })
                .collect(),
        }
    }

    /// The answer holds no record of the type asked (NXDOMAIN or NODATA).
    pub fn is_empty(&self) -> bool {
        match self.qtype {
            QueryType::A | QueryType::Aaaa => self.addrs.is_empty(),
            QueryType::Srv => self.srv.is_empty(),
        }
    }
}

/// A query that produced no usable answer.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{qtype} {name} via {server} over {transport}: {reason} after {latency:?}")]
pub struct QueryError {
    /// Server asked.
    pub server: SocketAddr,
    /// Name asked.
    pub name: Name,
    /// Type asked.
    pub qtype: QueryType,
    /// Transport of the attempt that failed.
    pub transport: Transport,
    /// Time spent until the failure was known.
    pub latency: Duration,
    /// Why, in the observation vocabulary.
    pub reason: FailureReason,
    /// The response code, when the failure is one.
    pub rcode: Option<ResponseCode>,
}

/// Sends one query for `name`/`qtype` to `server` and waits for its answer.
///
/// UDP first, with no retry and `config.timeout`; a truncated answer is asked again
/// once over TCP (when `config.tcp_on_truncation`), also within `config.timeout`.
///
/// # Errors
/// [`QueryError`] with [`FailureReason::Timeout`], [`FailureReason::Servfail`],
/// [`FailureReason::Refused`], [`FailureReason::Rcode`] (any other non-success rcode) or
/// [`FailureReason::Network`] (socket errors, connection refused on TCP, bad messages).
pub async fn query(
    server: SocketAddr,
    name: &Name,
    qtype: QueryType,
    config: &QueryConfig,
) -> Result<DnsAnswer, QueryError> {
    let start = Instant::now();
    let fail =
        |transport: Transport, reason: FailureReason, rcode: Option<ResponseCode>| QueryError {
            server,
            name: name.clone(),
            qtype,
            transport,
            latency: start.elapsed(),
            reason,
            rcode,
        };

    let udp = ask_udp(server, name, qtype, config.timeout)
        .await
        .map_err(|e| fail(Transport::Udp, reason_of(&e), None))?;
    let (response, transport) = if udp.metadata.truncation && config.tcp_on_truncation {
        let tcp = ask_tcp(server, name, qtype, config.timeout)
            .await
            .map_err(|e| fail(Transport::Tcp, reason_of(&e), None))?;
        (tcp, Transport::Tcp)
    } else {
        (udp, Transport::Udp)
    };

    let rcode = response.metadata.response_code;
    match rcode {
        ResponseCode::NoError | ResponseCode::NXDomain => {}
        ResponseCode::ServFail => {
            return Err(fail(transport, FailureReason::Servfail, Some(rcode)));
        }
        ResponseCode::Refused => return Err(fail(transport, FailureReason::Refused, Some(rcode))),
        other => {
            return Err(fail(
                transport,
                FailureReason::Rcode(rcode_mnemonic(other)),
                Some(rcode),
            ));
        }
    }

    let wanted = qtype.record_type();
    let (addrs, srv) = match qtype {
        QueryType::A | QueryType::Aaaa => (
            response
                .answers
                .iter()
                .filter(|r| r.record_type() == wanted)
                .filter_map(addr_record)
                .collect(),
            Vec::new(),
        ),
        QueryType::Srv => (
            Vec::new(),
            response.answers.iter().filter_map(srv_record).collect(),
        ),
    };
    let additional_addrs = if qtype == QueryType::Srv {
        response
            .additionals
            .iter()
            .filter_map(addr_record)
            .collect()
    } else {
        Vec::new()
    };
    Ok(DnsAnswer {
        server,
        name: name.clone(),
        qtype,
        rcode,
        addrs,
        srv,
        additional_addrs,
        authoritative: response.metadata.authoritative,
        transport,
        truncated: response.metadata.truncation,
        latency: start.elapsed(),
    })
}

/// The conventional mnemonic of a response code (`NOTIMP`, `FORMERR`, …; `RCODE23` when unnamed).
pub fn rcode_mnemonic(rcode: ResponseCode) -> String {
    let name = match rcode {
        ResponseCode::NoError => "NOERROR",
        ResponseCode::FormErr => "FORMERR",
        ResponseCode::ServFail => "SERVFAIL",
        ResponseCode::NXDomain => "NXDOMAIN",
        ResponseCode::NotImp => "NOTIMP",
        ResponseCode::Refused => "REFUSED",
        ResponseCode::YXDomain => "YXDOMAIN",
        ResponseCode::YXRRSet => "YXRRSET",
        ResponseCode::NXRRSet => "NXRRSET",
        ResponseCode::NotAuth => "NOTAUTH",
        ResponseCode::NotZone => "NOTZONE",
        ResponseCode::BADCOOKIE => "BADCOOKIE",
        other => return format!("RCODE{}", u16::from(other)),
    };
    name.to_string()
}

/// Maps a hickory error onto the observation vocabulary.
fn reason_of(error: &NetError) -> FailureReason {
    match error {
        NetError::Timeout => FailureReason::Timeout,
        NetError::Io(e) if e.kind() == io::ErrorKind::TimedOut => FailureReason::Timeout,
        other => FailureReason::Network(other.to_string()),
    }
}

fn addr_record(r: &Record) -> Option<AddrRecord> {
    let ip = match &r.data {
        RData::A(a) => IpAddr::V4(a.0),
        RData::AAAA(a) => IpAddr::V6(a.0),
        _ => return None,
    };
    Some(AddrRecord {
        name: r.name.clone(),
        ip,
        ttl: r.ttl,
    })
}

fn srv_record(r: &Record) -> Option<SrvRecord> {
    match &r.data {
        RData::SRV(s) => Some(SrvRecord {
            name: r.name.clone(),
            target: s.target.clone(),
            port: s.port,
            priority: s.priority,
            weight: s.weight,
            ttl: r.ttl,
        }),
        _ => None,
    }
}

async fn ask_udp(
    server: SocketAddr,
    name: &Name,
    qtype: QueryType,
    timeout: Duration,
) -> Result<DnsResponse, NetError> {
    let stream = UdpClientStream::builder(server, TokioRuntimeProvider::default())
        .with_timeout(Some(timeout))
        .with_max_retries(0)
        .build();
    let (mut client, background) = Client::<TokioRuntimeProvider>::from_sender(stream);
    let answer = client.query(name.clone(), DNSClass::IN, qtype.record_type());
    drive(answer, background, timeout).await
}

async fn ask_tcp(
    server: SocketAddr,
    name: &Name,
    qtype: QueryType,
    timeout: Duration,
) -> Result<DnsResponse, NetError> {
    let (connect, sender) =
        TcpClientStream::new(server, None, Some(timeout), TokioRuntimeProvider::default());
    let stream = match tokio::time::timeout(timeout + GUARD_SLACK, connect).await {
        Ok(stream) => stream?,
        Err(_) => return Err(NetError::Timeout),
    };
    let (mut client, background) =
        Client::<TokioRuntimeProvider>::with_timeout(stream, sender, timeout);
    let answer = client.query(name.clone(), DNSClass::IN, qtype.record_type());
    drive(answer, background, timeout).await
}

/// Polls the query and the client's background task together, so nothing outlives the call
/// (no spawned task; dropping the future drops the sockets).
async fn drive<Q, B>(answer: Q, background: B, timeout: Duration) -> Result<DnsResponse, NetError>
where
    Q: Future<Output = Result<DnsResponse, NetError>>,
    B: Future<Output = ()>,
{
    let guarded = async {
        tokio::select! {
            biased;
            result = answer => result,
            () = background => Err(NetError::from("DNS client background task ended before the answer")),
        }
    };
    match tokio::time::timeout(timeout + GUARD_SLACK, guarded).await {
        Ok(result) => result,
        Err(_) => Err(NetError::Timeout),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mnemonics() {
        assert_eq!(rcode_mnemonic(ResponseCode::NotImp), "NOTIMP");
        assert_eq!(rcode_mnemonic(ResponseCode::FormErr), "FORMERR");
        assert_eq!(rcode_mnemonic(ResponseCode::Unknown(3841)), "RCODE3841");
    }

    #[test]
    fn timeouts_map_to_timeout() {
        assert_eq!(reason_of(&NetError::Timeout), FailureReason::Timeout);
        let io = NetError::from(io::Error::new(io::ErrorKind::TimedOut, "connect"));
        assert_eq!(reason_of(&io), FailureReason::Timeout);
        let refused = NetError::from(io::Error::new(io::ErrorKind::ConnectionRefused, "refused"));
        assert!(matches!(reason_of(&refused), FailureReason::Network(_)));
    }
}
