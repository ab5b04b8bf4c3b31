//! What kube-proxy's rule comments say: the Service port (`ns/svc:port`), the frontend kind
//! (`… cluster IP`, `… external IP`, `… loadbalancer IP`) and, in a jump's comment, the
//! endpoint it leads to (`… -> 10.0.0.1:80`).

use std::net::SocketAddr;
use std::sync::LazyLock;

use memchr::memmem::FinderRev;

use crate::model::{FrontendKind, ServiceRef};

pub(super) static FIND_ARROW: LazyLock<FinderRev<'static>> =
    LazyLock::new(|| FinderRev::new(b" -> "));

/// Kind named by the suffix of an entry comment (`ns/svc:port cluster IP`).
pub(super) fn kind_from_comment(comment: &str) -> Option<FrontendKind> {
    if comment.ends_with("cluster IP") {
        Some(FrontendKind::ClusterIp)
    } else if comment.ends_with("external IP") {
        Some(FrontendKind::ExternalIp)
    } else if comment.ends_with("loadbalancer IP") {
        Some(FrontendKind::LoadBalancer)
    } else {
        None
    }
}

/// `ns/svc:port` from a comment, skipping the userspace-era `portal for ` prefix.
pub(super) fn service_from_comment(comment: &str) -> Option<ServiceRef> {
    ServiceRef::parse_kube_proxy(service_token(comment)?)
}

/// The `ns/svc:port` token of a comment, when it is one.
pub(super) fn service_token(comment: &str) -> Option<&str> {
    let c = comment.strip_prefix("portal for ").unwrap_or(comment);
    let first = c.split(' ').next()?;
    ServiceRef::kube_proxy_parts(first).map(|_| first)
}

/// The endpoint named by `… -> 10.0.0.1:80` in a jump's comment.
pub(super) fn hint_from_comment(comment: &str) -> Option<SocketAddr> {
    let (_, after) = comment.rsplit_once(" -> ")?;
    crate::text::parse_socket(after.trim())
}

/// The part after the last ` -> ` was not UTF-8 (the general path then reads the line).
pub(super) struct NotUtf8;

/// [`hint_from_comment`] of a comment's bytes, with the same result. The address after
/// the arrow has no `>`, so the last `>` is usually the arrow's; a plain IPv4 address
/// has nothing to trim and is read without UTF-8 validation.
pub(super) fn hint_from_comment_bytes(comment: &[u8]) -> Result<Option<SocketAddr>, NotUtf8> {
    let arrow = match memchr::memrchr(b'>', comment) {
        Some(g) if g >= 2 && comment.get(g - 2..g + 2) == Some(b" -> ") => Some(g - 2),
        Some(_) => FIND_ARROW.rfind(comment),
        None => None,
    };
    let Some(p) = arrow else {
        return Ok(None);
    };
    let after = comment.get(p + 4..).unwrap_or_default();
    if let Some(sa) = crate::text::parse_socket_v4_plain(after) {
        return Ok(Some(sa));
    }
    let after = std::str::from_utf8(after).map_err(|_| NotUtf8)?;
    Ok(crate::text::parse_socket(after.trim()))
}

pub(super) fn kind_from_words(comment: &str) -> Option<FrontendKind> {
    if comment.contains("external IP") {
        Some(FrontendKind::ExternalIp)
    } else if comment.contains("loadbalancer IP") {
        Some(FrontendKind::LoadBalancer)
    } else {
        None
    }
}
