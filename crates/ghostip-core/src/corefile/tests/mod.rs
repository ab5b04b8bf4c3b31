//! Unit tests of the Corefile parser and of the lag rules, one file per part.
#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)]

mod lag;
mod placeholder;
mod props;
mod syntax;

use std::time::Duration;

use super::*;

fn lag(text: &str) -> ExpectedLag {
    match Corefile::parse(text).and_then(|c| c.expected_lag("cluster.local")) {
        Ok(l) => l,
        Err(e) => panic!("unexpected error: {e}\n{text}"),
    }
}

fn s(n: u64) -> Duration {
    Duration::from_secs(n)
}

const CLASSIC: &str = ".:53 {
    errors
    kubernetes cluster.local in-addr.arpa ip6.arpa {
       pods insecure
       fallthrough in-addr.arpa ip6.arpa
       ttl 30
    }
    forward . /etc/resolv.conf
    cache 30
}
";
