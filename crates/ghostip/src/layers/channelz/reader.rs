//! One bounded read of a client's channelz over gRPC: its top channels (paged), then each subchannel's address and state.
//!
//! Every read is bounded: one deadline for the whole read (connect included), at most
//! [`ReadBounds::max_channels`] channels and [`ReadBounds::max_subchannels`] subchannels
//! (a read past either is marked truncated and stops), pages of
//! [`ReadBounds::page`] channels, at most [`ReadBounds::concurrency`] subchannel requests in
//! flight, and responses of at most [`ReadBounds::max_message`] bytes. A port that is not
//! a gRPC server, a server without channelz, one that answers slowly or with garbage all end
//! as a [`ReadError`] naming what failed.
//!
//! With a [`ReadBudget`] ([`read_within`], what `watch` uses), every request waits for its
//! slot in the budget first (each page alone, the `GetSubchannel` requests in batches of
//! up to [`ReadBounds::concurrency`], sent together at the batch's last slot: fewer
//! wakeups and syscalls than one at a time), and the deadline does not count that wait: it
//! bounds the client's answers, not the budget's queue.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use ghostip_session::layers::channelz::{
    ChannelRead, ClientRead, ConnState, SubchannelRead, parse_addresses,
};
use http::uri::PathAndQuery;
use tokio::time::Instant;
use tonic::transport::{Channel, Endpoint};

use super::budget::ReadBudget;
use super::proto;

/// How much one read may do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadBounds {
    /// The whole read (connect, every request) ends by then.
    pub deadline: Duration,
    /// Channels read at most.
    pub max_channels: usize,
    /// Subchannels read at most, over all channels.
    pub max_subchannels: usize,
    /// Channels asked per `GetTopChannels` page.
    pub page: usize,
    /// `GetSubchannel` requests in flight at once.
    pub concurrency: usize,
    /// Largest response accepted, in bytes.
    pub max_message: usize,
}

impl Default for ReadBounds {
    fn default() -> Self {
        Self {
            deadline: Duration::from_secs(2),
            max_channels: 100,
            max_subchannels: 2000,
            page: 100,
            concurrency: 32,
            max_message: 4 << 20,
        }
    }
}

/// Why a read failed.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// No connection (refused, unreachable, not HTTP/2).
    #[error("cannot connect to channelz at {addr}: {cause}")]
    Connect {
        /// Where.
        addr: SocketAddr,
        /// Why.
        cause: String,
    },
    /// The read did not finish within its deadline.
    #[error("channelz at {addr} did not answer within {deadline:?}")]
    Timeout {
        /// Where.
        addr: SocketAddr,
        /// The deadline.
        deadline: Duration,
    },
    /// The server answered with a gRPC error (UNIMPLEMENTED: no channelz service there), or
    /// what it sent is not gRPC or not channelz.
    #[error("channelz at {addr}: {method}: {code:?}: {message}")]
    Status {
        /// Where.
        addr: SocketAddr,
        /// The method.
        method: &'static str,
        /// The gRPC code.
        code: tonic::Code,
        /// Its message.
        message: String,
    },
}

impl ReadError {
    /// A short label for metrics: `connect`, `timeout`, `unimplemented`, `protocol`.
    pub fn label(&self) -> &'static str {
        match self {
            Self::Connect { .. } => "connect",
            Self::Timeout { .. } => "timeout",
            Self::Status {
                code: tonic::Code::Unimplemented,
                ..
            } => "unimplemented",
            Self::Status { .. } => "protocol",
        }
    }
}

/// Reads the channelz of the client serving it on `addr`, within `bounds`.
pub async fn read(addr: SocketAddr, bounds: &ReadBounds) -> Result<ClientRead, ReadError> {
    read_within(addr, bounds, None).await
}

/// Reads as [`read`] does; with a budget, each request first waits for its slot, and the
/// deadline is pushed back by the time the read spent waiting (overlapping waits of
/// concurrent requests counted once).
pub async fn read_within(
    addr: SocketAddr,
    bounds: &ReadBounds,
    budget: Option<&ReadBudget>,
) -> Result<ClientRead, ReadError> {
    let now = Instant::now();
    let deadline = Arc::new(Mutex::new(Deadline {
        end: now + bounds.deadline,
        covered: now,
    }));
    let pace = budget.map(|b| Pace {
        budget: b.clone(),
        deadline: Arc::clone(&deadline),
    });
    let work = read_unbounded(addr, bounds, pace);
    tokio::pin!(work);
    loop {
        let end = lock(&deadline).end;
        match tokio::time::timeout_at(end, &mut work).await {
            Ok(r) => return r,
            // Pushed back by a budget wait meanwhile: keep going until the new end.
            Err(_) if lock(&deadline).end > end => {}
            Err(_) => {
                return Err(ReadError::Timeout {
                    addr,
                    deadline: bounds.deadline,
                });
            }
        }
    }
}

