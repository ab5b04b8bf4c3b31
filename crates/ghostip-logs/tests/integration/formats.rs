//! Per-format unit tests on lines written for this project (shapes taken from each client's
//! source and documentation), plus timestamps, multi-line events and bad input.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::net::SocketAddr;

use ghostip_logs::{ConnFailure, Format, Kind, ScanOptions, ScanStats, scan_bytes};

fn scan_with(text: &str, opts: ScanOptions) -> (Vec<ConnFailure>, ScanStats) {
    scan_bytes(text.as_bytes(), opts).unwrap()
}

fn scan(text: &str) -> Vec<ConnFailure> {
    scan_with(
        text,
        ScanOptions {
            year: Some(2024),
            ..ScanOptions::default()
        },
    )
    .0
}

fn one(text: &str) -> ConnFailure {
    let mut v = scan(text);
    assert_eq!(v.len(), 1, "{text}\n{v:#?}");
    v.remove(0)
}

fn sa(s: &str) -> Option<SocketAddr> {
    Some(s.parse().unwrap())
}

fn check(text: &str, kind: Kind, format: Format, target: Option<&str>) -> ConnFailure {
    let f = one(text);
    assert_eq!(f.kind, kind, "{text}");
    assert_eq!(f.format, format, "{text}");
    assert_eq!(f.target, target.and_then(sa), "{text}");
    f
}

#[test]
fn grpc_go() {
    check(
        "2024/05/01 15:42:10 WARNING: [core] [Channel #1 SubChannel #3] grpc: addrConn.createTransport failed to connect to {Addr: \"10.42.3.17:9090\", ServerName: \"api:9090\", }. Err: connection error: desc = \"transport: Error while dialing: dial tcp 10.42.3.17:9090: connect: connection refused\"",
        Kind::Refused,
        Format::GrpcGo,
        Some("10.42.3.17:9090"),
    );
    check(
        "rpc error: code = Unavailable desc = connection error: desc = \"transport: Error while dialing dial tcp 10.42.3.17:9090: i/o timeout\"",
        Kind::Timeout,
        Format::GrpcGo,
        Some("10.42.3.17:9090"),
    );
    // No dial detail: unavailable, target from the subchannel address.
    check(
        "2024/05/01 15:42:10 WARNING: [core] [Channel #1] rpc error: code = Unavailable desc = last connection error for {Addr: \"10.42.3.17:9090\"}",
        Kind::Unavailable,
        Format::GrpcGo,
        Some("10.42.3.17:9090"),
    );
}

#[test]
fn grpc_go_double_log_is_one_failure() {
    let text = "2025/06/12 12:52:17 INFO: [core] Creating new client transport to \"{Addr: \\\"100.125.131.27:8080\\\", ServerName: \\\"identity:8080\\\", }\": connection error: desc = \"transport: Error while dialing: dial tcp 100.125.131.27:8080: connect: connection refused\"\n2025/06/12 12:52:17 WARNING: [core] [Channel #1 SubChannel #67] grpc: addrConn.createTransport failed to connect to {Addr: \"100.125.131.27:8080\", ServerName: \"identity:8080\", }. Err: connection error: desc = \"transport: Error while dialing: dial tcp 100.125.131.27:8080: connect: connection refused\"\n";
    let f = one(text);
    assert_eq!((f.line_no, f.end_line_no), (1, 2));
}

