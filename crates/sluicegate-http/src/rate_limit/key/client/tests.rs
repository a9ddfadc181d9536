//! How `ClientIp` reads the chain, including what a client writes to dodge it.

use std::net::SocketAddr;

use http::request::Parts;
use http::{HeaderValue, Request};
use proptest::prelude::*;

use super::*;

/// `key`'s answer for a request from `peer` with these field lines (name, raw bytes).
fn key_of(key: &ClientIp, peer: &str, fields: &[(&str, &[u8])]) -> Result<IpAddr, KeyError> {
    let mut request = Request::builder();
    for (name, value) in fields {
        let value = HeaderValue::from_bytes(value).expect("a field value");
        request = request.header(*name, value);
    }
    let (mut parts, ()): (Parts, ()) = request.body(()).expect("request").into_parts();
    let peer: SocketAddr = peer.parse().expect("peer");
    parts.extensions.insert(peer);
    key.extract(&RequestHead::from_parts(&parts))
}

fn ip(text: &str) -> IpAddr {
    text.parse().expect("ip")
}

fn xff(trusted: &[&str]) -> ClientIp {
    ClientIp::x_forwarded_for()
        .trusted_proxies(trusted)
        .expect("proxies")
}

fn forwarded(trusted: &[&str]) -> ClientIp {
    ClientIp::forwarded()
        .trusted_proxies(trusted)
        .expect("proxies")
}

#[test]
fn untrusted_peer_is_the_client_whatever_it_forwards() {
    let key = xff(&["10.0.0.0/8"]);
    let got = key_of(&key, "203.0.113.9:5000", &[("x-forwarded-for", b"1.2.3.4")]);
    assert_eq!(got, Ok(ip("203.0.113.9")));
}

#[test]
fn right_most_untrusted_address_wins_over_a_forged_left_most() {
    let key = xff(&["10.0.0.0/8", "192.168.1.1"]);
    let fields: &[(&str, &[u8])] = &[("x-forwarded-for", b"6.6.6.6, 198.51.100.7, 192.168.1.1")];
    assert_eq!(key_of(&key, "10.1.1.1:80", fields), Ok(ip("198.51.100.7")));
}

#[test]
fn all_trusted_takes_the_left_most_and_no_header_the_peer() {
    let key = xff(&["10.0.0.0/8"]);
    let fields: &[(&str, &[u8])] = &[("x-forwarded-for", b"10.0.0.3, 10.0.0.2")];
    assert_eq!(key_of(&key, "10.0.0.1:80", fields), Ok(ip("10.0.0.3")));
    assert_eq!(key_of(&key, "10.0.0.1:80", &[]), Ok(ip("10.0.0.1")));
}

#[test]
fn what_is_not_an_address_ends_the_walk_at_the_last_vouched_address() {
    let key = xff(&["10.0.0.0/8"]);
    let cases: &[(&[u8], &str)] = &[
        // The peer vouched for `bogus`, which is no address: the peer is the key.
        (b"1.1.1.1, bogus", "10.0.0.1"),
        (b"1.1.1.1, bogus, 10.0.0.7", "10.0.0.7"),
        // Garbage to the left of the client is never read.
        (b"bogus, 1.1.1.1", "1.1.1.1"),
        (b"\", 1.1.1.1", "1.1.1.1"),
        (b"\xff, 1.1.1.1", "1.1.1.1"),
        (b"unknown", "10.0.0.1"),
        (b"_hidden, 10.0.0.9", "10.0.0.9"),
        (b"1.1.1.1,, 10.0.0.9,", "1.1.1.1"),
        (b"[2001:db8::1]:80", "2001:db8::1"),
        (b"2001:db8::1", "2001:db8::1"),
        (b"1.1.1.1:443", "1.1.1.1"),
    ];
    for (value, expected) in cases {
        let got = key_of(&key, "10.0.0.1:80", &[("x-forwarded-for", value)]);
        assert_eq!(got, Ok(ip(expected)), "{}", String::from_utf8_lossy(value));
    }
}

#[test]
fn each_field_line_is_read_on_its_own() {
    let key = xff(&["10.0.0.0/8"]);
    // A client's open quote in the first line does not reach into the line appended after it.
    let fields: &[(&str, &[u8])] = &[
        ("x-forwarded-for", b"\"6.6.6.6"),
        ("x-forwarded-for", b"192.0.2.9, 10.0.0.2"),
    ];
    assert_eq!(key_of(&key, "10.0.0.1:80", fields), Ok(ip("192.0.2.9")));
    let fields: &[(&str, &[u8])] = &[
        ("x-forwarded-for", b"6.6.6.6"),
        ("x-forwarded-for", b"10.0.0.2"),
    ];
    assert_eq!(key_of(&key, "10.0.0.1:80", fields), Ok(ip("6.6.6.6")));
}

#[test]
fn forwarded_elements_with_ports_quotes_and_ipv6() {
    let key = forwarded(&["10.0.0.0/8", "2001:db8:cafe::/48"]);
    let header: &[u8] =
        b"for=6.6.6.6, For=\"[2001:db8::17]:4711\";proto=https, for=\"[2001:db8:cafe::1]\";by=x";
    let got = key_of(&key, "10.0.0.1:80", &[("forwarded", header)]);
    assert_eq!(got, Ok(ip("2001:db8::17")));
    let got = key_of(
        &key,
        "10.0.0.1:80",
        &[("forwarded", b"for=192.0.2.43:8080")],
    );
    assert_eq!(got, Ok(ip("192.0.2.43")));
}

