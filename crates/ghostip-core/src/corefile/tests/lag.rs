//! The lag rules: kubernetes TTL, cache caps and floors, disable, serve_stale, NodeLocal chains.

use super::*;

#[test]
fn classic_kubeadm_lags_thirty_seconds() {
    let l = lag(CLASSIC);
    assert_eq!(l.cache_lag, s(30));
    assert_eq!(l.client_ttl, s(30));
    assert_eq!(l.denial_lag, s(30));
    assert_eq!(l.serve_stale, None);
    assert_eq!(l.source, AnswerSource::Kubernetes { ttl: 30 });
    assert!(
        l.notes.iter().any(|n| n.contains("= 30 s")),
        "{:?}",
        l.notes
    );
}

#[test]
fn cache_five_caps_at_five() {
    let l = lag(&CLASSIC.replace("cache 30", "cache 5"));
    assert_eq!(l.cache_lag, s(5));
    assert_eq!(l.client_ttl, s(5));
}

#[test]
fn disable_success_keeps_client_ttl() {
    let text = CLASSIC.replace(
        "cache 30\n",
        "cache 30 {\n       disable success cluster.local\n       disable denial cluster.local\n    }\n",
    );
    let l = lag(&text);
    assert_eq!(l.cache_lag, Duration::ZERO);
    assert_eq!(l.client_ttl, s(30));
    assert_eq!(l.denial_lag, Duration::ZERO);
}

#[test]
fn minttl_floor_raises_ttl_zero() {
    let l = lag(&CLASSIC.replace("ttl 30", "ttl 0"));
    assert_eq!(l.cache_lag, s(5));
    assert_eq!(l.client_ttl, s(5));
    // Even with success caching disabled, the floor still rewrites the TTL clients get.
    let l = lag(&CLASSIC
        .replace("ttl 30", "ttl 0")
        .replace("cache 30", "cache 30 {\n disable success\n}"));
    assert_eq!(l.cache_lag, Duration::ZERO);
    assert_eq!(l.client_ttl, s(5));
    // MINTTL 0 lets ttl 0 through.
    let l = lag(&CLASSIC
        .replace("ttl 30", "ttl 0")
        .replace("cache 30", "cache 30 {\n success 9984 30 0\n}"));
    assert_eq!(l.cache_lag, Duration::ZERO);
    assert_eq!(l.client_ttl, Duration::ZERO);
}

#[test]
fn minttl_above_cap_is_capped() {
    let l = lag(&CLASSIC
        .replace("ttl 30", "ttl 1")
        .replace("cache 30", "cache {\n success 9984 3 10\n}"));
    assert_eq!(l.cache_lag, s(3));
}

#[test]
fn default_kubernetes_ttl_and_default_cache() {
    let l = lag(".:53 {\n kubernetes cluster.local\n cache\n}\n");
    assert_eq!(l.cache_lag, s(5));
    assert_eq!(l.client_ttl, s(5));
    let l = lag(".:53 {\n kubernetes cluster.local { ttl 600 }\n cache\n}\n");
    assert_eq!(l.cache_lag, s(600));
    assert_eq!(
        l.denial_ttl,
        s(300),
        "negative answers carry the SOA TTL capped at 300"
    );
}

#[test]
fn cache_summary_reports_the_covering_cache() {
    let l = lag(CLASSIC);
    let c = l.cache.unwrap_or_else(|| panic!("no cache summary"));
    assert_eq!(c.success_max, s(30));
    assert_eq!(c.success_min, s(5));
    assert!(c.success_cached && c.denial_cached);
    assert!(!c.prefetch && !c.keepttl);
    let l = lag(&CLASSIC.replace(
        "cache 30\n",
        "cache 30 {\n disable success cluster.local\n prefetch 10\n}\n",
    ));
    let c = l.cache.unwrap_or_else(|| panic!("no cache summary"));
    assert!(!c.success_cached && c.denial_cached && c.prefetch);
    assert_eq!(
        lag(".:53 {\n kubernetes cluster.local { ttl 30 }\n cache 10 example.org\n}\n").cache,
        None
    );
}

