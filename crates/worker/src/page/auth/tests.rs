//! The token, session and CSRF rules, and the pause after wrong tokens.

use std::net::{IpAddr, Ipv6Addr, SocketAddr};

use axum::http::{HeaderName, HeaderValue};

use super::*;

/// The address of the requests that do not care which it is.
const HERE: Peer = Peer::UNKNOWN;

fn peer(address: &str) -> Peer {
    Peer::new(address.parse().unwrap())
}

fn headers(pairs: &[(header::HeaderName, &str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (k, v) in pairs {
        h.append(k.clone(), HeaderValue::from_str(v).unwrap());
    }
    h
}

#[test]
fn actions_need_the_token_or_a_session_with_its_csrf_field() {
    let auth = Auth::new(Some("a-token-of-24-characters".into()));
    let none = Auth::new(None);
    assert_eq!(none.check(HERE, &HeaderMap::new(), None), Err(Refusal::Disabled));
    assert_eq!(auth.check(HERE, &HeaderMap::new(), None), Err(Refusal::NotSignedIn));
    let bearer = headers(&[(header::AUTHORIZATION, "Bearer a-token-of-24-characters")]);
    assert_eq!(auth.check(HERE, &bearer, None), Ok(Via::Bearer));
    let wrong = headers(&[(header::AUTHORIZATION, "Bearer a-token-of-24-characterz")]);
    assert_eq!(auth.check(HERE, &wrong, None), Err(Refusal::WrongToken));
    let basic = headers(&[(header::AUTHORIZATION, "Basic YWRtaW46cHc=")]);
    assert_eq!(auth.check(HERE, &basic, None), Err(Refusal::NotSignedIn), "a proxy's credentials are not ours");

    let session = format!("{SESSION_COOKIE}={}", auth.session_value().unwrap());
    let csrf = auth.csrf().unwrap();
    let browser = headers(&[(header::COOKIE, &session), (header::HOST, "127.0.0.1:9464")]);
    assert_eq!(auth.check(HERE, &browser, Some(&csrf)), Ok(Via::Session));
    assert_eq!(auth.check(HERE, &browser, None), Err(Refusal::Forged));
    assert_eq!(auth.check(HERE, &browser, Some(&"0".repeat(64))), Err(Refusal::Forged));
    let elsewhere = headers(&[
        (header::COOKIE, &session),
        (header::HOST, "127.0.0.1:9464"),
        (header::ORIGIN, "http://evil.example"),
    ]);
    assert_eq!(auth.check(HERE, &elsewhere, Some(&csrf)), Err(Refusal::Forged));
    let here = headers(&[
        (header::COOKIE, &session),
        (header::HOST, "127.0.0.1:9464"),
        (header::ORIGIN, "http://127.0.0.1:9464"),
    ]);
    assert_eq!(auth.check(HERE, &here, Some(&csrf)), Ok(Via::Session));
    // Where the browser says the request comes from: a page on another port of this host is the same site,
    // not the same origin; a form of this page posts `Origin: null` under its no-referrer policy.
    let from = |site: &str, origin: &str| {
        headers(&[
            (header::COOKIE, &session),
            (header::HOST, "127.0.0.1:9464"),
            (HeaderName::from_static("sec-fetch-site"), site),
            (header::ORIGIN, origin),
        ])
    };
    assert_eq!(auth.check(HERE, &from("same-origin", "null"), Some(&csrf)), Ok(Via::Session));
    assert_eq!(auth.check(HERE, &from("same-origin", "http://127.0.0.1:9464"), Some(&csrf)), Ok(Via::Session));
    assert_eq!(auth.check(HERE, &from("same-site", "http://127.0.0.1:8080"), Some(&csrf)), Err(Refusal::Forged));
    assert_eq!(auth.check(HERE, &from("same-site", "null"), Some(&csrf)), Err(Refusal::Forged));
    assert_eq!(auth.check(HERE, &from("cross-site", "http://127.0.0.1:9464"), Some(&csrf)), Err(Refusal::Forged));
    assert_eq!(auth.check(HERE, &from("none", "null"), Some(&csrf)), Err(Refusal::Forged));
    let null_alone = headers(&[(header::COOKIE, &session), (header::HOST, "127.0.0.1:9464"), (header::ORIGIN, "null")]);
    assert_eq!(auth.check(HERE, &null_alone, Some(&csrf)), Err(Refusal::Forged));
    // Another Worker's (or an earlier start's) session is not this one's.
    let other = Auth::new(Some("a-token-of-24-characters".into()));
    assert_eq!(other.check(HERE, &browser, Some(&csrf)), Err(Refusal::WrongToken));
    assert!(!auth.session_value().unwrap().contains("a-token"));
}

#[test]
fn the_operations_guide_gives_the_pause_as_it_is() {
    let guide = include_str!("../../../../../docs/operations.md").split_whitespace().collect::<Vec<_>>().join(" ");
    for said in [
        format!(
            "After {WRONG_TOKENS_BEFORE_PAUSE} wrong tokens in a row from one client address (the sign-in form and \
             `Authorization: Bearer` counted together), no token from that address is looked at for {} seconds",
            PAUSE_AFTER_WRONG_TOKENS.as_secs()
        ),
        "**Behind a reverse proxy every client has the proxy's address**".to_owned(),
        format!("At most {ADDRESSES_REMEMBERED} addresses are remembered"),
        "an IPv6 address counts by its /64".to_owned(),
    ] {
        assert!(guide.contains(&said), "docs/operations.md should say: {said}");
    }
}

#[tokio::test(start_paused = true)]
async fn wrong_tokens_in_a_row_pause_that_address_for_a_while_and_no_other_then_it_ends_by_itself() {
    const TOKEN: &str = "a-token-of-24-characters";
    let auth = Auth::new(Some(TOKEN.into()));
    let guesser = peer("203.0.113.7");
    let operator = peer("198.51.100.20");
    let bearer = |token: &str| headers(&[(header::AUTHORIZATION, &format!("Bearer {token}"))]);
    let session = format!("{SESSION_COOKIE}={}", auth.session_value().unwrap());
    let browser = headers(&[(header::COOKIE, &session), (header::HOST, "127.0.0.1:9464")]);
    let csrf = auth.csrf().unwrap();
    // One short of the limit, then the right token: the count starts again.
    for _ in 1..WRONG_TOKENS_BEFORE_PAUSE {
        assert_eq!(auth.check(guesser, &bearer("a-token-of-24-characterz"), None), Err(Refusal::WrongToken));
    }
    assert_eq!(auth.sign_in(guesser, &HeaderMap::new(), TOKEN).map(|_| ()), Ok(()));
    // A sign-in posted from another origin is refused before its token counts.
    let elsewhere = headers(&[(header::HOST, "127.0.0.1:9464"), (header::ORIGIN, "http://127.0.0.1:8080")]);
    for _ in 0..2 * WRONG_TOKENS_BEFORE_PAUSE {
        assert_eq!(auth.sign_in(guesser, &elsewhere, "guess-0123456789abcdef"), Err(Refusal::Forged));
    }
    assert_eq!(auth.paused_for(guesser), None);
    // The operator mistypes a few times: their count is their own, the guesser's wrong tokens do not add to it.
    for _ in 1..WRONG_TOKENS_BEFORE_PAUSE {
        assert_eq!(auth.sign_in(operator, &HeaderMap::new(), "typo-0123456789abcdef"), Err(Refusal::WrongToken));
    }
    // The limit reached from one address (the form and scripts count together): every token check from it is
    // refused, the right one included, and the pause does not grow with the refused ones.
    for i in 0..WRONG_TOKENS_BEFORE_PAUSE {
        let refusal = if i % 2 == 0 {
            auth.sign_in(guesser, &HeaderMap::new(), "guess-0123456789abcdef").map(|_| ())
        } else {
            auth.check(guesser, &bearer("guess-0123456789abcdef"), None).map(|_| ())
        };
        assert_eq!(refusal, Err(Refusal::WrongToken), "wrong token {i}");
    }
    assert_eq!(auth.paused_for(guesser), Some(PAUSE_AFTER_WRONG_TOKENS.as_secs()));
    assert_eq!(auth.check(guesser, &bearer(TOKEN), None), Err(Refusal::Paused));
    assert_eq!(auth.sign_in(guesser, &HeaderMap::new(), TOKEN), Err(Refusal::Paused));
    assert_eq!(Refusal::Paused.status(), StatusCode::TOO_MANY_REQUESTS);
    // Another address is not paused: the operator signs in, and scripts act, with the right token.
    assert_eq!(auth.paused_for(operator), None);
    assert_eq!(auth.sign_in(operator, &HeaderMap::new(), TOKEN), Ok(auth.session_value().unwrap()));
    assert_eq!(auth.check(operator, &bearer(TOKEN), None), Ok(Via::Bearer));
    assert_eq!(auth.check(peer("::1"), &bearer(TOKEN), None), Ok(Via::Bearer));
    // A browser signed in before acts on, even from the paused address.
    assert_eq!(auth.check(guesser, &browser, Some(&csrf)), Ok(Via::Session));
    tokio::time::advance(PAUSE_AFTER_WRONG_TOKENS - Duration::from_millis(1)).await;
    assert_eq!(auth.paused_for(guesser), Some(1));
    assert_eq!(auth.check(guesser, &bearer(TOKEN), None), Err(Refusal::Paused));
    tokio::time::advance(Duration::from_millis(1)).await;
    assert_eq!(auth.paused_for(guesser), None);
    assert_eq!(auth.check(guesser, &bearer(TOKEN), None), Ok(Via::Bearer));
    // And a fresh count: wrong tokens are wrong again, not paused, until the limit.
    for _ in 1..WRONG_TOKENS_BEFORE_PAUSE {
        assert_eq!(auth.check(guesser, &bearer("a-token-of-24-characterz"), None), Err(Refusal::WrongToken));
    }
    assert_eq!(auth.check(guesser, &bearer(TOKEN), None), Ok(Via::Bearer));
    assert_eq!(auth.remembered(), 0, "right tokens forget their address");
}

#[test]
fn an_address_is_its_ip_without_the_port_and_an_ipv6_host_is_its_64() {
    let at = |s: &str| Peer::from(s.parse::<SocketAddr>().unwrap());
    assert_eq!(at("203.0.113.7:40000"), at("203.0.113.7:40001"), "each connection has its own port");
    assert_ne!(at("203.0.113.7:40000"), at("203.0.113.8:40000"));
    assert_eq!(at("[::ffff:203.0.113.7]:1"), at("203.0.113.7:2"), "an IPv4 address mapped into IPv6");
    assert_eq!(at("[2001:db8:1:2:aaaa::1]:1"), at("[2001:db8:1:2:ffff:ffff:ffff:ffff]:2"));
    assert_ne!(at("[2001:db8:1:2::1]:1"), at("[2001:db8:1:3::1]:1"));
    assert_eq!(at("[2001:db8:1:2:aaaa::1]:1").to_string(), "2001:db8:1:2::/64");
    assert_eq!(at("[::ffff:203.0.113.7]:1").to_string(), "203.0.113.7");
    assert_eq!(Peer::UNKNOWN.to_string(), "unknown");
}

#[tokio::test(start_paused = true)]
async fn the_addresses_remembered_stay_bounded_under_a_flood_of_them() {
    let auth = Auth::new(Some("a-token-of-24-characters".into()));
    let wrong = headers(&[(header::AUTHORIZATION, "Bearer guess-0123456789abcdef")]);
    let nth = |n: usize| Peer::new(IpAddr::V6(Ipv6Addr::from_bits(0x2001_0db8 << 96 | (n as u128) << 64)));
    // A paused address is kept while its pause runs and forgotten once it is over, when a new address comes.
    let guesser = peer("203.0.113.7");
    for _ in 0..WRONG_TOKENS_BEFORE_PAUSE {
        assert_eq!(auth.check(guesser, &wrong, None), Err(Refusal::WrongToken));
    }
    tokio::time::advance(PAUSE_AFTER_WRONG_TOKENS / 2).await;
    assert_eq!(auth.check(peer("203.0.113.8"), &wrong, None), Err(Refusal::WrongToken));
    assert_eq!(auth.remembered(), 2, "the pause that runs is kept");
    tokio::time::advance(PAUSE_AFTER_WRONG_TOKENS / 2).await;
    assert_eq!(auth.check(nth(0), &wrong, None), Err(Refusal::WrongToken));
    assert_eq!(auth.remembered(), 2, "the pause that is over is forgotten");
    // A flood of addresses, one wrong token each: the table never holds more than its bound, and the
    // addresses forgotten are the ones whose last wrong token is oldest.
    for n in 1..3 * ADDRESSES_REMEMBERED {
        tokio::time::advance(Duration::from_millis(1)).await;
        assert_eq!(auth.check(nth(n), &wrong, None), Err(Refusal::WrongToken));
        assert!(auth.remembered() <= ADDRESSES_REMEMBERED);
    }
    assert_eq!(auth.remembered(), ADDRESSES_REMEMBERED);
    // The newest addresses are still counted: one that had one wrong token is paused after the rest.
    let newest = nth(3 * ADDRESSES_REMEMBERED - 1);
    for _ in 1..WRONG_TOKENS_BEFORE_PAUSE {
        assert_eq!(auth.check(newest, &wrong, None), Err(Refusal::WrongToken));
    }
    assert_eq!(auth.paused_for(newest), Some(PAUSE_AFTER_WRONG_TOKENS.as_secs()));
    // The oldest was forgotten: it starts again from nothing (four more wrong tokens do not pause it).
    for _ in 1..WRONG_TOKENS_BEFORE_PAUSE {
        assert_eq!(auth.check(nth(1), &wrong, None), Err(Refusal::WrongToken));
    }
    assert_eq!(auth.paused_for(nth(1)), None);
    assert_eq!(auth.remembered(), ADDRESSES_REMEMBERED);
}

/// A browser that keeps another Worker's session for the host's root (`Path=/`) sends it beside this one's, in
/// either order, in one `Cookie` header or two: this Worker's session counts wherever it comes.
#[test]
fn another_workers_session_beside_this_ones_does_not_hide_it() {
    let auth = Auth::new(Some("a-token-of-24-characters".into()));
    let other = Auth::new(Some("another-token-of-24-chars".into()));
    let (ours, theirs) = (auth.session_value().unwrap(), other.session_value().unwrap());
    let csrf = auth.csrf().unwrap();
    for cookies in [
        vec![format!("{SESSION_COOKIE}={ours}; {SESSION_COOKIE}={theirs}")],
        vec![format!("{SESSION_COOKIE}={theirs}; almanac_flash=00; {SESSION_COOKIE}={ours}")],
        vec![format!("{SESSION_COOKIE}={theirs}"), format!("x=1; {SESSION_COOKIE}={ours}")],
    ] {
        let mut h = headers(&[(header::HOST, "127.0.0.1:9464")]);
        for c in &cookies {
            h.append(header::COOKIE, HeaderValue::from_str(c).unwrap());
        }
        assert!(auth.signed_in(&h), "{cookies:?}");
        assert_eq!(auth.check(HERE, &h, Some(&csrf)), Ok(Via::Session), "{cookies:?}");
    }
    let only_theirs =
        headers(&[(header::COOKIE, &format!("{SESSION_COOKIE}={theirs}")), (header::HOST, "127.0.0.1:9464")]);
    assert!(!auth.signed_in(&only_theirs));
    assert_eq!(auth.check(HERE, &only_theirs, Some(&csrf)), Err(Refusal::WrongToken));
}
