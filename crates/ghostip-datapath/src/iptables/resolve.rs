//! Jump resolution: when the dump ends, each entry rule is followed through the chain graph to
//! the DNAT targets it reaches, and each frontend is handed to a [`FrontendSink`].
//!
//! The graph is rows sorted by [`ChainKey`]: jump runs per source chain and DNAT rows per
//! chain, looked up by interpolation ([`Bands`]); jumps to a chain with one DNAT are resolved
//! beforehand in one pass ([`resolve_direct`]).
//!
//! Property tests (`tests.rs`): `resolve_direct_agrees_with_a_scan`,
//! `key_set_is_a_sorted_search`, `band_lookup_agrees_with_a_scan`.

use std::net::{IpAddr, Ipv4Addr};
use std::ops::Range;

use super::chain_key::ChainKey;
use super::{EXPECTED, Entry, Parser};
use crate::error::ParseError;
use crate::format::Format;
use crate::model::{Backend, Frontend, Location, ServiceRef, SkipStats, any_addr};
use crate::packed::FrontendSink;

/// A jump run: source chain and the index of its first row in the jump rows.
pub(super) type Run = (ChainKey, u32);
/// A jump row: target chain and the endpoint named by the jump's comment.
pub(super) type JumpRow = (ChainKey, PAddr);

/// A backend address in 8 bytes: IPv4 inline, IPv6 as an index into the parser's list.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) struct PAddr {
    pub(super) ip: u32,
    pub(super) port: u16,
    /// 0: none, 4: IPv4, 6: IPv6 (index).
    pub(super) family: u16,
}

impl PAddr {
    pub(super) const NONE: PAddr = PAddr {
        ip: 0,
        port: 0,
        family: 0,
    };

    /// Flag on a jump row's address: the target chain's one DNAT (see [`resolve_direct`]),
    /// not the endpoint named by the comment.
    pub(super) const RESOLVED: u16 = 0x100;

    /// Flag on a DNAT row's address while [`drop_resolved_dnats`] runs: a jump took it.
    pub(super) const TAKEN: u16 = 0x200;
}

/// Where the rows of one chain key are in a sorted array: each tag's band is found
/// once, then a key's position inside its band is interpolated from the key (hashed
/// names are spread evenly) and corrected by a galloping search, so a lookup touches a
/// cache line or two instead of the twenty a binary search would.
pub(super) struct Bands {
    start: [usize; 9],
}

impl Bands {
    pub(super) fn new<T>(v: &[T], k: impl Fn(&T) -> ChainKey) -> Self {
        let mut start = [0usize; 9];
        for (t, s) in start.iter_mut().enumerate() {
            *s = v.partition_point(|x| k(x).tag() < t);
        }
        start[8] = v.len();
        Self { start }
    }

