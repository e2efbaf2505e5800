//! Fetching against a loopback fake KDS and PCS serving the real vectors: the fetched collateral equals what
//! the vectors hold and verifies; 429/503 with Retry-After are retried (bounded), slow answers time out,
//! truncated bodies, wrong issuer chains, wrong roots and stale CRLs are refused naming the URL, and nothing
//! refused is cached.

mod collateral_common;

use collateral_common::*;
use std::time::Duration;
use verifier_lib::collateral::cache::Cache;
use verifier_lib::collateral::pcs::QuoteNeeds;
use verifier_lib::collateral::FetchError;

const NAME: &str = "dcapqvl-v4-b0c06f-uptodate";

fn fixture() -> Option<(PcsVector, FakeServer)> {
    let v = vectors()?;
    let tv = tdx_vector(&v, NAME);
    let srv = FakeServer::start();
    tv.serve_all(&srv);
    Some((tv, srv))
}

#[test]
fn pcs_fetch_equals_the_vector_collateral_and_verifies() {
    let Some((tv, srv)) = fixture() else { return };
    let http = client(Duration::from_secs(5), 0);
    let needs = QuoteNeeds::of_quote(&tv.quote).expect("needs");
    assert_eq!(needs.fmspc, tv.fmspc);
    let got = pcs(&http, &srv, None)
        .for_quote(&needs, tv.reference_time)
        .expect("fetch");
    let want: verifier_lib::tdx::collateral::CollateralFile =
        serde_json::from_slice(&tv.collateral_json).expect("vector collateral");
    assert_eq!(got.file.tcb_info, want.tcb_info);
    assert_eq!(got.file.qe_identity, want.qe_identity);
    assert_eq!(
        got.file.tcb_info_signature,
        want.tcb_info_signature.to_lowercase()
    );
    assert_eq!(got.file.pck_crl, want.pck_crl.to_lowercase());
    assert_eq!(got.file.root_ca_crl, want.root_ca_crl.to_lowercase());
    // Each of the four endpoints was asked exactly once.
    assert_eq!(srv.hits(&tcb_route(&tv.fmspc)), 1);
    assert_eq!(srv.hits(QE_ROUTE), 1);
    assert_eq!(srv.hits(PCK_CRL_ROUTE), 1);
    assert_eq!(srv.hits(ROOT_CRL_ROUTE), 1);
    // And the quote verifies with it.
    let coll = verifier_lib::tdx::Collateral::from_json(&got.json).expect("parse");
    let policy = verifier_lib::tdx::Policy::default();
    let opts = verifier_lib::tdx::VerifyOptions {
        collateral: Some(&coll),
        at: tv.reference_time,
        policy: &policy,
        allow_simulated: false,
    };
    let r = verifier_lib::tdx::verify_quote(&tv.quote, &opts).expect("quote");
    assert!(r.verified(), "{:?}", r.failures);
}

#[test]
fn pcs_429_with_retry_after_is_retried_then_served() {
    let Some((tv, srv)) = fixture() else { return };
    srv.route(
        &tcb_route(&tv.fmspc),
        vec![
            Reply::status(429).header("Retry-After", "1"),
            tv.tcb_reply(),
        ],
    );
    let http = client(Duration::from_secs(5), 2);
    let started = std::time::Instant::now();
    pcs(&http, &srv, None)
        .tcb_info(
            verifier_lib::collateral::pcs::Tee::Tdx,
            &tv.fmspc,
            tv.reference_time,
        )
        .expect("served after one retry");
    assert_eq!(srv.hits(&tcb_route(&tv.fmspc)), 2);
    // The client waited as Retry-After said (at least one second) before asking again.
    assert!(started.elapsed() >= Duration::from_secs(1));
}

