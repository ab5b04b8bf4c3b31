//! The general path: a rule line split into tokens as iptables-save quotes them, its options
//! read into a [`Rule`], and the rule recorded by its chain's class (entry rules, DNAT targets,
//! chain-to-chain jumps, `… has no endpoints` rejects).
//!
//! Every line the byte paths decline is read here, and they must record exactly what this
//! path records for the lines they take: the tests' `general_path` reads every line here
//! (see `fast_paths_agree_with_the_general_path` in `tests.rs`).

use std::net::SocketAddr;

use super::Parser;
use super::chain_key::{ChainClass, chain_class, is_lb_chain};
use super::comment::{
    hint_from_comment, kind_from_comment, kind_from_words, service_from_comment, service_token,
};
use super::{Entry, NoEndpoints, Table};
use crate::model::{FrontendKind, Protocol};
use crate::text::{Tokens, parse_host, unescape};

/// Targets that mark, accept or return: not load-balancing.
pub(super) fn is_mark_target(t: &str) -> bool {
    matches!(
        t,
        "KUBE-MARK-MASQ"
            | "KUBE-MARK-DROP"
            | "RETURN"
            | "MARK"
            | "ACCEPT"
            | "MASQUERADE"
            | "KUBE-NODEPORTS"
            | "KUBE-POSTROUTING"
            | "KUBE-NODE-PORT"
            | "KUBE-LOAD-BALANCER"
            | "KUBE-PROXY-FIREWALL"
            | "KUBE-EXTERNAL-SERVICES"
            | "KUBE-FIREWALL"
            | "CONNMARK"
    )
}

/// The fields of one `-A` rule that matter here.
#[derive(Default)]
pub(super) struct Rule<'a> {
    pub(super) dst: Option<&'a str>,
    pub(super) dst_neg: bool,
    pub(super) proto: Option<&'a str>,
    pub(super) dport: Option<&'a str>,
    pub(super) comment: Option<&'a str>,
    pub(super) dst_local: bool,
    pub(super) target: Option<&'a str>,
    pub(super) to_dest: Option<&'a str>,
    pub(super) affinity: bool,
    pub(super) match_set: bool,
}

pub(super) fn parse_rule<'a>(toks: &mut Tokens<'a>) -> Rule<'a> {
    let mut r = Rule::default();
    let mut neg = false;
    while let Some(t) = toks.next() {
        match t {
            "!" => {
                neg = true;
                continue;
            }
            "-d" | "--destination" | "--dst" => {
                r.dst = toks.next();
                r.dst_neg = neg;
            }
            "-p" | "--protocol" => {
                let v = toks.next();
                if !neg {
                    r.proto = v;
                }
            }
            "--dport" | "--destination-port" => {
                let v = toks.next();
                if !neg {
                    r.dport = v;
                }
            }
            "--comment" => r.comment = toks.next(),
            "--dst-type" => {
                let v = toks.next();
                if !neg && v == Some("LOCAL") {
                    r.dst_local = true;
                }
            }
            "-j" | "--jump" | "-g" | "--goto" => r.target = toks.next(),
            "--to-destination" => r.to_dest = toks.next(),
            "--rcheck" => r.affinity = true,
            "--match-set" => {
                r.match_set = true;
                toks.next();
            }
            "-m" | "--match" | "-s" | "--source" | "--src" | "-i" | "-o" | "--src-type"
            | "--mode" | "--probability" | "--name" | "--seconds" | "--mask" | "--sport"
            | "--source-port" | "--mark" | "--ctstate" | "--state" | "--set-xmark"
            | "--or-mark" | "--xor-mark" | "--reject-with" | "--nfacct-name" => {
                toks.next();
            }
            _ => {}
        }
        neg = false;
    }
    r
}

/// The last space-separated token of `b` (all of `b` without a space).
pub(super) fn last_token(b: &[u8]) -> &[u8] {
    b.get(memchr::memrchr(b' ', b).map_or(0, |i| i + 1)..)
        .unwrap_or_default()
}

