//! The ways around a limit that issue 29's audit found, end to end: a client that writes its
//! own forwarding fields, spells one path or one host many ways, or leaves out the field a
//! limit is keyed on, must not get more than the limit allows, where nginx 1.22 held.
//!
//! Every request is written byte for byte on a raw socket from a chosen loopback address
//! (127.0.0.0/8 is all this machine's), and the upstream records the exact bytes of every
//! request head it receives. Rates are one a minute or slower: nothing refills during a test,
//! and no assertion depends on timing. Each table reports all of its failures at once.

mod dodge_support;
mod proxy_support;

use std::net::{IpAddr, Ipv6Addr, SocketAddr};

use dodge_support::fronts::{ClientIpStage, Field, Front, PROXY_1, PROXY_2, tail};
use dodge_support::{Outcome, exchange, field, lo, nginx_http, request, shown};
use proxy_support::raw_upstream::{RawUpstream, target_of, values_of};
use proxy_support::{BoxError, Failures, Nginx, ProxyProcess};

type TestResult = Result<(), BoxError>;

/// Leaky bucket, one a minute, two more at once: three of six requests sent together pass.
const THREE_AT_ONCE: &str = "leaky-queue:rate=1/m,burst=2,nodelay";

/// What three of six requests get: the first three pass, the rest are denied.
const THREE_OF_SIX: [u16; 6] = [200, 200, 200, 429, 429, 429];

/// A budget of three untouched: three of four pass.
const THREE_OF_FOUR: [u16; 4] = [200, 200, 200, 429];

// ---------------------------------------------------------------------------------------------
// A. The client's address: the limit stays on the address the trusted proxies saw.
// ---------------------------------------------------------------------------------------------

/// One way of writing the field, sent six times from an attacker's own address.
struct Vector {
    name: &'static str,
    /// The field lines' values, as the client writes them.
    lines: Vec<Vec<u8>>,
    /// The addresses the client wrote: none of them may be charged.
    named: Vec<IpAddr>,
}

/// The vectors for `field`, the `front`'s `number`-th set: vector `i` (from 1) is sent from
/// 127.1.`number`.`i` and names 127.2.`number`.`i` (`{a}`), 127.3.`number`.`i` (`{b}`) and
/// 2001:db8::`number`:`i` (`{6}`), so that every vector has budgets of its own.
fn vectors(field: Field, number: u8) -> Vec<(IpAddr, Vector)> {
    let x_forwarded_for: &[(&str, &[&[u8]])] = &[
        ("a forged address", &[b"{a}"]),
        ("a forged address with a port", &[b"{a}:4711"]),
        ("forged addresses on two field lines", &[b"{a}", b"{b}"]),
        ("an open quote", &[b"\""]),
        ("a quote, then an address", &[b"\"{a}"]),
        ("an escaped quote that leaves a quote open", &[b"\"{a}\\\""]),
        ("an open quote on a second field line", &[b"{a}", b"\""]),
        ("a byte 0xFF", &[b"\xff"]),
        ("an address, then a byte 0xFF", &[b"{a}\xff"]),
        ("empty elements", &[b", ,{a},,"]),
        ("an empty field", &[b""]),
        ("unknown", &[b"unknown"]),
        ("an obfuscated node", &[b"_hidden"]),
        ("IPv6 in brackets with a port", &[b"[{6}]:80"]),
        ("IPv6 without brackets", &[b"{6}"]),
        ("a trusted proxy's address", &[b"127.0.0.1"]),
    ];
    let forwarded: &[(&str, &[&[u8]])] = &[
        ("a forged for=", &[b"for={a}"]),
        ("an unterminated quoted for=", &[b"for=\"{a}, for={b}"]),
        (
            "an escaped quote that leaves a quote open",
            &[b"for=\"x\\\""],
        ),
        ("for= a byte 0xFF", &[b"for=\xff"]),
        ("a parameter left open after for=", &[b"for={a};x=\""]),
        ("an obfuscated node", &[b"for=_abc"]),
        ("for=unknown", &[b"for=unknown"]),
        ("two for= in one element", &[b"for={a};for={b}"]),
        ("several field lines", &[b"for={a}", b"for=\"{b}"]),
        ("a quoted IPv6 with a port", &[b"for=\"[{6}]:80\""]),
        ("an unquoted IPv6", &[b"for={6}"]),
        ("empty elements", &[b",, for={a} ,,"]),
        ("an empty field", &[b""]),
        ("a trusted proxy's address", &[b"for=127.0.0.1"]),
    ];
    let templates = match field {
        Field::XForwardedFor => x_forwarded_for,
        Field::Forwarded => forwarded,
    };
    let mut out = Vec::new();
    for (i, (name, lines)) in (1u8..).zip(templates) {
        let a = lo(2, number, i);
        let b = lo(3, number, i);
        let six = IpAddr::V6(Ipv6Addr::new(
            0x2001,
            0xdb8,
            0,
            0,
            0,
            0,
            number.into(),
            i.into(),
        ));
        let mut named = Vec::new();
        let lines = lines
            .iter()
            .map(|line| {
                let mut line = line.to_vec();
                for (placeholder, address) in [("{a}", a), ("{b}", b), ("{6}", six)] {
                    if let Some(replaced) = replace(&line, placeholder.as_bytes(), &address) {
                        line = replaced;
                        if !named.contains(&address) {
                            named.push(address);
                        }
                    }
                }
                line
            })
            .collect();
        let vector = Vector { name, lines, named };
        out.push((lo(1, number, i), vector));
    }
    out
}

