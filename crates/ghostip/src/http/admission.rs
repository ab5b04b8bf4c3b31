//! Which connections an HTTP server admits: a share of its slots per client address that shrinks under pressure, slots kept for connections from this host, and, when full, eviction of the largest holder's oldest idle connection instead of refusing a newcomer.
//!
//! Pure: the server ([`super::serve`]) passes the instant and closes what this evicts.
//!
//! The rule, for a connection from address `A` (IPv4-mapped IPv6 addresses count as IPv4):
//! 1. `A`'s share is [`Rules::per_client`] (16) while the server is at most half full after
//!    admitting it; beyond that (under pressure) it is
//!    `min(per_client, max(min_share, max_connections / (distinct addresses + 1)))`, the
//!    distinct addresses counting `A`: 64 slots among 4 holders and a newcomer leave 12 each
//!    (`64 / 5`), and never fewer than 2 ([`Rules::min_share`]). `A` already at its share
//!    is refused.
//! 2. A connection from this host (its source address is its destination address: the
//!    kubelet probing a hostNetwork pod, a loopback client) may use
//!    [`Rules::reserved_for_this_host`] (2) slots above [`Rules::max_connections`].
//! 3. When every slot is taken, the oldest idle connection (accepted, or done with its last
//!    response, and waiting for a request head: a half-open or kept-alive one) of the address
//!    holding the most slots is closed for the newcomer, provided that address holds at
//!    least two more than the newcomer: a newcomer cannot evict an address that holds no
//!    more than itself, so holders of a fair share do not evict each other. With no such
//!    connection, the newcomer is refused.
//!
//! Against clients holding half-open connections from a few addresses and renewing them
//! (`tests/integration/http_limits.rs`), 1 stops them from renewing beyond their share as soon as a
//! newcomer appears, 3 lets the newcomer in at once, and 2 keeps health probes answered.

use std::cmp::Reverse;
use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::time::Instant;

/// The numbers of the rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rules {
    /// Slots for connections from anywhere.
    pub max_connections: usize,
    /// Share of one address while the server is at most half full.
    pub per_client: usize,
    /// Smallest share of one address under pressure.
    pub min_share: usize,
    /// Slots above `max_connections` only connections from this host may take.
    pub reserved_for_this_host: usize,
}

/// One open connection's number.
pub type ConnId = u64;

/// Why a connection is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Its address holds its share already.
    OverShare {
        /// The share.
        share: usize,
    },
    /// Every slot is taken and no idle connection may be evicted for it.
    Full,
}

/// What becomes of a new connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Admitted as `id`; `evict` is the connection to close for it.
    Admit {
        /// Its number.
        id: ConnId,
        /// The connection given up for it, already out of the table.
        evict: Option<ConnId>,
    },
    /// Refused.
    Refuse(Refusal),
}

#[derive(Clone, Copy, Debug)]
struct Conn {
    client: IpAddr,
    /// Requests in progress (their responses not yet sent whole).
    busy: usize,
    /// Since when it waits for a request head (accepted, or its last response ended).
    idle_since: Instant,
}

/// The open connections and the rule.
#[derive(Clone, Debug)]
pub struct Admission {
    rules: Rules,
    conns: BTreeMap<ConnId, Conn>,
    per_client: HashMap<IpAddr, usize>,
    next: ConnId,
}

impl Admission {
    /// No connection open yet.
    pub fn new(rules: Rules) -> Self {
        Self {
            rules,
            conns: BTreeMap::new(),
            per_client: HashMap::new(),
            next: 0,
        }
    }

    /// Connections open.
    pub fn open(&self) -> usize {
        self.conns.len()
    }

    /// Connections open from `client`.
    pub fn held_by(&self, client: IpAddr) -> usize {
        self.per_client
            .get(&client.to_canonical())
            .copied()
            .unwrap_or(0)
    }

    /// How many connections `client` may hold with one more admitted now (rule 1).
    pub fn share(&self, client: IpAddr) -> usize {
        let r = &self.rules;
        if (self.conns.len() + 1) * 2 <= r.max_connections {
            return r.per_client;
        }
        let distinct = self.per_client.len()
            + usize::from(!self.per_client.contains_key(&client.to_canonical()));
        r.per_client
            .min((r.max_connections / (distinct + 1)).max(r.min_share))
    }

    /// Admits or refuses a connection from `client` (`from_this_host`: its source address is
    /// its destination address) accepted at `now`.
    pub fn admit(&mut self, client: IpAddr, from_this_host: bool, now: Instant) -> Decision {
        let client = client.to_canonical();
        let mine = self.held_by(client);
        let share = self.share(client);
        if mine >= share {
            return Decision::Refuse(Refusal::OverShare { share });
        }
        let cap = self.rules.max_connections
            + if from_this_host {
                self.rules.reserved_for_this_host
            } else {
                0
            };
        let mut evict = None;
        if self.conns.len() >= cap {
            let held = |a: &IpAddr| self.per_client.get(a).copied().unwrap_or(0);
            let victim = self
                .conns
                .iter()
                .filter(|(_, c)| c.busy == 0 && c.client != client && held(&c.client) >= mine + 2)
                .max_by_key(|(id, c)| (held(&c.client), Reverse(c.idle_since), Reverse(**id)))
                .map(|(id, _)| *id);
            let Some(victim) = victim else {
                return Decision::Refuse(Refusal::Full);
            };
            self.close(victim);
            evict = Some(victim);
        }
        let id = self.next;
        self.next += 1;
        self.conns.insert(
            id,
            Conn {
                client,
                busy: 0,
                idle_since: now,
            },
        );
        *self.per_client.entry(client).or_insert(0) += 1;
        Decision::Admit { id, evict }
    }

