//! Parser of `ipvsadm -Ln` and `ipvsadm-save -n` output of kube-proxy's IPVS mode.
//!
//! See [`parse_reader`] and [`parse_str`]. Both layouts may be mixed in one input. The
//! list layout's columns are taken from its header, so `--stats`, `--rate` and
//! `--persistent-conn` listings are read too (weights only where a column has them).
//! Real servers with weight 0 are the known IPVS stale mode (kube-proxy sets weight 0 for
//! graceful termination; they keep receiving traffic on reused connections): they get
//! state [`BackendState::Terminating`] and weight `Some(0)`.
//!
//! IPVS does not say whether a virtual server is a ClusterIP or a NodePort, so frontends
//! are of kind [`FrontendKind::Unknown`]; the scheduler and persistence are flags.
//! Firewall-mark services (`FWM 100`) and non-numeric listings (`ipvsadm -L` without `-n`,
//! which prints host and port names) are counted as unknown.
//!
//! Several runs in one input (a terminal transcript) are several snapshots: the list header
//! repeated after virtual servers, or a virtual server declared a second time (`-A -t
//! VIP:PORT` again; no dump lists one twice), starts the next, and only the last is read
//! (`SkipStats::earlier_snapshots`).
//!
//! # Errors
//! Only input with no ipvsadm line at all is an error.

use std::collections::HashSet;
use std::io::BufRead;
use std::net::{IpAddr, SocketAddr};

use crate::error::ParseError;
use crate::format::Format;
use crate::model::{Backend, BackendState, Frontend, FrontendKind, LbTable, Location, Protocol};
use crate::text::{LineSink, OVERLONG_LINE, drive_bytes, drive_reader, drive_str, parse_socket};

const EXPECTED: &str = "ipvsadm -Ln or ipvsadm-save -n output";

/// Parses ipvsadm output held in memory.
pub fn parse_str(input: &str) -> Result<LbTable, ParseError> {
    let mut p = Parser::new();
    drive_str(input, &mut p);
    p.finish()
}

/// Parses ipvsadm output held in memory as bytes.
pub fn parse_bytes(input: &[u8]) -> Result<LbTable, ParseError> {
    let mut p = Parser::new();
    drive_bytes(input, &mut p);
    p.finish()
}

/// Parses ipvsadm output from a reader, line by line.
pub fn parse_reader<R: BufRead>(reader: R) -> Result<LbTable, ParseError> {
    let mut p = Parser::new();
    drive_reader(reader, Format::Ipvsadm, &mut p)?;
    p.finish()
}

/// Which column of a real-server line holds the weight.
#[derive(Clone, Copy, PartialEq, Eq)]
enum WeightCol {
    /// Default listing: `-> addr Forward Weight ActiveConn InActConn`.
    AfterForward,
    /// `--persistent-conn`: `-> addr Weight PersistConn ActiveConn InActConn`.
    First,
    /// `--stats` / `--rate`: no weight.
    None,
}

struct Parser {
    out: LbTable,
    current: Option<Frontend>,
    /// The last virtual server was skipped (firewall mark, non-numeric): so are its
    /// real servers.
    skipping: bool,
    weight_col: WeightCol,
    saw_ipvs: bool,
    first_foreign: Option<(usize, String)>,
    /// The virtual servers this snapshot has declared (`-A`, or a list-layout service
    /// line): one declared again starts the next snapshot.
    declared: HashSet<(IpAddr, u16, Protocol)>,
}

impl Parser {
    fn new() -> Self {
        Self {
            out: LbTable::new(Format::Ipvsadm),
            current: None,
            skipping: false,
            weight_col: WeightCol::AfterForward,
            saw_ipvs: false,
            first_foreign: None,
            declared: HashSet::new(),
        }
    }

    /// The list header repeats at line `no` after virtual servers, or a virtual server is
    /// declared a second time: the input holds several snapshots (runs of `ipvsadm -Ln` or
    /// `ipvsadm-save -n`), and only the last is read.
    fn new_snapshot(&mut self, no: usize) {
        self.current = None;
        self.skipping = false;
        self.weight_col = WeightCol::AfterForward;
        self.out.frontends.clear();
        self.declared.clear();
        self.out.skipped.new_snapshot(Location::Line(no));
    }

    /// A virtual server declared at line `no`: a second declaration of one (no dump lists a
    /// virtual server twice) starts the next snapshot.
    fn declare(&mut self, no: usize, key: (IpAddr, u16, Protocol)) {
        if !self.declared.insert(key) {
            let weight_col = self.weight_col;
            self.new_snapshot(no);
            // The columns of a list without its header again are the ones it had.
            self.weight_col = weight_col;
            self.declared.insert(key);
        }
    }

    fn unknown(&mut self, no: usize, reason: &'static str, line: &str) {
        self.out.skipped.unknown(Location::Line(no), reason, line);
    }

    fn flush(&mut self) {
        if let Some(f) = self.current.take() {
            self.out.frontends.push(f);
        }
    }