#[test]
fn pcs_503_forever_gives_up_after_the_bounded_retries_naming_url_and_status() {
    let Some((tv, srv)) = fixture() else { return };
    srv.route(
        QE_ROUTE,
        vec![Reply::status(503).header("Retry-After", "0")],
    );
    let http = client(Duration::from_secs(5), 2);
    let e = pcs(&http, &srv, None)
        .qe_identity(tv.reference_time)
        .expect_err("must fail");
    let msg = e.to_string();
    assert!(msg.contains("HTTP 503") && msg.contains(QE_ROUTE), "{msg}");
    assert_eq!(srv.hits(QE_ROUTE), 3, "one request and two retries");
    assert_eq!(e.check(), "collateral-fetch");
}

#[test]
fn a_retry_after_longer_than_allowed_is_not_waited_out() {
    let Some((tv, srv)) = fixture() else { return };
    srv.route(
        QE_ROUTE,
        vec![Reply::status(429).header("Retry-After", "3600")],
    );
    let http = client(Duration::from_secs(5), 3);
    let e = pcs(&http, &srv, None)
        .qe_identity(tv.reference_time)
        .expect_err("must fail");
    assert!(e.to_string().contains("3600"), "{e}");
    assert_eq!(srv.hits(QE_ROUTE), 1);
}

#[test]
fn retry_after_parses_delay_seconds_and_all_three_http_date_forms() {
    use verifier_lib::collateral::http::parse_retry_after_at;
    // 1994-11-06T08:49:37Z, the example date of RFC 9110.
    let t = std::time::UNIX_EPOCH + Duration::from_secs(784_111_777);
    let ten = Some(Duration::from_secs(10));
    assert_eq!(parse_retry_after_at("10", t), ten);
    assert_eq!(
        parse_retry_after_at("Sun, 06 Nov 1994 08:49:47 GMT", t),
        ten
    );
    assert_eq!(
        parse_retry_after_at("Sunday, 06-Nov-94 08:49:47 GMT", t),
        ten
    );
    assert_eq!(parse_retry_after_at("Sun Nov  6 08:49:47 1994", t), ten);
    // A date already past is no wait; garbage is neither form (the client then backs off on its own).
    assert_eq!(
        parse_retry_after_at("Sun, 06 Nov 1994 08:00:00 GMT", t),
        Some(Duration::ZERO)
    );
    assert_eq!(parse_retry_after_at("soon", t), None);
    assert_eq!(parse_retry_after_at("-5", t), None);
}

#[test]
fn a_429_with_an_http_date_retry_after_is_retried_then_served() {
    let Some((tv, srv)) = fixture() else { return };
    // A date one second ahead (HTTP dates have whole seconds: the wait is 0 to 2 s).
    let when = httpdate::fmt_http_date(std::time::SystemTime::now() + Duration::from_secs(1));
    srv.route(
        &tcb_route(&tv.fmspc),
        vec![
            Reply::status(429).header("Retry-After", &when),
            tv.tcb_reply(),
        ],
    );
    let http = client(Duration::from_secs(5), 2);
    pcs(&http, &srv, None)
        .tcb_info(
            verifier_lib::collateral::pcs::Tee::Tdx,
            &tv.fmspc,
            tv.reference_time,
        )
        .expect("served after one retry");
    assert_eq!(srv.hits(&tcb_route(&tv.fmspc)), 2);
}

#[test]
fn http_date_retry_afters_in_the_past_still_meet_the_retry_bound() {
    let Some((tv, srv)) = fixture() else { return };
    srv.route(
        QE_ROUTE,
        vec![Reply::status(503).header("Retry-After", "Sun, 06 Nov 1994 08:49:37 GMT")],
    );
    let http = client(Duration::from_secs(5), 2);
    let e = pcs(&http, &srv, None)
        .qe_identity(tv.reference_time)
        .expect_err("must fail");
    assert_eq!(
        srv.hits(QE_ROUTE),
        3,
        "one request and two retries, however often the date says now"
    );
    let msg = e.to_string();
    assert!(
        msg.contains("gave up after 2 retries") && msg.contains("1994"),
        "{msg}"
    );
}