#[test]
fn no_cache_means_no_cache_lag() {
    let l = lag(".:53 {\n kubernetes cluster.local {\n  ttl 30\n }\n}\n");
    assert_eq!(l.cache_lag, Duration::ZERO);
    assert_eq!(l.client_ttl, s(30));
}

#[test]
fn cache_zones_that_exclude_the_domain_do_nothing() {
    let l = lag(".:53 {\n kubernetes cluster.local { ttl 30 }\n cache 10 example.org\n}\n");
    assert_eq!(l.cache_lag, Duration::ZERO);
    assert_eq!(l.client_ttl, s(30));
}

#[test]
fn last_disable_wins_and_no_zone_means_root() {
    let text = ".:53 {\n kubernetes cluster.local { ttl 30 }\n cache 30 {\n  disable success example.org\n  disable success\n }\n}\n";
    assert_eq!(lag(text).cache_lag, Duration::ZERO);
    let text = ".:53 {\n kubernetes cluster.local { ttl 30 }\n cache 30 {\n  disable success\n  disable success example.org\n }\n}\n";
    assert_eq!(lag(text).cache_lag, s(30));
}

#[test]
fn partial_disable_is_noted() {
    let text = ".:53 {\n kubernetes cluster.local { ttl 30 }\n cache 30 {\n  disable success ns1.svc.cluster.local\n }\n}\n";
    let l = lag(text);
    assert_eq!(l.cache_lag, s(30));
    assert!(
        l.notes
            .iter()
            .any(|n| n.contains("only names under ns1.svc.cluster.local.")),
        "{:?}",
        l.notes
    );
}

#[test]
fn serve_stale_and_prefetch() {
    let l = lag(
        ".:53 {\n kubernetes cluster.local { ttl 30 }\n cache 30 {\n  serve_stale\n  prefetch 10 1m 20%\n }\n}\n",
    );
    assert_eq!(l.serve_stale, Some(s(3600)));
    assert_eq!(l.cache_lag, s(30));
    let l = lag(".:53 {\n kubernetes cluster.local\n cache {\n  serve_stale 24h verify\n }\n}\n");
    assert_eq!(l.serve_stale, Some(s(86400)));
    assert!(l.notes.iter().any(|n| n.contains("verify")));
}

#[test]
fn nodelocal_behind_classic_upstream() {
    let upstream = lag(CLASSIC);
    let nodelocal = "cluster.local:53 {\n errors\n cache {\n  success 9984 30\n  denial 9984 5\n }\n bind 169.254.20.10\n forward . 10.96.0.10 {\n  force_tcp\n }\n}\n.:53 {\n cache 30\n forward . /etc/resolv.conf\n}\n";
    let c = Corefile::parse(nodelocal).unwrap_or_default();
    let alone = c
        .expected_lag("cluster.local")
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(alone.cache_lag, s(30));
    assert_eq!(alone.client_ttl, s(30));
    assert_eq!(alone.denial_lag, s(5));
    assert!(
        matches!(alone.source, AnswerSource::Forward { ref to } if to == &["10.96.0.10".to_string()])
    );
    let chained = c
        .expected_lag_behind("cluster.local", Some(&upstream))
        .unwrap_or_else(|e| panic!("{e}"));
    // Fetched 1 s before the upstream entry expires, then held for the 5 s MINTTL floor.
    assert_eq!(chained.cache_lag, s(35));
    assert_eq!(chained.client_ttl, s(30));
    // Upstream with success caching disabled: NodeLocal holds the fresh 30 s answer.
    let newest = lag(&CLASSIC.replace(
        "cache 30\n",
        "cache 30 {\n disable success cluster.local\n}\n",
    ));
    let chained = c
        .expected_lag_behind("cluster.local", Some(&newest))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(chained.cache_lag, s(30));
}