/// `bytes` with every `placeholder` replaced by `address`, if it has any.
fn replace(bytes: &[u8], placeholder: &[u8], address: &IpAddr) -> Option<Vec<u8>> {
    let at = bytes
        .windows(placeholder.len())
        .position(|w| w == placeholder)?;
    let mut out = bytes[..at].to_vec();
    out.extend_from_slice(address.to_string().as_bytes());
    let rest = &bytes[at + placeholder.len()..];
    out.extend_from_slice(&replace(rest, placeholder, address).unwrap_or_else(|| rest.to_vec()));
    Some(out)
}

/// Every vector from its own attacker's address, six times, through every front: three pass
/// each time (the limit is on the attacker), and afterwards every address the attacker wrote
/// still has its whole budget (asked through one trusted proxy that vouches for it), as do the
/// trusted proxies themselves.
async fn limit_stays_on_the_attacker(field: Field) -> TestResult {
    let stage = ClientIpStage::start(field, THREE_AT_ONCE).await?;
    let mut failures = Failures::default();
    for front in Front::ALL {
        for (attacker, vector) in vectors(field, front.number()) {
            let written: Vec<String> = vector.lines.iter().map(|l| shown(l)).collect();
            let statuses = stage.statuses(front, attacker, &vector.lines, 6).await?;
            failures.check(
                &format!(
                    "{front:?}, {} ({} {written:?}) from {attacker}, 6 times",
                    vector.name,
                    field.name()
                ),
                statuses,
                THREE_OF_SIX.to_vec(),
            );
            for named in &vector.named {
                let statuses = stage.statuses(Front::OneProxy, *named, &[], 4).await?;
                failures.check(
                    &format!(
                        "{front:?}, {}: afterwards {named}, which the client wrote, from behind \
                         one trusted proxy, 4 times",
                        vector.name
                    ),
                    statuses,
                    THREE_OF_FOUR.to_vec(),
                );
            }
        }
    }
    // Nothing was charged to the trusted proxies (a request of theirs with no field is
    // theirs: every address of the chain is trusted).
    for proxy in [PROXY_1, PROXY_2] {
        let statuses = stage.statuses(Front::Direct, proxy, &[], 4).await?;
        failures.check(
            &format!("at the end, {proxy} (a trusted proxy) itself, 4 times"),
            statuses,
            THREE_OF_FOUR.to_vec(),
        );
    }
    failures.assert_none(&stage.logs());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn x_forwarded_for_written_by_the_client_moves_no_limit() -> TestResult {
    limit_stays_on_the_attacker(Field::XForwardedFor).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarded_written_by_the_client_moves_no_limit() -> TestResult {
    limit_stays_on_the_attacker(Field::Forwarded).await
}

/// The audit's own case, on its own: `for=127.0.2.27;x="` sent through a real front proxy
/// charges the sender, never 127.0.2.27, whose own requests through it still pass.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parameter_left_open_charges_the_sender_not_the_address_it_names() -> TestResult {
    let stage = ClientIpStage::start(Field::Forwarded, THREE_AT_ONCE).await?;
    for (front, attacker, named) in [
        (Front::Nginx, lo(0, 1, 21), lo(0, 2, 27)),
        (Front::Sluicegate, lo(0, 1, 22), lo(0, 2, 28)),
    ] {
        let mut line = b"for=".to_vec();
        line.extend_from_slice(named.to_string().as_bytes());
        line.extend_from_slice(b";x=\"");
        let lines = [line];
        let statuses = stage.statuses(front, attacker, &lines, 6).await?;
        assert_eq!(
            statuses,
            THREE_OF_SIX,
            "{front:?}: {attacker} sending Forwarded: {}\n{}",
            shown(&lines[0]),
            stage.logs()
        );
        let statuses = stage.statuses(front, named, &[], 4).await?;
        assert_eq!(
            statuses,
            THREE_OF_FOUR,
            "{front:?}: {named} itself, after {attacker} named it\n{}",
            stage.logs()
        );
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// B. Paths: one resource, one budget, however the path is spelt (nginx's `$uri`).
// ---------------------------------------------------------------------------------------------

/// `/login` and `/api/` each with one request an hour, every other path with none: nginx's
/// `location = /login` and `location /api/`.
fn path_rules(paths: &str) -> String {
    format!(
        "{paths}limits:\n  login: {{ key: global, spec: \"leaky-queue:rate=1/h\" }}\n  \
         api: {{ key: global, spec: \"leaky-queue:rate=1/h\" }}\n\
         routes:\n  - {{ exact: /login, limits: [login] }}\n  \
         - {{ prefix: /api/, limits: [api] }}\n  - {{ prefix: / }}\n"
    )
}

const NGINX_PATHS: &str = r#"
limit_req_zone "login" zone=login:1m rate=1r/m;
limit_req_zone "api" zone=api:1m rate=1r/m;
server {
    listen LISTEN;
    location = /login { limit_req zone=login; proxy_pass http://app; }
    location /api/ { limit_req zone=api; proxy_pass http://app; }
    location / { proxy_pass http://app; }
}
"#;

/// Each target in order, from one fresh state, and how nginx answers it (checked: these are
/// what nginx 1.22 does, and `sluicegate proxy` must do the same). `/api` alone is left out:
/// nginx redirects it to `/api/` (a `proxy_pass` location's own rule), which is no limit's.
const PATH_SPELLINGS: &[(&str, Outcome)] = {
    use Outcome::{Bad, Deny, Pass};
    &[
        ("/login", Pass),
        // The same path.
        ("//login", Deny),
        ("/./login", Deny),
        ("/x/../login", Deny),
        ("/%6Cogin", Deny),
        ("/%6C%6F%67%69%6E", Deny),
        ("/%2e/login", Deny),
        ("/x/%2e%2e/login", Deny),
        // nginx decodes `%2F` as any other octet: a slash.
        ("/%2F/login", Deny),
        ("/x/..%2Flogin", Deny),
        ("/login?a=b", Deny),
        // Other paths, which `location = /login` does not match either.
        ("/login/", Pass),
        ("/login/.", Pass),
        ("/login/%2e", Pass),
        ("/login%2F", Pass),
        ("/login%3F", Pass),
        ("/login/..", Pass),
        ("/LOGIN", Pass),
        // Above the root.
        ("/../login", Bad),
        ("/%2e%2e/login", Bad),
        ("/%2E%2E/login", Bad),
        ("/x/../../login", Bad),
        ("/..", Bad),
        ("/api/x", Pass),
        ("//api/x", Deny),
        ("/%61pi/x", Deny),
        ("/ap%69/x", Deny),
        ("/static/../api/x", Deny),
        ("/api//x", Deny),
        ("/api/y", Deny),
        ("/api%2Fx", Deny),
        ("/%2Fapi/x", Deny),
        ("/api/../api/z", Deny),
        ("/API/x", Pass),
        ("/api/%2e%2e/x", Pass),
        ("/api%2F..%2Fx", Pass),
    ]
};

/// Sends `targets` in order to `server` (whose upstream is `upstream`); each outcome, with
/// the targets the upstream received for it (as [`shown`]).
async fn outcomes(
    server: SocketAddr,
    upstream: &RawUpstream,
    targets: impl IntoIterator<Item = &[u8]>,
    host: &[u8],
) -> Result<Vec<(Outcome, Vec<String>)>, BoxError> {
    let mut out = Vec::new();
    upstream.take();
    for target in targets {
        let mut host_field = b"Host: ".to_vec();
        host_field.extend_from_slice(host);
        let answer = exchange(lo(0, 0, 1), server, &request(target, &[&host_field])).await?;
        let received = upstream
            .take()
            .iter()
            .map(|h| shown(target_of(h)))
            .collect();
        out.push((Outcome::of(answer.status), received));
    }
    Ok(out)
}

/// Every spelling of `/login` and `/api/...` gets what nginx gives it, and an allowed request
/// reaches the upstream with its target exactly as the client sent it (as nginx's
/// `proxy_pass` without a URI passes it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_spelling_of_a_path_spends_its_routes_budget_as_in_nginx() -> TestResult {
    let upstream = RawUpstream::start().await?;
    let nginx_upstream = RawUpstream::start().await?;
    let proxy = ProxyProcess::start(&upstream.url(), &path_rules(""), &[])?;
    let nginx = Nginx::start(&nginx_http(nginx_upstream.address, NGINX_PATHS))?;
    let targets = || PATH_SPELLINGS.iter().map(|(t, _)| t.as_bytes());
    let ours = outcomes(proxy.address, &upstream, targets(), b"paths.test").await?;
    let theirs = outcomes(nginx.address, &nginx_upstream, targets(), b"paths.test").await?;
    let mut failures = Failures::default();
    for (((target, expected), (outcome, received)), (nginx_outcome, nginx_received)) in
        PATH_SPELLINGS.iter().zip(ours).zip(theirs)
    {
        failures.check(&format!("sluicegate, {target}"), outcome, *expected);
        failures.check(&format!("nginx itself, {target}"), nginx_outcome, *expected);
        let passed_on = |outcome| match outcome {
            Outcome::Pass => vec![(*target).to_owned()],
            _ => Vec::new(),
        };
        failures.check(
            &format!("sluicegate, what the upstream received for {target}"),
            received,
            passed_on(outcome),
        );
        failures.check(
            &format!("nginx itself, what the upstream received for {target}"),
            nginx_received,
            passed_on(nginx_outcome),
        );
    }
    failures.assert_none(&format!("proxy's log:\n{}", tail(&proxy.log_text())));
    Ok(())
}

/// A path whose decoded form holds a NUL byte (`/login%00`) is refused, as nginx 1.22 refuses
/// it (400, "client sent invalid request"), before any route or limit: passed on, an upstream
/// that decodes the path into a C string would serve `/login` to a request no limit of
/// `/login` counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nul_in_a_path_is_refused_as_nginx_refuses_it() -> TestResult {
    let upstream = RawUpstream::start().await?;
    let nginx_upstream = RawUpstream::start().await?;
    let proxy = ProxyProcess::start(&upstream.url(), &path_rules(""), &[])?;
    let nginx = Nginx::start(&nginx_http(nginx_upstream.address, NGINX_PATHS))?;
    let targets: [&[u8]; 3] = [b"/login", b"/login%00", b"/api/%00/x"];
    let ours = outcomes(proxy.address, &upstream, targets, b"paths.test").await?;
    let theirs = outcomes(nginx.address, &nginx_upstream, targets, b"paths.test").await?;
    let expected = [Outcome::Pass, Outcome::Bad, Outcome::Bad];
    let mut failures = Failures::default();
    for (((target, expected), (outcome, _)), (nginx_outcome, _)) in
        targets.iter().zip(expected).zip(ours).zip(theirs)
    {
        let target = shown(target);
        failures.check(&format!("sluicegate, {target}"), outcome, expected);
        failures.check(&format!("nginx itself, {target}"), nginx_outcome, expected);
    }
    failures.assert_none(&format!("proxy's log:\n{}", tail(&proxy.log_text())));
    Ok(())
}

/// `paths: { case_insensitive: true }`: `/API/x` spends `/api/`'s budget and `/LOGIN`
/// `/login`'s, and the upstream still receives the path as sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_insensitive_paths_are_one_path_in_any_case() -> TestResult {
    use Outcome::{Deny, Pass};
    let upstream = RawUpstream::start().await?;
    let rules = path_rules("paths: { case_insensitive: true }\n");
    let proxy = ProxyProcess::start(&upstream.url(), &rules, &[])?;
    let table: &[(&str, Outcome, Option<&str>)] = &[
        ("/API/x", Pass, Some("/API/x")),
        ("/api/x", Deny, None),
        ("/Api/Y", Deny, None),
        ("/%41PI/z", Deny, None),
        ("//aPi//x", Deny, None),
        ("/LOGIN", Pass, Some("/LOGIN")),
        ("/login", Deny, None),
        ("/Login", Deny, None),
        ("/%4Cogin", Deny, None),
        ("/x/../LoGiN", Deny, None),
        ("/LOGIN/", Pass, Some("/LOGIN/")),
    ];
    check_table(&proxy, &upstream, table).await
}

/// `paths: { forward: normalised }`: the upstream receives the path the routes matched (dot
/// segments resolved, slashes merged, what needs no encoding decoded, what does encoded
/// again), with the query as sent; the case is kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn normalised_paths_are_forwarded_normalised() -> TestResult {
    use Outcome::{Deny, Pass};
    let upstream = RawUpstream::start().await?;
    let rules = path_rules("paths: { forward: normalised }\n");
    let proxy = ProxyProcess::start(&upstream.url(), &rules, &[])?;
    let table: &[(&str, Outcome, Option<&str>)] = &[
        ("//login", Pass, Some("/login")),
        ("/login", Deny, None),
        ("/%61pi//x/./y", Pass, Some("/api/x/y")),
        ("/api/z", Deny, None),
        (
            "/x/../static//%62?q=1/../2",
            Pass,
            Some("/static/b?q=1/../2"),
        ),
        ("/static/a%20b%3Fc", Pass, Some("/static/a%20b%3Fc")),
        ("/static/./", Pass, Some("/static/")),
        ("/LOGIN", Pass, Some("/LOGIN")),
        ("/../static", Outcome::Bad, None),
    ];
    check_table(&proxy, &upstream, table).await
}

/// Sends each target of `table` in order: its outcome, and the target the upstream received
/// (none when it received nothing).
async fn check_table(
    proxy: &ProxyProcess,
    upstream: &RawUpstream,
    table: &[(&str, Outcome, Option<&str>)],
) -> TestResult {
    let got = outcomes(
        proxy.address,
        upstream,
        table.iter().map(|(t, _, _)| t.as_bytes()),
        b"paths.test",
    )
    .await?;
    let mut failures = Failures::default();
    for ((target, expected, forwarded), (outcome, received)) in table.iter().zip(got) {
        failures.check(target, outcome, *expected);
        let expected_received: Vec<String> = forwarded.iter().map(|f| (*f).to_owned()).collect();
        failures.check(
            &format!("what the upstream received for {target}"),
            received,
            expected_received,
        );
    }
    failures.assert_none(&format!("proxy's log:\n{}", tail(&proxy.log_text())));
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// C. Hosts: one host, one budget, however it is spelt (nginx's `$host`).
// ---------------------------------------------------------------------------------------------

const NGINX_HOSTS: &str = r#"
limit_req_zone $host zone=host:1m rate=1r/m;
server {
    listen LISTEN;
    location / { limit_req zone=host; proxy_pass http://app; proxy_set_header Host $host; }
}
"#;

/// One request an hour per host.
const HOST_RULES: &str = "limits:\n  per_host: { key: host, spec: \"leaky-queue:rate=1/h\" }\n\
                          routes:\n  - { prefix: /, limits: [per_host] }\n";

/// Each request in order (its target and `Host` fields), from one fresh state, and what
/// nginx answers it.
const HOST_SPELLINGS: &[(&str, &[&str], Outcome)] = {
    use Outcome::{Bad, Deny, Pass};
    &[
        ("/a", &["hk.test"], Pass),
        ("/a", &["HK.TEST"], Deny),
        ("/a", &["hk.test:80"], Deny),
        ("/a", &["hk.test."], Deny),
        ("/a", &["Hk.Test.:8080"], Deny),
        ("/a", &["hk.test x"], Bad),
        ("/a", &["a/b"], Bad),
        ("/a", &["a.test", "b.test"], Bad),
        // The host of an absolute-form target wins over `Host` (RFC 9112 section 3.2.2).
        ("http://other.test/a", &["h.test"], Pass),
        ("/a", &["other.test"], Deny),
        ("/a", &["h.test"], Pass),
    ]
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_spelling_of_a_host_spends_its_budget_as_in_nginx() -> TestResult {
    let upstream = RawUpstream::start().await?;
    let nginx_upstream = RawUpstream::start().await?;
    let proxy = ProxyProcess::start(&upstream.url(), HOST_RULES, &[])?;
    let nginx = Nginx::start(&nginx_http(nginx_upstream.address, NGINX_HOSTS))?;
    let mut failures = Failures::default();
    for &(target, hosts, expected) in HOST_SPELLINGS {
        let fields: Vec<Vec<u8>> = hosts.iter().map(|h| field("Host", h.as_bytes())).collect();
        let fields: Vec<&[u8]> = fields.iter().map(Vec::as_slice).collect();
        let sent = request(target.as_bytes(), &fields);
        let what = format!("GET {target} with Host {hosts:?}");
        upstream.take();
        let ours = exchange(lo(0, 0, 1), proxy.address, &sent).await?;
        let received = upstream.take();
        let theirs = exchange(lo(0, 0, 1), nginx.address, &sent).await?;
        failures.check(
            &format!("sluicegate, {what}"),
            Outcome::of(ours.status),
            expected,
        );
        failures.check(
            &format!("nginx itself, {what}"),
            Outcome::of(theirs.status),
            expected,
        );
        let received_hosts: Vec<Vec<String>> = received
            .iter()
            .map(|head| values_of(head, "host").iter().map(|v| shown(v)).collect())
            .collect();
        let expected_hosts: Vec<Vec<String>> = match (Outcome::of(ours.status), target) {
            (Outcome::Pass, "http://other.test/a") => vec![vec!["other.test".to_owned()]],
            (Outcome::Pass, _) => vec![hosts.iter().map(|h| (*h).to_owned()).collect()],
            _ => Vec::new(),
        };
        failures.check(
            &format!("sluicegate, the Host fields the upstream received for {what}"),
            received_hosts,
            expected_hosts,
        );
        if let Some(head) = received.first() {
            failures.check(
                &format!("sluicegate, the target the upstream received for {what}"),
                shown(target_of(head)),
                "/a".to_owned(),
            );
        }
    }
    failures.assert_none(&format!("proxy's log:\n{}", tail(&proxy.log_text())));
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// D. A request without the field its limit is keyed on.
// ---------------------------------------------------------------------------------------------

/// `count` requests for `target` from 127.0.0.1 with `fields` (and a `Host`).
async fn answers(
    proxy: &ProxyProcess,
    target: &str,
    fields: &[&[u8]],
    count: usize,
) -> Result<Vec<dodge_support::Answer>, BoxError> {
    let mut all: Vec<&[u8]> = vec![b"Host: keys.test"];
    all.extend_from_slice(fields);
    let sent = request(target.as_bytes(), &all);
    let mut out = Vec::with_capacity(count);
    for _ in 0..count {
        out.push(exchange(lo(0, 0, 1), proxy.address, &sent).await?);
    }
    Ok(out)
}

fn statuses(answers: &[dodge_support::Answer]) -> Vec<u16> {
    answers.iter().map(|a| a.status).collect()
}

/// With no `on_missing_key`, a request without the field passes uncounted (as nginx does not
/// account an empty key), and one with it is limited as ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_key_passes_uncounted_by_default() -> TestResult {
    let upstream = RawUpstream::start().await?;
    let rules = format!(
        "limits:\n  per_key: {{ key: {{ header: x-api-key }}, spec: \"{THREE_AT_ONCE}\" }}\n\
         routes:\n  - {{ prefix: /, limits: [per_key] }}\n"
    );
    let proxy = ProxyProcess::start(&upstream.url(), &rules, &[])?;
    let without = answers(&proxy, "/a", &[], 6).await?;
    assert_eq!(statuses(&without), [200; 6]);
    assert_eq!(
        upstream.take().len(),
        6,
        "every request reached the upstream"
    );
    let empty = answers(&proxy, "/a", &[b"x-api-key: "], 6).await?;
    assert_eq!(statuses(&empty), [200; 6], "an empty value is no key");
    let keyed = answers(&proxy, "/a", &[b"x-api-key: k1"], 6).await?;
    assert_eq!(statuses(&keyed), THREE_OF_SIX);
    Ok(())
}

/// `on_missing_key: skip` (the default, said), `deny` (400 naming the field, never
/// reaching the upstream) and `{ key: anonymous }` (one budget for every request without it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_key_is_skipped_denied_or_shared_as_the_limit_says() -> TestResult {
    let upstream = RawUpstream::start().await?;
    let limit = |missing: &str| {
        format!(
            "{{ key: {{ header: x-api-key }}, spec: \"{THREE_AT_ONCE}\", on_missing_key: {missing} }}"
        )
    };
    let rules = format!(
        "limits:\n  skip: {}\n  deny: {}\n  anon: {}\n\
         routes:\n  - {{ prefix: /skip/, limits: [skip] }}\n  \
         - {{ prefix: /deny/, limits: [deny] }}\n  - {{ prefix: /anon/, limits: [anon] }}\n  \
         - {{ prefix: / }}\n",
        limit("skip"),
        limit("deny"),
        limit("{ key: anonymous }"),
    );
    let proxy = ProxyProcess::start(&upstream.url(), &rules, &[])?;
    let log = || tail(&proxy.log_text());

    // skip: uncounted, all passed on.
    let skipped = answers(&proxy, "/skip/a", &[], 6).await?;
    assert_eq!(statuses(&skipped), [200; 6], "{}", log());
    assert_eq!(upstream.take().len(), 6);

    // deny: 400 naming the field, and the upstream sees none of them; an empty value is as
    // missing (else `x-api-key:` would step around the denial).
    for fields in [&[][..], &[&b"x-api-key: "[..]][..]] {
        let denied = answers(&proxy, "/deny/a", fields, 6).await?;
        let written: Vec<String> = fields.iter().map(|f| shown(f)).collect();
        assert_eq!(statuses(&denied), [400; 6], "{written:?}\n{}", log());
        for answer in &denied {
            assert!(
                answer.body().to_ascii_lowercase().contains("x-api-key"),
                "the denial names the missing field: {:?}",
                answer.text
            );
        }
        assert_eq!(
            upstream.take(),
            Vec::<Vec<u8>>::new(),
            "nothing reached the upstream"
        );
    }
    let keyed = answers(&proxy, "/deny/a", &[b"x-api-key: k1"], 6).await?;
    assert_eq!(statuses(&keyed), THREE_OF_SIX, "{}", log());

    // { key: anonymous }: every request without the field shares one budget, an empty value
    // included; a key of its own has its own.
    let anonymous = answers(&proxy, "/anon/a", &[], 6).await?;
    assert_eq!(statuses(&anonymous), THREE_OF_SIX, "{}", log());
    let empty = answers(&proxy, "/anon/a", &[b"x-api-key: "], 2).await?;
    assert_eq!(statuses(&empty), [429, 429], "{}", log());
    let keyed = answers(&proxy, "/anon/a", &[b"x-api-key: k2"], 6).await?;
    assert_eq!(statuses(&keyed), THREE_OF_SIX, "{}", log());
    Ok(())
}
