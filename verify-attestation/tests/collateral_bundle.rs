//! Offline bundles end to end through the CLI: `fetch --bundle` against the fake KDS/PCS, then verification
//! with `--collateral BUNDLE` and no network; auditor signatures with measurement-set keys, k of n.

mod collateral_common;

use collateral_common::*;

fn keypair(dir: &std::path::Path, name: &str) -> (String, String) {
    let k = measurements::set::generate_key();
    let sk = dir.join(format!("{name}.key"));
    let pk = dir.join(format!("{name}.pub"));
    std::fs::write(&sk, measurements::set::private_key_pem(&k).expect("pem")).expect("write");
    std::fs::write(
        &pk,
        measurements::set::public_key_pem(&k.verifying_key()).expect("pem"),
    )
    .expect("write");
    (sk.display().to_string(), pk.display().to_string())
}

#[test]
fn snp_bundle_verifies_offline_and_auditor_signatures_count_k_of_n() {
    let Some(v) = vectors() else { return };
    let srv = FakeServer::start();
    let (_, chain_route, vcek_route) = serve_snp(&srv, &v, "genoa-v3-yaxi", "Genoa");
    let dir = tempfile::tempdir().expect("tmp");
    let report = v.join("snp/genoa-v3-yaxi/report.bin");
    let report = report.to_str().expect("utf8");
    let bundle = dir.path().join("genoa.bundle.json");
    let b = bundle.to_str().expect("utf8");
    let cache = dir.path().join("cache");
    let (code, out, err) = cli(&[
        "fetch",
        report,
        "--bundle",
        b,
        "--kds-url",
        &srv.base,
        "--cache",
        cache.to_str().expect("utf8"),
        "--no-crl",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!((srv.hits(&chain_route), srv.hits(&vcek_route)), (1, 1));
    // Offline: the server is gone, the bundle is all there is.
    drop(srv);
    let (code, out, err) = cli(&["snp-report", report, "--collateral", b, "--json"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("\"verified\":true"), "{out}");

    // Auditors: two keys trusted, a third not.
    let (a_sk, a_pk) = keypair(dir.path(), "a");
    let (b_sk, b_pk) = keypair(dir.path(), "b");
    let (c_sk, _) = keypair(dir.path(), "c");
    let need = |k: &str, keys: &[&str]| {
        let mut args = vec![
            "snp-report",
            report,
            "--collateral",
            b,
            "--json",
            "--collateral-auditors-required",
            k,
        ];
        for key in keys {
            args.push("--collateral-auditor-key");
            args.push(key);
        }
        cli(&args)
    };
    let (code, out, _) = need("1", &[&a_pk]);
    assert_eq!(code, 1, "unsigned bundle: {out}");
    assert!(out.contains("collateral-unsigned"), "{out}");
    for (sk, who) in [(&a_sk, "alice"), (&c_sk, "mallory")] {
        let (code, out, err) = cli(&["bundle-sign", b, "--key", sk, "--auditor", who]);
        assert_eq!(code, 0, "{out}{err}");
    }
    assert_eq!(need("1", &[&a_pk, &b_pk]).0, 0);
    let (code, out, _) = need("2", &[&a_pk, &b_pk]);
    assert_eq!(code, 1, "one trusted signature of two: {out}");
    assert!(
        out.contains("untrusted key"),
        "the untrusted signature is named: {out}"
    );
    let (code, out, err) = cli(&["bundle-sign", b, "--key", &b_sk, "--auditor", "bob"]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(need("2", &[&a_pk, &b_pk]).0, 0);

    // Any change to the signed content voids the signatures.
    let text = std::fs::read_to_string(&bundle).expect("read");
    assert!(text.contains("\"subject\": \"report.bin"), "{text}");
    let tampered = dir.path().join("tampered.json");
    std::fs::write(
        &tampered,
        text.replacen("\"subject\": \"report.bin", "\"subject\": \"other.bin", 1),
    )
    .expect("write");
    let (code, out, _) = cli(&[
        "snp-report",
        report,
        "--collateral",
        tampered.to_str().expect("utf8"),
        "--json",
        "--collateral-auditor-key",
        &a_pk,
    ]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("signed other content"), "{out}");
}

#[test]
fn tdx_bundle_verifies_offline_and_a_bundle_without_the_part_is_named() {
    let Some(v) = vectors() else { return };
    let tv = tdx_vector(&v, "dcapqvl-v4-b0c06f-uptodate");
    let srv = FakeServer::start();
    tv.serve_all(&srv);
    let dir = tempfile::tempdir().expect("tmp");
    let quote = v.join("tdx/dcapqvl-v4-b0c06f-uptodate/quote.bin");
    let q = quote.to_str().expect("utf8");
    let bundle = dir.path().join("tdx.bundle.json");
    let b = bundle.to_str().expect("utf8");
    let at = tv.reference_time.to_string();
    let root = format!("{}{ROOT_CRL_ROUTE}", srv.base);
    let (code, out, err) = cli(&[
        "fetch",
        q,
        "--bundle",
        b,
        "--pcs-url",
        &srv.base,
        "--root-crl-url",
        &root,
        "--no-cache",
        "--at",
        &at,
    ]);
    assert_eq!(code, 0, "{out}{err}");
    drop(srv);
    let (code, out, err) = cli(&["tdx-quote", q, "--collateral", b, "--at", &at, "--json"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("\"source\":\"bundle\""), "{out}");
    // The same bundle for an SEV-SNP report has no SEV-SNP part.
    let report = v.join("snp/genoa-v3-yaxi/report.bin");
    let (code, out, _) = cli(&[
        "snp-report",
        report.to_str().expect("utf8"),
        "--collateral",
        b,
        "--json",
    ]);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("no SEV-SNP part"), "{out}");
}

#[test]
fn fetch_online_from_the_verify_command_and_errors_name_the_url() {
    let Some(v) = vectors() else { return };
    let srv = FakeServer::start();
    serve_snp(&srv, &v, "genoa-v3-yaxi", "Genoa");
    let dir = tempfile::tempdir().expect("tmp");
    let report = v.join("snp/genoa-v3-yaxi/report.bin");
    let r = report.to_str().expect("utf8");
    let c = dir.path().join("cache");
    let c = c.to_str().expect("utf8");
    // No CRL on the fake KDS: the fetch names the URL and the status.
    let (code, out, _) = cli(&[
        "snp-report",
        r,
        "--online",
        "--kds-url",
        &srv.base,
        "--cache",
        c,
        "--json",
    ]);
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains("/vcek/v1/Genoa/crl") && out.contains("HTTP 404"),
        "{out}"
    );
    // The chain and VCEK were verified and cached before the CRL failed; offline, the missing CRL is named.
    let (code, out, _) = cli(&["snp-report", r, "--cache", c, "--json"]);
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains("collateral-missing") && out.contains("kds/Genoa/crl"),
        "{out}"
    );
    // With a local --crl the fetch does not ask for one; the cached certificates then serve offline (here the
    // CRL file is unreadable, and that is named).
    let (code, out, _) = cli(&[
        "snp-report",
        r,
        "--cache",
        c,
        "--crl",
        "/nonexistent.crl",
        "--json",
    ]);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("--crl"), "{out}");
}

#[test]
fn base_urls_come_from_a_config_file_and_flags_win() {
    let Some(v) = vectors() else { return };
    let srv = FakeServer::start();
    let (_, chain_route, _) = serve_snp(&srv, &v, "genoa-v3-yaxi", "Genoa");
    let dir = tempfile::tempdir().expect("tmp");
    let cfg = dir.path().join("fetch.toml");
    std::fs::write(
        &cfg,
        format!(
            "kds_url = \"{}\"\ntimeout_secs = 5\nmax_retries = 0\n",
            srv.base
        ),
    )
    .expect("write");
    let report = v.join("snp/genoa-v3-yaxi/report.bin");
    let out = dir.path().join("certs");
    let (code, o, e) = cli(&[
        "fetch",
        report.to_str().expect("utf8"),
        "--out",
        out.to_str().expect("utf8"),
        "--fetch-config",
        cfg.to_str().expect("utf8"),
        "--no-cache",
        "--no-crl",
    ]);
    assert_eq!(code, 0, "{o}{e}");
    assert_eq!(srv.hits(&chain_route), 1);
    // The directory is the layout snp-report --certs reads.
    let (code, o, _) = cli(&[
        "snp-report",
        report.to_str().expect("utf8"),
        "--certs",
        out.to_str().expect("utf8"),
        "--json",
    ]);
    assert_eq!(code, 0, "{o}");
    // A flag wins over the file: a closed port is tried instead, and the error names it.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let dead = format!("http://{}", closed.local_addr().expect("addr"));
    drop(closed);
    let (code, o, e) = cli(&[
        "fetch",
        report.to_str().expect("utf8"),
        "--out",
        out.to_str().expect("utf8"),
        "--fetch-config",
        cfg.to_str().expect("utf8"),
        "--kds-url",
        &dead,
        "--no-cache",
        "--no-crl",
    ]);
    assert_eq!(code, 2, "{o}");
    assert!(e.contains(&dead), "{e}");
    // An unknown key in the file is named.
    std::fs::write(&cfg, "kds_ulr = \"x\"\n").expect("write");
    let (code, _, e) = cli(&[
        "fetch",
        report.to_str().expect("utf8"),
        "--out",
        out.to_str().expect("utf8"),
        "--fetch-config",
        cfg.to_str().expect("utf8"),
        "--no-cache",
    ]);
    assert_eq!(code, 2);
    assert!(e.contains("kds_ulr"), "{e}");
}