#[test]
fn most_specific_block_and_port() {
    let text = ".:53 {\n kubernetes cluster.local { ttl 30 }\n cache 30\n}\ncluster.local:53 {\n kubernetes { ttl 10 }\n}\n.:5353 {\n kubernetes cluster.local\n cache 3600\n}\n";
    let c = Corefile::parse(text).unwrap_or_default();
    let all = c.expected_lags("cluster.local", None).unwrap_or_default();
    assert_eq!(all.len(), 2);
    assert_eq!(all[0].port, 53);
    assert_eq!(all[0].zone, "cluster.local.");
    assert_eq!(all[0].lag.source, AnswerSource::Kubernetes { ttl: 10 });
    assert_eq!(all[0].lag.cache_lag, Duration::ZERO);
    assert_eq!(all[1].port, 5353);
    assert_eq!(all[1].lag.cache_lag, s(5));
    // The overall answer is the listener that lags most.
    assert_eq!(
        c.expected_lag("cluster.local").map(|l| l.cache_lag),
        Ok(s(5))
    );
}

#[test]
fn snippets_are_not_servers() {
    let text = "(common) {\n kubernetes cluster.local\n cache 3600\n}\n.:53 {\n import common\n kubernetes cluster.local { ttl 30 }\n}\n";
    let c = Corefile::parse(text).unwrap();
    assert!(c.servers[0].is_snippet());
    let l = c.expected_lag("cluster.local").unwrap();
    assert_eq!(l.cache_lag, Duration::ZERO);
    assert!(
        l.notes
            .iter()
            .any(|n| n.contains("import common not followed")),
        "{:?}",
        l.notes
    );
}

#[test]
fn plugin_errors_have_lines() {
    let cases: &[(&str, usize)] = &[
        (
            ".:53 {\n kubernetes cluster.local {\n  ttl 3601\n }\n}\n",
            3,
        ),
        (".:53 {\n kubernetes cluster.local {\n  ttl -1\n }\n}\n", 3),
        (".:53 {\n kubernetes cluster.local\n cache 0\n}\n", 3),
        (
            ".:53 {\n kubernetes cluster.local\n cache {\n  success 10 0\n }\n}\n",
            4,
        ),
        (
            ".:53 {\n kubernetes cluster.local\n cache {\n  prefetch 1 1m 5%\n }\n}\n",
            4,
        ),
        (
            ".:53 {\n kubernetes cluster.local\n cache {\n  serve_stale 1h later\n }\n}\n",
            4,
        ),
        (
            ".:53 {\n kubernetes cluster.local\n cache {\n  disable both\n }\n}\n",
            4,
        ),
        (
            ".:53 {\n kubernetes cluster.local\n cache {\n  servfail 10m\n }\n}\n",
            4,
        ),
    ];
    for (text, line) in cases {
        match Corefile::parse(text).and_then(|c| c.expected_lag("cluster.local")) {
            Err(CorefileError::InvalidPlugin { line: l, .. }) => assert_eq!(l, *line, "{text}"),
            other => panic!("{text}: {other:?}"),
        }
    }
    let dup = Corefile::parse(".:53 {\n kubernetes cluster.local\n cache 5\n cache 10\n}\n")
        .and_then(|c| c.expected_lag("cluster.local"));
    assert_eq!(
        dup.err(),
        Some(CorefileError::Duplicate {
            line: 4,
            first: 3,
            plugin: "cache".into()
        })
    );
}

#[test]
fn not_served_and_not_answered() {
    let c = Corefile::parse("example.org {\n whoami\n}\n").unwrap_or_default();
    assert!(matches!(
        c.expected_lag("cluster.local"),
        Err(CorefileError::NotServed { .. })
    ));
    let c = Corefile::parse(".:53 {\n whoami\n}\n").unwrap_or_default();
    assert!(matches!(
        c.expected_lag("cluster.local"),
        Err(CorefileError::NotAnswered { line: 1, .. })
    ));
    let c = Corefile::parse("tls://.:853 {\n kubernetes cluster.local\n}\n").unwrap_or_default();
    assert!(matches!(
        c.expected_lag("cluster.local"),
        Err(CorefileError::NotServed { .. })
    ));
    assert_eq!(Corefile::parse(""), Ok(Corefile::default()));
}