    /// `TCP  10.0.0.1:443 rr persistent 10800` (list layout).
    fn list_service(&mut self, no: usize, line: &str, toks: &[&str]) {
        self.flush();
        self.saw_ipvs = true;
        self.skipping = true;
        let proto = match toks.first().copied() {
            Some("TCP") => Protocol::Tcp,
            Some("UDP") => Protocol::Udp,
            Some("SCTP") => Protocol::Sctp,
            _ => return self.unknown(no, "firewall-mark virtual server", line),
        };
        let Some(addr) = toks.get(1).and_then(|a| parse_socket(a)) else {
            return self.unknown(
                no,
                "non-numeric virtual server address (use ipvsadm -Ln)",
                line,
            );
        };
        self.declare(no, (addr.ip(), addr.port(), proto));
        let mut fe = Frontend::new(addr.ip(), addr.port(), proto, FrontendKind::Unknown);
        let mut rest = toks.iter().skip(2);
        if let Some(sched) = rest.next()
            && sched.bytes().all(|b| b.is_ascii_alphanumeric())
            && !is_number(sched)
        {
            fe.add_flag(format!("scheduler={sched}"));
        }
        let rest: Vec<&str> = toks.iter().skip(3).copied().collect();
        let mut i = 0;
        while let Some(t) = rest.get(i) {
            match *t {
                "persistent" => {
                    let timeout = rest.get(i + 1).filter(|v| is_number(v));
                    match timeout {
                        Some(v) => {
                            fe.add_flag(format!("persistent={v}"));
                            i += 1;
                        }
                        None => fe.add_flag("persistent"),
                    }
                }
                "ops" => fe.add_flag("ops"),
                _ => {}
            }
            i += 1;
        }
        self.skipping = false;
        self.current = Some(fe);
    }

    /// `  -> 10.244.1.5:80  Masq  1  0  0` (list layout).
    fn list_real_server(&mut self, no: usize, line: &str, toks: &[&str]) {
        let Some(addr_tok) = toks.get(1) else {
            return self.unknown(no, "real server line without address", line);
        };
        if *addr_tok == "RemoteAddress:Port" {
            self.saw_ipvs = true;
            self.weight_col = if toks.get(2) == Some(&"Forward") {
                WeightCol::AfterForward
            } else if toks.len() <= 2 {
                // `--stats`, `--rate` and `--persistent-conn` put the columns on the
                // `Prot LocalAddress:Port …` line; keep what it said.
                self.weight_col
            } else {
                WeightCol::None
            };
            return;
        }
        let Some(addr) = parse_socket(addr_tok) else {
            return self.unknown(
                no,
                "non-numeric real server address (use ipvsadm -Ln)",
                line,
            );
        };
        let weight = match self.weight_col {
            WeightCol::AfterForward => toks.get(3).and_then(|w| w.parse::<u32>().ok()),
            WeightCol::First => toks.get(2).and_then(|w| w.parse::<u32>().ok()),
            WeightCol::None => None,
        };
        self.real_server(no, line, addr, weight);
    }

    fn real_server(&mut self, no: usize, line: &str, addr: SocketAddr, weight: Option<u32>) {
        if self.skipping {
            return self
                .out
                .skipped
                .ignore("real server of a skipped virtual server");
        }
        let Some(fe) = self.current.as_mut() else {
            return self.unknown(no, "real server without a virtual server before it", line);
        };
        let state = if weight == Some(0) {
            BackendState::Terminating
        } else {
            BackendState::Active
        };
        fe.backends.push(Backend {
            ip: addr.ip(),
            port: addr.port(),
            state,
            weight,
        });
    }

