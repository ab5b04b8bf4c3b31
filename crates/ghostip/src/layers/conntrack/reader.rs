//! Reads the node's conntrack table from the kernel: one `IPCTNL_MSG_CT_GET` dump over a `NETLINK_NETFILTER` socket, streamed through the pure decoder, with its CPU measured.
//!
//! See [`dump`] (every entry to a callback) and [`read_flows`] (entries aggregated by the
//! conntrack layer's [`FlowCollector`]). The request asks for every family (`AF_UNSPEC`:
//! IPv4 and IPv6 in one dump). The socket is `rustix`'s safe netlink socket; no program is
//! run and no `unsafe` is used. Datagrams are read into one 64 KiB buffer (the kernel's
//! dump batches are at most 32 KiB) and handed to
//! [`ViewDecoder`](ghostip_datapath::conntrack_netlink::ViewDecoder) as they come, which
//! hands each entry over as a borrowed view without allocating: memory does not grow with
//! the table and decoding costs no allocation per entry.
//!
//! A dump counts only when it is **complete**: it ended with `NLMSG_DONE`, no message
//! carried `NLM_F_DUMP_INTR` (the kernel's mark of a dump that raced with table changes),
//! no error came back. Anything else is an error ([`ReadError`]) and the read is not
//! judged.
//!
//! # Errors
//! [`ReadError`]: netlink or ctnetlink unavailable (no `nf_conntrack_netlink`), a missing
//! `CAP_NET_ADMIN`, an interrupted or incomplete dump, a timeout, a decoding error.

use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use ghostip_datapath::ParseError;
use ghostip_datapath::conntrack_netlink::{CtView, ViewDecoder};
use ghostip_session::layers::conntrack::flows::{CollectedFlows, FlowCollector, TcpTimeouts};
use rustix::io::Errno;
use rustix::net::netlink::{self, SocketAddrNetlink};
use rustix::net::sockopt::{self, Timeout};
use rustix::net::{AddressFamily, RecvFlags, SendFlags, SocketFlags, SocketType};

use crate::layers::datapath::readers::thread_cpu;

/// Netlink message header length.
const NLMSG_HDRLEN: usize = 16;
const NLM_F_REQUEST: u16 = 0x1;
/// `NLM_F_ROOT | NLM_F_MATCH`.
const NLM_F_DUMP: u16 = 0x300;
/// The dump was inconsistent because the table changed while it ran.
const NLM_F_DUMP_INTR: u16 = 0x10;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLMSG_OVERRUN: u16 = 4;
/// `NFNL_SUBSYS_CTNETLINK << 8 | IPCTNL_MSG_CT_GET`.
const CT_GET: u16 = (1 << 8) | 1;
/// Receive buffer: larger than the kernel's largest dump batch (32 KiB).
const BUFFER: usize = 64 * 1024;
/// How often a blocked receive wakes to check the deadline and cancellation.
const POLL: Duration = Duration::from_millis(200);

/// Why the table could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// No conntrack netlink in this kernel or namespace.
    #[error(
        "conntrack is not readable over netlink here ({detail}): the kernel needs nf_conntrack_netlink"
    )]
    Unavailable {
        /// What the kernel said.
        detail: String,
    },
    /// The kernel refused: `CAP_NET_ADMIN` is missing.
    #[error(
        "reading conntrack needs CAP_NET_ADMIN in the node's network namespace (the kernel said: {detail})"
    )]
    Privilege {
        /// What the kernel said.
        detail: String,
    },
    /// The table changed during the dump in a way the kernel flagged; nothing is judged.
    #[error("the conntrack dump was interrupted by table changes; it is read again")]
    Interrupted,
    /// The socket closed or the stream ended before `NLMSG_DONE`.
    #[error("the conntrack dump ended before NLMSG_DONE after {bytes} bytes")]
    Incomplete {
        /// Bytes received.
        bytes: u64,
    },
    /// A datagram larger than the buffer.
    #[error("a conntrack netlink datagram of {len} bytes did not fit the {BUFFER}-byte buffer")]
    Truncated {
        /// Its length.
        len: usize,
    },
    /// The dump did not finish in time.
    #[error("the conntrack dump did not finish within {after:?}")]
    Timeout {
        /// The limit.
        after: Duration,
    },
    /// The agent is stopping.
    #[error("the conntrack dump was cancelled")]
    Cancelled,
    /// The kernel answered the request with another error.
    #[error("the kernel refused the conntrack dump: {errno}")]
    Refused {
        /// The error.
        errno: std::io::Error,
    },
    /// A socket call failed.
    #[error("{call} on the netlink socket: {source}")]
    Io {
        /// Which call.
        call: &'static str,
        /// Cause.
        source: std::io::Error,
    },
    /// The messages did not decode.
    #[error("decoding the conntrack dump: {0}")]
    Parse(#[from] ParseError),
}

