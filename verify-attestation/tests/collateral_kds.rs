//! KDS beyond the VCEK happy path, against the loopback fake KDS: the VLEK side (`/vlek/v1/{product}/
//! cert_chain` and `crl`, real AWS VLEK vectors; the VLEK itself is named as the provider's to give), and the
//! whole valid-CRL path with CRLs the test signs with the sim ARK (good CRL accepted, revoked ASK rejected,
//! a forged one refused, a stale CRL refetched online and a named failure offline, the VLEK side's CRL cached
//! under its own key). The vectors hold no AMD CRL to parse.

mod collateral_common;

use attestation::sim::SimPsp;
use attestation::snp::{AttestationReport, Product};
use collateral_common::{cli, client, read, vectors, FakeServer, Reply};
use std::time::Duration;
use verifier_lib::collateral::kds::{self, Endorsement, Kds};
use verifier_lib::collateral::FetchError;
use x509_parser::prelude::{FromDer, X509Certificate};

const VLEK_VECTOR: &str = "snp/milan-v3-vlek-aws-trustee";
/// 2025-06-01T00:00:00Z: inside the AWS VLEK's validity (2024-12-10 .. 2025-12-10).
const VLEK_AT: i64 = 1_748_736_000;

fn serve_vlek_chain(srv: &FakeServer, v: &std::path::Path) -> String {
    let dir = v.join(VLEK_VECTOR);
    let route = "/vlek/v1/Milan/cert_chain".to_string();
    srv.route(
        &route,
        vec![Reply::ok(
            [read(dir.join("asvk.pem")), read(dir.join("ark.pem"))].concat(),
        )],
    );
    route
}

fn der_of_pem(pem: &[u8]) -> Vec<u8> {
    let text = String::from_utf8_lossy(pem);
    let b64: String = text.lines().filter(|l| !l.starts_with("-----")).collect();
    base64::Engine::decode(&base64::engine::general_purpose::STANDARD, b64).expect("pem")
}

#[test]
fn vlek_report_fetches_the_asvk_chain_and_names_the_vlek_as_the_providers() {
    let Some(v) = vectors() else { return };
    let srv = FakeServer::start();
    let route = serve_vlek_chain(&srv, &v);
    let report =
        AttestationReport::from_bytes(&read(v.join(VLEK_VECTOR).join("report.bin"))).expect("r");
    let http = client(Duration::from_secs(5), 0);
    let k = collateral_common::kds(&http, &srv, None);
    let e = k
        .for_report(&report, None, false, VLEK_AT)
        .expect_err("a VLEK cannot be fetched");
    assert_eq!(e.check(), "collateral-vlek");
    let msg = e.to_string();
    assert!(
        msg.contains("SIGNING_KEY is VLEK")
            && msg.contains("cloud provider")
            && msg.contains("--vlek"),
        "{msg}"
    );
    let FetchError::VlekNotFetchable { partial } = e else {
        panic!("not VlekNotFetchable")
    };
    assert_eq!(srv.hits(&route), 1, "the ASVK chain is asked for once");
    assert_eq!(
        partial.ask,
        der_of_pem(&read(v.join(VLEK_VECTOR).join("asvk.pem")))
    );
    assert!(partial.vcek.is_empty());

    // With the VLEK the founder got from the provider: checked against the ASVK and the report.
    let vlek = read(v.join(VLEK_VECTOR).join("vlek.der"));
    let got = k
        .for_vlek_report(&report, None, false, Some(&vlek), VLEK_AT)
        .expect("VLEK given");
    assert_eq!(got.vcek, vlek);
    let opts = verifier_lib::snp::ChainOptions {
        at: time::OffsetDateTime::from_unix_timestamp(VLEK_AT).expect("t"),
        ..Default::default()
    };
    let r = verifier_lib::snp::verify_report(&report, &got.bundle(), &opts, &Default::default());
    assert!(r.verified(), "{:?}", r.failures);

    // Another report's VLEK (same CSP, another TCB) is refused, naming the VLEK.
    let other = read(v.join("snp/milan-v2-vlek-aws-constellation-2024/vlek.der"));
    let e = k
        .for_vlek_report(&report, None, false, Some(&other), VLEK_AT)
        .expect_err("another VLEK");
    assert_eq!(e.check(), "collateral-rejected", "{e}");
    assert!(e.to_string().contains("VLEK"), "{e}");

    // The VCEK side's chain (ASK + ARK) served on the VLEK path is refused: the ARK signed it, but a VLEK does
    // not verify under an ASK.
    srv.route(
        &route,
        vec![Reply::ok(read(v.join("snp/roots/milan/cert_chain.pem")))],
    );
    let fresh = collateral_common::kds(&http, &srv, None);
    let e = fresh
        .for_vlek_report(&report, None, false, Some(&vlek), VLEK_AT)
        .expect_err("ASK in place of ASVK");
    assert_eq!(e.check(), "collateral-rejected", "{e}");
}

