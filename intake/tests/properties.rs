//! Property tests: random archives of hostile-looking names and links never write outside the target and
//! never leave a link out of it; IPv6 forms embedding IPv4 are judged exactly like the IPv4 address.

use intake::addr::{classify, classify_v4};
use intake::unpack::{unpack_archive, ArchiveFormat};
use intake::IntakeLimits;
use proptest::prelude::*;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::Path;

fn octal(field: &mut [u8], v: u64) {
    let s = format!("{:0w$o}\0", v, w = field.len() - 1);
    field.copy_from_slice(s.as_bytes());
}

/// A raw ustar header with exactly the given name and link (no sanitising).
fn header(name: &str, kind: u8, link: &str, size: u64) -> [u8; 512] {
    let mut h = [0u8; 512];
    let n = name.as_bytes();
    h[..n.len().min(100)].copy_from_slice(&n[..n.len().min(100)]);
    octal(&mut h[100..108], 0o644);
    octal(&mut h[108..116], 0);
    octal(&mut h[116..124], 0);
    octal(&mut h[124..136], size);
    octal(&mut h[136..148], 0);
    h[156] = kind;
    let l = link.as_bytes();
    h[157..157 + l.len().min(100)].copy_from_slice(&l[..l.len().min(100)]);
    h[257..263].copy_from_slice(b"ustar\0");
    h[263..265].copy_from_slice(b"00");
    h[148..156].copy_from_slice(b"        ");
    let sum: u32 = h.iter().map(|b| u32::from(*b)).sum();
    h[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
    h
}

#[derive(Debug, Clone)]
enum E {
    File(String),
    Dir(String),
    Sym(String, String),
    Hard(String, String),
}

fn name() -> impl Strategy<Value = String> {
    let part = prop::sample::select(vec![
        "a", "b", "A", "..", ".", "", "sentinel", "out", "l", "x",
    ]);
    (any::<bool>(), prop::collection::vec(part, 1..5)).prop_map(|(abs, parts)| {
        let s = parts.join("/");
        if abs {
            format!("/{s}")
        } else {
            s
        }
    })
}

fn entry() -> impl Strategy<Value = E> {
    prop_oneof![
        name().prop_map(E::File),
        name().prop_map(E::Dir),
        (name(), name()).prop_map(|(a, b)| E::Sym(a, b)),
        (name(), name()).prop_map(|(a, b)| E::Hard(a, b)),
    ]
}

fn build(entries: &[E]) -> Vec<u8> {
    let mut v = Vec::new();
    for e in entries {
        match e {
            E::File(n) => {
                v.extend_from_slice(&header(n, b'0', "", 5));
                let mut block = [0u8; 512];
                block[..5].copy_from_slice(b"owned");
                v.extend_from_slice(&block);
            }
            E::Dir(n) => v.extend_from_slice(&header(n, b'5', "", 0)),
            E::Sym(n, t) => v.extend_from_slice(&header(n, b'2', t, 0)),
            E::Hard(n, t) => v.extend_from_slice(&header(n, b'1', t, 0)),
        }
    }
    v.extend_from_slice(&[0u8; 1024]);
    v
}

fn listing(p: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![p.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd {
            let e = e.expect("entry").path();
            out.push(e.strip_prefix(p).expect("under").display().to_string());
            if std::fs::symlink_metadata(&e).expect("stat").is_dir() {
                stack.push(e);
            }
        }
    }
    out.sort();
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn random_archives_stay_inside(entries in prop::collection::vec(entry(), 1..10)) {
        let tmp = tempfile::tempdir().expect("tempdir");
        let sandbox = tmp.path().join("a").join("b");
        std::fs::create_dir_all(sandbox.join("sentinel")).expect("mkdir");
        std::fs::write(sandbox.join("sentinel/keep"), b"keep").expect("write");
        let before = listing(tmp.path());
        let out = sandbox.join("out");
        let bytes = build(&entries);
        let result = unpack_archive(&bytes, ArchiveFormat::Tar, &out, &IntakeLimits::default());
        // Nothing changed outside `out`.
        let after: Vec<String> = listing(tmp.path())
            .into_iter()
            .filter(|p| p != "a/b/out" && !p.starts_with("a/b/out/"))
            .collect();
        prop_assert_eq!(&after, &before);
        prop_assert_eq!(std::fs::read(sandbox.join("sentinel/keep")).expect("read"), b"keep");
        if result.is_ok() {
            // Every link in the tree resolves inside it.
            let root = std::fs::canonicalize(&out).expect("canon");
            for rel in listing(&out) {
                let p = out.join(&rel);
                if let Ok(c) = std::fs::canonicalize(&p) {
                    prop_assert!(c.starts_with(&root), "{} resolves to {}", rel, c.display());
                }
            }
        }
    }

    #[test]
    fn embedded_ipv4_is_judged_as_ipv4(a in any::<u32>()) {
        let v4 = Ipv4Addr::from(a);
        let want = classify_v4(v4);
        prop_assert_eq!(classify(IpAddr::V6(v4.to_ipv6_mapped())), want);
        let nat64 = Ipv6Addr::from((0x0064_ff9b_u128 << 96) | u128::from(a));
        prop_assert_eq!(classify(IpAddr::V6(nat64)), want);
        let six_to_four = Ipv6Addr::from((0x2002_u128 << 112) | (u128::from(a) << 80) | 1);
        prop_assert_eq!(classify(IpAddr::V6(six_to_four)), want);
        let siit = Ipv6Addr::from((0xffff_u128 << 48) | u128::from(a));
        prop_assert_eq!(classify(IpAddr::V6(siit)), want);
    }
}