    /// The band of `key`'s tag in `v` (its start) and the interpolated position of
    /// `key` in it.
    fn guess<'v, T>(
        &self,
        v: &'v [T],
        key: ChainKey,
        k: impl Fn(&T) -> ChainKey,
    ) -> (usize, &'v [T], usize) {
        let t = key.tag();
        let s = self.start.get(t).copied().unwrap_or(0);
        let e = self.start.get(t + 1).copied().unwrap_or(s);
        let band = v.get(s..e).unwrap_or_default();
        let n = band.len();
        let (Some(first), Some(last)) = (band.first(), band.last()) else {
            return (s, band, 0);
        };
        let (lo, hi, x) = (k(first).body(), k(last).body(), key.body());
        let g = if x <= lo {
            0
        } else if x >= hi {
            n - 1
        } else {
            let g = u128::from(x - lo) * (n as u128 - 1) / u128::from(hi - lo);
            usize::try_from(g).unwrap_or(n - 1).min(n - 1)
        };
        (s, band, g)
    }

    /// The rows of `key` in `v` (sorted by key).
    pub(super) fn range<T>(
        &self,
        v: &[T],
        key: ChainKey,
        k: impl Fn(&T) -> ChainKey,
    ) -> Range<usize> {
        let (s, band, g) = self.guess(v, key, &k);
        let n = band.len();
        if n == 0 {
            return s..s;
        }
        let lower = |a: usize, b: usize| {
            a + band
                .get(a..b)
                .unwrap_or_default()
                .partition_point(|y| k(y) < key)
        };
        let below = |i: usize| band.get(i).is_some_and(|y| k(y) < key);
        let lb = if below(g) {
            let mut from = g + 1;
            let mut step = 1;
            loop {
                let i = g + step;
                if i >= n {
                    break lower(from, n);
                }
                if !below(i) {
                    break lower(from, i);
                }
                from = i + 1;
                step *= 2;
            }
        } else {
            let mut to = g;
            let mut step = 1;
            loop {
                if step > g {
                    break lower(0, to);
                }
                let i = g - step;
                if below(i) {
                    break lower(i + 1, to);
                }
                to = i;
                step *= 2;
            }
        };
        let mut ub = lb;
        while band.get(ub).is_some_and(|y| k(y) == key) {
            ub += 1;
        }
        s + lb..s + ub
    }
}