/// The end of one read, and up to when budget waits already pushed it back.
#[derive(Debug)]
struct Deadline {
    end: Instant,
    covered: Instant,
}

impl Deadline {
    /// A request asked at `asked` waited until `slot`: the part of that not already
    /// counted moves the end.
    fn waited(&mut self, asked: Instant, slot: Instant) {
        let from = asked.max(self.covered);
        if slot > from {
            self.end += slot - from;
            self.covered = slot;
        }
    }
}

fn lock(d: &Mutex<Deadline>) -> std::sync::MutexGuard<'_, Deadline> {
    d.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A read's share of the budget.
#[derive(Clone, Debug)]
struct Pace {
    budget: ReadBudget,
    deadline: Arc<Mutex<Deadline>>,
}

async fn read_unbounded(
    addr: SocketAddr,
    bounds: &ReadBounds,
    pace: Option<Pace>,
) -> Result<ClientRead, ReadError> {
    let channel = Endpoint::from_shared(format!("http://{addr}"))
        .map_err(|e| ReadError::Connect {
            addr,
            cause: e.to_string(),
        })?
        .connect_timeout(bounds.deadline)
        .connect()
        .await
        .map_err(|e| ReadError::Connect {
            addr,
            cause: error_chain(&e),
        })?;
    let client = Client {
        addr,
        pace,
        grpc: tonic::client::Grpc::new(channel).max_decoding_message_size(bounds.max_message),
    };
    let mut out = ClientRead::default();
    // Top channels, then their subchannel ids, within the bounds.
    let mut pending: Vec<(usize, i64)> = Vec::new();
    let mut start = 0i64;
    'pages: loop {
        client.pace(1).await;
        let page = client
            .unary::<_, proto::GetTopChannelsResponse>(
                proto::GET_TOP_CHANNELS,
                proto::GetTopChannelsRequest {
                    start_channel_id: start,
                    max_results: i64::try_from(bounds.page).unwrap_or(i64::MAX),
                },
            )
            .await?;
        let mut last = None;
        for ch in page.channel {
            let id = ch.r#ref.as_ref().map_or(0, |r| r.channel_id);
            last = Some(last.map_or(id, |l: i64| l.max(id)));
            if out.channels.len() >= bounds.max_channels {
                out.truncated = true;
                break 'pages;
            }
            let idx = out.channels.len();
            out.channels.push(ChannelRead {
                target: ch.data.map(|d| d.target).unwrap_or_default(),
                subchannels: Vec::new(),
            });
            for r in ch.subchannel_ref {
                if pending.len() >= bounds.max_subchannels {
                    out.truncated = true;
                    break 'pages;
                }
                pending.push((idx, r.subchannel_id));
            }
        }
        match last {
            Some(id) if !page.end => start = id.saturating_add(1),
            _ => break,
        }
    }
    // In batches of `concurrency`, each after its slots in the budget.
    let batch = bounds.concurrency.max(1);
    let batches: Vec<Vec<(usize, i64)>> = pending.chunks(batch).map(<[_]>::to_vec).collect();
    let ids = futures::stream::iter(batches)
        .then(|ids| {
            let client = client.clone();
            async move {
                client
                    .pace(u32::try_from(ids.len()).unwrap_or(u32::MAX))
                    .await;
                futures::stream::iter(ids)
            }
        })
        .flatten();
    let subchannels: Vec<(usize, Vec<SubchannelRead>)> = ids
        .map(|(idx, id)| {
            let client = client.clone();
            async move {
                let r = client
                    .unary::<_, proto::GetSubchannelResponse>(
                        proto::GET_SUBCHANNEL,
                        proto::GetSubchannelRequest { subchannel_id: id },
                    )
                    .await;
                match r {
                    Ok(r) => {
                        let data = r.subchannel.and_then(|s| s.data);
                        Ok(Some((idx, subchannel_reads(data))))
                    }
                    // Removed between the two requests: it holds nothing.
                    Err(ReadError::Status {
                        code: tonic::Code::NotFound,
                        ..
                    }) => Ok(None),
                    Err(e) => Err(e),
                }
            }
        })
        .buffer_unordered(batch)
        .try_filter_map(|r| async move { Ok(r) })
        .try_collect()
        .await?;
    for (idx, sc) in subchannels {
        if let Some(ch) = out.channels.get_mut(idx) {
            ch.subchannels.extend(sc);
        }
    }
    Ok(out)
}

/// One channelz subchannel as reads: one per address of its target, each in the
/// subchannel's state (a grpc-java subchannel over an address group of several addresses
/// tries, so holds, each of them); one without an address when none parses.
fn subchannel_reads(data: Option<proto::ChannelData>) -> Vec<SubchannelRead> {
    let state = ConnState::from_proto(
        data.as_ref()
            .and_then(|d| d.state.as_ref())
            .map_or(0, |s| s.state),
    );
    let addrs = data.map(|d| parse_addresses(&d.target)).unwrap_or_default();
    if addrs.is_empty() {
        return vec![SubchannelRead {
            address: None,
            state,
        }];
    }
    addrs
        .into_iter()
        .map(|a| SubchannelRead {
            address: Some(a),
            state,
        })
        .collect()
}