#[test]
fn go_net_and_dns() {
    check(
        "Readiness probe failed: Get \"http://10.244.3.71:8080/healthz\": dial tcp 10.244.3.71:8080: connect: connection refused",
        Kind::Refused,
        Format::GoNet,
        Some("10.244.3.71:8080"),
    );
    check(
        "Get \"https://10.42.0.7:10250/readyz\": read tcp 10.42.0.1:52682->10.42.0.7:10250: read: connection reset by peer",
        Kind::Reset,
        Format::GoNet,
        Some("10.42.0.7:10250"),
    );
    check(
        "write tcp 10.244.1.5:40000->10.244.3.71:5432: write: broken pipe",
        Kind::Reset,
        Format::GoNet,
        Some("10.244.3.71:5432"),
    );
    check(
        "dial tcp 10.244.3.71:8080: connect: no route to host",
        Kind::NoRoute,
        Format::GoNet,
        Some("10.244.3.71:8080"),
    );
    let f = check(
        "dial tcp: lookup argocd-redis on 10.96.0.10:53: read udp 10.244.1.5:41234->10.96.0.10:53: i/o timeout",
        Kind::DnsTimeout,
        Format::GoNet,
        None,
    );
    assert_eq!(f.dns_name.as_deref(), Some("argocd-redis"));
    assert_eq!(f.dns_server, sa("10.96.0.10:53"));
    let f = check(
        "dial tcp: lookup argocd-redis: i/o timeout",
        Kind::DnsTimeout,
        Format::GoNet,
        None,
    );
    assert_eq!(f.dns_name.as_deref(), Some("argocd-redis"));
    let f = check(
        "lookup orders.shop.svc.cluster.local on 10.96.0.10:53: no such host",
        Kind::DnsNotFound,
        Format::GoNet,
        None,
    );
    assert_eq!(f.dns_name.as_deref(), Some("orders.shop.svc.cluster.local"));
    check(
        "Get \"http://10.1.2.3:8080/x\": net/http: request canceled while waiting for connection (Client.Timeout exceeded while awaiting headers)",
        Kind::Timeout,
        Format::GoNet,
        Some("10.1.2.3:8080"),
    );
}

#[test]
fn json_lines_and_logfmt() {
    let f = check(
        "{\"level\":\"error\",\"ts\":1714578130.25,\"caller\":\"x.go:1\",\"msg\":\"dial failed\",\"error\":\"dial tcp 10.244.3.71:8080: connect: connection refused\"}",
        Kind::Refused,
        Format::GoNet,
        Some("10.244.3.71:8080"),
    );
    assert_eq!(
        f.timestamp.map(|t| t.to_string()).as_deref(),
        Some("2024-05-01T15:42:10.25Z")
    );
    let f = check(
        "time=\"2024-05-01T15:42:10Z\" level=error msg=\"probe failed\" error=\"Get \\\"http://10.244.3.71:8080/\\\": dial tcp 10.244.3.71:8080: i/o timeout\"",
        Kind::Timeout,
        Format::GoNet,
        Some("10.244.3.71:8080"),
    );
    assert!(!f.approximate_time);
}

