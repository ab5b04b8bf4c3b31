//! A sorted set of targets stored compactly: what one layer or path should hold for one Service.
//!
//! A [`Target`] is 22 bytes (an `IpAddr` and an optional port). At 150 000 endpoints the
//! engine keeps two sets per endpoint on an agent (the DNS layer's and the node's datapath
//! path's), so IPv4 targets (nearly all of them) are packed into one `u64` each: the
//! address, whether there is a port, the port, in that order of significance. That order
//! is `Target`'s own (`Ipv4Addr` by value, `None` before `Some`, ports by value), and every
//! IPv4 address sorts before every IPv6 one, so iterating the packed targets and then the
//! others yields the set in `Target` order.

use std::net::{IpAddr, Ipv4Addr};

use crate::model::Target;

/// A sorted, deduplicated set of targets (IPv4 ones in 8 bytes).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct TargetSet {
    v4: Box<[u64]>,
    other: Box<[Target]>,
}

fn pack(ip: Ipv4Addr, port: Option<u16>) -> u64 {
    (u64::from(u32::from(ip)) << 17)
        | (u64::from(port.is_some()) << 16)
        | u64::from(port.unwrap_or(0))
}

fn unpack(p: u64) -> Target {
    let ip = Ipv4Addr::from((p >> 17) as u32);
    let port = (p & (1 << 16) != 0).then_some((p & 0xffff) as u16);
    Target {
        ip: IpAddr::V4(ip),
        port,
    }
}

impl TargetSet {
    /// The set of `targets`, which must be sorted and deduplicated (as a `BTreeSet`
    /// iterates); the order is kept as given.
    pub fn from_sorted(targets: impl IntoIterator<Item = Target>) -> Self {
        let mut v4 = Vec::new();
        let mut other = Vec::new();
        for t in targets {
            match t.ip {
                IpAddr::V4(ip) => v4.push(pack(ip, t.port)),
                IpAddr::V6(_) => other.push(t),
            }
        }
        Self {
            v4: v4.into_boxed_slice(),
            other: other.into_boxed_slice(),
        }
    }

    /// Whether `t` is in the set.
    pub fn contains(&self, t: &Target) -> bool {
        match t.ip {
            IpAddr::V4(ip) => self.v4.binary_search(&pack(ip, t.port)).is_ok(),
            IpAddr::V6(_) => self.other.binary_search(t).is_ok(),
        }
    }

    /// Whether the targets of `items` (`target` of each), in the order given, are exactly
    /// this set's targets in order: true for the set's own sorted, deduplicated list, false
    /// for anything else (another order included). One pass without searches: how a
    /// datapath read, whose targets come sorted, is checked against the set (see
    /// `Engine::observe`).
    ///
    /// A slice rather than an iterator: with the lengths checked first, the set's IPv4
    /// part and the list's first items are walked side by side, one packed comparison per
    /// target and no bookkeeping (a read holds 100 000s of targets).
    pub fn equals_in_order<T>(&self, items: &[T], target: impl Fn(&T) -> Target) -> bool {
        if items.len() != self.len() {
            return false;
        }
        let (Some(v4), Some(other)) = (items.get(..self.v4.len()), items.get(self.v4.len()..))
        else {
            return false;
        };
        v4.iter().zip(self.v4.iter()).all(|(item, want)| {
            matches!(target(item), Target { ip: IpAddr::V4(ip), port } if pack(ip, port) == *want)
        }) && other
            .iter()
            .zip(self.other.iter())
            .all(|(item, want)| target(item) == *want)
    }

    /// The targets in order.
    pub fn iter(&self) -> impl Iterator<Item = Target> + '_ {
        self.v4
            .iter()
            .map(|p| unpack(*p))
            .chain(self.other.iter().copied())
    }

    /// How many targets.
    pub fn len(&self) -> usize {
        self.v4.len() + self.other.len()
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::net::Ipv6Addr;

    use proptest::prelude::*;

    use super::*;

    fn target() -> impl Strategy<Value = Target> {
        let ip = prop_oneof![
            4 => any::<u32>().prop_map(|v| IpAddr::V4(Ipv4Addr::from(v))),
            1 => any::<u128>().prop_map(|v| IpAddr::V6(Ipv6Addr::from(v))),
        ];
        (ip, proptest::option::of(any::<u16>())).prop_map(|(ip, port)| Target { ip, port })
    }

    proptest! {
        /// Packing keeps `Target`'s order, so the set iterates as the `BTreeSet` it was
        /// built from and answers membership like it.
        #[test]
        fn agrees_with_a_btreeset(
            set in proptest::collection::btree_set(target(), 0..64),
            probes in proptest::collection::vec(target(), 0..16),
        ) {
            let packed = TargetSet::from_sorted(set.iter().copied());
            prop_assert_eq!(packed.len(), set.len());
            prop_assert_eq!(packed.iter().collect::<Vec<_>>(), set.iter().copied().collect::<Vec<_>>());
            for t in set.iter().chain(&probes) {
                prop_assert_eq!(packed.contains(t), set.contains(t));
            }
        }

        /// `equals_in_order` is list equality with the set's sorted targets: true for them,
        /// false for any other list (reordered, shortened, extended, with a duplicate).
        #[test]
        fn equals_in_order_is_list_equality(
            set in proptest::collection::btree_set(target(), 0..32),
            list in proptest::collection::vec(target(), 0..32),
            edit in 0usize..5,
            at in any::<prop::sample::Index>(),
        ) {
            let packed = TargetSet::from_sorted(set.iter().copied());
            let sorted: Vec<Target> = set.iter().copied().collect();
            prop_assert!(packed.equals_in_order(&sorted, |t| *t));
            let mut edited = sorted.clone();
            if !edited.is_empty() {
                let i = at.index(edited.len());
                match edit {
                    0 => { edited.remove(i); }
                    1 => { let t = edited[i]; edited.insert(i, t); }
                    2 => edited.reverse(),
                    3 => { let t = edited[i]; edited.push(t); }
                    _ => edited.swap(0, i),
                }
            }
            prop_assert_eq!(packed.equals_in_order(&edited, |t| *t), edited == sorted);
            prop_assert_eq!(packed.equals_in_order(&list, |t| *t), list == sorted);
        }
    }

    #[test]
    fn edges_of_the_packing() {
        let set: BTreeSet<Target> = [
            Target::ip(IpAddr::V4(Ipv4Addr::UNSPECIFIED)),
            Target {
                ip: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
                port: Some(0),
            },
            Target {
                ip: IpAddr::V4(Ipv4Addr::BROADCAST),
                port: Some(u16::MAX),
            },
            Target::ip(IpAddr::V6(Ipv6Addr::UNSPECIFIED)),
        ]
        .into();
        let packed = TargetSet::from_sorted(set.iter().copied());
        assert_eq!(packed.iter().collect::<BTreeSet<_>>(), set);
        assert!(!packed.contains(&Target::ip(IpAddr::V4(Ipv4Addr::BROADCAST))));
    }
}
