//! Fuzzes the reading of a node agent's `/status` document, as `ghostip check` reads it
//! (`ghostip::agent_client::AgentStatus` from JSON, its open trackings judged, the node it names
//! checked against the node asked): arbitrary bytes must never panic, and a document that is
//! read keeps every tracking it holds.
#![no_main]

use std::net::{Ipv4Addr, SocketAddr};

use ghostip::agent_client::{Agent, AgentStatus, check_node};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(st) = serde_json::from_slice::<AgentStatus>(data) else {
        return;
    };
    let findings = st.open.iter().filter(|t| t.is_finding()).count();
    assert!(findings <= st.open.len());
    for t in &st.open {
        // A converged tracking is never a finding.
        if t.converged_by.is_some() {
            assert!(!t.is_finding());
        }
    }
    if let Some(dns) = &st.dns {
        let _ = dns.state.len();
    }
    // The node check: an empty name or the asked node's passes, any other fails.
    let agent = Agent {
        node: "node-1".to_string(),
        addr: SocketAddr::from((Ipv4Addr::LOCALHOST, 9090)),
    };
    let ok = check_node(&agent, &st.node).is_ok();
    assert_eq!(ok, st.node.is_empty() || st.node == "node-1");
});
