//! Layouts read where their line starts, finding the line's end while reading it (see
//! [`crate::text::ByteLineSink::line_at`]), which saves the newline search on most lines.
//!
//! Matches: `:KUBE-… - [0:0]` declarations and, in the nat table, the masquerade mark
//! `-A KUBE-SEP-… -s ADDR [-m comment --comment C] -j KUBE-MARK-MASQ`, and the layouts of
//! [`super::dnat_jump_layout`] ending in an IPv4 address resp. a packed chain name. Any other
//! byte where the line should end, or any other shape, is declined with nothing recorded.
//!
//! Property test (`tests.rs`): `fast_paths_agree_with_the_general_path`, which also reads
//! through buffers that end inside lines and edits that break lines inside tokens.

use super::Parser;
use super::Table;
use super::chain_key::{lb_tag, pack_chain, packed_len};
use super::comment::hint_from_comment_bytes;
use super::dnat_jump_layout::Cursor;
use super::words::graphic_len;

impl Parser {
    /// The four layouts that make up nearly all of a large dump, read where their line
    /// starts, without searching for its end first (see [`crate::text::ByteLineSink::line_at`]):
    /// a chain declaration `:KUBE-XXX-… - [0:0]`, and in the nat table the
    /// masquerade mark `-A KUBE-SEP-… -s ADDR -j KUBE-MARK-MASQ`, the DNAT rule and the
    /// jump of [`Parser::dnat_or_jump_layout`] with an IPv4 destination, resp. a packed target.
    /// Each layout ends with a packed chain name, an IPv4 address or a literal, so its
    /// `\n` is where the layout says; any other byte there, or any other shape, gives
    /// `None` with nothing recorded, and the line is split and read as before. What is
    /// recorded is what [`Parser::byte_line`] records for the same line.
    pub(super) fn line_at(&mut self, rest: &[u8]) -> Option<usize> {
        if self.general_only() {
            return None;
        }
        match rest.first()? {
            b':' => {
                let name = rest.get(1..)?;
                let n = packed_len(name);
                if !name.starts_with(b"KUBE-")
                    || graphic_len(name.get(..n)?) != n
                    || !name.get(n..)?.starts_with(b" - [0:0]\n")
                {
                    return None;
                }
                self.saw_iptables = true;
                self.declared += 1;
                Some(1 + n + 8)
            }
            b'-' if self.table == Some(Table::Nat) => self.rule_layout_at(rest),
            _ => None,
        }
    }

    /// The rule layouts of [`Parser::line_at`].
    pub(super) fn rule_layout_at(&mut self, rest: &[u8]) -> Option<usize> {
        let body = rest.strip_prefix(b"-A ")?;
        let n = packed_len(body);
        let chain = body.get(..n)?;
        let mut c = Cursor(body.get(n..)?);
        // Where the line's `\n` is, from what the cursor has left and the length of what
        // ends the line.
        let end = |c: &Cursor<'_>, tail: usize| rest.len() - c.0.len() + tail;
        if c.lit(b" -s ") {
            // The rule is ignored whatever its chain's hash, as long as the name is one
            // token of a load-balancing kind (what `byte_line` checks).
            if lb_tag(chain).is_none() || graphic_len(chain) != chain.len() {
                return None;
            }
            let addr = graphic_len(c.0);
            c.0 = c.0.get(addr..)?;
            if addr == 0
                || (c.lit(b" -m comment --comment ") && c.comment().is_none())
                || !c.lit(b" -j KUBE-MARK-MASQ\n")
            {
                return None;
            }
            self.rule_seen();
            self.ignore_mark();
            return Some(end(&c, 0) - 1);
        }
        if chain.get(5..9) == Some(b"SEP-") {
            let key = pack_chain(chain)?;
            if !c.dnat_head() {
                return None;
            }
            let (sa, len) = crate::text::parse_socket_v4_prefix(c.0)?;
            if c.0.get(len) != Some(&b'\n') {
                return None;
            }
            self.rule_seen();
            self.add_dnat(key, sa);
            return Some(end(&c, len));
        }
        let (comment, quoted, affinity) = c.jump_head()?;
        let t = packed_len(c.0);
        let to = pack_chain(c.0.get(..t)?)?;
        if c.0.get(t) != Some(&b'\n') {
            return None;
        }
        // An unquoted comment has no space, so it names no endpoint.
        let hint = if quoted {
            hint_from_comment_bytes(comment).ok()?
        } else {
            None
        };
        let from = self.source_key(chain)?;
        self.rule_seen();
        if affinity {
            self.affinity.push(from);
        }
        self.add_jump(from, to, hint);
        Some(end(&c, t))
    }
}