    /// A request of `id` started: it is not idle until its response ends.
    pub fn request_started(&mut self, id: ConnId) {
        if let Some(c) = self.conns.get_mut(&id) {
            c.busy += 1;
        }
    }

    /// A response of `id` was sent whole (or given up) at `now`.
    pub fn request_ended(&mut self, id: ConnId, now: Instant) {
        if let Some(c) = self.conns.get_mut(&id) {
            c.busy = c.busy.saturating_sub(1);
            if c.busy == 0 {
                c.idle_since = now;
            }
        }
    }

    /// `id` closed; nothing when it was evicted already.
    pub fn close(&mut self, id: ConnId) {
        let Some(c) = self.conns.remove(&id) else {
            return;
        };
        if let Some(n) = self.per_client.get_mut(&c.client) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.per_client.remove(&c.client);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]
    use super::*;
    use std::time::Duration;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn admitted(d: Decision) -> (ConnId, Option<ConnId>) {
        match d {
            Decision::Admit { id, evict } => (id, evict),
            Decision::Refuse(r) => panic!("refused: {r:?}"),
        }
    }

    const RULES: Rules = Rules {
        max_connections: 8,
        per_client: 8,
        min_share: 2,
        reserved_for_this_host: 1,
    };

    #[test]
    fn the_share_is_per_client_until_half_full_then_shrinks_with_the_addresses() {
        let t0 = crate::clock::monotonic_now();
        let mut a = Admission::new(RULES);
        // One address: its whole per-client share up to half full, then half of the slots.
        let mut ids = Vec::new();
        for _ in 0..4 {
            ids.push(admitted(a.admit(ip("10.0.0.1"), false, t0)).0);
        }
        assert_eq!(
            a.admit(ip("10.0.0.1"), false, t0),
            Decision::Refuse(Refusal::OverShare { share: 4 })
        );
        // A second and a third: 8 / (3 + 1) = 2 each; the fourth at 8 / 5, floored at 2.
        for b in ["10.0.0.2", "10.0.0.3"] {
            admitted(a.admit(ip(b), false, t0));
            admitted(a.admit(ip(b), false, t0));
            assert_eq!(
                a.admit(ip(b), false, t0),
                Decision::Refuse(Refusal::OverShare { share: 2 })
            );
        }
        assert_eq!(a.open(), 8);
        assert_eq!(a.share(ip("10.0.0.4")), 2);
        // Closing gives the slot and the count back.
        a.close(ids[0]);
        a.close(ids[0]);
        assert_eq!((a.open(), a.held_by(ip("10.0.0.1"))), (7, 3));
    }

    #[test]
    fn a_full_server_evicts_the_oldest_idle_connection_of_the_largest_holder() {
        let t0 = crate::clock::monotonic_now();
        let at = |ms| t0 + Duration::from_millis(ms);
        let mut a = Admission::new(RULES);
        let first: Vec<ConnId> = (0..4)
            .map(|i| admitted(a.admit(ip("10.0.0.1"), false, at(i))).0)
            .collect();
        for b in ["10.0.0.2", "10.0.0.3"] {
            for i in 10..12 {
                admitted(a.admit(ip(b), false, at(i)));
            }
        }
        // The oldest of 10.0.0.1 is busy with a request: the next oldest idle one goes.
        a.request_started(first[0]);
        let (_, evict) = admitted(a.admit(ip("10.0.0.4"), false, at(20)));
        assert_eq!(evict, Some(first[1]));
        assert_eq!(a.held_by(ip("10.0.0.1")), 3);
        assert_eq!(a.open(), 8);
        // A request that ended makes its connection idle from then on: the oldest idle of
        // 10.0.0.1 is now first[2] (idle since 2 ms), not first[0] (since 30 ms).
        a.request_ended(first[0], at(30));
        let (_, evict) = admitted(a.admit(ip("10.0.0.5"), false, at(31)));
        assert_eq!(evict, Some(first[2]));
        // Every address holds 2 or fewer now: a newcomer with none may still evict one with
        // 2; an address with 1 may not evict one with 2, and is refused.
        let (_, evict) = admitted(a.admit(ip("10.0.0.6"), false, at(40)));
        assert!(evict.is_some());
        assert_eq!(
            a.admit(ip("10.0.0.4"), false, at(41)),
            Decision::Refuse(Refusal::Full)
        );
        assert_eq!(a.open(), 8);
    }

    #[test]
    fn busy_connections_are_never_evicted_and_this_host_has_its_reserved_slot() {
        let t0 = crate::clock::monotonic_now();
        let mut a = Admission::new(RULES);
        for b in ["10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4"] {
            for _ in 0..2 {
                let (id, _) = admitted(a.admit(ip(b), false, t0));
                a.request_started(id);
            }
        }
        assert_eq!(a.open(), 8);
        assert_eq!(
            a.admit(ip("10.0.0.9"), false, t0),
            Decision::Refuse(Refusal::Full)
        );
        // The kubelet's probe from this host takes the reserved slot, without evicting.
        assert_eq!(
            a.admit(ip("10.0.0.9"), true, t0),
            Decision::Admit { id: 8, evict: None }
        );
        assert_eq!(
            a.admit(ip("::ffff:10.0.0.9"), true, t0),
            Decision::Refuse(Refusal::Full),
            "one reserved slot, and a mapped address is the same client"
        );
        assert_eq!(a.held_by(ip("::ffff:10.0.0.9")), 1);
    }
}
