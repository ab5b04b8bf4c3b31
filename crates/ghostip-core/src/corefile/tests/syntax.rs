//! The lexer and parser: tokens, keys, blocks, imports, snippets, syntax errors, durations.

use super::*;
use crate::corefile::args::parse_go_duration;

#[test]
fn lexer_semantics() {
    let text = "# header\n.:53 { # trailing\n  template ANY ANY x {\n    match \"^a#b\\\"c$\"\n    answer \"{{ .Name }} 60 IN A 1.2.3.4\"\n  }\n  forward . 1.1.1.1#comment\n  health {$HOST}:8080\n}\n";
    let c = Corefile::parse(text).unwrap_or_else(|e| panic!("{e}"));
    let srv = &c.servers[0];
    assert_eq!(srv.line, 2);
    let tpl = srv
        .directive("template")
        .unwrap_or_else(|| panic!("no template"));
    assert_eq!(tpl.line, 3);
    assert_eq!(tpl.block_lines()[0].args, vec!["^a#b\"c$".to_string()]);
    assert_eq!(
        tpl.block_lines()[1].args,
        vec!["{{ .Name }} 60 IN A 1.2.3.4".to_string()]
    );
    assert_eq!(
        srv.directive("forward").map(|d| d.args.clone()),
        Some(vec![".".into(), "1.1.1.1".into()])
    );
    assert_eq!(
        srv.directive("health").map(|d| d.args.clone()),
        Some(vec!["{$HOST}:8080".into()])
    );
}

#[test]
fn one_line_blocks_and_brace_on_next_line() {
    let c = Corefile::parse(
        ".:53 {\n forward . 1.1.1.1 { expire 10s }\n cache 30\n {\n  success 100\n }\n}\n",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let srv = &c.servers[0];
    assert_eq!(
        srv.directive("forward").map(|d| d.block_lines().len()),
        Some(1)
    );
    assert_eq!(
        srv.directive("cache")
            .map(|d| d.block_lines()[0].name.clone()),
        Some("success".into())
    );
}

#[test]
fn keys_schemes_ports_and_commas() {
    let c = Corefile::parse("dns://Example.ORG:1053, tls://b.org:853\n c.org {\n whoami\n}\n");
    // A newline ends the keys unless the line ended with a comma.
    assert!(c.is_err());
    let c = Corefile::parse("dns://Example.ORG:1053,\n tls://b.org:853 c.org {\n whoami\n}\n")
        .unwrap_or_else(|e| panic!("{e}"));
    let keys = &c.servers[0].keys;
    assert_eq!(keys.len(), 3);
    assert_eq!(keys[0].zone, "example.org.");
    assert_eq!(keys[0].port, Some(1053));
    assert!(keys[0].is_plain_dns());
    assert!(!keys[1].is_plain_dns());
    assert_eq!(keys[2].port, None);
}

#[test]
fn braceless_single_server_and_imports() {
    let c = Corefile::parse(". \nwhoami\nlog\n").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.servers.len(), 1);
    assert_eq!(c.servers[0].directives.len(), 2);
    let c = Corefile::parse(
        ".:53 {\n kubernetes cluster.local\n import custom/*.override\n}\nimport custom/*.server\n",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        c.imports,
        vec![Import {
            line: 5,
            pattern: "custom/*.server".into()
        }]
    );
    let l = c
        .expected_lag("cluster.local")
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(l.notes.iter().any(|n| n.contains("custom/*.override")));
    assert!(l.notes.iter().any(|n| n.contains("custom/*.server")));
}

#[test]
fn syntax_errors_have_lines() {
    let cases: &[(&str, CorefileError)] = &[
        (
            ".:53 {\n cache 30\n",
            CorefileError::UnclosedBlock { line: 1 },
        ),
        (".:53 {\n}\n}\n", CorefileError::UnexpectedClose { line: 3 }),
        (
            ".:53 {\n log \"oops\n}\n",
            CorefileError::UnterminatedQuote { line: 2 },
        ),
        (
            "Corefile\n.:53 {\n}\n",
            CorefileError::InvalidDirective {
                line: 2,
                token: ".:53".into(),
            },
        ),
        (
            ".:53 {\n kubernetes x {\n }fallthrough\n}\n",
            CorefileError::GluedBrace {
                line: 3,
                token: "}fallthrough".into(),
            },
        ),
        (
            ".:53 {\n kubernetes {{ if .DNSDomain }}x{{ end }}\n}\n",
            CorefileError::Template {
                line: 2,
                token: "{{ if .DNSDomain }}".into(),
            },
        ),
        (
            ".:53 {\n kubernetes {{ .DNSDomain\n}\n",
            CorefileError::Template {
                line: 2,
                token: "{{".into(),
            },
        ),
        (
            ".:53 {\n kubernetes cluster.local }}\n}\n",
            CorefileError::Template {
                line: 2,
                token: "}}".into(),
            },
        ),
        ("a.org,\n", CorefileError::ExpectedAddress { line: 1 }),
        ("{\n}\n", CorefileError::UnexpectedOpen { line: 1 }),
    ];
    for (text, want) in cases {
        assert_eq!(Corefile::parse(text).as_ref(), Err(want), "{text}");
        assert!(want.line().is_some());
    }
    assert_eq!(CorefileError::UnclosedBlock { line: 4 }.line(), Some(4));
    assert_eq!(
        CorefileError::NotServed {
            domain: "cluster.local".into()
        }
        .line(),
        None
    );
    let msg = CorefileError::InvalidDirective {
        line: 2,
        token: ".:53".into(),
    }
    .to_string();
    assert!(msg.contains("missing its '{'"), "{msg}");
}

#[test]
fn go_durations() {
    assert_eq!(parse_go_duration("24h"), Some(s(86400)));
    assert_eq!(parse_go_duration("1h30m"), Some(s(5400)));
    assert_eq!(parse_go_duration("3600s"), Some(s(3600)));
    assert_eq!(parse_go_duration("1.5s"), Some(Duration::from_millis(1500)));
    assert_eq!(parse_go_duration("250ms"), Some(Duration::from_millis(250)));
    assert_eq!(parse_go_duration("0"), Some(Duration::ZERO));
    assert_eq!(parse_go_duration("10"), None);
    assert_eq!(parse_go_duration("-1s"), None);
    assert_eq!(parse_go_duration(""), None);
    assert_eq!(parse_go_duration("1x"), None);
    assert_eq!(parse_go_duration("99999999999999999999999h"), None);
}