#[test]
fn a_forwarded_element_a_client_broke_charges_no_address_it_wrote() {
    let key = forwarded(&["10.0.0.0/8"]);
    // As an appending proxy at 10.0.0.1 writes them after what the client at 192.0.2.50 sent.
    let sent: &[&[u8]] = &[
        b"for=\"127.0.2.28",
        b"for=\"x\\\"",
        b"for=\xff",
        b"for=127.0.2.27;x=\"",
        b"for=127.0.2.27;for=127.0.2.26",
        b"for=unknown",
        b"for=_hidden",
        b"proto=https",
        b"\"",
    ];
    for client_wrote in sent {
        let mut value = client_wrote.to_vec();
        value.extend_from_slice(b", for=192.0.2.50");
        let got = key_of(&key, "10.0.0.1:80", &[("forwarded", &value)]);
        assert_eq!(
            got,
            Ok(ip("192.0.2.50")),
            "{}",
            String::from_utf8_lossy(&value)
        );
        // With the attacker's element unreadable and nothing appended after it, the peer.
        let got = key_of(&key, "10.0.0.1:80", &[("forwarded", client_wrote)]);
        assert_eq!(
            got,
            Ok(ip("10.0.0.1")),
            "{}",
            String::from_utf8_lossy(client_wrote)
        );
    }
}

#[test]
fn x_real_ip_and_a_trusted_peer_without_address() {
    let key = ClientIp::x_real_ip()
        .trusted_proxies(["127.0.0.1"])
        .expect("proxies");
    let got = key_of(&key, "127.0.0.1:80", &[("x-real-ip", b"::ffff:192.0.2.5")]);
    assert_eq!(got, Ok(ip("192.0.2.5")));
    let got = key_of(
        &key,
        "127.0.0.1:80",
        &[("x-real-ip", b"192.0.2.5, 192.0.2.6")],
    );
    assert_eq!(got, Ok(ip("127.0.0.1")));

    let (no_peer, ()) = Request::builder()
        .header("x-real-ip", "192.0.2.6")
        .body(())
        .expect("request")
        .into_parts();
    let head = RequestHead::from_parts(&no_peer);
    assert_eq!(key.extract(&head), Err(KeyError::NoPeerAddress));
    let trusting = key.clone().peer_is_trusted();
    assert_eq!(trusting.extract(&head), Ok(ip("192.0.2.6")));
    let (garbage, ()) = Request::builder()
        .header("x-real-ip", "nope")
        .body(())
        .expect("request")
        .into_parts();
    assert!(matches!(
        trusting.extract(&RequestHead::from_parts(&garbage)),
        Err(KeyError::BadAddress { value, .. }) if value == "nope"
    ));
}

#[test]
fn bad_proxies_are_refused() {
    assert!(
        ClientIp::x_forwarded_for()
            .trusted_proxies(["10.0.0.0/33"])
            .is_err()
    );
    assert!(
        ClientIp::x_forwarded_for()
            .trusted_proxies(["proxy"])
            .is_err()
    );
}

/// Bytes a client may place in a field value (no control characters but tab, which no server
/// passes on),
/// biased toward what parsers trip on.
fn client_bytes() -> impl Strategy<Value = Vec<u8>> {
    let tricky =
        prop::sample::select(b"\",;=\\[]: _.0123456789abcdefforunknown\t\xff\x80".to_vec());
    let any = prop_oneof![Just(b'\t'), 0x20u8..=0x7e, 0x80u8..=0xff];
    prop::collection::vec(prop_oneof![3 => tricky, 1 => any], 0..40)
}

proptest! {
    /// Whatever a client at 192.0.2.77 writes in either forwarding field, behind zero, one or
    /// two appending proxies in 10/8 (each adding its own field line, or appending to the
    /// last), the key is the client's real address.
    #[test]
    fn a_client_cannot_choose_its_key(
        written in client_bytes(),
        hops in 0usize..3,
        own_line in any::<bool>(),
        use_forwarded in any::<bool>(),
    ) {
        let (key, name, element): (ClientIp, &str, fn(&str) -> String) = if use_forwarded {
            (forwarded(&["10.0.0.0/8"]), "forwarded", |a| format!("for={a}"))
        } else {
            (xff(&["10.0.0.0/8"]), "x-forwarded-for", |a| a.to_owned())
        };
        let client = "192.0.2.77";
        // What each hop appends: the address it received the request from.
        let from = [client, "10.0.0.2"];
        let mut lines: Vec<Vec<u8>> = vec![written];
        for sender in from.iter().take(hops) {
            let appended = element(sender);
            if own_line {
                lines.push(appended.into_bytes());
            } else if let Some(last) = lines.last_mut() {
                last.extend_from_slice(b", ");
                last.extend_from_slice(appended.as_bytes());
            }
        }
        let peer = match hops {
            0 => format!("{client}:1000"),
            _ => "10.0.0.1:80".to_owned(),
        };
        let fields: Vec<(&str, &[u8])> = lines.iter().map(|l| (name, l.as_slice())).collect();
        prop_assert_eq!(key_of(&key, &peer, &fields), Ok(ip(client)));
    }

    /// Read from any bytes alone (no proxy appended anything after them) behind a trusted
    /// peer, the key is the peer or an address the bytes hold in full, never an error.
    #[test]
    fn any_field_gives_a_key(written in client_bytes(), use_forwarded in any::<bool>()) {
        let (key, name) = if use_forwarded {
            (forwarded(&["10.0.0.0/8"]), "forwarded")
        } else {
            (xff(&["10.0.0.0/8"]), "x-forwarded-for")
        };
        let got = key_of(&key, "10.0.0.1:80", &[(name, &written)]);
        prop_assert!(got.is_ok(), "{:?}", got);
    }
}