#[derive(Clone)]
struct Client {
    addr: SocketAddr,
    pace: Option<Pace>,
    grpc: tonic::client::Grpc<Channel>,
}

impl Client {
    /// Waits for `n` slots in the budget, when there is one.
    async fn pace(&self, n: u32) {
        if let Some(p) = &self.pace {
            // The deadline moves before the wait, so the wait never times the read out.
            let (asked, slot) = p.budget.reserve_many(n);
            lock(&p.deadline).waited(asked, slot);
            if slot > asked {
                tokio::time::sleep_until(slot).await;
            }
        }
    }

    async fn unary<Req, Resp>(&self, method: &'static str, req: Req) -> Result<Resp, ReadError>
    where
        Req: prost::Message + Send + Sync + 'static,
        Resp: prost::Message + Default + Send + Sync + 'static,
    {
        let status = |s: tonic::Status| ReadError::Status {
            addr: self.addr,
            method: method.rsplit('/').next().unwrap_or(method),
            code: s.code(),
            message: s.message().chars().take(200).collect(),
        };
        let mut grpc = self.grpc.clone();
        grpc.ready().await.map_err(|e| ReadError::Connect {
            addr: self.addr,
            cause: error_chain(&e),
        })?;
        let codec = tonic_prost::ProstCodec::<Req, Resp>::default();
        grpc.unary(
            tonic::Request::new(req),
            PathAndQuery::from_static(method),
            codec,
        )
        .await
        .map(tonic::Response::into_inner)
        .map_err(status)
    }
}

/// An error and its causes, `a: b: c`.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(c) = source {
        let text = c.to_string();
        if !s.contains(&text) {
            s.push_str(": ");
            s.push_str(&text);
        }
        source = c.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlapping_budget_waits_push_the_deadline_once() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut d = Deadline {
            end: at(2000),
            covered: t0,
        };
        // Two requests asked together, slots at 100 and 200 ms: 200 ms waited in all.
        d.waited(at(0), at(100));
        d.waited(at(0), at(200));
        assert_eq!(d.end, at(2200));
        // Asked after the last slot, sent at once: nothing.
        d.waited(at(300), at(300));
        assert_eq!(d.end, at(2200));
        // Asked at 300, slot at 350: 50 more.
        d.waited(at(300), at(350));
        assert_eq!(d.end, at(2250));
    }

    fn data(target: &str, state: i32) -> Option<proto::ChannelData> {
        Some(proto::ChannelData {
            state: Some(proto::ChannelConnectivityState { state }),
            target: target.into(),
        })
    }

    fn addr(s: &str) -> Option<SocketAddr> {
        s.parse().ok()
    }

    #[test]
    fn a_grpc_go_subchannel_is_one_read() {
        assert_eq!(
            subchannel_reads(data("10.244.1.7:50051", 3)),
            vec![SubchannelRead {
                address: addr("10.244.1.7:50051"),
                state: ConnState::Ready
            }]
        );
    }

    /// grpc-java 1.85's `round_robin` subchannel, as its channelz answered in the lab.
    #[test]
    fn a_grpc_java_round_robin_subchannel_is_one_read() {
        assert_eq!(
            subchannel_reads(data("[[[/127.0.0.1:46199]/{}]]", 4)),
            vec![SubchannelRead {
                address: addr("127.0.0.1:46199"),
                state: ConnState::TransientFailure
            }]
        );
    }

    /// A grpc-java subchannel over a group of two addresses (`pick_first` over a list, a
    /// dual-stack endpoint) holds both: one read each, in its state.
    #[test]
    fn a_grpc_java_subchannel_over_several_addresses_holds_each() {
        let r = subchannel_reads(data(
            "[[[/10.244.1.7:50051, /[fd00:0:0:0:0:0:0:7]:50051]/{}], [[/10.244.2.9:50051]/{}]]",
            2,
        ));
        let got: Vec<_> = r.iter().map(|s| (s.address, s.state)).collect();
        assert_eq!(
            got,
            vec![
                (addr("10.244.1.7:50051"), ConnState::Connecting),
                (addr("[fd00::7]:50051"), ConnState::Connecting),
                (addr("10.244.2.9:50051"), ConnState::Connecting),
            ]
        );
    }

    #[test]
    fn a_subchannel_without_an_address_is_one_read_without_one() {
        assert_eq!(
            subchannel_reads(data("", 1)),
            vec![SubchannelRead {
                address: None,
                state: ConnState::Idle
            }]
        );
        assert_eq!(
            subchannel_reads(None),
            vec![SubchannelRead {
                address: None,
                state: ConnState::Unknown
            }]
        );
    }
}
