//! One-pass match of the two rule layouts kube-proxy writes for nearly every line of a large
//! dump, reading each byte once.
//!
//! Matches: `KUBE-SEP-… -p P [-m comment --comment C] -m P -j DNAT --to-destination ADDR` and
//! `KUBE-SVC-… [-m comment --comment C] [-m statistic --mode random --probability N] -j
//! KUBE-…` (also in `KUBE-SVL`, `KUBE-EXT`, `KUBE-FW`, `KUBE-XLB`), with session affinity's
//! `recent` match where kube-proxy puts it, comments left out (above 1 000 endpoints) or not.
//! Any other shape is declined with nothing recorded.
//!
//! Tests (`tests.rs`): `kube_proxy_layouts_take_the_one_pass_path` (generated and real
//! kube-proxy lines take it, near misses do not) and the property test
//! `fast_paths_agree_with_the_general_path`.

use super::Parser;
use super::chain_key::{ChainClass, pack_chain};
use super::comment::{NotUtf8, hint_from_comment_bytes};
use super::words::{space_or_control_lanes, starts_with_words, word_at};

/// The unread rest of a rule, for [`Parser::dnat_or_jump_layout`].
pub(super) struct Cursor<'a>(pub(super) &'a [u8]);

impl<'a> Cursor<'a> {
    /// Consumes `s` when the rest starts with it.
    #[inline(always)]
    pub(super) fn lit(&mut self, s: &[u8]) -> bool {
        if !starts_with_words(self.0, s) {
            return false;
        }
        self.0 = self.0.get(s.len()..).unwrap_or_default();
        true
    }

    /// A plain token up to the next space: not empty, and without a tab, quote or
    /// backslash (bytes that would make the tokenizer read it differently), nor a newline
    /// (so a cursor running past the end of a line, see [`Parser::line_at`], stops there).
    #[inline]
    pub(super) fn word(&mut self) -> Option<&'a [u8]> {
        // Words here are short (`tcp`, a probability): eight bytes at a time while none
        // is a space, control byte, quote or backslash, then one byte at a time (which
        // decides), no memchr call.
        const ONES: u64 = 0x0101_0101_0101_0101;
        let has = |x: u64, c: u8| {
            let y = x ^ (u64::from(c) * ONES);
            y.wrapping_sub(ONES) & !y & (0x80 * ONES) != 0
        };
        let mut n = 0;
        while let Some(x) = word_at(self.0, n) {
            if space_or_control_lanes(x) != 0 || has(x, b'"') || has(x, b'\\') {
                break;
            }
            n += 8;
        }
        for &b in self.0.get(n..).unwrap_or_default() {
            match b {
                b' ' => break,
                b'\t' | b'"' | b'\\' | b'\n' => return None,
                _ => n += 1,
            }
        }
        if n == 0 {
            return None;
        }
        let (w, rest) = self.0.split_at_checked(n)?;
        self.0 = rest;
        Some(w)
    }

    /// The comment token: a quoted one without backslashes or newlines (its inside,
    /// `true`) or a plain word (`false`).
    pub(super) fn comment(&mut self) -> Option<(&'a [u8], bool)> {
        let Some(r) = self.0.strip_prefix(b"\"") else {
            return self.word().map(|w| (w, false));
        };
        let q = memchr::memchr3(b'"', b'\\', b'\n', r)?;
        if r.get(q) != Some(&b'"') {
            return None;
        }
        let (inner, rest) = r.split_at_checked(q)?;
        self.0 = rest.get(1..).unwrap_or_default();
        Some((inner, true))
    }

    /// What kube-proxy writes in a `KUBE-SEP` chain before the DNAT address:
    /// ` -p P [-m comment --comment C] -m P -j DNAT --to-destination ` (the comment left
    /// out above 1 000 endpoints, `largeClusterEndpointsThreshold`, which is how a large
    /// dump looks; its TCP form compared as one literal first).
    #[inline(always)]
    pub(super) fn dnat_head(&mut self) -> bool {
        self.lit(b" -p tcp -m tcp -j DNAT --to-destination ")
            || self.lit(b" -p ")
                && self.word().is_some()
                && (!self.lit(b" -m comment --comment ") || self.comment().is_some())
                && (!self.lit(b" -m recent --set --name ") || self.recent_tail())
                && self.lit(b" -m ")
                && self.word().is_some()
                && self.lit(b" -j DNAT --to-destination ")
    }

    /// The rest of the `recent` match kube-proxy writes for session affinity, after its
    /// `--name` (iptables-save prints the options in this order): `NAME --mask MASK
    /// --rsource`. The tokenizer reads NAME and MASK as option values whatever they say,
    /// and `--set`, `--reap` and `--rsource` change nothing, so the layout reads these
    /// rules as it does.
    fn recent_tail(&mut self) -> bool {
        self.word().is_some()
            && self.lit(b" --mask ")
            && self.word().is_some()
            && self.lit(b" --rsource")
    }

    /// What kube-proxy writes in a load-balancing chain before a jump's target:
    /// ` [-m comment --comment C] [-m statistic --mode random --probability N] -j `, or
    /// for session affinity ` [-m comment --comment C] -m recent --rcheck --seconds N
    /// --reap --name NAME --mask MASK --rsource -j `; gives the comment (empty when left
    /// out, as above 1 000 endpoints), whether it was quoted, and whether the rule checks
    /// affinity (`--rcheck`).
    #[inline(always)]
    pub(super) fn jump_head(&mut self) -> Option<(&'a [u8], bool, bool)> {
        let (comment, quoted) = if self.lit(b" -m comment --comment ") {
            self.comment()?
        } else {
            (&[][..], false)
        };
        let affinity = self.lit(b" -m recent --rcheck --seconds ");
        if affinity
            && !(self.word().is_some() && self.lit(b" --reap --name ") && self.recent_tail())
        {
            return None;
        }
        if !affinity
            && self.lit(b" -m statistic --mode random --probability ")
            && self.word().is_none()
        {
            return None;
        }
        self.lit(b" -j ").then_some((comment, quoted, affinity))
    }
}

