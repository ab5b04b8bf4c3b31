//! Byte path for `-A KUBE-…` rule lines and chain declarations, without UTF-8 validation or
//! tokenizing.
//!
//! Matches: `:…` declarations (counted), masquerade marks (`… -j KUBE-MARK-MASQ`, counted),
//! service rules (handed to [`super::service_rule_layout`]), and a `KUBE-SEP` DNAT or a
//! load-balancing chain's jump in any option order: after the one-pass layouts of
//! [`super::dnat_jump_layout`], by scanning for the rule's last ` -j ` with at most one quoted
//! token and no escape or tab. Lines with space around them, in the filter table or in other
//! chains are declined (nothing recorded) and [`super::tokenized`] reads them.
//!
//! Property test (`tests.rs`): `fast_paths_agree_with_the_general_path` (random edits of a
//! generated dump's lines, both of kube-proxy's layouts, parsed against the general path).

use std::sync::LazyLock;

use memchr::memmem::Finder;

use super::Parser;
use super::Table;
use super::chain_key::{ChainClass, chain_class, is_lb_chain, pack_chain};
use super::comment::{NotUtf8, hint_from_comment_bytes};
use super::tokenized::{last_token, takes_value};

pub(super) static FIND_TO_DEST: LazyLock<Finder<'static>> =
    LazyLock::new(|| Finder::new(b"--to-destination "));
pub(super) static FIND_RCHECK: LazyLock<Finder<'static>> =
    LazyLock::new(|| Finder::new(b" --rcheck"));
pub(super) static FIND_COMMENT: LazyLock<Finder<'static>> =
    LazyLock::new(|| Finder::new(b" --comment "));

/// Position of the last ` -j ` in a rule (the rule's target).
pub(super) fn rfind_jump(b: &[u8]) -> Option<usize> {
    let mut end = b.len();
    while let Some(j) = memchr::memrchr(b'j', b.get(..end).unwrap_or_default()) {
        if let Some(p) = j.checked_sub(2)
            && b.get(p..p + 4) == Some(b" -j ")
        {
            return Some(p);
        }
        end = j;
    }
    None
}

impl Parser {
    /// Reads the lines that make up nearly all of a large dump as bytes, without UTF-8
    /// validation or tokenizing: chain declarations, masquerade marks,
    /// `KUBE-SEP-… -j DNAT --to-destination ADDR` and `KUBE-SVC-… -j KUBE-SEP-…`.
    /// Returns `false` (nothing recorded) when the line needs the general path, which
    /// then reads it exactly as if this one did not exist.
    pub(super) fn byte_line(&mut self, no: usize, raw: &[u8]) -> bool {
        match raw.first() {
            Some(b':') => {
                self.saw_iptables = true;
                if raw.starts_with(b":KUBE-") {
                    self.declared += 1;
                }
                return true;
            }
            Some(b'-') => {}
            _ => return false,
        }
        // No leading or trailing space to trim (the general path trims Unicode space).
        if !raw.starts_with(b"-A KUBE-") || !raw.last().is_some_and(u8::is_ascii_graphic) {
            return false;
        }
        let body = raw.get(3..).unwrap_or_default();
        let Some(i) = memchr::memchr(b' ', body) else {
            return false;
        };
        let chain = body.get(..i).unwrap_or_default();
        let class = chain_class(chain);
        self.rule_seen();
        if body.ends_with(b" -j KUBE-MARK-MASQ") && class != ChainClass::OtherKube {
            self.ignore_mark();
            return true;
        }
        let table = self.table.unwrap_or(Table::Unknown);
        match (table, class) {
            (Table::Other, _) => {
                self.ignore("rule in a table other than nat/filter");
                return true;
            }
            (_, ChainClass::Helper) => {
                self.ignore("rule in a kube-proxy helper chain");
                return true;
            }
            (Table::Filter, _) | (_, ChainClass::OtherKube | ChainClass::NonKube) => return false,
            (_, ChainClass::Services | ChainClass::NodePorts) => {
                return self.service_rule_layout(no, raw, class, chain, body);
            }
            _ => {}
        }
        self.scanned_dnat_or_jump(class, chain, body)
    }

