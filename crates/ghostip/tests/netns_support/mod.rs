//! Runs code inside a network namespace: a thread moved there with `setns`, so that the
//! sockets it makes (a flow's client, a netlink socket) belong to that namespace.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::os::fd::AsFd;
use std::path::Path;

use rustix::thread::LinkNameSpaceType;

/// Runs `f` on a thread moved into the network namespace bound at `netns` (e.g.
/// `/run/netns/NAME`) and returns what it returns. The caller's threads stay where they are.
pub fn enter<T: Send>(netns: &Path, f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| {
        s.spawn(|| {
            let ns = std::fs::File::open(netns)
                .unwrap_or_else(|e| panic!("opening {}: {e}", netns.display()));
            rustix::thread::move_into_link_name_space(ns.as_fd(), Some(LinkNameSpaceType::Network))
                .unwrap_or_else(|e| panic!("entering {}: {e}", netns.display()));
            f()
        })
        .join()
        .unwrap()
    })
}