/// Options whose next token [`parse_rule`] reads as their value.
pub(super) fn takes_value(tok: &[u8]) -> bool {
    matches!(
        tok,
        b"-d"
            | b"--destination"
            | b"--dst"
            | b"-p"
            | b"--protocol"
            | b"--dport"
            | b"--destination-port"
            | b"--comment"
            | b"--dst-type"
            | b"-j"
            | b"--jump"
            | b"-g"
            | b"--goto"
            | b"--to-destination"
            | b"--match-set"
            | b"-m"
            | b"--match"
            | b"-s"
            | b"--source"
            | b"--src"
            | b"-i"
            | b"-o"
            | b"--src-type"
            | b"--mode"
            | b"--probability"
            | b"--name"
            | b"--seconds"
            | b"--mask"
            | b"--sport"
            | b"--source-port"
            | b"--mark"
            | b"--ctstate"
            | b"--state"
            | b"--set-xmark"
            | b"--or-mark"
            | b"--xor-mark"
            | b"--reject-with"
            | b"--nfacct-name"
    )
}

/// A `--to-destination` value: `10.0.0.1:80` or `[fd00::1]:80` (anything else, a bare
/// address included, is not a backend).
pub(super) fn parse_dnat(d: &str, _v6: bool) -> Option<SocketAddr> {
    crate::text::parse_socket(d)
}

impl Parser {
    pub(super) fn rule(&mut self, no: usize, full_line: &str, body: &str) {
        let body = body.trim_start_matches(' ');
        let (chain, rest) = match memchr::memchr(b' ', body.as_bytes()) {
            Some(i) => (
                body.get(..i).unwrap_or_default(),
                body.get(i..).unwrap_or_default(),
            ),
            None => (body, ""),
        };
        if chain.is_empty() {
            self.unknown(no, "rule without chain name", full_line);
            return;
        }
        let mut toks = Tokens::new(rest);
        let class = chain_class(chain.as_bytes());
        if body.as_bytes().ends_with(b" -j KUBE-MARK-MASQ") && class != ChainClass::OtherKube {
            // Masquerade marks: a third of a large dump; no need to tokenize them.
            return self.ignore_mark();
        }
        let table = self.table.unwrap_or(Table::Unknown);
        match (table, class) {
            (Table::Other, _) => return self.ignore("rule in a table other than nat/filter"),
            (_, ChainClass::NonKube) => return self.ignore("rule in a non-kube-proxy chain"),
            (_, ChainClass::Helper) => return self.ignore("rule in a kube-proxy helper chain"),
            (_, ChainClass::OtherKube) => {
                return self.unknown(no, "rule in an unknown KUBE-* chain", full_line);
            }
            _ => {}
        }
        // Lines the byte path did not take (e.g. with `iptables-save -c` counters).
        if table != Table::Filter
            && !self.general_only()
            && self.scanned_dnat_or_jump(class, chain.as_bytes(), body.as_bytes())
        {
            return;
        }
        let mut r = parse_rule(&mut toks);
        let comment = r.comment.map(unescape);
        let comment = comment.as_deref().unwrap_or("");
        if let Some(d) = r.dst
            && d.contains(':')
        {
            self.v6 = true;
        }
        // "has no endpoints" REJECT / "has no local endpoints" DROP, in any table.
        if matches!(r.target, Some("REJECT") | Some("DROP")) {
            if comment.contains("has no endpoints") || comment.contains("has no local endpoints") {
                return self.no_endpoints(no, full_line, class, &r, comment);
            }
            return self.ignore("REJECT/DROP rule");
        }
        if table == Table::Filter {
            return self.ignore("filter-table rule");
        }
        if class == ChainClass::ExternalServices {
            return self.ignore("rule in a kube-proxy helper chain");
        }
        let Some(target) = r.target.take() else {
            return self.ignore("rule without target");
        };
        if is_mark_target(target) {
            return self.ignore_mark();
        }
        if r.match_set {
            return self.ignore("ipset match (IPVS mode helper)");
        }
        match class {
            ChainClass::Services
            | ChainClass::NodePorts
            | ChainClass::Portals
            | ChainClass::UserspaceNodePorts => {
                self.entry(no, full_line, class, &r, target, comment);
            }
            ChainClass::Svc
            | ChainClass::Svl
            | ChainClass::Ext
            | ChainClass::Fw
            | ChainClass::Xlb
            | ChainClass::Sep => {
                let from = self.key_of(chain);
                if r.affinity {
                    self.affinity.push(from);
                }
                if target == "DNAT" {
                    match r.to_dest.and_then(|d| parse_dnat(d, self.v6)) {
                        Some(sa) => self.add_dnat(from, sa),
                        None => {
                            self.unknown(no, "DNAT without a valid --to-destination", full_line)
                        }
                    }
                } else if is_lb_chain(chain_class(target.as_bytes())) {
                    let to = self.key_of(target);
                    self.add_jump(from, to, hint_from_comment(comment));
                } else {
                    self.unknown(no, "jump to an unknown target", full_line);
                }
            }
            _ => self.unknown(no, "rule in an unknown KUBE-* chain", full_line),
        }
    }