impl Parser {
    /// Resolves every entry rule to its backends and hands each frontend to `sink`.
    pub(super) fn finish_into(
        mut self,
        sink: &mut impl FrontendSink,
    ) -> Result<SkipStats, ParseError> {
        if !self.saw_iptables
            && let Some((no, line)) = self.first_foreign.take()
        {
            return Err(ParseError::unexpected(
                Format::Iptables,
                Location::Line(no),
                EXPECTED,
                &line,
            ));
        }
        drop(std::mem::take(&mut self.names));
        let mut out = std::mem::take(&mut self.skipped);
        if self.marks > 0 {
            out.ignored += self.marks;
            *out.ignored_by_reason
                .entry("masquerade/mark/return rule".to_string())
                .or_insert(0) += self.marks;
        }
        // Sort-merge instead of a chain map: DNAT rows sorted by chain (legacy
        // iptables-save lists chains sorted, so this is one pass over sorted input), jump
        // runs sorted by source chain; lookups interpolate into them.
        let mut dnats = std::mem::take(&mut self.dnats);
        if !dnats.is_sorted_by_key(|d| d.0) {
            dnats.sort_by_key(|d| d.0);
        }
        let (runs, mut jumps) = sorted_runs(
            std::mem::take(&mut self.runs),
            std::mem::take(&mut self.jumps),
        );
        resolve_direct(&mut jumps, &mut dnats);
        let dnat_rows = dnats.len();
        drop_resolved_dnats(&mut dnats, &runs, &self.entries);
        let affinity = KeySet::new(std::mem::take(&mut self.affinity));
        let dnat_bands = Bands::new(&dnats, |d| d.0);
        let run_bands = Bands::new(&runs, |r| r.0);
        let dnats_of = |c: ChainKey| -> &[(ChainKey, PAddr)] {
            dnats
                .get(dnat_bands.range(&dnats, c, |d| d.0))
                .unwrap_or_default()
        };
        let run_of = |c: ChainKey| -> Option<usize> {
            let r = run_bands.range(&runs, c, |r| r.0);
            (!r.is_empty()).then_some(r.start)
        };
        let jumps_of = |run: usize| -> &[(ChainKey, PAddr)] {
            let lo = runs.get(run).map_or(0, |r| r.1 as usize);
            let hi = runs.get(run + 1).map_or(jumps.len(), |r| r.1 as usize);
            jumps.get(lo..hi).unwrap_or_default()
        };
        let v6_addrs = std::mem::take(&mut self.v6_addrs);
        let addr = |a: PAddr| -> Option<(IpAddr, u16)> {
            match a.family {
                4 => Some((IpAddr::V4(Ipv4Addr::from(a.ip)), a.port)),
                6 => v6_addrs
                    .get(a.ip as usize)
                    .map(|ip| (IpAddr::V6(*ip), a.port)),
                _ => None,
            }
        };
        let has_affinity = |c: ChainKey| affinity.contains(c);
        // Each DNAT is usually reached from one frontend, some from a NodePort or an
        // external address too.
        sink.expect(
            self.entries.len() + self.no_endpoints.len(),
            dnat_rows + dnat_rows / 4,
        );
        let mut seen = vec![0u32; runs.len()];
        let mut stamp = 0u32;
        let mut stack: Vec<(ChainKey, Option<usize>)> = Vec::new();
        for e in std::mem::take(&mut self.entries) {
            stamp = stamp.wrapping_add(1);
            let mut fe = Frontend::new(
                e.ip.unwrap_or_else(|| any_addr(self.v6)),
                e.port,
                e.proto,
                e.kind,
            );
            fe.service = e.service.as_deref().and_then(ServiceRef::parse_kube_proxy);
            let root = run_of(e.target);
            // A KUBE-SVC chain's jumps are its backends: sized once instead of grown.
            if let Some(r) = root {
                fe.backends.reserve(jumps_of(r).len());
            }
            if root.is_none() && dnats_of(e.target).is_empty() {
                out.unknown(
                    Location::Line(e.line),
                    "entry rule jumps to a chain absent from the dump",
                    "",
                );
            }
            if let Some(s) = root.and_then(|r| seen.get_mut(r)) {
                *s = stamp;
            }
            stack.clear();
            stack.push((e.target, root));
            while let Some((c, run)) = stack.pop() {
                if has_affinity(c) {
                    fe.add_flag("session-affinity");
                }
                for (_, a) in dnats_of(c) {
                    if let Some((ip, port)) = addr(*a) {
                        fe.backends.push(Backend::active(ip, port));
                    }
                }
                let Some(run) = run else { continue };
                for &(to, hint) in jumps_of(run) {
                    let to_run = run_of(to);
                    if to_run.is_none()
                        && hint.family & PAddr::RESOLVED != 0
                        && let Some((ip, port)) = addr(PAddr {
                            family: hint.family & !PAddr::RESOLVED,
                            ..hint
                        })
                    {
                        // A KUBE-SEP with one DNAT, resolved by the merge.
                        if has_affinity(to) {
                            fe.add_flag("session-affinity");
                        }
                        fe.backends.push(Backend::active(ip, port));
                        continue;
                    }
                    if let Some(r) = to_run {
                        if let Some(s) = seen.get_mut(r)
                            && *s != stamp
                        {
                            *s = stamp;
                            stack.push((to, Some(r)));
                        }
                        continue;
                    }
                    let to_dnats = dnats_of(to);
                    if !to_dnats.is_empty() {
                        // A chain of DNATs only (a KUBE-SEP): read in place.
                        if has_affinity(to) {
                            fe.add_flag("session-affinity");
                        }
                        for (_, a) in to_dnats {
                            if let Some((ip, port)) = addr(*a) {
                                fe.backends.push(Backend::active(ip, port));
                            }
                        }
                        continue;
                    }
                    match addr(hint) {
                        Some((ip, port)) => {
                            fe.backends.push(Backend::active(ip, port));
                            out.unknown(
                                Location::Line(e.line),
                                "endpoint taken from a jump comment (KUBE-SEP chain absent from the dump)",
                                "",
                            );
                        }
                        None => out.unknown(
                            Location::Line(e.line),
                            "jump to a chain absent from the dump",
                            "",
                        ),
                    }
                }
            }
            sink.frontend(fe);
        }
        for ne in std::mem::take(&mut self.no_endpoints) {
            let mut fe = Frontend::new(
                ne.ip.unwrap_or_else(|| any_addr(self.v6)),
                ne.port,
                ne.proto,
                ne.kind,
            );
            fe.service = ne.service;
            fe.add_flag(ne.flag);
            sink.frontend(fe);
        }
        Ok(out)
    }
}