impl Parser {
    /// The two rule layouts kube-proxy writes for nearly every line of a large dump,
    /// matched in one left-to-right pass that reads each byte once:
    /// `KUBE-SEP-… -p P -m comment --comment C -m P -j DNAT --to-destination ADDR` and
    /// `KUBE-SVC-… -m comment --comment C [-m statistic --mode random --probability N]
    /// -j KUBE-…`, with session affinity's `recent` match where kube-proxy puts it (see
    /// [`Cursor::dnat_head`], [`Cursor::jump_head`]). The layout pins every token, so the
    /// tokenizer's view is known without the general scans (no other option, no second
    /// `-j` or `--comment`, no escape). Returns `false` (nothing recorded) for any other
    /// shape.
    pub(super) fn dnat_or_jump_layout(
        &mut self,
        class: ChainClass,
        chain: &[u8],
        body: &[u8],
    ) -> bool {
        let mut c = Cursor(body.get(chain.len()..).unwrap_or_default());
        match class {
            ChainClass::Sep => {
                if !c.dnat_head() {
                    return false;
                }
                // The address is the rest of the line: one token when it parses.
                let (Some(sa), Some(from)) =
                    (crate::text::parse_socket_bytes(c.0), pack_chain(chain))
                else {
                    return false;
                };
                self.add_dnat(from, sa);
                true
            }
            ChainClass::Svc
            | ChainClass::Svl
            | ChainClass::Ext
            | ChainClass::Fw
            | ChainClass::Xlb => {
                let Some((comment, quoted, affinity)) = c.jump_head() else {
                    return false;
                };
                // The target is the rest of the line; a packed name has no space or tab.
                let (Some(from), Some(to)) = (self.source_key(chain), pack_chain(c.0)) else {
                    return false;
                };
                // An unquoted comment has no space, so it names no endpoint.
                let hint = if quoted {
                    match hint_from_comment_bytes(comment) {
                        Ok(h) => h,
                        Err(NotUtf8) => return false,
                    }
                } else {
                    None
                };
                if affinity {
                    self.affinity.push(from);
                }
                self.add_jump(from, to, hint);
                true
            }
            _ => false,
        }
    }
}