#[test]
fn an_http_date_far_in_the_future_is_capped_and_the_error_says_so() {
    let Some((tv, srv)) = fixture() else { return };
    let far = "Fri, 31 Dec 2100 23:59:59 GMT";
    srv.route(
        QE_ROUTE,
        vec![Reply::status(429).header("Retry-After", far)],
    );
    let http = client(Duration::from_secs(5), 3);
    let e = pcs(&http, &srv, None)
        .qe_identity(tv.reference_time)
        .expect_err("must fail");
    let msg = e.to_string();
    assert!(
        msg.contains(far) && msg.contains("cap of 5s") && msg.contains("not waited out"),
        "{msg}"
    );
    assert!(msg.contains(QE_ROUTE) && msg.contains("HTTP 429"), "{msg}");
    assert_eq!(srv.hits(QE_ROUTE), 1, "no retry once the cap is exceeded");
}

#[test]
fn tdx_tcb_info_served_for_an_sgx_request_is_refused() {
    let Some((tv, srv)) = fixture() else { return };
    // Intel signs SGX and TDX TCB Info with one key: only the body's id tells them apart.
    let sgx_route = format!(
        "/sgx/certification/v4/tcb?fmspc={}&update=standard",
        tv.fmspc
    );
    srv.route(&sgx_route, vec![tv.tcb_reply()]);
    let http = client(Duration::from_secs(5), 0);
    let e = pcs(&http, &srv, None)
        .tcb_info(
            verifier_lib::collateral::pcs::Tee::Sgx,
            &tv.fmspc,
            tv.reference_time,
        )
        .expect_err("TDX TCB Info is not SGX TCB Info");
    let msg = e.to_string();
    assert!(
        msg.contains("TDX TCB Info") && msg.contains("SGX TCB Info was asked for"),
        "{msg}"
    );
    assert!(msg.contains(&sgx_route), "{msg}");
    assert_eq!(srv.hits(&sgx_route), 1);
}

