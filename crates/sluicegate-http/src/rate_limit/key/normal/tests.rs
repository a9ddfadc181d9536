//! Every spelling of a path or host that an audit stepped around a limit with.

use http::Request;
use proptest::prelude::*;

use super::*;

fn path(text: &str, fold_case: bool) -> Result<String, PathError> {
    normal_path(text.as_bytes(), fold_case).map(|p| String::from_utf8_lossy(&p).into_owned())
}

#[test]
fn paths_spelt_otherwise_are_one_path() {
    for spelling in [
        "/login",
        "//login",
        "/./login",
        "/x/../login",
        "/%6Cogin",
        "/%6C%6F%67%69%6E",
        "/%6c%6f%67%69%6e",
        "///.//login",
        "/x/%2e%2e/login",
        "/%2Flogin",
        "/a/b/../../login",
    ] {
        assert_eq!(path(spelling, false), Ok("/login".into()), "{spelling}");
    }
    for (spelling, normal) in [
        ("/", "/"),
        ("//", "/"),
        ("/api/", "/api/"),
        ("/api//x", "/api/x"),
        ("/static/../api/x", "/api/x"),
        ("/a/.", "/a/"),
        ("/a/b/..", "/a/"),
        ("/a/..", "/"),
        ("/a%20b", "/a b"),
        ("/100%", "/100%"),
        ("/%zz", "/%zz"),
        ("/%25%36%43", "/%6C"),
        ("*", "*"),
        ("/.hidden/..x", "/.hidden/..x"),
    ] {
        assert_eq!(path(spelling, false), Ok(normal.into()), "{spelling}");
    }
    assert_eq!(path("/API/X", false), Ok("/API/X".into()));
    assert_eq!(path("/API/%58", true), Ok("/api/x".into()));
}

#[test]
fn a_path_above_the_root_has_no_normal_form() {
    for spelling in [
        "/..",
        "/../login",
        "/%2e%2e/login",
        "/a/../..",
        "/a/%2E%2E/%2e%2e/x",
    ] {
        assert_eq!(
            path(spelling, false),
            Err(PathError::AboveRoot),
            "{spelling}"
        );
    }
}

#[test]
fn normal_paths_are_borrowed() {
    for normal in ["/", "/login", "/api/x/", "/a.b/c..d/.e", "/A"] {
        assert!(
            matches!(normal_path(normal.as_bytes(), false), Ok(Cow::Borrowed(_))),
            "{normal}"
        );
    }
    assert!(matches!(normal_path(b"/A", true), Ok(Cow::Owned(_))));
}

#[test]
fn encoded_paths_mean_what_they_meant() {
    assert_eq!(&*encoded_path(b"/a b?c%/d"), b"/a%20b%3Fc%25/d");
    assert_eq!(&*encoded_path(b"/\xff"), b"/%FF");
    assert!(matches!(encoded_path(b"/api/x;y=1"), Cow::Borrowed(_)));
}

fn host(text: &[u8]) -> Result<String, HostError> {
    normal_host(text).map(|h| String::from_utf8_lossy(&h).into_owned())
}

#[test]
fn hosts_spelt_otherwise_are_one_host() {
    for spelling in [
        &b"hk.test"[..],
        b"HK.TEST",
        b"hk.test:80",
        b"hk.test.",
        b"Hk.Test.:8080",
        b"hk.test:",
    ] {
        assert_eq!(
            host(spelling),
            Ok("hk.test".into()),
            "{}",
            String::from_utf8_lossy(spelling)
        );
    }
    assert_eq!(host(b"[::1]:80"), Ok("[::1]".into()));
    assert_eq!(host(b"192.0.2.1:8080"), Ok("192.0.2.1".into()));
    for bad in [
        &b"hk.test x"[..],
        b"a/b",
        b"",
        b":80",
        b".",
        b"a..b",
        b"h\xffst",
        b"user@host",
        b"host:8o",
        b"[::1",
        b"[]",
        b"[::1]x",
        b"host:80:80",
        b"a\\b",
        b".hk.test",
    ] {
        assert_eq!(
            host(bad),
            Err(HostError::Invalid),
            "{}",
            String::from_utf8_lossy(bad)
        );
    }
}

fn named_host(request: Request<()>) -> Result<Option<String>, HostError> {
    request_host(&RequestHead::of(&request))
        .map(|h| h.map(|h| String::from_utf8_lossy(h).into_owned()))
}

#[test]
fn the_request_line_names_the_host_first() -> Result<(), http::Error> {
    let absolute = Request::get("http://other.test/a")
        .header("host", "h.test")
        .body(())?;
    assert_eq!(named_host(absolute), Ok(Some("other.test".into())));
    let origin = Request::get("/a").header("host", "h.test").body(())?;
    assert_eq!(named_host(origin), Ok(Some("h.test".into())));
    let twice = Request::get("/a")
        .header("host", "a")
        .header("host", "a")
        .body(())?;
    assert_eq!(named_host(twice), Err(HostError::Repeated));
    let h2 = |host: &str| {
        Request::get("http://H.test:80/a")
            .version(Version::HTTP_2)
            .header("host", host)
            .body(())
    };
    assert_eq!(named_host(h2("h.test")?), Ok(Some("H.test:80".into())));
    assert_eq!(named_host(h2("other.test")?), Err(HostError::Conflicting));
    let none = Request::get("/a").version(Version::HTTP_10).body(())?;
    assert_eq!(named_host(none), Ok(None));
    Ok(())
}

proptest! {
    /// The normal form is a fixed point, starts with `/`, and never holds an empty, `.` or
    /// `..` segment but a final empty one.
    #[test]
    fn the_normal_form_is_normal(segments in prop::collection::vec(
        prop::sample::select(vec!["", ".", "..", "a", "B", "%2e", "%2E%2e", "%2F", "%41", "x%"]),
        0..8,
    ), fold_case in any::<bool>()) {
        let spelled = format!("/{}", segments.join("/"));
        if let Ok(normal) = normal_path(spelled.as_bytes(), fold_case) {
            let again = normal_path(&normal, fold_case).map(|p| p.into_owned());
            prop_assert_eq!(again, Ok(normal.clone().into_owned()));
            prop_assert!(normal.starts_with(b"/"));
            let inner = &normal[1..normal.len().saturating_sub(1).max(1)];
            for segment in inner.split(|&b| b == b'/') {
                prop_assert!(segment != b"." && segment != b"..", "{:?}", normal);
            }
        }
    }
}