/// A set of chain keys asked about once per jump (the chains with session affinity): a
/// bit per 16-bit key prefix answers most questions with one load from 8 KiB, and only
/// a set bit leads to the binary search. The tag is in the prefix, so the `KUBE-SEP`
/// targets of jumps never share a bit with the `KUBE-SVC` chains that carry affinity.
pub(super) struct KeySet {
    bits: Vec<u64>,
    keys: Vec<ChainKey>,
}

impl KeySet {
    pub(super) fn new(mut keys: Vec<ChainKey>) -> Self {
        keys.sort_unstable();
        keys.dedup();
        let mut bits = Vec::new();
        if !keys.is_empty() {
            bits = vec![0u64; (1 << 16) / 64];
            for k in &keys {
                let b = Self::bit(*k);
                if let Some(w) = bits.get_mut(b / 64) {
                    *w |= 1 << (b % 64);
                }
            }
        }
        Self { bits, keys }
    }

    fn bit(k: ChainKey) -> usize {
        (k.prefix() >> 16) as usize
    }

    pub(super) fn contains(&self, k: ChainKey) -> bool {
        let b = Self::bit(k);
        self.bits
            .get(b / 64)
            .is_some_and(|w| w & (1 << (b % 64)) != 0)
            && self.keys.binary_search(&k).is_ok()
    }
}

/// Replaces the address of each jump row whose target is a chain with exactly one DNAT
/// row by that DNAT's address, flagged [`PAddr::RESOLVED`] (the comment's endpoint is only
/// used for targets without rules, so it is not needed there). `dnats` is sorted by key.
///
/// The jumps are read in their own order and each looks its target up in a bucket index
/// of the DNAT rows' largest tag band (the `KUBE-SEP` chains): the first row of each value
/// of the top 16 bits of the hash (256 KiB, stays in cache), then the two or three rows of
/// that bucket, which are consecutive. Each lookup is one cache miss that does not depend
/// on the previous one (sorting the jumps by target and merging, as before, chased a
/// dependent miss per jump through the sort); the jumps go in groups of [`GROUP`] whose
/// rows are touched first, so that many of these misses are in flight at once. Targets
/// of other tags (rare) use [`Bands::range`].
pub(super) fn resolve_direct(jumps: &mut [JumpRow], dnats: &mut [(ChainKey, PAddr)]) {
    const BITS: u32 = 16;
    let bucket = |k: ChainKey| (k.body() >> (64 - BITS)) as usize;
    let bands = Bands::new(dnats, |d| d.0);
    let (tag, lo, hi) = (0..8)
        .map(|t| {
            let s = bands.start.get(t).copied().unwrap_or(0);
            let e = bands.start.get(t + 1).copied().unwrap_or(s);
            (t, s, e)
        })
        .max_by_key(|&(_, s, e)| e - s)
        .unwrap_or((0, 0, 0));
    // `first[b]..first[b + 1]`: the band's rows whose bucket is `b`.
    let mut first = vec![0u32; (1 << BITS) + 1];
    for (key, _) in dnats.get(lo..hi).unwrap_or_default() {
        if let Some(c) = first.get_mut(bucket(*key) + 1) {
            *c += 1;
        }
    }
    // Counts to starts: `first[b]` is where bucket `b` begins, `first[b + 1]` where it ends.
    let mut at = u32::try_from(lo).unwrap_or(u32::MAX);
    for c in first.iter_mut() {
        at = at.saturating_add(*c);
        *c = at;
    }
    let start = |b: usize| first.get(b).copied().unwrap_or(0) as usize;
    for group in jumps.chunks_mut(GROUP) {
        // First touch each jump's bucket with a short loop of independent loads, so the
        // processor has many of their cache misses in flight at once; the lookups below
        // then find the rows in cache. (Looked up one by one, the misses overlapped
        // little: a lookup is a long loop body with branches, and the processor reaches
        // only a few jumps ahead.)
        let mut touched = 0u32;
        for row in group.iter() {
            if row.0.tag() == tag {
                let at = start(bucket(row.0));
                touched ^= dnats.get(at).map_or(0, |r| r.0.lo);
            }
        }
        std::hint::black_box(touched);
        for row in group.iter_mut() {
            let range = if row.0.tag() == tag {
                let b = bucket(row.0);
                start(b)..start(b + 1)
            } else {
                bands.range(dnats, row.0, |d| d.0)
            };
            let Some(rows) = dnats.get_mut(range) else {
                continue;
            };
            let mut hit = rows.iter_mut().filter(|r| r.0 == row.0);
            if let (Some(taken), None) = (hit.next(), hit.next()) {
                let family = taken.1.family & !PAddr::TAKEN;
                row.1 = PAddr {
                    family: family | PAddr::RESOLVED,
                    ..taken.1
                };
                taken.1.family = family | PAddr::TAKEN;
            }
        }
    }
}

