//! One-pass match of kube-proxy's service rules, the frontends of the dump.
//!
//! Matches: `-A KUBE-SERVICES` and `-A KUBE-NODEPORTS` rules laid out as
//! `[-d IP[/32]] -p P -m comment --comment C -m P --dport N -j KUBE-…` with a packed target
//! chain; they are handed to the entry recording exactly as the tokenizer would read them.
//! Any other shape is declined with nothing recorded.
//!
//! Tests (`tests.rs`): `kube_proxy_layouts_take_the_one_pass_path` and the property test
//! `fast_paths_agree_with_the_general_path`.

use super::Parser;
use super::chain_key::{ChainClass, pack_chain};
use super::dnat_jump_layout::Cursor;
use super::tokenized::Rule;

impl Parser {
    /// The service rules kube-proxy writes in `KUBE-SERVICES` and `KUBE-NODEPORTS`
    /// (`[-d IP[/32]] -p P -m comment --comment C -m P --dport N -j KUBE-…`), matched in
    /// one pass like [`Parser::dnat_or_jump_layout`] and handed to [`Parser::entry`] exactly as
    /// the tokenizer would. Returns `false` (nothing recorded) for any other shape.
    pub(super) fn service_rule_layout(
        &mut self,
        no: usize,
        raw: &[u8],
        class: ChainClass,
        chain: &[u8],
        body: &[u8],
    ) -> bool {
        let Ok(full_line) = std::str::from_utf8(raw) else {
            return false;
        };
        fn text(b: &[u8]) -> Option<&str> {
            std::str::from_utf8(b).ok()
        }
        let mut c = Cursor(body.get(chain.len()..).unwrap_or_default());
        let dst = if c.lit(b" -d ") {
            match c.word().and_then(text) {
                Some(d) => Some(d),
                None => return false,
            }
        } else {
            None
        };
        let matched = (|| {
            if !c.lit(b" -p ") {
                return None;
            }
            let proto = c.word().and_then(text)?;
            if !c.lit(b" -m comment --comment ") {
                return None;
            }
            let (comment, _) = c.comment()?;
            let comment = text(comment)?;
            if !c.lit(b" -m ") {
                return None;
            }
            c.word()?;
            if !c.lit(b" --dport ") {
                return None;
            }
            let dport = c.word().and_then(text)?;
            if !c.lit(b" -j ") {
                return None;
            }
            // The target is the rest of the line; a packed name has no space or tab.
            pack_chain(c.0)?;
            Some((proto, comment, dport, text(c.0)?))
        })();
        let Some((proto, comment, dport, target)) = matched else {
            return false;
        };
        if dst.is_some_and(|d| d.contains(':')) {
            self.v6 = true;
        }
        let r = Rule {
            dst,
            proto: Some(proto),
            dport: Some(dport),
            comment: Some(comment),
            target: Some(target),
            ..Rule::default()
        };
        self.entry(no, full_line, class, &r, target, comment);
        true
    }
}
