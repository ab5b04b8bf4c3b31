//! The ids of the datapath and conntrack layers and their path kinds.
//!
//! Declared here, next to the dumps that show them ([`Dump::path_kind`](crate::Dump)),
//! because both this crate's format table and `ghostip-session`'s layers name them; the
//! session re-exports them as `ghostip_session::layers::datapath` and
//! `ghostip_session::layers::conntrack`, so each name is declared once.

use ghostip_core::{Layer, PathKind};

/// A node's load-balancer datapath (kube-proxy iptables/nftables/IPVS, Cilium).
pub const DATAPATH: Layer = Layer::new("datapath");
/// kube-proxy in iptables mode.
pub const IPTABLES: PathKind = PathKind::new(DATAPATH, "iptables");
/// kube-proxy in nftables mode.
pub const NFTABLES: PathKind = PathKind::new(DATAPATH, "nftables");
/// kube-proxy in IPVS mode.
pub const IPVS: PathKind = PathKind::new(DATAPATH, "ipvs");
/// Cilium's load-balancer maps.
pub const CILIUM: PathKind = PathKind::new(DATAPATH, "cilium");

/// Connection-tracking entries on a node.
pub const CONNTRACK: Layer = Layer::new("conntrack");
/// A node's connection-tracking table.
pub const CONNTRACK_TABLE: PathKind = PathKind::new(CONNTRACK, "conntrack");

/// The datapath layer's path kinds.
pub const DATAPATH_KINDS: [PathKind; 4] = [IPTABLES, NFTABLES, IPVS, CILIUM];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_belong_to_their_layer_and_keep_their_names() {
        let names: Vec<&str> = DATAPATH_KINDS.iter().map(|k| k.as_str()).collect();
        assert_eq!(names, ["iptables", "nftables", "ipvs", "cilium"]);
        assert!(DATAPATH_KINDS.iter().all(|k| k.layer() == DATAPATH));
        assert_eq!(DATAPATH.as_str(), "datapath");
        assert_eq!(
            (CONNTRACK.as_str(), CONNTRACK_TABLE.as_str()),
            ("conntrack", "conntrack")
        );
        assert_eq!(CONNTRACK_TABLE.layer(), CONNTRACK);
    }
}
