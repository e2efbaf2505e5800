//! Table tests of the proxy's wire helpers: authority and absolute-URI splitting, strict ports, no user
//! information, and chunked bodies with bad framing refused rather than passed on.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use guest::fence::proxy::wire::{split_authority, split_http_uri, BufIn};

#[test]
fn authorities() {
    let ok: &[(&str, Option<u16>, (&str, u16))] = &[
        ("registry.example:443", None, ("registry.example", 443)),
        ("registry.example", Some(80), ("registry.example", 80)),
        ("[::1]:8080", None, ("::1", 8080)),
        ("[2001:db8::1]", Some(80), ("2001:db8::1", 80)),
        ("93.184.216.34:65535", None, ("93.184.216.34", 65535)),
    ];
    for (text, default, want) in ok {
        assert_eq!(
            split_authority(text, *default).expect(text),
            *want,
            "{text}"
        );
    }
    let bad: &[(&str, Option<u16>)] = &[
        ("registry.example", None),
        ("registry.example:0", None),
        ("registry.example:65536", None),
        ("registry.example:+443", None),
        ("registry.example: 443", None),
        ("registry.example:", None),
        (":443", None),
        ("::1:443", None),
        ("[::1:443", None),
        ("[::1]x:443", None),
        ("user@registry.example:443", None),
    ];
    for (text, default) in bad {
        assert!(split_authority(text, *default).is_err(), "{text} accepted");
    }
}

#[test]
fn absolute_uris() {
    let ok: &[(&str, (&str, &str))] = &[
        (
            "http://registry.example/a/b?c=d",
            ("registry.example", "/a/b?c=d"),
        ),
        (
            "HTTP://registry.example:8080",
            ("registry.example:8080", "/"),
        ),
        ("http://registry.example?x=1", ("registry.example", "/?x=1")),
        ("http://registry.example/p#frag", ("registry.example", "/p")),
        ("http://[::1]:80/x", ("[::1]:80", "/x")),
    ];
    for (uri, (auth, path)) in ok {
        let (a, p) = split_http_uri(uri).expect(uri);
        assert_eq!((a, p.as_str()), (*auth, *path), "{uri}");
    }
    for uri in [
        "/relative",
        "https://registry.example/",
        "ftp://registry.example/",
        "http://u:p@registry.example/",
    ] {
        assert!(split_http_uri(uri).is_err(), "{uri} accepted");
    }
}

fn relay_chunked(input: &'static [u8]) -> Result<(Vec<u8>, u64), std::io::Error> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let mut r = BufIn::new(input);
        let mut out = Vec::new();
        let n = AtomicU64::new(0);
        r.copy_chunked(&mut out, &n, Duration::from_secs(5)).await?;
        Ok((out, n.load(Ordering::Relaxed)))
    })
}

#[test]
fn chunked_framing() {
    let good: &[u8] = b"4\r\nwiki\r\n5;ext=1\r\npedia\r\n0\r\nTrailer: x\r\n\r\nNEXT";
    let (out, n) = relay_chunked(good).expect("valid chunked");
    assert_eq!(
        out,
        &good[..good.len() - 4],
        "relayed verbatim up to the end of the body, not past it"
    );
    assert_eq!(n, out.len() as u64);
    for bad in [
        b"zz\r\nxx\r\n0\r\n\r\n".as_slice(),
        b"4\r\nwikiXX0\r\n\r\n",
        b"-1\r\n\r\n",
        b"4\r\nwi",
        b"ffffffffffffffffff\r\n",
    ] {
        assert!(
            relay_chunked(bad).is_err(),
            "{:?} accepted",
            String::from_utf8_lossy(bad)
        );
    }
}