impl ReadError {
    /// A short label for metrics.
    pub fn label(&self) -> &'static str {
        match self {
            ReadError::Unavailable { .. } => "unavailable",
            ReadError::Privilege { .. } => "privilege",
            ReadError::Interrupted => "interrupted",
            ReadError::Incomplete { .. } | ReadError::Truncated { .. } => "incomplete",
            ReadError::Timeout { .. } => "timeout",
            ReadError::Cancelled => "cancelled",
            ReadError::Refused { .. } => "refused",
            ReadError::Io { .. } => "io",
            ReadError::Parse(_) => "parse",
        }
    }

    /// The capability the agent lacks, when that is why the read failed.
    pub fn missing_capability(&self) -> Option<&'static str> {
        matches!(self, ReadError::Privilege { .. }).then_some("CAP_NET_ADMIN")
    }

    /// Whether the table cannot be read at all here (retrying soon will not help).
    pub fn is_unreadable(&self) -> bool {
        matches!(
            self,
            ReadError::Unavailable { .. } | ReadError::Privilege { .. }
        )
    }

    fn from_errno(e: Errno, call: &'static str) -> Self {
        let detail = std::io::Error::from(e).to_string();
        if e == Errno::PERM || e == Errno::ACCESS {
            ReadError::Privilege { detail }
        } else if e == Errno::PROTONOSUPPORT
            || e == Errno::AFNOSUPPORT
            || e == Errno::NOENT
            || e == Errno::OPNOTSUPP
            || e == Errno::INVAL
        {
            ReadError::Unavailable { detail }
        } else if e == Errno::INTR || e == Errno::BUSY {
            ReadError::Interrupted
        } else if call == "kernel" {
            ReadError::Refused {
                errno: std::io::Error::from(e),
            }
        } else {
            ReadError::Io {
                call,
                source: std::io::Error::from(e),
            }
        }
    }
}

/// What one dump cost and held.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DumpStats {
    /// Bytes of netlink messages received.
    pub bytes: u64,
    /// Datagrams received.
    pub datagrams: u64,
    /// Entries decoded.
    pub entries: u64,
    /// Messages the decoder skipped as unknown or undecodable.
    pub skipped_unknown: u64,
    /// CPU of the receive calls: the kernel walking its table and copying the messages.
    pub dump_cpu: Duration,
    /// CPU of decoding the messages and handing each entry on.
    pub parse_cpu: Duration,
    /// Wall time of the whole dump.
    pub wall: Duration,
}

/// One read of the table: its flows that count, and what it cost.
#[derive(Clone, Debug, Default)]
pub struct FlowRead {
    /// The aggregated flows of this node's pods.
    pub flows: CollectedFlows,
    /// The dump's cost.
    pub stats: DumpStats,
}

/// The dump request: a netlink header and an `nfgenmsg` for every family.
fn request(seq: u32) -> [u8; NLMSG_HDRLEN + 4] {
    let mut m = [0u8; NLMSG_HDRLEN + 4];
    m[0..4].copy_from_slice(&((NLMSG_HDRLEN + 4) as u32).to_ne_bytes());
    m[4..6].copy_from_slice(&CT_GET.to_ne_bytes());
    m[6..8].copy_from_slice(&(NLM_F_REQUEST | NLM_F_DUMP).to_ne_bytes());
    m[8..12].copy_from_slice(&seq.to_ne_bytes());
    // pid 0 (the kernel), nfgen_family AF_UNSPEC, version NFNETLINK_V0, res_id 0.
    m
}

/// What the headers of one datagram say: the end of the dump, an inconsistency, an error.
#[derive(Debug, Default, PartialEq, Eq)]
struct Headers {
    done: bool,
    interrupted: bool,
}

fn ne_u16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes([*b.get(at)?, *b.get(at + 1)?]))
}

fn ne_u32(b: &[u8], at: usize) -> Option<u32> {
    let bytes: [u8; 4] = b.get(at..at + 4)?.try_into().ok()?;
    Some(u32::from_ne_bytes(bytes))
}