    pub(super) fn entry(
        &mut self,
        no: usize,
        full_line: &str,
        class: ChainClass,
        r: &Rule<'_>,
        target: &str,
        comment: &str,
    ) {
        let tclass = chain_class(target.as_bytes());
        if !is_lb_chain(tclass) {
            return self.unknown(no, "entry rule jumps to an unknown target", full_line);
        }
        let Some(port) = r.dport.and_then(|p| p.parse::<u16>().ok()) else {
            return self.unknown(no, "entry rule without a valid --dport", full_line);
        };
        let proto = match r.proto {
            None => Protocol::Any,
            Some(p) => match Protocol::parse(p) {
                Some(p) => p,
                None => return self.unknown(no, "entry rule with an unknown protocol", full_line),
            },
        };
        let nodeport = matches!(
            class,
            ChainClass::NodePorts | ChainClass::UserspaceNodePorts
        );
        let ip = match (r.dst, r.dst_neg) {
            (Some(d), false) => match parse_host(d) {
                Some(ip) => Some(ip),
                None if nodeport => {
                    return self.ignore("NodePort rule for a destination range (localhost)");
                }
                None => {
                    return self.unknown(no, "entry rule with an invalid destination", full_line);
                }
            },
            _ if nodeport => None,
            _ => return self.unknown(no, "service rule without a destination", full_line),
        };
        let kind = if nodeport {
            FrontendKind::NodePort
        } else if let Some(k) = kind_from_comment(comment) {
            k
        } else {
            match (class, tclass) {
                (ChainClass::Portals, _) => FrontendKind::ClusterIp,
                (_, ChainClass::Fw) => FrontendKind::LoadBalancer,
                (_, ChainClass::Ext | ChainClass::Xlb) => FrontendKind::External,
                _ => FrontendKind::ClusterIp,
            }
        };
        let target = self.key_of(target);
        self.entries.push(Entry {
            ip,
            port,
            proto,
            kind,
            service: service_token(comment).map(Box::from),
            target,
            line: no,
        });
    }

    fn no_endpoints(
        &mut self,
        no: usize,
        full_line: &str,
        class: ChainClass,
        r: &Rule<'_>,
        c: &str,
    ) {
        let Some(port) = r.dport.and_then(|p| p.parse::<u16>().ok()) else {
            return self.unknown(no, "no-endpoints rule without a valid --dport", full_line);
        };
        let proto = r.proto.and_then(Protocol::parse).unwrap_or(Protocol::Any);
        let (ip, kind) = match r.dst.and_then(parse_host) {
            Some(ip) if class == ChainClass::Services => (Some(ip), FrontendKind::ClusterIp),
            Some(ip) => (
                Some(ip),
                kind_from_words(c).unwrap_or(FrontendKind::External),
            ),
            None if r.dst_local || class == ChainClass::NodePorts => (None, FrontendKind::NodePort),
            None => return self.unknown(no, "no-endpoints rule without a destination", full_line),
        };
        let flag = if c.contains("has no local endpoints") {
            "no-local-endpoints"
        } else {
            "no-endpoints"
        };
        self.no_endpoints.push(NoEndpoints {
            ip,
            port,
            proto,
            kind,
            service: service_from_comment(c),
            flag,
        });
    }
}