    pub(super) fn scanned_dnat_or_jump(
        &mut self,
        class: ChainClass,
        chain: &[u8],
        body: &[u8],
    ) -> bool {
        if self.dnat_or_jump_layout(class, chain, body) {
            return true;
        }
        // One pass for backslashes (escapes), tabs (the tokenizer splits on them too,
        // the scans below only on spaces) and quotes: at most one quoted token, and the
        // target not inside or after it.
        let (mut q1, mut q2) = (None, None);
        for i in memchr::memchr3_iter(b'\\', b'"', b'\t', body) {
            if body.get(i) != Some(&b'"') || q2.is_some() {
                return false;
            }
            if q1.is_none() {
                q1 = Some(i);
            } else {
                q2 = Some(i);
            }
        }
        let Some(idx) = rfind_jump(body) else {
            return false;
        };
        if q2.is_some_and(|q| q > idx) || (q1.is_some() && q2.is_none()) {
            return false;
        }
        // `-j` must not be the value of the option before it (the tokenizer would read it so).
        if takes_value(last_token(body.get(..idx).unwrap_or_default())) {
            return false;
        }
        let after = body.get(idx + 4..).unwrap_or_default();
        let tlen = memchr::memchr(b' ', after).unwrap_or(after.len());
        let target = after.get(..tlen).unwrap_or_default();
        let rest = after.get(tlen..).unwrap_or_default();
        match class {
            ChainClass::Sep if target == b"DNAT" => {
                // kube-proxy writes `--to-destination` right after `-j DNAT`.
                let at = if rest.starts_with(b" --to-destination ") {
                    1
                } else {
                    match FIND_TO_DEST.find(rest) {
                        // Not the value of the option before it.
                        Some(at)
                            if !takes_value(last_token(rest.get(..at).unwrap_or_default())) =>
                        {
                            at
                        }
                        _ => return false,
                    }
                };
                let from_dest = rest.get(at + 17..).unwrap_or_default();
                let end = memchr::memchr(b' ', from_dest).unwrap_or(from_dest.len());
                let dest = from_dest.get(..end).unwrap_or_default();
                // The tokenizer keeps the last `--to-destination`.
                if FIND_TO_DEST
                    .find(from_dest.get(end..).unwrap_or_default())
                    .is_some()
                {
                    return false;
                }
                let Some(sa) = crate::text::parse_socket_bytes(dest) else {
                    return false;
                };
                let Some(from) = pack_chain(chain) else {
                    return false;
                };
                self.add_dnat(from, sa);
                true
            }
            ChainClass::Svc
            | ChainClass::Svl
            | ChainClass::Ext
            | ChainClass::Fw
            | ChainClass::Xlb
                if rest.is_empty() && is_lb_chain(chain_class(target)) =>
            {
                let (Some(from), Some(to)) = (self.source_key(chain), pack_chain(target)) else {
                    return false;
                };
                let hint = match (q1, q2) {
                    (Some(q1), Some(q2)) => {
                        // One quoted token: the comment, if `--comment` is right before it,
                        // is not itself the value of the option before it (`--comment
                        // --comment "…"`), and is the rule's last `--comment`.
                        let before = body.get(..q1).unwrap_or_default();
                        let Some(opt) = before.strip_suffix(b" --comment ") else {
                            return false;
                        };
                        if takes_value(last_token(opt))
                            || FIND_COMMENT
                                .find(body.get(q2..).unwrap_or_default())
                                .is_some()
                        {
                            return false;
                        }
                        let inner = body.get(q1 + 1..q2).unwrap_or_default();
                        match hint_from_comment_bytes(inner) {
                            Ok(h) => h,
                            Err(NotUtf8) => return false,
                        }
                    }
                    // No quote: an unquoted comment has no space, so it names no endpoint.
                    _ => None,
                };
                // `--rcheck` outside the quoted comment (the tokenizer's view).
                let (head, tail) = match (q1, q2) {
                    (Some(a), Some(b)) => (
                        body.get(..a).unwrap_or_default(),
                        body.get(b..).unwrap_or_default(),
                    ),
                    _ => (body, &[][..]),
                };
                if FIND_RCHECK.find(head).is_some() || FIND_RCHECK.find(tail).is_some() {
                    self.affinity.push(from);
                }
                self.add_jump(from, to, hint);
                true
            }
            _ => false,
        }
    }
}
