//! Fuzzes the reading of a node agent's answer to `GET /v1/ips/{ip}`, as `ghostip drain-wait`
//! reads it (`read_answer`): arbitrary bytes must never panic; an answer that is read names the
//! node asked (or none) and keeps every Service it says still holds the IP.
#![no_main]

use std::net::{Ipv4Addr, SocketAddr};

use ghostip::agent_client::Agent;
use ghostip::commands::drain_wait::agent_answers::read_answer;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let agent = Agent {
        node: "node-1".to_string(),
        addr: SocketAddr::from((Ipv4Addr::LOCALHOST, 9754)),
    };
    match read_answer(&agent, data) {
        Ok(report) => {
            // The reader skips unknown fields without checking their strings' UTF-8; a
            // document serde_json cannot read as a Value has nothing to compare with.
            let Ok(v) = serde_json::from_slice::<serde_json::Value>(data) else {
                return;
            };
            let node = v["node"].as_str().unwrap_or_default();
            assert!(node.is_empty() || node == "node-1", "{node}");
            let held = v["holding"].as_array().map_or(0, Vec::len);
            assert_eq!(report.holding.len(), held);
        }
        Err(why) => assert!(!why.is_empty()),
    }
});
