//! `/proc/net/tcp` tables: any bytes parse without panicking, and every socket read back
//! comes from a line that was not counted as skipped.
#![no_main]

use ghostip_datapath::socket_table::SocketTable;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let t = SocketTable::parse(&text);
    let lines = text
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.trim().starts_with("sl "))
        .count();
    assert_eq!(t.sockets.len() + t.skipped, lines);
    let ports = t.listening_ports();
    assert!(t.established_to(&ports) <= t.sockets.len());
});