fn ne_i32(b: &[u8], at: usize) -> Option<i32> {
    let bytes: [u8; 4] = b.get(at..at + 4)?.try_into().ok()?;
    Some(i32::from_ne_bytes(bytes))
}

/// Walks the message headers of one datagram (the decoder checks the framing itself).
fn scan(datagram: &[u8]) -> Result<Headers, ReadError> {
    let mut h = Headers::default();
    let mut at = 0;
    while let Some(len) = ne_u32(datagram, at).map(|l| l as usize) {
        if len < NLMSG_HDRLEN {
            break;
        }
        let kind = ne_u16(datagram, at + 4).unwrap_or(0);
        let flags = ne_u16(datagram, at + 6).unwrap_or(0);
        if flags & NLM_F_DUMP_INTR != 0 || kind == NLMSG_OVERRUN {
            h.interrupted = true;
        }
        if kind == NLMSG_ERROR || kind == NLMSG_DONE {
            // NLMSG_ERROR carries the request's error (0 is an acknowledgement); a dump
            // that failed midway ends with an NLMSG_DONE carrying the error.
            let code = ne_i32(datagram, at + NLMSG_HDRLEN).unwrap_or(0);
            if code < 0 {
                return Err(ReadError::from_errno(
                    Errno::from_raw_os_error(-code),
                    "kernel",
                ));
            }
            if kind == NLMSG_DONE {
                h.done = true;
            }
        }
        at += len.next_multiple_of(4);
    }
    Ok(h)
}