#[test]
fn vlek_crl_url_and_its_absence_is_named() {
    let Some(v) = vectors() else { return };
    assert_eq!(
        kds::crl_url_for("https://kds.example/", Product::Genoa, Endorsement::Vlek),
        "https://kds.example/vlek/v1/Genoa/crl"
    );
    assert_eq!(
        kds::chain_url("https://kds.example", Product::Turin, Endorsement::Vlek),
        "https://kds.example/vlek/v1/Turin/cert_chain"
    );
    let srv = FakeServer::start();
    serve_vlek_chain(&srv, &v);
    let report =
        AttestationReport::from_bytes(&read(v.join(VLEK_VECTOR).join("report.bin"))).expect("r");
    let http = client(Duration::from_secs(5), 0);
    let e = collateral_common::kds(&http, &srv, None)
        .for_report(&report, None, true, VLEK_AT)
        .expect_err("no CRL served");
    let msg = e.to_string();
    assert!(
        msg.contains("/vlek/v1/Milan/crl") && msg.contains("HTTP 404"),
        "{msg}"
    );
    assert_eq!(srv.hits("/vlek/v1/Milan/crl"), 1);
}

#[test]
fn fetch_cli_on_a_vlek_report_writes_the_asvk_chain_and_needs_the_vlek() {
    let Some(v) = vectors() else { return };
    let srv = FakeServer::start();
    serve_vlek_chain(&srv, &v);
    let dir = tempfile::tempdir().expect("tmp");
    let out = dir.path().join("certs");
    let cache = dir.path().join("cache");
    let report = v.join(VLEK_VECTOR).join("report.bin");
    let at = VLEK_AT.to_string();
    let args = |extra: &[&str]| {
        let mut a = vec![
            "fetch",
            report.to_str().expect("utf8"),
            "--out",
            out.to_str().expect("utf8"),
            "--kds-url",
            &srv.base,
            "--cache",
            cache.to_str().expect("utf8"),
            "--no-crl",
            "--at",
            &at,
        ];
        a.extend_from_slice(extra);
        cli(&a)
    };
    let (code, stdout, stderr) = args(&["--json"]);
    assert_eq!(code, 2, "{stdout}{stderr}");
    let all = format!("{stdout}{stderr}");
    assert!(
        all.contains("collateral-vlek") && all.contains("SIGNING_KEY is VLEK"),
        "{all}"
    );
    assert!(all.contains("asvk.pem"), "it says what it wrote: {all}");
    assert!(out.join("ark.pem").is_file() && out.join("asvk.pem").is_file());
    assert!(!out.join("vlek.der").exists());

    let vlek = v.join(VLEK_VECTOR).join("vlek.der");
    let (code, stdout, stderr) = args(&["--vlek", vlek.to_str().expect("utf8")]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert_eq!(read(out.join("vlek.der")), read(&vlek));
    // The directory is the one `snp-report --certs` reads.
    let (code, stdout, stderr) = cli(&[
        "snp-report",
        report.to_str().expect("utf8"),
        "--certs",
        out.to_str().expect("utf8"),
        "--at",
        &at,
        "--json",
    ]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    // The same as one offline bundle: `snp-report --collateral` verifies the VLEK-signed report with it.
    let bundle = dir.path().join("vlek.bundle.json");
    let (code, stdout, stderr) = cli(&[
        "fetch",
        report.to_str().expect("utf8"),
        "--bundle",
        bundle.to_str().expect("utf8"),
        "--kds-url",
        &srv.base,
        "--cache",
        cache.to_str().expect("utf8"),
        "--no-crl",
        "--at",
        &at,
        "--vlek",
        vlek.to_str().expect("utf8"),
    ]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    let (code, stdout, stderr) = cli(&[
        "snp-report",
        report.to_str().expect("utf8"),
        "--collateral",
        bundle.to_str().expect("utf8"),
        "--at",
        &at,
        "--json",
    ]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    // A verify command cannot complete a VLEK-signed report from KDS: named before any request.
    let before = srv.total_hits();
    let (code, stdout, stderr) = cli(&[
        "snp-report",
        report.to_str().expect("utf8"),
        "--online",
        "--kds-url",
        &srv.base,
        "--no-cache",
        "--json",
    ]);
    assert_eq!(code, 2, "{stdout}{stderr}");
    assert!(
        stdout.contains("SIGNING_KEY is VLEK") && stdout.contains("--certs"),
        "{stdout}"
    );
    assert_eq!(srv.total_hits(), before);
    // --vlek on a VCEK-signed report is an input error.
    let vcek_report = v.join("snp/genoa-v3-yaxi/report.bin");
    let (code, stdout, stderr) = cli(&[
        "fetch",
        vcek_report.to_str().expect("utf8"),
        "--out",
        out.to_str().expect("utf8"),
        "--kds-url",
        &srv.base,
        "--no-cache",
        "--vlek",
        vlek.to_str().expect("utf8"),
    ]);
    assert_eq!(code, 2, "{stdout}{stderr}");
    assert!(stderr.contains("not VLEK"), "{stdout}{stderr}");
}

// ---- The valid-CRL path with the sim ARK. ----

struct SimKds {
    srv: FakeServer,
    psp: SimPsp,
    report: Vec<u8>,
    crl_route: String,
}

const DAY: u64 = 86_400;

fn now() -> u64 {
    time::OffsetDateTime::now_utc().unix_timestamp() as u64
}

fn sim_kds() -> SimKds {
    // One sim state for these tests (its RSA keys are made once), beside the other tests' in the target dir.
    let state =
        std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("fenced-run-collateral-kds-sim");
    let psp = SimPsp::new(&state, Product::Milan).expect("sim psp");
    let (report, certs) = psp
        .sign_report(psp.report_template([0x11; 48], [0x22; 64]))
        .expect("sign");
    let srv = FakeServer::start();
    let pem = |der: &[u8]| {
        format!(
            "-----BEGIN CERTIFICATE-----\n{}\n-----END CERTIFICATE-----\n",
            base64::Engine::encode(&base64::engine::general_purpose::STANDARD, der)
        )
    };
    srv.route(
        "/vcek/v1/Milan/cert_chain",
        vec![Reply::ok(pem(psp.ask_der()) + &pem(psp.ark_der()))],
    );
    let r = AttestationReport::from_bytes(&report).expect("report");
    let url = kds::vcek_url(&srv.base, Product::Milan, &r).expect("vcek url");
    srv.route(
        url.trim_start_matches(&srv.base),
        vec![Reply::ok(certs[0].clone())],
    );
    SimKds {
        srv,
        psp,
        report,
        crl_route: "/vcek/v1/Milan/crl".into(),
    }
}

fn sim_kds_client<'a>(
    http: &'a verifier_lib::collateral::http::Client,
    s: &SimKds,
    cache: Option<&'a verifier_lib::collateral::cache::Cache>,
) -> Kds<'a> {
    Kds {
        http,
        base: s.srv.base.clone(),
        cache,
        allow_simulated: true,
    }
}

#[test]
fn a_sim_root_is_refused_unless_simulated_roots_are_allowed() {
    let s = sim_kds();
    let http = client(Duration::from_secs(5), 0);
    let r = AttestationReport::from_bytes(&s.report).expect("report");
    let t = now() as i64;
    let e = collateral_common::kds(&http, &s.srv, None)
        .for_report(&r, None, false, t)
        .expect_err("sim root without allow_simulated");
    assert!(e.to_string().contains("not AMD's pinned Milan root"), "{e}");
    sim_kds_client(&http, &s, None)
        .for_report(&r, None, false, t)
        .expect("allowed");
}

#[test]
fn a_good_ark_signed_crl_is_accepted_and_a_revoked_ask_rejected_through_the_fake_kds() {
    let s = sim_kds();
    let t = now();
    let good = s
        .psp
        .ark_crl_der(t - DAY, t + 30 * DAY, &[&[0x7f, 0x01]])
        .expect("crl");
    // A real AMD CRL has the same shape: ARK-issued, RSASSA-PSS, thisUpdate/nextUpdate.
    s.srv.route(&s.crl_route, vec![Reply::ok(good.clone())]);
    let http = client(Duration::from_secs(5), 0);
    let r = AttestationReport::from_bytes(&s.report).expect("report");
    let got = sim_kds_client(&http, &s, None)
        .for_report(&r, None, true, t as i64)
        .expect("good CRL");
    assert_eq!(got.crl.as_deref(), Some(&good[..]));
    let opts = verifier_lib::snp::ChainOptions {
        crl: got.crl.clone(),
        allow_simulated: true,
        ..Default::default()
    };
    let v = verifier_lib::snp::verify_report(&r, &got.bundle(), &opts, &Default::default());
    assert!(v.verified(), "{:?}", v.failures);

    // Through the CLI: snp-report --online takes the chain, VCEK and CRL from the fake KDS.
    let dir = tempfile::tempdir().expect("tmp");
    let rp = dir.path().join("report.bin");
    std::fs::write(&rp, &s.report).expect("write");
    let run = |cache: &str| {
        cli(&[
            "snp-report",
            rp.to_str().expect("utf8"),
            "--online",
            "--kds-url",
            &s.srv.base,
            "--cache",
            cache,
            "--allow-simulated",
            "--json",
        ])
    };
    let c1 = dir.path().join("c1");
    let (code, out, err) = run(c1.to_str().expect("utf8"));
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        c1.join("kds-sim/Milan/crl.json").is_file(),
        "sim answers are cached apart from real ones"
    );
    assert!(!c1.join("kds").exists());
    // `fetch --allow-simulated` serves the same entries (no new request) and writes the certificate directory;
    // without the flag the sim entries are not used and the sim root is refused.
    let hits = s.srv.total_hits();
    let out_dir = dir.path().join("out");
    let fetch = |extra: &[&str]| {
        let mut a = vec![
            "fetch",
            rp.to_str().expect("utf8"),
            "--out",
            out_dir.to_str().expect("utf8"),
            "--kds-url",
            &s.srv.base,
            "--cache",
            c1.to_str().expect("utf8"),
        ];
        a.extend_from_slice(extra);
        cli(&a)
    };
    let (code, out, err) = fetch(&["--allow-simulated"]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(s.srv.total_hits(), hits, "served from kds-sim/");
    assert_eq!(read(out_dir.join("crl.der")), good);
    let (code, out, err) = fetch(&[]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(err.contains("not AMD's pinned Milan root"), "{err}");

    // The CRL revokes the ASK that issued the VCEK: the report is rejected, the revocation named.
    let (_, ask) = X509Certificate::from_der(s.psp.ask_der()).expect("ask");
    let revoked = s
        .psp
        .ark_crl_der(t - DAY, t + 30 * DAY, &[ask.raw_serial()])
        .expect("crl");
    s.srv.route(&s.crl_route, vec![Reply::ok(revoked)]);
    let c2 = dir.path().join("c2");
    let (code, out, err) = run(c2.to_str().expect("utf8"));
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.contains("revoked"), "{out}");

    // A CRL the ASK key signed under the ARK's name is refused at fetch time, and nothing is cached.
    let forged = {
        let mut b = good.clone();
        let n = b.len();
        b[n - 1] ^= 0x01;
        b
    };
    s.srv.route(&s.crl_route, vec![Reply::ok(forged)]);
    let c3 = dir.path().join("c3");
    let (code, out, err) = run(c3.to_str().expect("utf8"));
    assert_eq!(code, 2, "{out}{err}");
    assert!(
        out.contains("collateral-rejected") && out.contains("/vcek/v1/Milan/crl"),
        "{out}"
    );
    assert!(!c3.join("kds-sim/Milan/crl.json").exists());
}

#[test]
fn a_stale_crl_is_refetched_online_and_a_named_failure_offline() {
    let s = sim_kds();
    let t0 = now();
    // First CRL: current for one hour from t0.
    let first = s.psp.ark_crl_der(t0, t0 + 3600, &[]).expect("crl");
    let second = s
        .psp
        .ark_crl_der(t0 + 5400, t0 + 30 * DAY, &[])
        .expect("crl");
    s.srv.route(
        &s.crl_route,
        vec![Reply::ok(first.clone()), Reply::ok(second.clone())],
    );
    let dir = tempfile::tempdir().expect("tmp");
    let rp = dir.path().join("report.bin");
    std::fs::write(&rp, &s.report).expect("write");
    let cache = dir.path().join("cache");
    let run = |at: u64, online: bool| {
        let at = at.to_string();
        let mut a = vec![
            "snp-report",
            rp.to_str().expect("utf8"),
            "--kds-url",
            &s.srv.base,
            "--cache",
            cache.to_str().expect("utf8"),
            "--allow-simulated",
            "--at",
            &at,
            "--json",
        ];
        if online {
            a.push("--online");
        }
        let (code, out, err) = cli(&a);
        (code, format!("{out}{err}"))
    };
    let (code, out) = run(t0 + 600, true);
    assert_eq!(code, 0, "{out}");
    assert_eq!(s.srv.hits(&s.crl_route), 1);
    // Within its nextUpdate the cached CRL serves offline.
    let (code, out) = run(t0 + 1200, false);
    assert_eq!(code, 0, "{out}");
    // Past nextUpdate: offline it is a named failure with the key and the time it expired.
    let (code, out) = run(t0 + 7200, false);
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains("collateral-stale") && out.contains("kds-sim/Milan/crl"),
        "{out}"
    );
    assert_eq!(s.srv.hits(&s.crl_route), 1, "offline asks nothing");
    // Online it is fetched again (the chain and VCEK still come from the cache).
    let (code, out) = run(t0 + 7200, true);
    assert_eq!(code, 0, "{out}");
    assert_eq!(s.srv.hits(&s.crl_route), 2, "the stale CRL was refetched");
    assert_eq!(s.srv.hits("/vcek/v1/Milan/cert_chain"), 1);
    // A server that still serves the stale CRL is refused (it is never cached or used).
    s.srv.route(&s.crl_route, vec![Reply::ok(first)]);
    let (code, out) = run(t0 + 40 * DAY, true);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("stale") || out.contains("nextUpdate"), "{out}");
}