#[test]
fn java_family() {
    let text = "2024-05-01 15:42:10.123 ERROR 1 --- [nio-8080-exec-1] c.e.OrderClient : call failed\njava.net.ConnectException: Failed to connect to /10.244.3.71:8080\n\tat okhttp3.internal.connection.RealConnection.connectSocket(RealConnection.kt:297)\nCaused by: java.net.ConnectException: Connection refused\n\tat java.base/sun.nio.ch.Net.pollConnect(Native Method)\n";
    let f = one(text);
    assert_eq!(f.kind, Kind::Refused);
    assert_eq!(f.format, Format::OkHttp);
    assert_eq!(f.target, sa("10.244.3.71:8080"));
    assert_eq!((f.line_no, f.end_line_no), (2, 4));
    // Time taken from the log record the exception belongs to (zone assumed: approximate).
    assert_eq!(
        f.timestamp.map(|t| t.to_string()).as_deref(),
        Some("2024-05-01T15:42:10.123Z")
    );
    assert!(f.approximate_time);

    check(
        "java.net.SocketException: Connection reset",
        Kind::Reset,
        Format::Java,
        None,
    );
    // Two raw stack traces printed one after the other are two failures.
    let two = scan(
        "java.net.ConnectException: Connection refused (Connection refused)\n\tat java.net.PlainSocketImpl.socketConnect(Native Method)\n\tat java.net.Socket.connect(Socket.java:607)\njava.net.ConnectException: Connection refused (Connection refused)\n\tat java.net.PlainSocketImpl.socketConnect(Native Method)\n",
    );
    assert_eq!(two.len(), 2, "{two:#?}");
    check(
        "org.apache.http.conn.HttpHostConnectException: Connect to orders:8080 [orders/10.244.3.71] failed: Connect timed out",
        Kind::Timeout,
        Format::ApacheHttpClient,
        Some("10.244.3.71:8080"),
    );
    check(
        "Caused by: io.netty.channel.AbstractChannel$AnnotatedConnectException: finishConnect(..) failed: Connection refused: orders.shop.svc.cluster.local/10.244.3.71:8080",
        Kind::Refused,
        Format::ReactorNetty,
        Some("10.244.3.71:8080"),
    );
    check(
        "io.grpc.StatusRuntimeException: UNAVAILABLE: io exception; io.grpc.netty.shaded.io.netty.channel.AbstractChannel$AnnotatedConnectException: Connection refused: /[0:0:0:0:0:0:0:1]:9090",
        Kind::Refused,
        Format::GrpcJava,
        Some("[::1]:9090"),
    );
    // The lab's grpcjava (grpc-java 1.85.1, netty-shaded epoll): one line per failed call,
    // as it printed it against a closed loopback port.
    let f = check(
        "2026-12-05T09:59:12.496718267Z grpcjava: target=dns:///web.demo.svc.cluster.local:50051 call failed: io.grpc.StatusRuntimeException: UNAVAILABLE: io exception; cause: io.grpc.netty.shaded.io.netty.channel.AbstractChannel$AnnotatedConnectException: finishConnect(..) failed with error(-111): Connection refused: /127.0.0.1:41003",
        Kind::Refused,
        Format::GrpcJava,
        Some("127.0.0.1:41003"),
    );
    assert_eq!(
        f.timestamp.map(|t| t.to_string()).as_deref(),
        Some("2026-12-05T09:59:12.496718267Z")
    );
    check(
        "java.net.NoRouteToHostException: No route to host (Host unreachable)",
        Kind::NoRoute,
        Format::Java,
        None,
    );
    let f = check(
        "java.net.UnknownHostException: orders.shop.svc.cluster.local: Name or service not known",
        Kind::DnsNotFound,
        Format::Java,
        None,
    );
    assert_eq!(f.dns_name.as_deref(), Some("orders.shop.svc.cluster.local"));
    let f = check(
        "io.netty.resolver.dns.DnsNameResolverTimeoutException: [/10.96.0.10:53] query via UDP timed out after 5000 milliseconds (no stack trace available)",
        Kind::DnsTimeout,
        Format::Java,
        None,
    );
    assert_eq!(f.dns_server, sa("10.96.0.10:53"));
}

#[test]
fn envoy() {
    let f = check(
        "[2024-05-01T15:42:10.123Z] \"GET /api HTTP/1.1\" 503 UF,URX upstream_reset_before_response_started{connection_failure,delayed_connect_error:_111} - \"delayed_connect_error:_111\" 0 91 3 - \"-\" \"curl/8\" \"id\" \"orders:8080\" \"10.244.3.71:8080\" outbound|8080||orders.shop.svc.cluster.local - 10.96.1.1:8080 10.244.1.5:4000 - default",
        Kind::Refused,
        Format::EnvoyText,
        Some("10.244.3.71:8080"),
    );
    assert_eq!(f.response_flags.as_deref(), Some("UF,URX"));
    check(
        "[2024-05-01T15:42:10.123Z] \"- - -\" 0 UF,URX \"-\" \"-\" 0 0 1000 - \"-\" \"-\" \"-\" \"-\" \"10.244.3.71:5432\" outbound|5432||db - 10.96.2.2:5432 10.244.1.5:4000 - -",
        Kind::Unavailable,
        Format::EnvoyText,
        Some("10.244.3.71:5432"),
    );
    check(
        "{\"start_time\":\"2024-05-01T15:42:10.123Z\",\"response_code\":503,\"response_flags\":\"UH\",\"upstream_host\":null,\"connection_termination_details\":null}",
        Kind::Unavailable,
        Format::EnvoyJson,
        None,
    );
    let f = check(
        "{\"response_flags\":\"UC\",\"response_code_details\":\"upstream_reset_before_response_started{connection_termination}\",\"upstream_host\":\"10.244.3.72:8080\",\"start_time\":\"2024-05-01T15:42:11Z\"}",
        Kind::Reset,
        Format::EnvoyJson,
        Some("10.244.3.72:8080"),
    );
    assert_eq!(
        f.timestamp.map(|t| t.to_string()).as_deref(),
        Some("2024-05-01T15:42:11Z")
    );
    // A 200 and a 503 without failure flags are not connection failures.
    assert!(scan("[2024-05-01T15:42:10.123Z] \"GET /?timeout=3 HTTP/1.1\" 200 - \"-\" 0 1 2 2 \"-\" \"ua\" \"id\" \"a:1\" \"10.1.1.1:80\" c").is_empty());
    assert!(scan("{\"response_flags\":\"UAEX\",\"upstream_host\":\"-\",\"x\":\"UNAVAILABLE: no healthy upstream\"}").is_empty());
}

