//! Corpus test over the real client-error samples in `../shared/fixtures/client-errors/`, read in
//! place (never copied into the repository): every connection failure is found, with the kind and
//! the target IP:port (or DNS server) expected after reading each file by hand.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::collections::BTreeMap;
use std::path::PathBuf;

use ghostip_logs::Kind::{self, *};
use ghostip_logs::{ConnFailure, Format, ScanOptions, ScanStats, Scanner, classify, open_reader};

/// The client-error samples of the fixture corpus; the test fails naming the folder where it is
/// absent.
fn corpus_dir() -> PathBuf {
    ghostip_testkit::env::fixtures("client-errors")
}

/// One expected failure: (first line of the event, kind, target IP:port | `dns@SERVER` | `-`).
type Want = (u64, Kind, &'static str);

/// Per file, the failures in order.
const EXPECTED: &[(&str, &[Want])] = &[
    (
        "coredns-1.2.6-log_HINFO-unreachable-backend_coredns-issue2693_2019_PARTIAL.log",
        &[
            (7, DnsTimeout, "dns@213.186.33.99:53"),
            (8, DnsTimeout, "dns@213.186.33.99:53"),
            (9, DnsTimeout, "dns@213.186.33.99:53"),
            (10, DnsTimeout, "dns@213.186.33.99:53"),
            (11, DnsTimeout, "dns@213.186.33.99:53"),
            (12, DnsTimeout, "dns@213.186.33.99:53"),
        ],
    ),
    (
        "coredns-log_aks_forward-only-once-per-server-block_issue4729.log",
        &[],
    ),
    (
        "coredns-log_plugin-errors_read-udp-io-timeout_k8s-issue86762_2020_PARTIAL.log",
        &[
            (1, DnsTimeout, "dns@132.120.200.52:53"),
            (2, DnsTimeout, "dns@132.120.200.49:53"),
            (3, DnsTimeout, "dns@132.120.200.49:53"),
            (4, DnsTimeout, "dns@132.120.200.49:53"),
            (5, DnsTimeout, "dns@10.96.0.10:53"),
            (6, DnsTimeout, "dns@132.120.200.49:53"),
            (7, DnsTimeout, "dns@132.120.200.49:53"),
        ],
    ),
    (
        "curl_immediate-connect-fail_operation-not-permitted.txt",
        &[(3, Other, "10.15.1.8:443")],
    ),
    (
        "envoy-istio-access-log_json_503-UAEX-no-healthy-upstream_ingressgateway-1.4.0_istio-issue19056_2019_PARTIAL.txt",
        &[],
    ),
    (
        "envoy-istio-access-log_json_503-UF-URX_upstream_host_istio-1.11.5_istio-issue36636_2021_PARTIAL.txt",
        &[(4, Unavailable, "10.118.101.48:8080")],
    ),
    (
        "envoy-istio-access-log_json_tcp-UF-URX_istio-1.3_istio-issue17139_2019_PARTIAL.txt",
        &[(1, Unavailable, "-")],
    ),
    (
        "envoy-istio-access-log_text_200_after-EDS-fix_same-flow_zhaohuabing-2020.log",
        &[],
    ),
    (
        "envoy-istio-access-log_text_503-UC_connection_termination_istio-1.17_eks_istio-issue45802_2023.log",
        &[(1, Reset, "10.80.47.192:8181")],
    ),
    (
        "envoy-istio-access-log_text_503-UF-URX_stale-headless-pod-ip_ORIGINAL_DST_zhaohuabing-2020.log",
        &[(1, Unavailable, "172.16.0.198:8761")],
    ),
    (
        "envoy-istio-access-log_text_istio-1.8-format-inbound-cluster-name_istio-io-issue8404_2020.log",
        &[],
    ),
    (
        "envoy-istio-access-log_text_kubectl-timestamps_inbound-500-and-passthrough_istio-issue29109_2020.log",
        &[],
    ),
    (
        "go-client-go_cilium-agent-k8sError_connect-operation-not-permitted_v1.18.6.log",
        &[
            (1, Other, "10.15.1.8:443"),
            (2, Other, "10.15.1.8:443"),
            (3, Other, "10.15.1.8:443"),
            (4, Other, "10.15.1.8:443"),
            (5, Other, "10.15.1.8:443"),
            (6, Other, "10.15.1.8:443"),
            (7, Other, "10.15.1.8:443"),
            (8, Other, "10.15.1.8:443"),
            (9, Other, "10.15.1.8:443"),
            (10, Other, "10.15.1.8:443"),
        ],
    ),
    (
        "go-client-go_cilium-config-initcontainer_connect-operation-not-permitted_v1.18.6.log",
        &[
            (5, Other, "10.15.1.8:443"),
            (6, Other, "10.15.1.8:443"),
            (7, Other, "10.15.1.8:443"),
            // The process's final `Error: …` print is a record of its own.
            (10, Other, "10.15.1.8:443"),
        ],
    ),
    (
        "go-net-http_kubelet-events_gke_connect-refused_k8s-issue51096_2020_PARTIAL.txt",
        &[(5, Refused, "10.48.8.21:80"), (6, Refused, "10.48.8.21:80")],
    ),
    (
        "go-net-http_kubelet-events_reset-by-peer_client-timeout_context-deadline_k3s-issue10010_2024_PARTIAL.txt",
        &[
            (7, Reset, "10.42.0.7:10250"),
            (10, Timeout, "10.42.0.7:10250"),
            (11, Timeout, "10.42.0.7:10250"),
        ],
    ),
    (
        "go-net-http_kubelet-probe_getsockopt-connection-refused_go-pre1.11_openshift-gogs-issue22_2018.txt",
        &[
            (2, Refused, "172.17.0.7:3000"),
            (5, Refused, "172.17.0.7:3000"),
        ],
    ),
    (
        "go-net-http_kubelet-probe_quoted-url_connect-refused_k8s-1.21_secret-generator-issue65_2021.txt",
        &[
            (1, Refused, "10.0.171.162:8080"),
            (2, Refused, "10.0.171.162:8080"),
        ],
    ),
    (
        "go-net-http_kubelet-probe_unquoted-url_connect-refused_traefik-helm-issue3_2019.txt",
        &[(1, Refused, "10.1.0.120:9000")],
    ),
    (
        "go-net-http_kubelet-reflector_journald-syslog-prefix_connect-refused_k8s-issue75477_2019_PARTIAL.log",
        &[
            (1, Refused, "1.2.3.4:6443"),
            (2, Refused, "1.2.3.4:6443"),
            (3, Refused, "1.2.3.4:6443"),
        ],
    ),
    (
        "go-net_kubelet-prober_ipv6-read-tcp-connection-reset_kubevirt-pr3249_2020_PARTIAL.log",
        &[
            (1, Reset, "[fd00:10:244::27]:1500"),
            (2, Reset, "[fd00:10:244::27]:1500"),
            (3, Reset, "[fd00:10:244::27]:1500"),
        ],
    ),
    (
        "grpc-go_2025_channelz-logs_createTransport-failed_pod-ip_grpc-go-issue8398_PARTIAL.log",
        &[(7, Refused, "100.125.131.27:8080")],
    ),
    (
        "grpc-go_dapr-1.13.5_retry_unavailable_dapr-issue8602_2025.log",
        &[(1, Refused, "10.110.0.2:50002")],
    ),
    (
        "grpc-go_kubelet-journald_containerd-sock_bottlerocket-issue2512_2023_PARTIAL.log",
        &[(1, Refused, "-"), (2, Refused, "-"), (3, Reset, "-")],
    ),
    (
        "grpc-go_old-clientconn.go-1120_etcd-client_kube-apiserver_minikube-issue5472_2019.log",
        &[
            (1, Refused, "127.0.0.1:2379"),
            (2, Refused, "127.0.0.1:2379"),
            (3, Refused, "127.0.0.1:2379"),
            (4, Refused, "127.0.0.1:2379"),
        ],
    ),
    (
        "grpc-java_connect-timeout_grpc-spring-boot-starter-issue18_2019.txt",
        &[(1, Timeout, "192.168.1.211:6565")],
    ),
    (
        "grpc-java_nio_status-toString_no-further-information_grpc-java-issue10802_2024_PARTIAL.txt",
        &[(1, Refused, "127.0.0.1:9898")],
    ),
    (
        "grpc-java_unshaded-netty_AnnotatedConnectException_typedb-issue5314_2019_PARTIAL.txt",
        &[(1, Refused, "[fe80::1%1]:48555")],
    ),
    (
        "grpc-js-1.0_structured-log_14-UNAVAILABLE-No-connection-established_k8s-pod-recycled_grpc-node-issue1064_2020_PARTIAL.yaml",
        &[(2, Unavailable, "-")],
    ),
    (
        "grpc-js-1.3_Error-14-UNAVAILABLE_Stream-refused-by-server_node14_grpc-node-issue1808_2021.txt",
        &[(1, Unavailable, "-")],
    ),
    (
        "java-apache-httpclient_HttpHostConnectException_pod-ip_zalenium-pr646_PARTIAL.log",
        &[(1, Refused, "100.117.126.169:40000")],
    ),
    (
        "java-apache-httpclient_sentry-format_localhost_zmon-issue668_2018.txt",
        // Sentry prints the root cause first, its frames, then the wrapper: after a complete stack
        // trace an exception line is read as the next trace, so this is two events.
        &[(1, Refused, "-"), (10, Refused, "127.0.0.1:8080")],
    ),
    (
        "java-eureka-client_TransportException-cannot-execute-request_spring-boot-log_zhaohuabing-2020.log",
        &[],
    ),
    (
        "java-okhttp_ConnectException-Failed-to-connect_okhttp-issue5262_2019_PARTIAL.txt",
        &[(1, Other, "101.37.31.235:80")],
    ),
    (
        "java-okhttp_kubernetes-client-java_localhost-443_issue514_2019.txt",
        &[(1, Other, "127.0.0.1:443")],
    ),
    (
        "java-okhttp_logging-interceptor_SocketTimeoutException-connect-timed-out_k8s-java-issue978_2020_PARTIAL.txt",
        &[(1, Timeout, "-")],
    ),
    (
        "java-spring-boot-logback_ConnectException_fabric8-client_issue3554_2021.log",
        &[(3, Refused, "-")],
    ),
    (
        "java-spring-webclient_json-log_finishConnect-refused_reactor-netty-issue2895_2023_PARTIAL.log",
        &[(8, Refused, "[::1]:80")],
    ),
    (
        "java-spring-webclient_reactor-netty-1.0.38_DnsNameResolver-UnknownHost_k8s_reactor-netty-issue2978_2023_PARTIAL.log",
        &[(1, DnsNotFound, "-")],
    ),
    (
        "linkerd2-proxy_2.210.4_startup-and-timestamps_linkerd-issue12688_2024_PARTIAL.log",
        &[],
    ),
    (
        "linkerd2-proxy_2018-debug_outbound-endpoint-pod-ip_linkerd-issue1719_PARTIAL.log",
        &[],
    ),
    (
        "nginx-error-and-access-log_nginx-inc-kubernetes-ingress_connect-refused-localhost_ingress-nginx-issue5734_2020.log",
        &[(1, Refused, "127.0.0.1:8181")],
    ),
    (
        "nginx-error-log_ingress-nginx-0.9-era_113-No-route-to-host_deleted-pod_ingress-nginx-issue759_2017.log",
        &[(1, NoRoute, "10.2.3.30:3000")],
    ),
    (
        "nginx-error-log_stream-tcp-upstream_connect-refused_ingress-nginx-issue6919_2021_PARTIAL.log",
        &[
            (1, Refused, "172.26.144.225:9009"),
            (2, Refused, "172.26.144.225:9004"),
            (3, Refused, "172.26.144.225:9007"),
            (4, Refused, "172.26.144.225:9003"),
            (5, Refused, "172.26.144.225:9006"),
        ],
    ),
    (
        "nodejs-0.12_read-ECONNRESET_errnoException_todayweather-issue523_2016.log",
        &[(4, Reset, "-"), (7, Reset, "-")],
    ),
    (
        "nodejs-10_socket-hang-up_code-ECONNRESET_changes-stream-issue25_2019.txt",
        &[(1, Reset, "-")],
    ),
    (
        "nodejs-17.6_unhandled-ECONNRESET_TLSWrap_errno-104_node-issue42154_k8s_2022.txt",
        &[(5, Reset, "-")],
    ),
    (
        "nodejs_ECONNREFUSED_nodeport-redacted-port_allok8-issue47_2021.txt",
        &[(1, Refused, "-")],
    ),
    (
        "nodejs_server-log_read-ECONNRESET_k8s-probe_highcharts-export-issue660_2025.log",
        &[(2, Reset, "-"), (5, Reset, "-")],
    ),
    (
        "python-redis_temporary-failure-in-name-resolution_k8s-issue86762_2020.txt",
        &[(4, DnsTimeout, "-")],
    ),
    (
        "python-urllib3_retry-warnings_NewConnectionError-111_dask-k8s-issue198_2019_PARTIAL.log",
        &[(1, Refused, "-"), (2, Refused, "-"), (3, Refused, "-")],
    ),
    (
        "python2-urllib3_MaxRetryError_NewConnectionError-111_k8s-client-python-issue385_2017.txt",
        &[(1, Refused, "-")],
    ),
    (
        "python3.10-requests_ConnectionError_pytest-output_portforward-issue14_2023.txt",
        &[(2, Refused, "-")],
    ),
    (
        "python3.7-urllib3_chained-traceback_ConnectionRefusedError_dask-k8s-issue205_PARTIAL.txt",
        &[(6, Refused, "-")],
    ),
    (
        "reactor-netty_connection-observed-an-error_reasons_spring-cloud-gateway-issue2232_2021.txt",
        &[(1, Reset, "-"), (3, Reset, "-")],
    ),
];

fn peer(f: &ConnFailure) -> String {
    match (f.target, f.dns_server) {
        (Some(t), _) => t.to_string(),
        (None, Some(s)) => format!("dns@{s}"),
        (None, None) => "-".into(),
    }
}

fn scan(path: &std::path::Path) -> (Vec<ConnFailure>, ScanStats) {
    let mut scanner = Scanner::new(ScanOptions {
        year: Some(2024),
        ..ScanOptions::default()
    })
    .unwrap();
    let reader = open_reader(std::fs::File::open(path).unwrap()).unwrap();
    let mut out = Vec::new();
    scanner.scan(reader, &mut |f| out.push(f)).unwrap();
    (out, scanner.into_stats())
}

#[test]
#[ignore = "needs the fixture corpus (../shared/fixtures)"]
fn every_failure_in_the_corpus_is_found_and_classified() {
    let dir = corpus_dir();
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    let expected: BTreeMap<&str, &[Want]> = EXPECTED.iter().copied().collect();
    let mut per_format: BTreeMap<Format, u64> = BTreeMap::new();
    let mut per_kind: BTreeMap<Kind, u64> = BTreeMap::new();
    let mut with_target = 0;
    let mut local_targets = 0;
    let mut total = 0;
    let mut failures = Vec::new();
    for path in &files {
        let name = path.file_name().unwrap().to_str().unwrap();
        let Some(want) = expected.get(name) else {
            failures.push(format!("{name}: new fixture without expectations"));
            continue;
        };
        let (got, stats) = scan(path);
        assert_eq!(stats.failures as usize, got.len());
        let got_triples: Vec<(u64, Kind, String)> =
            got.iter().map(|f| (f.line_no, f.kind, peer(f))).collect();
        let want_triples: Vec<(u64, Kind, String)> = want
            .iter()
            .map(|(l, k, p)| (*l, *k, (*p).to_owned()))
            .collect();
        if got_triples != want_triples {
            failures.push(format!(
                "{name}:\n  want {want_triples:?}\n  got  {got_triples:?}"
            ));
        }
        for f in &got {
            // Every failure gets a class, and the class agrees with the kind, but for a
            // connection to a loopback or link-local address or a loopback name such as
            // `localhost` (never a pod IP).
            let class = classify(f);
            let local = !f.kind.is_dns()
                && (f
                    .target
                    .is_some_and(|t| ghostip_logs::is_local_address(t.ip()))
                    || f.host
                        .as_deref()
                        .is_some_and(ghostip_logs::is_loopback_name));
            if local {
                assert_eq!(class, ghostip_logs::Class::LocalTarget, "{name}: {}", f.raw);
                local_targets += 1;
            } else {
                assert_eq!(
                    class,
                    ghostip_logs::class_of_kind(f.kind),
                    "{name}: {}",
                    f.raw
                );
            }
            assert!(f.raw.len() <= ghostip_logs::RAW_EXCERPT_MAX);
            *per_format.entry(f.format).or_default() += 1;
            *per_kind.entry(f.kind).or_default() += 1;
            with_target += u64::from(f.target.is_some());
            total += 1;
        }
        assert_eq!(stats.binary_lines, 0, "{name}");
    }
    for name in expected.keys() {
        if !files
            .iter()
            .any(|p| p.file_name().and_then(|n| n.to_str()) == Some(name))
        {
            failures.push(format!("{name}: expected but missing from the corpus"));
        }
    }
    println!(
        "corpus: {} files, {total} failures, {with_target} with a target IP:port \
         ({local_targets} loopback or link-local)",
        files.len()
    );
    for (f, n) in &per_format {
        println!("  {:<18} {n:>3}", f.as_str());
    }
    for (k, n) in &per_kind {
        println!("  kind {:<13} {n:>3}", k.as_str());
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
#[ignore = "needs the fixture corpus (../shared/fixtures)"]
fn formats_of_selected_fixtures() {
    let dir = corpus_dir();
    let cases: &[(&str, Format)] = &[
        (
            "grpc-go_dapr-1.13.5_retry_unavailable_dapr-issue8602_2025.log",
            Format::GrpcGo,
        ),
        (
            "grpc-java_unshaded-netty_AnnotatedConnectException_typedb-issue5314_2019_PARTIAL.txt",
            Format::GrpcJava,
        ),
        (
            "java-apache-httpclient_HttpHostConnectException_pod-ip_zalenium-pr646_PARTIAL.log",
            Format::ApacheHttpClient,
        ),
        (
            "java-okhttp_ConnectException-Failed-to-connect_okhttp-issue5262_2019_PARTIAL.txt",
            Format::OkHttp,
        ),
        (
            "java-spring-webclient_json-log_finishConnect-refused_reactor-netty-issue2895_2023_PARTIAL.log",
            Format::ReactorNetty,
        ),
        (
            "envoy-istio-access-log_text_503-UF-URX_stale-headless-pod-ip_ORIGINAL_DST_zhaohuabing-2020.log",
            Format::EnvoyText,
        ),
        (
            "envoy-istio-access-log_json_503-UF-URX_upstream_host_istio-1.11.5_istio-issue36636_2021_PARTIAL.txt",
            Format::EnvoyJson,
        ),
        (
            "nginx-error-log_ingress-nginx-0.9-era_113-No-route-to-host_deleted-pod_ingress-nginx-issue759_2017.log",
            Format::Nginx,
        ),
        (
            "nodejs_ECONNREFUSED_nodeport-redacted-port_allok8-issue47_2021.txt",
            Format::NodeJs,
        ),
        (
            "python2-urllib3_MaxRetryError_NewConnectionError-111_k8s-client-python-issue385_2017.txt",
            Format::PythonUrllib3,
        ),
        (
            "coredns-log_plugin-errors_read-udp-io-timeout_k8s-issue86762_2020_PARTIAL.log",
            Format::CoreDns,
        ),
        (
            "go-net_kubelet-prober_ipv6-read-tcp-connection-reset_kubevirt-pr3249_2020_PARTIAL.log",
            Format::GoNet,
        ),
    ];
    for (name, format) in cases {
        let (got, _) = scan(&dir.join(name));
        assert!(!got.is_empty(), "{name}");
        assert!(got.iter().all(|f| f.format == *format), "{name}: {got:?}");
    }
}

#[test]
#[ignore = "needs the fixture corpus (../shared/fixtures)"]
fn stale_headless_pod_ip_keeps_its_time_flags_and_target() {
    let dir = corpus_dir();
    let path = dir.join(
        "envoy-istio-access-log_text_503-UF-URX_stale-headless-pod-ip_ORIGINAL_DST_zhaohuabing-2020.log",
    );
    assert!(path.is_file(), "{} not found in the corpus", path.display());
    let (got, _) = scan(&path);
    assert_eq!(got.len(), 1);
    let f = &got[0];
    assert_eq!(f.target, "172.16.0.198:8761".parse().ok());
    assert_eq!(f.response_flags.as_deref(), Some("UF,URX"));
    assert_eq!(
        f.timestamp.map(|t| t.to_string()).as_deref(),
        Some("2020-09-24T13:31:37.98Z")
    );
    assert!(!f.approximate_time);
}