/// Dumps the table of the calling thread's network namespace, calling `f` for every entry
/// (IPv4 and IPv6). Blocking: run it on a blocking thread. Stops with
/// [`ReadError::Timeout`] after `timeout` and with [`ReadError::Cancelled`] soon after
/// `cancel` is set.
pub fn dump(
    timeout: Duration,
    cancel: &AtomicBool,
    mut f: impl FnMut(&CtView<'_>),
) -> Result<DumpStats, ReadError> {
    let started = crate::clock::monotonic_now();
    let fd = rustix::net::socket_with(
        AddressFamily::NETLINK,
        SocketType::RAW,
        SocketFlags::CLOEXEC,
        Some(netlink::NETFILTER),
    )
    .map_err(|e| ReadError::from_errno(e, "socket"))?;
    rustix::net::bind(&fd, &SocketAddrNetlink::new(0, 0))
        .map_err(|e| ReadError::from_errno(e, "bind"))?;
    sockopt::set_socket_timeout(&fd, Timeout::Recv, Some(POLL))
        .map_err(|e| ReadError::from_errno(e, "setsockopt"))?;
    let req = request(1);
    rustix::net::sendto(&fd, &req, SendFlags::empty(), &SocketAddrNetlink::new(0, 0))
        .map_err(|e| ReadError::from_errno(e, "send"))?;

    let mut stats = DumpStats::default();
    let mut decoder = ViewDecoder::new();
    let mut buf = vec![0u8; BUFFER];
    let mut entries = 0u64;
    loop {
        if cancel.load(Ordering::Relaxed) {
            return Err(ReadError::Cancelled);
        }
        if started.elapsed() > timeout {
            return Err(ReadError::Timeout { after: timeout });
        }
        let before = thread_cpu();
        let received = rustix::net::recv(&fd, &mut buf[..], RecvFlags::TRUNC);
        stats.dump_cpu += crate::layers::datapath::readers::thread_cpu_since(before);
        let (n, len) = match received {
            Ok((n, len)) => (n, len),
            Err(e) if e == Errno::AGAIN || e == Errno::WOULDBLOCK || e == Errno::INTR => continue,
            Err(e) => return Err(ReadError::from_errno(e, "recv")),
        };
        if len > n {
            return Err(ReadError::Truncated { len });
        }
        if n == 0 {
            return Err(ReadError::Incomplete { bytes: stats.bytes });
        }
        stats.bytes += n as u64;
        stats.datagrams += 1;
        let datagram = &buf[..n];
        let before = thread_cpu();
        let headers = scan(datagram)?;
        if headers.interrupted {
            return Err(ReadError::Interrupted);
        }
        decoder.push(datagram, |e| {
            entries += 1;
            f(e);
        })?;
        stats.parse_cpu += crate::layers::datapath::readers::thread_cpu_since(before);
        if headers.done || decoder.is_done() {
            break;
        }
    }
    let skipped = decoder.finish()?;
    stats.entries = entries;
    stats.skipped_unknown = skipped.unknown;
    stats.wall = started.elapsed();
    Ok(stats)
}

/// The TCP conntrack timeouts of this network namespace, read before each dump (kube-proxy
/// may change them while the agent runs); the kernel's defaults where they cannot be read.
fn tcp_timeouts() -> TcpTimeouts {
    TcpTimeouts::from_sysctls(|name| {
        std::fs::read_to_string(format!(
            "/proc/sys/net/netfilter/nf_conntrack_tcp_timeout_{name}"
        ))
        .ok()
    })
}

/// Dumps the table and keeps the flows sent by `clients` (this node's pod addresses),
/// aggregated; the collector's CPU counts as parsing.
pub fn read_flows(
    clients: Vec<IpAddr>,
    timeout: Duration,
    cancel: &AtomicBool,
) -> Result<FlowRead, ReadError> {
    let mut collector = FlowCollector::with_timeouts(clients, tcp_timeouts());
    let stats = dump(timeout, cancel, |v| collector.push_view(v))?;
    let before = thread_cpu();
    let flows = collector.finish();
    let mut stats = stats;
    stats.parse_cpu += crate::layers::datapath::readers::thread_cpu_since(before);
    Ok(FlowRead { flows, stats })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn message(kind: u16, flags: u16, payload: &[u8]) -> Vec<u8> {
        let len = NLMSG_HDRLEN + payload.len();
        let mut m = Vec::new();
        m.extend_from_slice(&(len as u32).to_ne_bytes());
        m.extend_from_slice(&kind.to_ne_bytes());
        m.extend_from_slice(&flags.to_ne_bytes());
        m.extend_from_slice(&7u32.to_ne_bytes());
        m.extend_from_slice(&0u32.to_ne_bytes());
        m.extend_from_slice(payload);
        while m.len() % 4 != 0 {
            m.push(0);
        }
        m
    }

    #[test]
    fn the_request_asks_ctnetlink_for_a_dump_of_every_family() {
        let r = request(5);
        assert_eq!(u32::from_ne_bytes(r[0..4].try_into().unwrap()), 20);
        assert_eq!(u16::from_ne_bytes([r[4], r[5]]), 0x0101);
        assert_eq!(u16::from_ne_bytes([r[6], r[7]]), 0x301);
        assert_eq!(u32::from_ne_bytes(r[8..12].try_into().unwrap()), 5);
        assert_eq!(
            &r[16..20],
            &[0, 0, 0, 0],
            "AF_UNSPEC, NFNETLINK_V0, res_id 0"
        );
    }

    #[test]
    fn headers_say_done_interrupted_or_which_error() {
        let entry = message(CT_GET, 0x2, &[2, 0, 0, 0]);
        let done = message(NLMSG_DONE, 0x2, &0i32.to_ne_bytes());
        let mut both = entry.clone();
        both.extend_from_slice(&done);
        assert_eq!(
            scan(&both).unwrap(),
            Headers {
                done: true,
                interrupted: false
            }
        );
        assert_eq!(scan(&entry).unwrap(), Headers::default());
        let intr = message(CT_GET, 0x2 | NLM_F_DUMP_INTR, &[2, 0, 0, 0]);
        assert!(scan(&intr).unwrap().interrupted);
        let eperm = message(NLMSG_ERROR, 0, &(-1i32).to_ne_bytes());
        let err = scan(&eperm).unwrap_err();
        assert_eq!(err.missing_capability(), Some("CAP_NET_ADMIN"), "{err}");
        let einval = message(NLMSG_ERROR, 0, &(-22i32).to_ne_bytes());
        assert!(matches!(
            scan(&einval).unwrap_err(),
            ReadError::Unavailable { .. }
        ));
        let failed_dump = message(NLMSG_DONE, 0x2, &(-4i32).to_ne_bytes());
        assert!(matches!(
            scan(&failed_dump).unwrap_err(),
            ReadError::Interrupted
        ));
        let ack = message(NLMSG_ERROR, 0, &0i32.to_ne_bytes());
        assert_eq!(scan(&ack).unwrap(), Headers::default());
        // A header with an impossible length ends the walk; the decoder reports it.
        assert_eq!(scan(&[1, 0, 0, 0, 3, 0]).unwrap(), Headers::default());
    }
}