#[test]
fn nginx_node_python_linkerd_coredns_curl() {
    check(
        "2024/05/01 15:42:10 [error] 31#31: *9 upstream timed out (110: Connection timed out) while connecting to upstream, client: 10.244.1.5, server: _, request: \"GET / HTTP/1.1\", upstream: \"http://10.244.3.71:8080/\", host: \"x\"",
        Kind::Timeout,
        Format::Nginx,
        Some("10.244.3.71:8080"),
    );
    check(
        "2024/05/01 15:42:10 [error] 31#31: *9 recv() failed (104: Connection reset by peer) while reading response header from upstream, client: 10.244.1.5, server: _, request: \"GET / HTTP/1.1\", upstream: \"http://10.244.3.71:8080/\", host: \"x\"",
        Kind::Reset,
        Format::Nginx,
        Some("10.244.3.71:8080"),
    );
    check(
        "2024/05/01 15:42:10 [error] 31#31: *9 no live upstreams while connecting to upstream, client: 10.244.1.5, server: _, request: \"GET / HTTP/1.1\", upstream: \"http://orders/\", host: \"x\"",
        Kind::Unavailable,
        Format::Nginx,
        None,
    );
    check(
        "Error: connect ETIMEDOUT 10.244.3.71:443\n    at TCPConnectWrap.afterConnect [as oncomplete] (node:net:1555:16) {\n  errno: -110,\n  code: 'ETIMEDOUT',\n  syscall: 'connect',\n  address: '10.244.3.71',\n  port: 443\n}",
        Kind::Timeout,
        Format::NodeJs,
        Some("10.244.3.71:443"),
    );
    let f = check(
        "Error: getaddrinfo ENOTFOUND orders.shop.svc.cluster.local",
        Kind::DnsNotFound,
        Format::NodeJs,
        None,
    );
    assert_eq!(f.dns_name.as_deref(), Some("orders.shop.svc.cluster.local"));
    check(
        "requests.exceptions.ConnectionError: HTTPConnectionPool(host='10.244.3.71', port=8080): Max retries exceeded with url: / (Caused by NewConnectionError('<urllib3.connection.HTTPConnection object at 0x7f>: Failed to establish a new connection: [Errno 111] Connection refused'))",
        Kind::Refused,
        Format::PythonUrllib3,
        Some("10.244.3.71:8080"),
    );
    check(
        "[  1285.215813s]  WARN ThreadId(01) outbound:proxy{addr=10.96.12.40:8080}:service{ns=shop name=orders port=8080}:endpoint{addr=10.244.3.71:8080}: linkerd_reconnect: Failed to connect error=Connection refused (os error 111)",
        Kind::Refused,
        Format::Linkerd,
        Some("10.244.3.71:8080"),
    );
    check(
        "[    12.0s]  WARN ThreadId(01) inbound:server{port=8080}: linkerd_app_core::errors::respond: Request failed error=endpoint 10.244.3.71:8080: connect timed out after 1s client.addr=10.244.1.5:40000",
        Kind::Timeout,
        Format::Linkerd,
        Some("10.244.3.71:8080"),
    );
    let f = check(
        "[ERROR] plugin/errors: 2 orders.shop.svc.cluster.local. AAAA: read udp 10.244.0.5:41234->10.96.0.10:53: i/o timeout",
        Kind::DnsTimeout,
        Format::CoreDns,
        None,
    );
    assert_eq!(f.dns_name.as_deref(), Some("orders.shop.svc.cluster.local"));
    assert_eq!(f.dns_server, sa("10.96.0.10:53"));
    check(
        "curl: (7) Failed to connect to 10.244.3.71 port 8080 after 1 ms: Connection refused",
        Kind::Refused,
        Format::Curl,
        Some("10.244.3.71:8080"),
    );
}