#[test]
fn the_vlek_sides_crl_is_fetched_verified_and_cached_under_its_own_key() {
    // The sim has no ASVK; its ASK stands in for one here: the VLEK CRL path checks the same things (issued
    // and signed by the ARK, current) and caches under its own key.
    let s = sim_kds();
    let t = now();
    let crl = s.psp.ark_crl_der(t - DAY, t + 30 * DAY, &[]).expect("crl");
    s.srv
        .route("/vlek/v1/Milan/crl", vec![Reply::ok(crl.clone())]);
    let dir = tempfile::tempdir().expect("tmp");
    let cache = verifier_lib::collateral::cache::Cache::new(dir.path());
    let http = client(Duration::from_secs(5), 0);
    let k = sim_kds_client(&http, &s, Some(&cache));
    let (got, origin, url) = k
        .crl_for(
            Product::Milan,
            Endorsement::Vlek,
            s.psp.ask_der(),
            s.psp.ark_der(),
            t as i64,
        )
        .expect("VLEK CRL");
    assert_eq!(got, crl);
    assert_eq!(origin, verifier_lib::collateral::cache::Origin::Fetched);
    assert!(url.ends_with("/vlek/v1/Milan/crl"), "{url}");
    let entry = cache
        .read("kds-sim/Milan/vlek_crl")
        .expect("cached under the VLEK key");
    assert_eq!(entry.expires, (t + 30 * DAY) as i64);
    assert!(
        cache.read("kds-sim/Milan/crl").is_none(),
        "apart from the VCEK side's"
    );
    // A CRL signed by another key at the VLEK URL is refused and not cached.
    let mut forged = crl.clone();
    let n = forged.len();
    forged[n - 1] ^= 0x01;
    s.srv.route("/vlek/v1/Milan/crl", vec![Reply::ok(forged)]);
    let other = tempfile::tempdir().expect("tmp");
    let cache2 = verifier_lib::collateral::cache::Cache::new(other.path());
    let e = sim_kds_client(&http, &s, Some(&cache2))
        .crl_for(
            Product::Milan,
            Endorsement::Vlek,
            s.psp.ask_der(),
            s.psp.ark_der(),
            t as i64,
        )
        .expect_err("forged");
    assert_eq!(e.check(), "collateral-rejected", "{e}");
    assert!(cache2.read("kds-sim/Milan/vlek_crl").is_none());
}