/// How many jumps [`resolve_direct`] touches before it looks them up.
pub(super) const GROUP: usize = 32;

/// Drops the DNAT rows that jumps took in [`resolve_direct`] and that nothing else looks
/// up (a chain whose one DNAT was taken is looked up again only when an entry rule jumps
/// to it or it has jumps of its own), and gives their memory back: in a large dump that is
/// nearly every row, memory the resolution no longer needs while it builds the frontends.
/// `dnats` is sorted by chain.
pub(super) fn drop_resolved_dnats(
    dnats: &mut Vec<(ChainKey, PAddr)>,
    runs: &[Run],
    entries: &[Entry],
) {
    const KEEP: u16 = PAddr::TAKEN << 1;
    let bands = Bands::new(dnats, |d| d.0);
    let roots = entries.iter().map(|e| e.target);
    for key in roots.chain(runs.iter().map(|r| r.0)) {
        let range = bands.range(dnats, key, |d| d.0);
        for row in dnats.get_mut(range).unwrap_or_default() {
            row.1.family |= KEEP;
        }
    }
    // Nearly every row goes: the kept ones are copied out and the whole vector freed.
    let kept: Vec<(ChainKey, PAddr)> = dnats
        .iter()
        .filter(|(_, a)| a.family & PAddr::TAKEN == 0 || a.family & KEEP != 0)
        .map(|&(key, a)| {
            let family = a.family & !(PAddr::TAKEN | KEEP);
            (key, PAddr { family, ..a })
        })
        .collect();
    *dnats = kept;
}

/// Jump runs sorted by source chain with one run per chain. Dumps list a chain's rules
/// together and legacy iptables-save sorts chains, so this is usually a check; otherwise
/// the rows are regrouped (keeping each chain's rule order).
pub(super) fn sorted_runs(runs: Vec<Run>, jumps: Vec<JumpRow>) -> (Vec<Run>, Vec<JumpRow>) {
    if runs.windows(2).all(|w| matches!(w, [a, b] if a.0 < b.0)) {
        return (runs, jumps);
    }
    let mut rows: Vec<(ChainKey, ChainKey, PAddr)> = Vec::with_capacity(jumps.len());
    for (i, &(from, lo)) in runs.iter().enumerate() {
        let hi = runs.get(i + 1).map_or(jumps.len(), |r| r.1 as usize);
        for &(to, hint) in jumps.get(lo as usize..hi).unwrap_or_default() {
            rows.push((from, to, hint));
        }
    }
    drop(jumps);
    rows.sort_by_key(|r| r.0);
    let mut runs = Vec::new();
    let mut jumps = Vec::with_capacity(rows.len());
    for (from, to, hint) in rows {
        if runs.last().is_none_or(|r: &Run| r.0 != from) {
            runs.push((from, u32::try_from(jumps.len()).unwrap_or(u32::MAX)));
        }
        jumps.push((to, hint));
    }
    (runs, jumps)
}