#[test]
fn look_alikes_are_dismissed() {
    let (v, s) = scan_with(
        "Failed to open connection to \"system\" message bus: Failed to connect to socket /run/dbus/system_bus_socket: No such file or directory\n\
         2024-05-01 15:42:10.123  INFO 1 --- [main] c.e.PasswordResetService : password reset email queued\n\
         I0501 15:42:10.123456       1 reflector.go:255] Listing and watching *v1.Pod (timeoutSeconds=412)\n\
         GET /api 503 Service Unavailable java.lang.IllegalStateException: upstream said no\n",
        ScanOptions::default(),
    );
    assert!(v.is_empty(), "{v:#?}");
    assert_eq!(s.unknown_lines, 0, "{:?}", s.unknown_shapes);
}

#[test]
fn timestamps_need_year_and_zone_or_are_approximate() {
    let line = "<30>Nov 30 05:00:00 node-1 kubelet[1]: dial tcp 10.244.3.71:8080: connect: connection refused\n";
    // No year: none given, none inferred → no timestamp.
    let (v, s) = scan_with(line, ScanOptions::default());
    assert_eq!(v[0].timestamp, None);
    assert_eq!(s.undated, 1);
    // Year given, zone assumed.
    let (v, s) = scan_with(
        line,
        ScanOptions {
            year: Some(2025),
            ..ScanOptions::default()
        },
    );
    assert_eq!(
        v[0].timestamp.map(|t| t.to_string()).as_deref(),
        Some("2025-11-30T05:00:00Z")
    );
    assert!(v[0].approximate_time);
    assert_eq!((s.assumed_year, s.assumed_zone), (0, 1));
    // Year and zone given: exact.
    let (v, _) = scan_with(
        line,
        ScanOptions {
            year: Some(2025),
            tz: Some(jiff::tz::TimeZone::fixed(jiff::tz::offset(1))),
            ..ScanOptions::default()
        },
    );
    assert_eq!(
        v[0].timestamp.map(|t| t.to_string()).as_deref(),
        Some("2025-11-30T04:00:00Z")
    );
    assert!(!v[0].approximate_time);
    // Year inferred from an earlier dated line of the same input: approximate.
    let text =
        format!("2023-01-02T03:04:05Z dial tcp 10.0.0.1:1: connect: connection refused\n{line}");
    let (v, s) = scan_with(&text, ScanOptions::default());
    assert_eq!(
        v[1].timestamp.map(|t| t.to_string()).as_deref(),
        Some("2023-11-30T05:00:00Z")
    );
    assert!(s.warnings().iter().any(|w| w.contains("--year")));
}

#[test]
fn an_undated_line_takes_only_the_time_of_the_record_it_continues() {
    let time = |f: &ConnFailure| f.timestamp.map(|t| t.to_string());
    let log = |lines: &[&str]| lines.iter().map(|l| format!("{l}\n")).collect::<String>();
    // An unrelated line in between (another process's output): the failure is its own
    // record, whose time the log does not give.
    let text = log(&[
        "2024-05-01T15:42:10Z INFO cache warmed",
        "dial tcp 10.244.3.71:8080: connect: connection refused",
        "2024-05-01T15:42:11Z INFO request ok",
        "starting worker pool",
        "java.net.ConnectException: Connection refused (Connection refused) to /10.244.3.72:8080",
    ]);
    let (v, s) = scan_with(&text, ScanOptions::default());
    assert_eq!(v.len(), 2, "{v:#?}");
    assert_eq!(time(&v[0]), None, "{v:#?}");
    assert_eq!(time(&v[1]), None, "{v:#?}");
    assert_eq!(s.undated, 2);
    assert!(
        s.warnings()
            .iter()
            .any(|w| w.contains("2 failure(s) have no time"))
    );
    // The exception, its frames and cause continue the record a timestamped header began.
    let text = log(&[
        "2024-05-01T15:42:10Z ERROR c.e.OrderClient - call failed",
        "org.springframework.web.client.ResourceAccessException: I/O error on GET request",
        "\tat org.springframework.web.client.RestTemplate.doExecute(RestTemplate.java:785)",
        "\t... 12 more",
        "Caused by: java.net.ConnectException: Connection refused to /10.244.3.72:8080",
        "2024-05-01T15:42:20Z ERROR app - lookup failed",
        "Traceback (most recent call last):",
        "  File \"/app/x.py\", line 3, in <module>",
        "",
        "ConnectionRefusedError: [Errno 111] Connection refused",
    ]);
    let (v, s) = scan_with(&text, ScanOptions::default());
    assert_eq!(v.len(), 2, "{v:#?}");
    assert_eq!(time(&v[0]).as_deref(), Some("2024-05-01T15:42:10Z"));
    assert_eq!(time(&v[1]).as_deref(), Some("2024-05-01T15:42:20Z"));
    assert_eq!(s.undated, 0);
}

