//! The channelz layer's part of a drain: when no opted-in client's balancer holds the pod's IP any more.
//!
//! A client lets go once a read of its channelz made after t0 shows no subchannel (other
//! than `SHUTDOWN`) to the IP, on any port. A client that cannot be read is unknown: the
//! drain's fallback budget stands in for it. With no opted-in client the layer adds nothing
//! to the decision.

use std::collections::BTreeMap;
use std::net::IpAddr;

use ghostip_core::Time;

use super::ClientRead;
use crate::drain::{LayerStatus, LayerView, LetGo};

/// The channels of one read whose balancer holds `ip`, with the subchannel's state.
pub fn holders(read: &ClientRead, ip: IpAddr) -> Vec<String> {
    let ip = ip.to_canonical();
    let mut out: Vec<String> = read
        .channels
        .iter()
        .flat_map(|ch| {
            ch.subchannels
                .iter()
                .filter(move |sc| {
                    sc.state.holds() && sc.address.is_some_and(|a| a.ip().to_canonical() == ip)
                })
                .map(move |sc| format!("{} ({:?})", ch.target, sc.state))
        })
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// What one client's read said about the IP.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientReport {
    /// When the read was made.
    pub read_at: Time,
    /// Its channels still holding the IP ([`holders`]).
    pub holding: Vec<String>,
}

/// Every opted-in client's balancer's hold on one IP.
#[derive(Clone, Debug, Default)]
pub struct ClientsLetGo {
    clients: BTreeMap<String, Result<ClientReport, String>>,
    /// The clients cannot be found at all, with why.
    unknown: Option<String>,
}

impl ClientsLetGo {
    /// No client read yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// What a client's read said (`namespace/pod`), or why it could not be read.
    pub fn on_client(&mut self, client: &str, report: Result<ClientReport, String>) {
        self.clients.insert(client.to_string(), report);
    }

    /// The opted-in clients cannot be found (the pods cannot be listed).
    pub fn unknown(&mut self, why: impl Into<String>) {
        self.unknown = Some(why.into());
    }

    /// A client is no longer opted in or gone: it holds nothing.
    pub fn forget(&mut self, client: &str) {
        self.clients.remove(client);
    }
}

impl LetGo for ClientsLetGo {
    fn views(&self, t0: Time, _now: Time, out: &mut Vec<LayerStatus>) {
        if let Some(why) = &self.unknown {
            out.push(LayerStatus {
                layer: "channelz",
                path: "*".into(),
                view: LayerView::Unknown { why: why.clone() },
            });
        }
        for (client, report) in &self.clients {
            let view = match report {
                Err(why) => LayerView::Unknown { why: why.clone() },
                Ok(r) if r.read_at < t0 => LayerView::Holding {
                    why: "its channelz has not been read since the IP left the endpoints".into(),
                    until: None,
                },
                Ok(r) if !r.holding.is_empty() => LayerView::Holding {
                    why: format!("subchannels of {} hold the IP", r.holding.join(", ")),
                    until: None,
                },
                Ok(r) => LayerView::LetGo { at: r.read_at },
            };
            out.push(LayerStatus {
                layer: "channelz",
                path: client.clone(),
                view,
            });
        }
    }
}