#[test]
fn a_qe_identity_that_is_not_the_td_qes_is_refused_at_fetch() {
    use verifier_lib::collateral::pcs::check_qe_identity_id;
    // The vectors hold no signed SGX QE Identity; the check runs on the verified signed text, so it is driven
    // here with that text: the real vector's (TD_QE) passes, the SGX QE's and QVE's ids and a missing id do not.
    let Some((tv, srv)) = fixture() else { return };
    let http = client(Duration::from_secs(5), 0);
    let qe = pcs(&http, &srv, None)
        .qe_identity(tv.reference_time)
        .expect("the vector's TD QE identity");
    check_qe_identity_id("u", &qe.text).expect("TD_QE");
    for (body, want) in [
        (r#"{"id":"QE","version":2}"#, "\"QE\""),
        (r#"{"id":"QVE","version":2}"#, "\"QVE\""),
        (r#"{"version":2}"#, "has no id"),
    ] {
        let e = check_qe_identity_id("https://pcs.example/qe", body).expect_err(body);
        let msg = e.to_string();
        assert_eq!(e.check(), "collateral-rejected", "{msg}");
        assert!(
            msg.contains(want) && msg.contains("TD_QE") && msg.contains("https://pcs.example/qe"),
            "{msg}"
        );
    }
}

#[test]
fn update_early_is_sent_to_the_server_and_cached_apart() {
    let Some((tv, srv)) = fixture() else { return };
    let early_tcb = format!("/tdx/certification/v4/tcb?fmspc={}&update=early", tv.fmspc);
    let early_qe = "/tdx/certification/v4/qe/identity?update=early";
    srv.route(&early_tcb, vec![tv.tcb_reply()]);
    srv.route(early_qe, vec![tv.qe_reply()]);
    let http = client(Duration::from_secs(5), 0);
    let dir = tempfile::tempdir().expect("tmp");
    let cache = Cache::new(dir.path());
    let mut p = pcs(&http, &srv, Some(&cache));
    p.update = verifier_lib::collateral::pcs::Update::Early;
    let needs = QuoteNeeds::of_quote(&tv.quote).expect("needs");
    p.for_quote(&needs, tv.reference_time).expect("early");
    assert_eq!((srv.hits(&early_tcb), srv.hits(early_qe)), (1, 1));
    assert_eq!(srv.hits(&tcb_route(&tv.fmspc)), 0, "standard was not asked");
    assert!(cache
        .read(&format!(
            "pcs/tdx/{}-{}-early",
            needs.fmspc,
            needs.ca.name()
        ))
        .is_some());
    assert!(cache
        .read(&format!(
            "pcs/tdx/{}-{}-standard",
            needs.fmspc,
            needs.ca.name()
        ))
        .is_none());
}

#[test]
fn a_404_is_an_error_naming_url_and_status() {
    let Some((tv, srv)) = fixture() else { return };
    srv.route(QE_ROUTE, vec![Reply::status(404)]);
    let http = client(Duration::from_secs(5), 3);
    let e = pcs(&http, &srv, None)
        .qe_identity(tv.reference_time)
        .expect_err("must fail");
    assert!(
        e.to_string().contains("HTTP 404") && e.to_string().contains(&srv.base),
        "{e}"
    );
    assert_eq!(srv.hits(QE_ROUTE), 1, "a 404 is not retried");
}

#[test]
fn a_slow_answer_times_out() {
    let Some((tv, srv)) = fixture() else { return };
    srv.route(QE_ROUTE, vec![tv.qe_reply().delay(Duration::from_secs(3))]);
    let http = client(Duration::from_millis(500), 0);
    let e = pcs(&http, &srv, None)
        .qe_identity(tv.reference_time)
        .expect_err("must fail");
    assert!(matches!(e, FetchError::Http(_)), "{e}");
    assert!(e.to_string().contains(QE_ROUTE), "{e}");
}

#[test]
fn a_truncated_body_is_refused() {
    let Some((tv, srv)) = fixture() else { return };
    srv.route(QE_ROUTE, vec![tv.qe_reply().cut(100)]);
    let http = client(Duration::from_secs(5), 0);
    let e = pcs(&http, &srv, None)
        .qe_identity(tv.reference_time)
        .expect_err("must fail");
    assert!(e.to_string().contains(QE_ROUTE), "{e}");
}

#[test]
fn a_wrong_issuer_chain_is_refused_and_nothing_is_cached() {
    let Some((tv, srv)) = fixture() else { return };
    // The TCB Info answer with the PCK CRL issuer chain (PCK Platform CA, root): chains to Intel's root, but
    // the PCK CA did not sign TCB Info.
    let wrong = tv.file["pck_crl_issuer_chain"]
        .as_str()
        .expect("pem")
        .to_string();
    let mut r = tv.tcb_reply();
    r.headers = vec![("TCB-Info-Issuer-Chain".into(), enc(&wrong))];
    srv.route(&tcb_route(&tv.fmspc), vec![r]);
    let dir = tempfile::tempdir().expect("tmp");
    let cache = Cache::new(dir.path());
    let http = client(Duration::from_secs(5), 0);
    let needs = QuoteNeeds::of_quote(&tv.quote).expect("needs");
    let e = pcs(&http, &srv, Some(&cache))
        .for_quote(&needs, tv.reference_time)
        .expect_err("must fail");
    assert_eq!(e.check(), "collateral-rejected", "{e}");
    assert!(e.to_string().contains("TCB Info"), "{e}");
    let key = format!("pcs/tdx/{}-platform-standard", tv.fmspc);
    assert!(cache.read(&key).is_none(), "a refused answer was cached");
}

#[test]
fn a_chain_to_a_foreign_root_is_refused() {
    let Some((tv, srv)) = fixture() else { return };
    let v = vectors().expect("vectors");
    // An AMD ARK is a self-signed root, not Intel's.
    let ark = String::from_utf8(read(v.join("snp/roots/milan/ark.pem"))).expect("pem");
    let mut r = tv.qe_reply();
    r.headers = vec![(
        "SGX-Enclave-Identity-Issuer-Chain".into(),
        enc(&(ark.clone() + &ark)),
    )];
    srv.route(QE_ROUTE, vec![r]);
    let http = client(Duration::from_secs(5), 0);
    let e = pcs(&http, &srv, None)
        .qe_identity(tv.reference_time)
        .expect_err("must fail");
    assert!(
        e.to_string().contains("not the pinned Intel SGX Root CA"),
        "{e}"
    );
}

#[test]
fn a_missing_issuer_chain_header_is_refused() {
    let Some((tv, srv)) = fixture() else { return };
    let mut r = tv.qe_reply();
    r.headers.clear();
    srv.route(QE_ROUTE, vec![r]);
    let http = client(Duration::from_secs(5), 0);
    let e = pcs(&http, &srv, None)
        .qe_identity(tv.reference_time)
        .expect_err("must fail");
    assert!(
        e.to_string().contains("SGX-Enclave-Identity-Issuer-Chain"),
        "{e}"
    );
}

#[test]
fn a_stale_pck_crl_is_refused() {
    let Some((tv, srv)) = fixture() else { return };
    let pck_next = verifier_lib::tdx::x509::Crl::from_der(
        "pck_crl",
        &hex::decode(tv.file["pck_crl"].as_str().expect("hex")).expect("hex"),
    )
    .expect("crl")
    .window()
    .1
    .expect("nextUpdate");
    let http = client(Duration::from_secs(5), 0);
    let e = pcs(&http, &srv, None)
        .pck_crl(
            verifier_lib::collateral::pcs::PckCa::Platform,
            pck_next + 60,
        )
        .expect_err("must fail");
    assert!(e.to_string().contains("stale"), "{e}");
    // One second earlier it is current.
    pcs(&http, &srv, None)
        .pck_crl(verifier_lib::collateral::pcs::PckCa::Platform, pck_next - 1)
        .expect("current CRL");
}

#[test]
fn kds_fetches_cert_chain_and_the_vcek_for_the_report() {
    let Some(v) = vectors() else { return };
    let srv = FakeServer::start();
    let (report, chain_route, vcek_route) = serve_snp(&srv, &v, "genoa-v3-yaxi", "Genoa");
    let report = attestation::snp::AttestationReport::from_bytes(&report).expect("report");
    let http = client(Duration::from_secs(5), 0);
    let now = time::OffsetDateTime::now_utc().unix_timestamp();
    let got = kds(&http, &srv, None)
        .for_report(&report, None, false, now)
        .expect("fetch");
    assert_eq!(srv.hits(&chain_route), 1);
    assert_eq!(
        srv.hits(&vcek_route),
        1,
        "the VCEK URL is built from CHIP_ID and REPORTED_TCB"
    );
    assert_eq!(got.vcek, read(v.join("snp/genoa-v3-yaxi/vcek.der")));
    let opts = verifier_lib::snp::ChainOptions::default();
    let r = verifier_lib::snp::verify_report(&report, &got.bundle(), &opts, &Default::default());
    assert!(r.verified(), "{:?}", r.failures);
}

#[test]
fn kds_refuses_another_products_chain_and_another_chips_vcek() {
    let Some(v) = vectors() else { return };
    let srv = FakeServer::start();
    let (report, chain_route, vcek_route) = serve_snp(&srv, &v, "genoa-v3-yaxi", "Genoa");
    let report = attestation::snp::AttestationReport::from_bytes(&report).expect("report");
    let http = client(Duration::from_secs(5), 0);
    let now = time::OffsetDateTime::now_utc().unix_timestamp();
    // Milan's chain served for Genoa.
    srv.route(
        &chain_route,
        vec![Reply::ok(read(v.join("snp/roots/milan/cert_chain.pem")))],
    );
    let e = kds(&http, &srv, None)
        .for_report(&report, None, false, now)
        .expect_err("must fail");
    assert!(e.to_string().contains("Milan root"), "{e}");
    // The right chain, another chip's VCEK.
    serve_snp(&srv, &v, "genoa-v3-yaxi", "Genoa");
    srv.route(
        &vcek_route,
        vec![Reply::ok(read(v.join("snp/genoa-v5-oak-oc/vcek.der")))],
    );
    let e = kds(&http, &srv, None)
        .for_report(&report, None, false, now)
        .expect_err("must fail");
    assert_eq!(e.check(), "collateral-rejected", "{e}");
    assert!(e.to_string().contains("VCEK"), "{e}");
}

#[test]
fn kds_needs_a_product_for_a_version_2_report_and_refuses_vlek() {
    let Some(v) = vectors() else { return };
    let srv = FakeServer::start();
    let http = client(Duration::from_secs(5), 0);
    let now = time::OffsetDateTime::now_utc().unix_timestamp();
    let (report, _, vcek_route) = serve_snp(&srv, &v, "milan-v2-virtee-sev", "Milan");
    let report = attestation::snp::AttestationReport::from_bytes(&report).expect("report");
    let e = kds(&http, &srv, None)
        .for_report(&report, None, false, now)
        .expect_err("must fail");
    assert!(e.to_string().contains("--product"), "{e}");
    let got = kds(&http, &srv, None)
        .for_report(&report, Some(attestation::snp::Product::Milan), false, now)
        .expect("with --product");
    assert_eq!(srv.hits(&vcek_route), 1);
    assert_eq!(got.product, attestation::snp::Product::Milan);
    let vlek = read(v.join("snp/milan-v3-vlek-aws-trustee/report.bin"));
    let vlek = attestation::snp::AttestationReport::from_bytes(&vlek).expect("report");
    let before = srv.total_hits();
    let e = kds(&http, &srv, None)
        .for_report(&vlek, None, false, now)
        .expect_err("must fail");
    assert!(e.to_string().contains("/vlek/v1/Milan/cert_chain"), "{e}");
    // Only the VLEK side's chain is asked for (404 here; collateral_kds.rs serves it); never a VCEK.
    assert_eq!(srv.hits("/vlek/v1/Milan/cert_chain"), 1);
    assert_eq!(srv.total_hits(), before + 1, "no VCEK is asked for a VLEK");
}

#[test]
fn turin_vcek_url_uses_the_8_byte_hwid_and_fmc_spl() {
    let Some(v) = vectors() else { return };
    // A Genoa v3 report re-labelled as Turin (CPUID family 1Ah model 02h) with the Turin vector's hwID and
    // TCB: only the URL is built from it.
    let mut b = read(v.join("snp/genoa-v3-yaxi/report.bin"));
    b[0x188] = 0x1A;
    b[0x189] = 0x02;
    b[0x180..0x188].copy_from_slice(&0x0900000000000000u64.to_le_bytes());
    let hwid = hex::decode("1e550a8ee5cf9f4d").expect("hex");
    b[0x1A0..0x1E0].fill(0);
    b[0x1A0..0x1A8].copy_from_slice(&hwid);
    let r = attestation::snp::AttestationReport::from_bytes(&b).expect("report");
    let url = verifier_lib::collateral::kds::vcek_url(
        "https://kds.example",
        attestation::snp::Product::Turin,
        &r,
    )
    .expect("url");
    assert_eq!(
        url,
        "https://kds.example/vcek/v1/Turin/1e550a8ee5cf9f4d?fmcSPL=00&blSPL=00&teeSPL=00&snpSPL=00&ucodeSPL=09"
    );
    // Nonzero CHIP_ID bytes after the first eight are refused.
    b[0x1B0] = 1;
    let r = attestation::snp::AttestationReport::from_bytes(&b).expect("report");
    assert!(verifier_lib::collateral::kds::vcek_url(
        "https://kds.example",
        attestation::snp::Product::Turin,
        &r
    )
    .is_err());
}

#[test]
fn from_pcs_responses_converts_saved_responses_to_the_vector_collateral() {
    let Some(v) = vectors() else { return };
    let name = "automata-v4-00806f-outofdate-padded";
    let raw = v.join("tdx").join(name).join("collateral_raw");
    let dir = tempfile::tempdir().expect("tmp");
    for e in std::fs::read_dir(&raw).expect("raw") {
        let e = e.expect("entry");
        std::fs::write(dir.path().join(e.file_name()), read(e.path())).expect("copy");
    }
    std::fs::write(
        dir.path().join("intel_sgx_root_ca.pem"),
        read(v.join("tdx/roots/intel_sgx_root_ca.pem")),
    )
    .expect("root");
    let tv = tdx_vector(&v, name);
    let out = tempfile::tempdir().expect("tmp");
    let (code, stdout, stderr) = cli(&[
        "fetch",
        "--from-pcs-responses",
        dir.path().to_str().expect("utf8"),
        "--out",
        out.path().to_str().expect("utf8"),
        "--at",
        &tv.reference_time.to_string(),
    ]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    let got: serde_json::Value =
        serde_json::from_slice(&read(out.path().join("collateral.json"))).expect("json");
    for k in ["tcb_info", "qe_identity"] {
        assert_eq!(got[k], tv.file[k], "{k}");
    }
    for k in [
        "tcb_info_signature",
        "qe_identity_signature",
        "pck_crl",
        "root_ca_crl",
    ] {
        assert_eq!(
            got[k].as_str().map(str::to_lowercase),
            tv.file[k].as_str().map(str::to_lowercase),
            "{k}"
        );
    }
    // The converted file verifies the quote as the vector's does (OutOfDate, accepted on request).
    let (code, stdout, _) = cli(&[
        "tdx-quote",
        v.join("tdx")
            .join(name)
            .join("quote.bin")
            .to_str()
            .expect("utf8"),
        "--collateral",
        out.path().join("collateral.json").to_str().expect("utf8"),
        "--at",
        &tv.reference_time.to_string(),
        "--accept-tcb-status",
        "OutOfDate",
        "--json",
    ]);
    assert_eq!(code, 0, "{stdout}");
    // A directory lacking a part names it.
    std::fs::remove_file(dir.path().join("qe_identity_response.json")).expect("rm");
    let (code, _, stderr) = cli(&[
        "fetch",
        "--from-pcs-responses",
        dir.path().to_str().expect("utf8"),
        "--out",
        out.path().to_str().expect("utf8"),
        "--at",
        &tv.reference_time.to_string(),
    ]);
    assert_eq!(code, 2);
    assert!(stderr.contains("QE Identity"), "{stderr}");
}

#[test]
fn https_proxy_is_used_and_no_proxy_bypasses_it() {
    use verifier_lib::collateral::http::{Client, HttpOptions};
    let srv = FakeServer::start();
    // Through a proxy, the request line carries the absolute URL; the fake server plays the proxy here, so
    // the name kds.example is never resolved.
    let target = "http://kds.example/vcek/v1/Milan/cert_chain";
    srv.route(target, vec![Reply::ok("via proxy")]);
    let opts = HttpOptions {
        proxy: Some(srv.base.clone()),
        timeout: Duration::from_secs(5),
        ..HttpOptions::default()
    };
    let c = Client::new(opts.clone()).expect("client");
    assert_eq!(c.get(target).expect("proxied").body, b"via proxy");
    assert_eq!(srv.hits(target), 1);
    // NO_PROXY: the loopback server is reached directly although the proxy (a closed port) would fail.
    srv.route("/direct", vec![Reply::ok("direct")]);
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let dead = format!("http://{}", closed.local_addr().expect("addr"));
    drop(closed);
    let c = Client::new(HttpOptions {
        proxy: Some(dead.clone()),
        no_proxy: vec!["127.0.0.1".into()],
        ..opts.clone()
    })
    .expect("client");
    assert_eq!(
        c.get(&format!("{}/direct", srv.base)).expect("direct").body,
        b"direct"
    );
    let c = Client::new(HttpOptions {
        proxy: Some(dead),
        ..opts
    })
    .expect("client");
    let e = c
        .get(&format!("{}/direct", srv.base))
        .expect_err("must fail");
    assert!(e.to_string().contains("/direct"), "{e}");
}

#[test]
fn the_cli_takes_its_proxy_from_https_proxy() {
    let Some(v) = vectors() else { return };
    // The fake server plays the proxy: requests for kds.example arrive with the absolute URL, so the name is
    // never resolved and nothing leaves loopback.
    let srv = FakeServer::start();
    let scratch = FakeServer::start();
    let (_, chain_route, vcek_route) = serve_snp(&scratch, &v, "genoa-v3-yaxi", "Genoa");
    let dir = v.join("snp/genoa-v3-yaxi");
    let host = "http://kds.example";
    srv.route(
        &format!("{host}{chain_route}"),
        vec![Reply::ok(
            [read(dir.join("ask.pem")), read(dir.join("ark.pem"))].concat(),
        )],
    );
    srv.route(
        &format!("{host}{vcek_route}"),
        vec![Reply::ok(read(dir.join("vcek.der")))],
    );
    let out = tempfile::tempdir().expect("tmp");
    let run = |env: &[(&str, &str)]| {
        let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_verify-attestation"));
        c.args([
            "fetch",
            dir.join("report.bin").to_str().expect("utf8"),
            "--kds-url",
            host,
            "--no-cache",
            "--no-crl",
            "--out",
            out.path().to_str().expect("utf8"),
        ])
        .env_remove("HTTPS_PROXY")
        .env_remove("https_proxy")
        .env_remove("NO_PROXY")
        .env_remove("no_proxy");
        for (k, val) in env {
            c.env(k, val);
        }
        let o = c.output().expect("run");
        (
            o.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    let (code, err) = run(&[("HTTPS_PROXY", &srv.base)]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(srv.hits(&format!("{host}{chain_route}")), 1);
    assert_eq!(srv.hits(&format!("{host}{vcek_route}")), 1);
    assert_eq!(
        read(out.path().join("vcek.der")),
        read(dir.join("vcek.der"))
    );
    // NO_PROXY naming the host (no port in the URL, as with the real services): the proxy, here a closed
    // port, is bypassed and the loopback KDS is reached directly.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let dead = format!("http://{}", closed.local_addr().expect("addr"));
    drop(closed);
    let direct = scratch.base.clone();
    let run2 = |env: &[(&str, &str)]| {
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_verify-attestation"))
            .args([
                "fetch",
                dir.join("report.bin").to_str().expect("utf8"),
                "--kds-url",
                &direct,
                "--no-cache",
                "--no-crl",
                "--out",
                out.path().to_str().expect("utf8"),
            ])
            .env_remove("NO_PROXY")
            .env_remove("no_proxy")
            .env_remove("https_proxy")
            .envs(env.iter().copied())
            .output()
            .expect("run");
        (
            o.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    let (code, err) = run2(&[
        ("HTTPS_PROXY", &dead),
        ("NO_PROXY", "example.org,127.0.0.1"),
    ]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(scratch.hits(&chain_route), 1);
    // Without NO_PROXY the dead proxy is used, and the error names the URL.
    let (code, err) = run2(&[("HTTPS_PROXY", &dead)]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains(&chain_route), "{err}");
    assert_eq!(scratch.hits(&chain_route), 1);
}

#[test]
fn pcs_urls_follow_the_v4_api() {
    use verifier_lib::collateral::pcs::*;
    let b = "https://pccs.example/";
    assert_eq!(
        tcb_info_url(b, Tee::Tdx, "b0c06f000000", Update::Early),
        "https://pccs.example/tdx/certification/v4/tcb?fmspc=b0c06f000000&update=early"
    );
    assert_eq!(
        tcb_info_url(b, Tee::Sgx, "00906ed50000", Update::Standard),
        "https://pccs.example/sgx/certification/v4/tcb?fmspc=00906ed50000&update=standard"
    );
    assert_eq!(
        qe_identity_url(b, Update::Early),
        "https://pccs.example/tdx/certification/v4/qe/identity?update=early"
    );
    assert_eq!(
        pck_crl_url(b, PckCa::Processor),
        "https://pccs.example/sgx/certification/v4/pckcrl?ca=processor&encoding=der"
    );
    assert!("sometimes".parse::<Update>().is_err());
}