#[test]
fn bad_input_is_counted_not_fatal() {
    let mut data = b"dial tcp 10.0.0.1:80: connect: connection refused\n".to_vec();
    data.extend_from_slice(b"\xff\xfe garbage refused \x00\x01\n");
    data.extend_from_slice(b"\x00\x00\x00 binary\n");
    data.extend_from_slice(b"something went wrong: connection refused to the thing\n");
    data.extend_from_slice(b"dial tcp 10.0.0.2:80: connect: connection refused\r\n");
    let (v, s) = scan_bytes(&data, ScanOptions::default()).unwrap();
    assert_eq!(v.len(), 3, "{v:#?}");
    assert_eq!(s.binary_lines, 2);
    assert_eq!(s.unknown_lines, 1);
    assert_eq!(s.unknown_shapes.len(), 1);
    assert!(s.unknown_shapes[0].example.contains("something went wrong"));
    assert_eq!(v[2].target, sa("10.0.0.2:80"));
    assert_eq!(s.lines, 5);
}

#[test]
fn overlong_lines_are_capped() {
    let mut data = Vec::new();
    data.extend_from_slice(b"dial tcp 10.0.0.1:80: connect: connection refused ");
    data.resize(3 << 20, b'x');
    data.extend_from_slice(b"\ndial tcp 10.0.0.2:80: connect: connection refused\n");
    let (v, s) = scan_bytes(&data, ScanOptions::default()).unwrap();
    assert_eq!(s.overlong_lines, 1);
    assert_eq!(s.lines, 2);
    assert_eq!(v.len(), 2);
    assert_eq!((v[0].line_no, v[1].line_no), (1, 2));
    assert!(v[0].raw.len() <= ghostip_logs::RAW_EXCERPT_MAX);
    let mut scanner = ghostip_logs::Scanner::new(ScanOptions::default()).unwrap();
    let mut w = Vec::new();
    scanner.scan_slice(&data, &mut |f| w.push(f));
    assert_eq!(v, w);
    assert_eq!(&s, scanner.stats());
}

#[test]
fn gzip_input_is_detected() {
    use std::io::Write;
    let text = b"2024-05-01T15:42:10Z dial tcp 10.0.0.1:80: connect: connection refused\n";
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    enc.write_all(text).unwrap();
    let gz = enc.finish().unwrap();
    let reader = ghostip_logs::open_reader(std::io::Cursor::new(gz)).unwrap();
    let (v, _) = ghostip_logs::scan_reader(reader, ScanOptions::default()).unwrap();
    assert_eq!(v.len(), 1);
    assert_eq!(v[0].target, sa("10.0.0.1:80"));
}

#[test]
fn line_numbers_across_read_chunks() {
    // Enough lines to span several 1 MiB reads; failures at known lines.
    let mut text = String::new();
    let mut want = Vec::new();
    for i in 1..=60_000u64 {
        if i % 7919 == 0 {
            text.push_str(&format!(
                "2024-05-01T15:42:10Z dial tcp 10.0.{}.{}:80: connect: connection refused\n",
                i / 256 % 256,
                i % 256
            ));
            want.push(i);
        } else {
            text.push_str("2024-05-01T15:42:10Z INFO handled GET /api/v1/orders/12345 in 3 ms status 200 ok\n");
        }
    }
    let (v, s) = scan_bytes(text.as_bytes(), ScanOptions::default()).unwrap();
    assert_eq!(v.iter().map(|f| f.line_no).collect::<Vec<_>>(), want);
    assert_eq!(s.lines, 60_000);
    assert_eq!(s.bytes, text.len() as u64);
}