    /// `-A -t 10.0.0.1:443 -s rr -p 10800` / `-a -t 10.0.0.1:443 -r 10.244.1.5:80 -m -w 1`.
    fn save_line(&mut self, no: usize, line: &str, toks: &[&str]) {
        self.saw_ipvs = true;
        let add_service = matches!(toks.first().copied(), Some("-A" | "--add-service"));
        let mut proto = None;
        let mut vaddr = None;
        let mut raddr = None;
        let mut weight = None;
        let mut sched = None;
        let mut persistent = None;
        let mut fwmark = false;
        let mut i = 1;
        while let Some(t) = toks.get(i) {
            let val = toks.get(i + 1).copied();
            match *t {
                "-t" | "--tcp-service" => proto = Some(Protocol::Tcp),
                "-u" | "--udp-service" => proto = Some(Protocol::Udp),
                "--sctp-service" => proto = Some(Protocol::Sctp),
                "-f" | "--fwmark-service" => fwmark = true,
                "-r" | "--real-server" => raddr = val,
                "-w" | "--weight" => weight = val.and_then(|w| w.parse::<u32>().ok()),
                "-s" | "--scheduler" => sched = val,
                "-p" | "--persistent" => persistent = Some(val.filter(|v| is_number(v))),
                _ => {
                    i += 1;
                    continue;
                }
            }
            if matches!(
                *t,
                "-t" | "--tcp-service" | "-u" | "--udp-service" | "--sctp-service"
            ) {
                vaddr = val;
            }
            // Every option here takes a value, except `-p` without a timeout.
            let persistent_flag =
                matches!(*t, "-p" | "--persistent") && !val.is_some_and(is_number);
            i += if persistent_flag { 1 } else { 2 };
        }
        if fwmark {
            if add_service {
                self.flush();
                self.skipping = true;
            }
            return self.unknown(no, "firewall-mark virtual server", line);
        }
        if add_service {
            self.skipping = false;
        }
        let (Some(proto), Some(vaddr)) = (proto, vaddr) else {
            return self.unknown(no, "ipvsadm-save line without -t/-u ADDR:PORT", line);
        };
        let Some(vaddr) = parse_socket(vaddr) else {
            return self.unknown(
                no,
                "non-numeric virtual server address (use ipvsadm-save -n)",
                line,
            );
        };
        if add_service {
            self.flush();
            self.declare(no, (vaddr.ip(), vaddr.port(), proto));
            let mut fe = Frontend::new(vaddr.ip(), vaddr.port(), proto, FrontendKind::Unknown);
            if let Some(s) = sched {
                fe.add_flag(format!("scheduler={s}"));
            }
            match persistent {
                Some(Some(t)) => fe.add_flag(format!("persistent={t}")),
                Some(None) => fe.add_flag("persistent"),
                None => {}
            }
            self.current = Some(fe);
            return;
        }
        let Some(raddr) = raddr.and_then(parse_socket) else {
            return self.unknown(no, "ipvsadm-save real server without -r ADDR:PORT", line);
        };
        // Real servers follow their service in ipvsadm-save; find it if they do not.
        let key = (vaddr.ip(), vaddr.port(), proto);
        if self.current.as_ref().map(Frontend::key) != Some(key) {
            self.flush();
            let pos = self.out.frontends.iter().position(|f| f.key() == key);
            let fe = match pos {
                Some(p) => self.out.frontends.swap_remove(p),
                None => Frontend::new(vaddr.ip(), vaddr.port(), proto, FrontendKind::Unknown),
            };
            self.current = Some(fe);
        }
        self.skipping = false;
        self.real_server(no, line, raddr, weight);
    }

    fn finish(mut self) -> Result<LbTable, ParseError> {
        self.flush();
        if !self.saw_ipvs
            && let Some((no, line)) = self.first_foreign.take()
        {
            return Err(ParseError::unexpected(
                Format::Ipvsadm,
                Location::Line(no),
                EXPECTED,
                &line,
            ));
        }
        self.out.normalize();
        Ok(self.out)
    }
}

/// Whether `line` is a virtual-server line of `ipvsadm -Ln` (`TCP  10.0.0.1:443 rr`).
pub(crate) fn looks_like_virtual_server(line: &str) -> bool {
    let toks: Vec<&str> = line.split_ascii_whitespace().take(3).collect();
    match toks.as_slice() {
        [proto, addr, sched] => {
            matches!(*proto, "TCP" | "UDP" | "SCTP")
                && parse_socket(addr).is_some()
                && sched.bytes().all(|b| b.is_ascii_lowercase())
        }
        _ => false,
    }
}

fn is_number(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

impl LineSink for Parser {
    fn line(&mut self, no: usize, raw: &str) {
        let line = raw.trim();
        if line.is_empty() {
            return;
        }
        let toks: Vec<&str> = line.split_ascii_whitespace().collect();
        match toks.first().copied() {
            Some("IP") if line.starts_with("IP Virtual Server version") => {
                if self.current.is_some() || !self.out.frontends.is_empty() {
                    self.new_snapshot(no);
                }
                self.saw_ipvs = true;
            }
            Some("Prot") => {
                self.saw_ipvs = true;
                self.weight_col = if line.contains("Scheduler") {
                    WeightCol::AfterForward
                } else if toks.get(2) == Some(&"Weight") {
                    WeightCol::First
                } else {
                    WeightCol::None
                };
            }
            Some("TCP" | "UDP" | "SCTP" | "FWM") if toks.len() >= 2 => {
                self.list_service(no, line, &toks);
            }
            Some("->") => self.list_real_server(no, line, &toks),
            Some("-A" | "-a" | "--add-service" | "--add-server") => self.save_line(no, line, &toks),
            _ => {
                if self.first_foreign.is_none() {
                    self.first_foreign = Some((no, crate::model::excerpt(line)));
                }
                self.unknown(no, "not an ipvsadm line", line);
            }
        }
    }

    fn overlong(&mut self, no: usize, head: &str) {
        if self.first_foreign.is_none() {
            self.first_foreign = Some((no, crate::model::excerpt(head)));
        }
        self.unknown(no, OVERLONG_LINE, head);
    }
}
