//! Issue 35, "Fail closed, and say what was checked against what": with `--collateral-auditor-key`, collateral from
//! every source but a signed bundle is refused (`collateral-unsigned`): the collateral TDX evidence carries, a bare
//! `collateral.json`, the cache, `--online` (TDX, on dcap-qvl's real v4 vector and a loopback fake PCS), and the
//! certificates SEV-SNP evidence carries, `--certs`, `--crl`, a `--tcb-baseline` file, the cache and `--online`
//! (SEV-SNP, on a sim PSP and a loopback fake KDS); each source without keys is used. The usage errors of the
//! flags; one claim per row, `not pinned` when nothing is pinned, the anchors of held claims; `--pool-attempt`
//! named; `--policy FILE` without a measurement; the URL that served collateral after a redirect.

mod collateral_common;

use attestation::binding;
use attestation::evidence::{Collateral, Evidence, TeeLabel};
use attestation::sim::tdx::{SimQe, SimTd, SimTdxTee};
use attestation::tee::Tee;
use attestation::verdict::{Inputs, Isolation, Outcome, Verdict};
use collateral_common::{cli, FakeServer, Reply};
use p384::ecdsa::SigningKey;
use sha2::{Digest, Sha384};
use std::path::{Path, PathBuf};
use verifier_lib::collateral::bundle::{Bundle, Content, BUNDLE_FORMAT};

/// Runs `verify-attestation` and reads its one JSON object: (exit code, JSON, all output).
fn json_run(args: &[&str]) -> (i32, serde_json::Value, String) {
    let (code, out, err) = cli(args);
    let j = serde_json::from_str(out.trim())
        .unwrap_or_else(|e| panic!("one JSON object ({e}): {out}{err}"));
    (code, j, format!("{out}{err}"))
}

/// The failed checks' names.
fn checks(j: &serde_json::Value) -> Vec<String> {
    j["failures"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|f| f["check"].as_str().unwrap_or("").to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// The claim `name` of a JSON result.
fn claim<'a>(j: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    j["claims"]
        .as_array()
        .and_then(|a| a.iter().find(|c| c["claim"] == name))
        .unwrap_or_else(|| panic!("no claim {name}: {j}"))
}

/// An auditor: its key, and the path of its public key file.
struct Auditor {
    key: ed25519_dalek::SigningKey,
    public: String,
    id: String,
}

fn auditor(dir: &Path, name: &str) -> Auditor {
    let key = measurements::set::generate_key();
    let p = dir.join(format!("{name}.pub"));
    std::fs::write(
        &p,
        measurements::set::public_key_pem(&key.verifying_key()).expect("pem"),
    )
    .expect("write");
    let id = verifier_lib::collateral::bundle::key_id(&key.verifying_key().to_bytes());
    Auditor {
        key,
        public: p.to_str().expect("utf8").to_string(),
        id,
    }
}

fn write_bundle(path: &Path, b: &Bundle) -> String {
    std::fs::write(path, b.to_json()).expect("write");
    path.to_str().expect("utf8").to_string()
}

fn tdx_bundle(collateral_json: &[u8]) -> Bundle {
    Bundle::new(Content {
        format: BUNDLE_FORMAT.into(),
        created: "2026-12-01T00:00:00Z".into(),
        subject: "tdx.evidence".into(),
        snp: None,
        tdx: Some(serde_json::from_slice(collateral_json).expect("collateral.json")),
        sources: vec!["https://pcs.example/tdx".into()],
    })
}

/// TDX evidence holding dcap-qvl's real v4 quote, sealed here (so only `key-binding` fails whatever the
/// collateral): each source of collateral is used without auditor keys and refused with them, but a bundle the
/// auditors signed, k of n.
#[test]
fn tdx_every_collateral_source_needs_the_auditors_once_keys_are_named() {
    let Some(v) = collateral_common::vectors() else {
        return;
    };
    let tv = collateral_common::tdx_vector(&v, "dcapqvl-v4-b0c06f-uptodate");
    let srv = FakeServer::start();
    tv.serve_all(&srv);
    let dir = tempfile::tempdir().expect("tmp");
    let k = SigningKey::from_slice(&Sha384::digest(b"guest")).expect("key");
    let nonce = [9u8; 32];
    let verdict = Verdict::new(
        Outcome::TestsPassed,
        Isolation::Tdx,
        Inputs {
            nonce: nonce.to_vec(),
            ..Inputs::default()
        },
        "test",
    );
    let seal = |name: &str, collateral: Option<Collateral>| {
        let ev = Evidence::seal(
            TeeLabel::Tdx,
            tv.quote.clone(),
            vec![],
            collateral,
            &k,
            &verdict,
        )
        .expect("seal");
        let p = dir.path().join(name);
        std::fs::write(&p, ev.to_cbor().expect("cbor")).expect("write");
        p.to_str().expect("utf8").to_string()
    };
    let carried = seal(
        "carried.evidence",
        Some(Collateral::Bytes(tv.collateral_json.clone())),
    );
    let bare = seal("bare.evidence", None);
    let coll = dir.path().join("collateral.json");
    std::fs::write(&coll, &tv.collateral_json).expect("write");
    let coll = coll.to_str().expect("utf8").to_string();
    let exp: serde_json::Value = serde_json::from_slice(&collateral_common::read(
        v.join("tdx/dcapqvl-v4-b0c06f-uptodate/expected.json"),
    ))
    .expect("expected");
    let mrtd = exp["fields"]["mrtd"].as_str().expect("mrtd").to_string();
    let at = tv.reference_time.to_string();
    let n_hex = hex::encode(nonce);
    let cache = dir.path().join("cache");
    let cache = cache.to_str().expect("utf8").to_string();
    let root_crl = format!("{}{}", srv.base, collateral_common::ROOT_CRL_ROUTE);
    let a = auditor(dir.path(), "alice");
    let b = auditor(dir.path(), "bob");
    let run = |ev: &str, extra: &[&str]| {
        let mut args = vec![
            "evidence",
            ev,
            "--nonce",
            &n_hex,
            "--mrtd",
            &mrtd,
            "--leave-rtmrs-unpinned",
            "--at",
            &at,
            "--json",
        ];
        args.extend_from_slice(extra);
        json_run(&args)
    };
    let online: Vec<&str> = vec![
        "--online",
        "--pcs-url",
        &srv.base,
        "--root-crl-url",
        &root_crl,
        "--cache",
        &cache,
    ];
    let offline: Vec<&str> = vec!["--cache", &cache];
    let bare_file: Vec<&str> = vec!["--collateral", &coll];
    // (name, evidence, flags, the words the collateral claim's anchor starts with)
    let sources: [(&str, &str, &[&str], &str); 4] = [
        ("evidence", &carried, &[], "carried in the evidence"),
        ("bare file", &bare, &bare_file, "bare collateral file"),
        ("online", &bare, &online, "fetched (--online)"),
        ("cache", &bare, &offline, "the cache"),
    ];
    for (name, ev, flags, anchor) in sources {
        // Without keys: used; only the binding (the test's sealing key) fails.
        let (code, j, all) = run(ev, flags);
        assert_eq!(code, 1, "{name}: {all}");
        assert_eq!(checks(&j), ["key-binding"], "{name}: {all}");
        let c = claim(&j, "collateral");
        assert_eq!(c["status"], "held", "{name}: {all}");
        let got = c["anchor"].as_str().expect("anchor");
        assert!(
            got.starts_with(anchor) && got.contains("signed by no auditor"),
            "{name}: {got}"
        );
        let chain = claim(&j, "chain");
        assert_eq!(chain["status"], "held", "{name}: {all}");
        assert!(
            chain["anchor"]
                .as_str()
                .is_some_and(|a| a.starts_with("Intel SGX Root CA (pinned)")),
            "{name}: {chain}"
        );
        let tcb = claim(&j, "tcb");
        assert!(
            tcb["anchor"]
                .as_str()
                .is_some_and(|a| a.contains("tcbEvaluationDataNumber 17") && a.contains(anchor)),
            "{name}: {tcb}"
        );
        assert_eq!(claim(&j, "key binding")["status"], "failed", "{all}");
        // With a key: refused before anything is fetched, naming the source and the way out.
        let hits = srv.total_hits();
        let mut with_key = flags.to_vec();
        with_key.extend(["--collateral-auditor-key", &a.public]);
        let (code, j, all) = run(ev, &with_key);
        assert_eq!(code, 1, "{name}: {all}");
        assert_eq!(checks(&j), ["collateral-unsigned"], "{name}: {all}");
        assert!(
            all.contains("--collateral BUNDLE") && all.contains("bundle-sign"),
            "{name}: {all}"
        );
        assert_eq!(srv.total_hits(), hits, "{name}: nothing fetched");
    }
    assert_eq!(srv.total_hits(), 4, "one fetch of each part, by --online");

    // A bundle: used without keys; unsigned with keys, refused; k of n.
    let bundle = tdx_bundle(&tv.collateral_json);
    let bp = dir.path().join("tdx.bundle.json");
    let bs = write_bundle(&bp, &bundle);
    let (code, j, all) = run(&carried, &["--collateral", &bs]);
    assert_eq!((code, checks(&j)), (1, vec!["key-binding".into()]), "{all}");
    assert!(
        claim(&j, "collateral")["anchor"].as_str().is_some_and(|a| a
            .starts_with(&format!("bundle {bs}"))
            && a.contains("https://pcs.example/tdx")),
        "{all}"
    );
    let keyed = ["--collateral", &bs, "--collateral-auditor-key", &a.public];
    let (code, j, all) = run(&carried, &keyed);
    assert_eq!(
        (code, checks(&j)),
        (1, vec!["collateral-unsigned".into()]),
        "{all}"
    );
    let mut signed = bundle.clone();
    signed.sign(&a.key, "alice");
    write_bundle(&bp, &signed);
    let (code, j, all) = run(&carried, &keyed);
    assert_eq!((code, checks(&j)), (1, vec!["key-binding".into()]), "{all}");
    let c = claim(&j, "collateral");
    assert_eq!(c["status"], "held", "{all}");
    assert!(
        c["anchor"]
            .as_str()
            .is_some_and(|x| x.contains(&format!("signed by auditor {}", a.id))),
        "{c}"
    );
    assert_eq!(
        j["collateral_source"]["auditor_keys"][0],
        a.id.as_str(),
        "{all}"
    );
    let two = [
        "--collateral",
        &bs,
        "--collateral-auditor-key",
        &a.public,
        "--collateral-auditor-key",
        &b.public,
        "--collateral-auditors-required",
        "2",
    ];
    let (code, j, all) = run(&carried, &two);
    assert_eq!(
        (code, checks(&j)),
        (1, vec!["collateral-unsigned".into()]),
        "{all}"
    );
    assert!(all.contains("signed by 1 of the 2"), "{all}");
    signed.sign(&b.key, "bob");
    write_bundle(&bp, &signed);
    let (code, j, all) = run(&carried, &two);
    assert_eq!((code, checks(&j)), (1, vec!["key-binding".into()]), "{all}");

    // tdx-quote: a bare collateral.json, the cache, and no collateral at all are refused with a key.
    let qp = dir.path().join("quote.bin");
    std::fs::write(&qp, &tv.quote).expect("write");
    let q = qp.to_str().expect("utf8");
    for flags in [
        vec!["--collateral", coll.as_str()],
        vec!["--cache", cache.as_str()],
        vec![],
    ] {
        let mut args = vec!["tdx-quote", q, "--at", &at, "--json"];
        args.extend(flags.iter().copied());
        let (code, j, all) = json_run(&args);
        assert_eq!(
            code,
            if flags.is_empty() { 1 } else { 0 },
            "{flags:?}: {all}"
        );
        args.extend(["--collateral-auditor-key", &a.public]);
        let (code, j2, all) = json_run(&args);
        assert_eq!(code, 1, "{flags:?}: {all}");
        assert_eq!(checks(&j2), ["collateral-unsigned"], "{flags:?}: {all}");
        drop(j);
    }
    let (code, _, all) = json_run(&[
        "tdx-quote",
        q,
        "--at",
        &at,
        "--json",
        "--collateral",
        &bs,
        "--collateral-auditor-key",
        &a.public,
    ]);
    assert_eq!(code, 0, "{all}");
}

/// A sim SEV-SNP PSP and a loopback fake KDS serving its chain, VCEK and CRL.
struct SnpFixture {
    dir: tempfile::TempDir,
    srv: FakeServer,
    report: Vec<u8>,
    certs: Vec<Vec<u8>>,
    crl: Vec<u8>,
    k: SigningKey,
    nonce: [u8; 32],
    measurement: [u8; 48],
}

fn snp_fixture(state: &str, redirect_chain: bool) -> SnpFixture {
    use attestation::sim::SimPsp;
    use attestation::snp::{AttestationReport, Product};
    const DAY: u64 = 86_400;
    let state = Path::new(env!("CARGO_TARGET_TMPDIR")).join(state);
    let psp = SimPsp::new(&state, Product::Milan).expect("sim psp");
    let k = SigningKey::from_slice(&Sha384::digest(b"snp guest")).expect("key");
    let nonce = [9u8; 32];
    let measurement = [0x44u8; 48];
    let rd = binding::report_data(&p384::PublicKey::from(k.verifying_key()), &nonce);
    let (report, certs) = psp
        .sign_report(psp.report_template(measurement, rd))
        .expect("sign");
    let srv = FakeServer::start();
    let pem = |der: &[u8]| {
        format!(
            "-----BEGIN CERTIFICATE-----\n{}\n-----END CERTIFICATE-----\n",
            base64::Engine::encode(&base64::engine::general_purpose::STANDARD, der)
        )
    };
    let chain = pem(psp.ask_der()) + &pem(psp.ark_der());
    if redirect_chain {
        // The chain is served from a mirror path the KDS path redirects to.
        let to = format!("{}/mirror/Milan/cert_chain", srv.base);
        srv.route(
            "/vcek/v1/Milan/cert_chain",
            vec![Reply::status(302).header("Location", &to)],
        );
        srv.route("/mirror/Milan/cert_chain", vec![Reply::ok(chain)]);
    } else {
        srv.route("/vcek/v1/Milan/cert_chain", vec![Reply::ok(chain)]);
    }
    let r = AttestationReport::from_bytes(&report).expect("report");
    let vcek_url =
        verifier_lib::collateral::kds::vcek_url(&srv.base, Product::Milan, &r).expect("url");
    srv.route(
        vcek_url.trim_start_matches(&srv.base),
        vec![Reply::ok(certs[0].clone())],
    );
    let t = time::OffsetDateTime::now_utc().unix_timestamp() as u64;
    let crl = psp.ark_crl_der(t - DAY, t + 30 * DAY, &[]).expect("crl");
    srv.route("/vcek/v1/Milan/crl", vec![Reply::ok(crl.clone())]);
    SnpFixture {
        dir: tempfile::tempdir().expect("tmp"),
        srv,
        report,
        certs,
        crl,
        k,
        nonce,
        measurement,
    }
}

impl SnpFixture {
    fn seal(&self, name: &str, certs: Vec<Vec<u8>>) -> String {
        let verdict = Verdict::new(
            Outcome::TestsPassed,
            Isolation::Vm,
            Inputs {
                nonce: self.nonce.to_vec(),
                ..Inputs::default()
            },
            "test",
        );
        let ev = Evidence::seal(
            TeeLabel::SimSevSnp,
            self.report.clone(),
            certs,
            None,
            &self.k,
            &verdict,
        )
        .expect("seal");
        let p = self.dir.path().join(name);
        std::fs::write(&p, ev.to_cbor().expect("cbor")).expect("write");
        p.to_str().expect("utf8").to_string()
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn verify(&self, ev: &str, extra: &[&str]) -> (i32, serde_json::Value, String) {
        let m = hex::encode(self.measurement);
        let n = hex::encode(self.nonce);
        let mut a = vec![
            "evidence",
            ev,
            "--nonce",
            &n,
            "--measurement",
            &m,
            "--allow-simulated",
            "--json",
        ];
        a.extend_from_slice(extra);
        json_run(&a)
    }
}

/// SEV-SNP: the certificates the evidence carries, `--online`, the cache, `--crl`, a `--tcb-baseline` file and
/// `snp-report --certs` are used without auditor keys and refused with them; a signed bundle is used.
#[test]
fn snp_every_collateral_source_needs_the_auditors_once_keys_are_named() {
    let f = snp_fixture("fenced-run-collateral-auditors-snp", false);
    let with_certs = f.seal("certs.evidence", f.certs.clone());
    let bare = f.seal("bare.evidence", vec![]);
    let cache = f.path("cache");
    let cache = cache.to_str().expect("utf8").to_string();
    let a = auditor(f.dir.path(), "alice");
    let online: Vec<&str> = vec!["--online", "--kds-url", &f.srv.base, "--cache", &cache];
    let offline: Vec<&str> = vec!["--cache", &cache];
    let crl_path = f.path("crl.der");
    std::fs::write(&crl_path, &f.crl).expect("write");
    let crl = crl_path.to_str().expect("utf8").to_string();
    let crl_flags: Vec<&str> = vec!["--crl", &crl];
    let baseline_path = f.path("baseline.toml");
    // A baseline with no floor: every TCB is at or above it.
    std::fs::write(
        &baseline_path,
        "format = \"fenced-run-snp-tcb-baseline-v1\"\nversion = \"test\"\n",
    )
    .expect("write");
    let baseline = baseline_path.to_str().expect("utf8").to_string();
    let baseline_flags: Vec<&str> = vec!["--tcb-baseline", &baseline];
    let sources: [(&str, &str, &[&str]); 5] = [
        ("evidence certificates", &with_certs, &[]),
        ("online", &bare, &online),
        ("cache", &bare, &offline),
        ("crl file", &with_certs, &crl_flags),
        ("baseline file", &with_certs, &baseline_flags),
    ];
    for (name, ev, flags) in sources {
        let (code, j, all) = f.verify(ev, flags);
        assert_eq!(code, 0, "{name}: {all}");
        assert_eq!(claim(&j, "collateral")["status"], "held", "{name}: {all}");
        if name == "baseline file" {
            let tcb = claim(&j, "tcb");
            assert_eq!(tcb["status"], "held", "{all}");
            assert_eq!(tcb["anchor"], format!("TCB baseline {baseline}"), "{all}");
        }
        let hits = f.srv.total_hits();
        let mut with_key = flags.to_vec();
        with_key.extend(["--collateral-auditor-key", &a.public]);
        let (code, j, all) = f.verify(ev, &with_key);
        assert_eq!(code, 1, "{name}: {all}");
        assert_eq!(checks(&j), ["collateral-unsigned"], "{name}: {all}");
        assert!(all.contains("--collateral BUNDLE"), "{name}: {all}");
        assert_eq!(f.srv.total_hits(), hits, "{name}: nothing fetched");
    }

    // A bundle of the evidence's collateral (from the cache), signed: used with the key.
    let bundle_path = f.path("snp.bundle.json");
    let bp = bundle_path.to_str().expect("utf8").to_string();
    let (code, out, err) = cli(&[
        "fetch",
        &bare,
        "--bundle",
        &bp,
        "--kds-url",
        &f.srv.base,
        "--cache",
        &cache,
        "--allow-simulated",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    let keyed = [
        "--collateral",
        bp.as_str(),
        "--collateral-auditor-key",
        &a.public,
    ];
    let (code, j, all) = f.verify(&bare, &keyed);
    assert_eq!(
        (code, checks(&j)),
        (1, vec!["collateral-unsigned".into()]),
        "{all}"
    );
    let mut signed = Bundle::from_json(&std::fs::read(&bundle_path).expect("read")).expect("b");
    signed.sign(&a.key, "alice");
    write_bundle(&bundle_path, &signed);
    let (code, j, all) = f.verify(&bare, &keyed);
    assert_eq!(code, 0, "{all}");
    let c = claim(&j, "collateral");
    assert!(
        c["anchor"]
            .as_str()
            .is_some_and(|x| x.starts_with(&format!("bundle {bp}"))
                && x.contains(&f.srv.base)
                && x.contains(&a.id)),
        "{c}"
    );
    assert!(
        claim(&j, "chain")["anchor"]
            .as_str()
            .is_some_and(|x| x.contains("not AMD's (simulated")),
        "{all}"
    );
    assert_eq!(claim(&j, "tcb")["status"], "not pinned", "{all}");

    // snp-report --certs DIR: used without keys, refused with them.
    let certs_dir = f.path("certs");
    std::fs::create_dir_all(&certs_dir).expect("mkdir");
    std::fs::write(certs_dir.join("vcek.der"), &f.certs[0]).expect("write");
    std::fs::write(certs_dir.join("ask.der"), &f.certs[1]).expect("write");
    std::fs::write(certs_dir.join("ark.der"), &f.certs[2]).expect("write");
    let rp = f.path("report.bin");
    std::fs::write(&rp, &f.report).expect("write");
    let r = rp.to_str().expect("utf8");
    let d = certs_dir.to_str().expect("utf8");
    let (code, _, all) = json_run(&["snp-report", r, "--certs", d, "--allow-simulated", "--json"]);
    assert_eq!(code, 0, "{all}");
    let (code, j, all) = json_run(&[
        "snp-report",
        r,
        "--certs",
        d,
        "--allow-simulated",
        "--json",
        "--collateral-auditor-key",
        &a.public,
    ]);
    assert_eq!(
        (code, checks(&j)),
        (1, vec!["collateral-unsigned".into()]),
        "{all}"
    );
    let (code, _, all) = json_run(&[
        "snp-report",
        r,
        "--allow-simulated",
        "--json",
        "--collateral",
        &bp,
        "--collateral-auditor-key",
        &a.public,
    ]);
    assert_eq!(code, 0, "{all}");
}

/// Sim TDX evidence (the sim QE), sealed with `nonce` in the verdict and REPORT_DATA; the evidence file's path.
fn sim_tdx_evidence(dir: &Path, nonce: &[u8], mrtd: [u8; 48]) -> String {
    let tee = SimTdxTee::new(
        SimQe::new(dir).expect("sim qe"),
        SimTd {
            mrtd,
            ..SimTd::default()
        },
    );
    let k = SigningKey::from_slice(&Sha384::digest(b"guest")).expect("key");
    let rd = binding::report_data(&p384::PublicKey::from(k.verifying_key()), nonce);
    let raw = tee.get_report(&rd).expect("sim quote");
    let inputs = Inputs {
        nonce: nonce.to_vec(),
        ..Inputs::default()
    };
    let verdict = Verdict::new(Outcome::TestsPassed, Isolation::Vm, inputs, "test");
    let ev = Evidence::seal(
        TeeLabel::SimTdx,
        raw.report,
        raw.certs,
        raw.collateral,
        &k,
        &verdict,
    )
    .expect("seal");
    let p = dir.join("run.evidence");
    std::fs::write(&p, ev.to_cbor().expect("cbor")).expect("write");
    p.to_str().expect("utf8").to_string()
}

/// The usage errors (exit 2): a count without keys names both flags; more required than named; a bundle with
/// --online; --certs with --online.
#[test]
fn the_collateral_flags_usage_errors_are_exit_2_and_name_the_flags() {
    let dir = tempfile::tempdir().expect("tmp");
    let ev = sim_tdx_evidence(dir.path(), &[7u8; 32], [0x3c; 48]);
    let a = auditor(dir.path(), "alice");
    for sub in [
        vec!["evidence", ev.as_str(), "--any-measurement", "--no-nonce"],
        vec!["tdx-quote", "q.bin"],
        vec!["snp-report", "r.bin"],
    ] {
        let mut args = sub.clone();
        args.extend(["--collateral-auditors-required", "2"]);
        let (code, out, err) = cli(&args);
        assert_eq!(code, 2, "{sub:?}: {out}{err}");
        assert!(
            err.contains("--collateral-auditors-required")
                && err.contains("--collateral-auditor-key"),
            "{sub:?}: {err}"
        );
        let mut args = sub.clone();
        args.extend(["--collateral", "c.json", "--online"]);
        let (code, _, err) = cli(&args);
        assert_eq!(code, 2, "{sub:?}: {err}");
        assert!(
            err.contains("--collateral")
                && err.contains("--online")
                && err.contains("cannot be used with"),
            "{sub:?}: {err}"
        );
    }
    let (code, j, all) = json_run(&[
        "evidence",
        &ev,
        "--any-measurement",
        "--no-nonce",
        "--allow-simulated",
        "--json",
        "--collateral-auditor-key",
        &a.public,
        "--collateral-auditors-required",
        "2",
    ]);
    assert_eq!(code, 2, "{all}");
    assert!(
        j["error"]["detail"].as_str().is_some_and(
            |d| d.contains("--collateral-auditors-required 2 with 1 --collateral-auditor-key")
        ),
        "{all}"
    );
    let (code, _, err) = cli(&["snp-report", "r.bin", "--certs", "d", "--online"]);
    assert_eq!(code, 2, "{err}");
    // --collateral FILE with --cache DIR: the cache would go unread.
    let coll = dir.path().join("c.json");
    std::fs::write(&coll, "{}").expect("write");
    let (code, j, all) = json_run(&[
        "evidence",
        &ev,
        "--any-measurement",
        "--no-nonce",
        "--allow-simulated",
        "--json",
        "--collateral",
        coll.to_str().expect("utf8"),
        "--cache",
        dir.path().to_str().expect("utf8"),
    ]);
    assert_eq!(code, 2, "{all}");
    assert!(
        j["error"]["detail"]
            .as_str()
            .is_some_and(|d| d.contains("--collateral")
                && d.contains("--cache")
                && d.contains("unread")),
        "{all}"
    );
}

/// Nothing pinned about the run: every claim of the run is `not pinned`, in the table and the JSON, and a note
/// names the commit, patch and job left out; pinned, they hold with their anchors.
#[test]
fn a_founder_who_pins_nothing_sees_every_not_pinned_row() {
    let dir = tempfile::tempdir().expect("tmp");
    let mrtd = [0x3c; 48];
    let ev = sim_tdx_evidence(dir.path(), &[7u8; 32], mrtd);
    let base = [
        "evidence",
        ev.as_str(),
        "--any-measurement",
        "--no-nonce",
        "--allow-simulated",
    ];
    let mut args = base.to_vec();
    args.push("--json");
    let (code, j, all) = json_run(&args);
    assert_eq!(code, 0, "{all}");
    let names: Vec<&str> = j["claims"]
        .as_array()
        .expect("claims")
        .iter()
        .map(|c| c["claim"].as_str().expect("name"))
        .collect();
    assert_eq!(names, verifier_lib::output::CLAIMS, "{all}");
    for name in [
        "measurement",
        "nonce",
        "pool attempt and execution",
        "outcome",
        "commit",
        "tree",
        "patch",
        "job",
        "test tree",
        "isolation",
    ] {
        let c = claim(&j, name);
        assert_eq!(c["status"], "not pinned", "{name}: {c}");
        assert!(c["anchor"].is_null(), "{name}: {c}");
    }
    for name in [
        "chain",
        "tcb",
        "policy",
        "key binding",
        "verdict signature",
        "collateral",
    ] {
        let c = claim(&j, name);
        assert_eq!(c["status"], "held", "{name}: {c}");
        assert!(
            c["anchor"].as_str().is_some_and(|a| !a.is_empty()),
            "{name}: {c}"
        );
    }
    assert!(j["pool_attempt"].is_null(), "{all}");
    // A sim chain's TCB Info is not said to be under Intel's root.
    assert!(
        claim(&j, "tcb")["anchor"]
            .as_str()
            .is_some_and(|a| a.contains("signed under the simulated root (not Intel's)")),
        "{all}"
    );
    assert_eq!(
        claim(&j, "commit")["detail"],
        "no --commit: the verdict records none",
        "{all}"
    );
    assert!(
        j["notes"].as_array().is_some_and(|n| n.iter().any(|n| n
            .as_str()
            .is_some_and(|n| n.contains("commit (--commit), patch (--patch), job (--job)")))),
        "{all}"
    );
    // The table: one `claim` row each.
    let (code, out, err) = cli(&base);
    assert_eq!(code, 0, "{out}{err}");
    for name in [
        "commit",
        "patch",
        "job",
        "outcome",
        "pool attempt and execution",
        "test tree",
    ] {
        assert!(
            out.lines()
                .any(|l| l.contains(&format!("claim {name} ")) && l.contains("not pinned")),
            "{name}: {out}"
        );
    }
    // Pinned, they hold and name what backed them.
    let job = dir.path().join("job.toml");
    std::fs::write(&job, "x").expect("write");
    let mut args = base.to_vec();
    args.extend([
        "--expect-outcome",
        "tests_passed",
        "--isolation",
        "vm",
        "--job",
        job.to_str().expect("utf8"),
        "--json",
    ]);
    let (code, j, all) = json_run(&args);
    assert_eq!(code, 1, "the verdict has no job hash: {all}");
    assert_eq!(claim(&j, "outcome")["status"], "held", "{all}");
    assert_eq!(
        claim(&j, "outcome")["anchor"],
        "pin-outcome tests_passed",
        "{all}"
    );
    assert_eq!(
        claim(&j, "isolation")["anchor"],
        "pin-isolation vm",
        "{all}"
    );
    assert_eq!(claim(&j, "job")["status"], "failed", "{all}");
    assert_eq!(claim(&j, "commit")["status"], "not pinned", "{all}");
}

/// `--pool-attempt N` is named in the table, the JSON and the claims; the wrong attempt fails the claim.
#[test]
fn the_pool_attempt_is_named_in_the_output() {
    let dir = tempfile::tempdir().expect("tmp");
    let n = [5u8; 32];
    let attempt = attestation::pool_nonce::attempt_nonce(&n, 2);
    let ev = sim_tdx_evidence(dir.path(), &attempt, [0x3c; 48]);
    let n_hex = hex::encode(n);
    let run = |attempt: &str, json: bool| {
        let mut a = vec![
            "evidence",
            ev.as_str(),
            "--any-measurement",
            "--allow-simulated",
            "--nonce",
            &n_hex,
            "--pool-attempt",
            attempt,
        ];
        if json {
            a.push("--json");
        }
        cli(&a)
    };
    let (code, out, err) = run("2", true);
    assert_eq!(code, 0, "{out}{err}");
    let j: serde_json::Value = serde_json::from_str(out.trim()).expect("json");
    assert_eq!(j["pool_attempt"], 2, "{out}");
    let c = claim(&j, "pool attempt and execution");
    assert_eq!(c["status"], "held", "{c}");
    assert!(
        c["anchor"]
            .as_str()
            .is_some_and(|a| a.contains("attempt 2")),
        "{c}"
    );
    assert!(
        claim(&j, "nonce")["anchor"]
            .as_str()
            .is_some_and(|a| a.contains("--pool-attempt 2")),
        "{out}"
    );
    let (code, out, _) = run("2", false);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.lines()
            .any(|l| l.starts_with("SIMULATED pool attempt and execution ")
                && l.trim_end().ends_with(" 2")),
        "{out}"
    );
    let (code, out, _) = run("3", true);
    assert_eq!(code, 1, "{out}");
    let j: serde_json::Value = serde_json::from_str(out.trim()).expect("json");
    assert_eq!(
        claim(&j, "pool attempt and execution")["status"],
        "failed",
        "{out}"
    );
}

/// `--policy FILE` that pins no measurement: the failure says how to pin one, and no note claims that
/// `--any-measurement` was given.
#[test]
fn a_policy_file_without_a_measurement_does_not_claim_any_measurement() {
    let dir = tempfile::tempdir().expect("tmp");
    let ev = sim_tdx_evidence(dir.path(), &[7u8; 32], [0x3c; 48]);
    let policy = dir.path().join("policy.toml");
    std::fs::write(&policy, "allow-debug = false\n").expect("write");
    let (code, j, all) = json_run(&[
        "evidence",
        &ev,
        "--policy",
        policy.to_str().expect("utf8"),
        "--no-nonce",
        "--allow-simulated",
        "--json",
    ]);
    assert_eq!(code, 1, "{all}");
    assert_eq!(checks(&j), ["measurement-unpinned"], "{all}");
    let notes: Vec<&str> = j["notes"]
        .as_array()
        .expect("notes")
        .iter()
        .filter_map(|n| n.as_str())
        .collect();
    assert!(
        notes
            .iter()
            .any(|n| n.starts_with("launch measurement NOT pinned: no --measurement")),
        "{notes:?}"
    );
    assert!(
        !notes.iter().any(|n| n.contains("(--any-measurement)")),
        "{notes:?}"
    );
    assert!(
        claim(&j, "policy")["anchor"]
            .as_str()
            .is_some_and(|a| a.starts_with("--policy ")),
        "{all}"
    );
    assert_eq!(claim(&j, "measurement")["status"], "failed", "{all}");
    // With --any-measurement the note says so.
    let (code, j, all) = json_run(&[
        "evidence",
        &ev,
        "--any-measurement",
        "--no-nonce",
        "--allow-simulated",
        "--json",
    ]);
    assert_eq!(code, 0, "{all}");
    assert!(
        j["notes"].as_array().is_some_and(|n| n.iter().any(|n| n
            .as_str()
            .is_some_and(|n| n.contains("(--any-measurement)")))),
        "{all}"
    );
}

/// A collateral URL that redirects: the client, the cache entry, `fetch` and the verify command's
/// `collateral_source.urls` all record the URL that served the bytes, not the one asked for.
#[test]
fn the_url_recorded_is_the_one_that_served_the_bytes_after_a_redirect() {
    let f = snp_fixture("fenced-run-collateral-auditors-redirect", true);
    let mirror = format!("{}/mirror/Milan/cert_chain", f.srv.base);
    let asked = format!("{}/vcek/v1/Milan/cert_chain", f.srv.base);
    // The client.
    let http = collateral_common::client(std::time::Duration::from_secs(5), 0);
    let r = http.get(&asked).expect("redirected get");
    assert_eq!(r.url, mirror);
    assert!(r.body.starts_with(b"-----BEGIN CERTIFICATE-----"));
    // evidence --online: the served URL in collateral_source and the collateral claim's anchor.
    let bare = f.seal("bare.evidence", vec![]);
    let cache = f.path("cache");
    let cache = cache.to_str().expect("utf8").to_string();
    let (code, j, all) = f.verify(
        &bare,
        &["--online", "--kds-url", &f.srv.base, "--cache", &cache],
    );
    assert_eq!(code, 0, "{all}");
    let urls: Vec<&str> = j["collateral_source"]["urls"]
        .as_array()
        .expect("urls")
        .iter()
        .filter_map(|u| u.as_str())
        .collect();
    assert!(urls.contains(&mirror.as_str()), "{all}");
    assert!(!urls.contains(&asked.as_str()), "{all}");
    assert!(
        claim(&j, "collateral")["anchor"]
            .as_str()
            .is_some_and(|a| a.contains(&mirror)),
        "{all}"
    );
    // Offline from the cache: the entry kept the served URL.
    let (code, j, all) = f.verify(&bare, &["--cache", &cache]);
    assert_eq!(code, 0, "{all}");
    assert!(
        j["collateral_source"]["urls"]
            .as_array()
            .is_some_and(|u| u.iter().any(|u| u == mirror.as_str())),
        "{all}"
    );
    // fetch --json: its sources are the served URLs.
    let (code, out, err) = cli(&[
        "fetch",
        &bare,
        "--out",
        f.path("out").to_str().expect("utf8"),
        "--kds-url",
        &f.srv.base,
        "--no-cache",
        "--allow-simulated",
        "--json",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    let j: serde_json::Value = serde_json::from_str(out.trim()).expect("json");
    assert!(
        j["sources"]
            .as_array()
            .is_some_and(|u| u.iter().any(|u| u == mirror.as_str())),
        "{out}"
    );
}

/// The chain claim names the vendor root by product (AMD ARK-Milan/Genoa and the ASK or ASVK, Intel's root), on
/// real vectors, in `snp-report` and `tdx-quote` as in `evidence`; an expired chain is a failed claim, no anchor.
#[test]
fn the_chain_claim_names_the_vendor_root_by_product() {
    let Some(v) = collateral_common::vectors() else {
        return;
    };
    let snp = |name: &str, at: Option<&str>| {
        let d = v.join("snp").join(name);
        let r = d.join("report.bin");
        let mut args = vec![
            "snp-report".to_string(),
            r.display().to_string(),
            "--certs".into(),
            d.display().to_string(),
            "--json".into(),
        ];
        if let Some(at) = at {
            args.extend(["--at".into(), at.into()]);
        }
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        json_run(&a)
    };
    for (name, want) in [
        (
            "milan-v3-oak-oc-release",
            "AMD ARK-Milan (pinned key, DER SHA-256 69d063b45344d26a...) -> ASK-Milan -> VCEK",
        ),
        (
            "genoa-v3-yaxi",
            "AMD ARK-Genoa (pinned key, DER SHA-256 4c6598d19c18719c...) -> ASK-Genoa -> VCEK",
        ),
    ] {
        let (code, j, all) = snp(name, None);
        assert_eq!(code, 0, "{name}: {all}");
        let c = claim(&j, "chain");
        assert_eq!(
            (c["status"].as_str(), c["anchor"].as_str()),
            (Some("held"), Some(want)),
            "{all}"
        );
        assert!(
            claim(&j, "collateral")["anchor"]
                .as_str()
                .is_some_and(|a| a.starts_with("the --certs directory ")),
            "{all}"
        );
        assert_eq!(claim(&j, "measurement")["status"], "not pinned", "{all}");
        assert_eq!(claim(&j, "tcb")["status"], "not pinned", "{all}");
        let (code, j, all) = {
            let d = v.join("snp").join(name);
            json_run(&[
                "snp-report",
                d.join("report.bin").to_str().expect("utf8"),
                "--certs",
                d.to_str().expect("utf8"),
                "--tcb-baseline",
                "builtin",
                "--json",
            ])
        };
        assert!(code == 0 || code == 1, "{all}");
        let tcb = claim(&j, "tcb");
        if code == 0 {
            assert_eq!(tcb["anchor"], "TCB baseline builtin", "{all}");
        } else {
            assert_eq!(tcb["status"], "failed", "{all}");
        }
    }
    // A VLEK chain names the ASVK; at a time its VLEK had expired the claim fails and names no anchor.
    let (code, j, all) = snp(
        "milan-v2-vlek-aws-constellation-2024",
        Some("2024-09-01T00:00:00Z"),
    );
    assert_eq!(code, 0, "{all}");
    assert!(
        claim(&j, "chain")["anchor"]
            .as_str()
            .is_some_and(|a| a.starts_with("AMD ARK-Milan") && a.ends_with("-> ASVK-Milan -> VLEK")),
        "{all}"
    );
    let (code, j, all) = snp(
        "milan-v2-vlek-aws-constellation-2024",
        Some("2026-01-01T00:00:00Z"),
    );
    assert_eq!(code, 1, "{all}");
    let c = claim(&j, "chain");
    assert_eq!(c["status"], "failed", "{all}");
    assert!(
        c["anchor"].is_null()
            && c["detail"]
                .as_str()
                .is_some_and(|d| d.contains("cert-validity")),
        "{c}"
    );

    // tdx-quote: Intel's root, and the TCB Info the TCB claim rests on.
    let d = v.join("tdx/dcapqvl-v4-b0c06f-uptodate");
    let tv = collateral_common::tdx_vector(&v, "dcapqvl-v4-b0c06f-uptodate");
    let at = tv.reference_time.to_string();
    let (code, j, all) = json_run(&[
        "tdx-quote",
        d.join("quote.bin").to_str().expect("utf8"),
        "--collateral",
        d.join("collateral.json").to_str().expect("utf8"),
        "--at",
        &at,
        "--json",
    ]);
    assert_eq!(code, 0, "{all}");
    assert!(
        claim(&j, "chain")["anchor"]
            .as_str()
            .is_some_and(|a| a
                .starts_with("Intel SGX Root CA (pinned) -> PCK CA -> PCK certificate (FMSPC ")),
        "{all}"
    );
    assert!(
        claim(&j, "tcb")["anchor"].as_str().is_some_and(|a| a
            .contains("tcbEvaluationDataNumber 17")
            && a.contains("bare collateral file")),
        "{all}"
    );
    let (code, out, _) = cli(&[
        "tdx-quote",
        d.join("quote.bin").to_str().expect("utf8"),
        "--collateral",
        d.join("collateral.json").to_str().expect("utf8"),
        "--at",
        &at,
    ]);
    assert_eq!(code, 0, "{out}");
    assert!(out.lines().any(|l| l.starts_with("claim chain ") && l.contains("held (anchor: Intel SGX Root CA")), "{out}");
}

/// A failed `--report-data` pin of `snp-report` (a check evidence counts under `key binding`, which a bare report
/// has no claim for) fails the `policy` claim: no failure goes unshown in the claims.
#[test]
fn a_bare_reports_failure_always_fails_a_claim() {
    let Some(v) = collateral_common::vectors() else {
        return;
    };
    let d = v.join("snp/milan-v3-oak-oc-release");
    let (code, j, all) = json_run(&[
        "snp-report",
        d.join("report.bin").to_str().expect("utf8"),
        "--certs",
        d.to_str().expect("utf8"),
        "--report-data",
        &"00".repeat(64),
        "--json",
    ]);
    assert_eq!(code, 1, "{all}");
    assert_eq!(checks(&j), ["report-data"], "{all}");
    let p = claim(&j, "policy");
    assert_eq!(p["status"], "failed", "{all}");
    assert!(
        p["detail"]
            .as_str()
            .is_some_and(|d| d.starts_with("report-data: ")),
        "{all}"
    );
    assert_eq!(claim(&j, "chain")["status"], "held", "{all}");
}

/// The measurement claim backed by a measurement set names the set, the entry matched and its signers' key ids.
#[test]
fn the_measurement_claim_names_the_set_entry_and_its_signers() {
    use measurements::set::{
        self, Artifacts, Hex, MeasurementSet, Release, SignatureFile, SimEntry,
    };
    let dir = tempfile::tempdir().expect("tmp");
    let mrtd = [0x3c; 48];
    let ev = sim_tdx_evidence(dir.path(), &[7u8; 32], mrtd);
    let ms = MeasurementSet {
        format: set::SET_FORMAT.to_string(),
        release: Release {
            name: "fenced-run-guest".into(),
            version: "0.1.0-claims".into(),
        },
        artifacts: Artifacts {
            kernel_sha256: Some(Hex([1; 32])),
            initramfs_sha256: Some(Hex([2; 32])),
            cmdline: Some("console=ttyS0".into()),
            cmdline_sha256: Some(Hex(measurements::sim::cmdline_sha256("console=ttyS0"))),
            ovmf_sha256: None,
            tdvf_sha256: None,
        },
        not_after: Some("2099-01-01T00:00:00Z".into()),
        identity: Vec::new(),
        snp: Vec::new(),
        tdx: Vec::new(),
        sim: vec![SimEntry {
            tier: "vm".into(),
            measurement: Hex(mrtd),
            binary_sha256: None,
        }],
    };
    let set_path = dir.path().join("release.toml");
    std::fs::write(&set_path, ms.to_toml()).expect("write set");
    let a = auditor(dir.path(), "alice");
    std::fs::write(
        dir.path().join("release.toml.alice.sig"),
        SignatureFile::sign(&ms, &a.key, "alice").to_toml(),
    )
    .expect("write signature");
    let (code, j, all) = json_run(&[
        "evidence",
        &ev,
        "--measurements",
        set_path.to_str().expect("utf8"),
        "--auditor-key",
        &a.public,
        "--no-nonce",
        "--allow-simulated",
        "--json",
    ]);
    assert_eq!(code, 0, "{all}");
    let c = claim(&j, "measurement");
    assert_eq!(c["status"], "held", "{all}");
    let anchor = c["anchor"].as_str().expect("anchor");
    assert!(
        anchor.starts_with("measurement set fenced-run-guest")
            && anchor.contains("0.1.0-claims")
            && anchor.contains(&format!(
                "entry sim tier=vm measurement={}",
                hex::encode(mrtd)
            ))
            && anchor.ends_with(&format!("signed by auditor {}", a.id)),
        "{anchor}"
    );
}

/// A bundle's recorded URLs are the bundle writer's text: in the claims they come out escaped (table) and
/// without raw control characters (JSON), so a host's bundle cannot draw over the verdict.
#[test]
fn a_bundles_urls_in_the_claims_are_escaped() {
    let dir = tempfile::tempdir().expect("tmp");
    let ev = sim_tdx_evidence(dir.path(), &[7u8; 32], [0x3c; 48]);
    let decoded = Evidence::from_cbor(&std::fs::read(&ev).expect("read")).expect("evidence");
    let Some(Collateral::Bytes(coll)) = decoded.collateral else {
        panic!("sim collateral is collateral.json bytes")
    };
    let mut b = tdx_bundle(&coll);
    b.content.sources = vec!["https://pcs.example/\u{1b}[2J\u{1b}[1;1HVERIFIED\r\n".into()];
    let b = Bundle::new(b.content);
    let bp = write_bundle(&dir.path().join("evil.bundle.json"), &b);
    let args = [
        "evidence",
        ev.as_str(),
        "--any-measurement",
        "--no-nonce",
        "--allow-simulated",
        "--collateral",
        &bp,
    ];
    let (code, out, err) = cli(&args);
    assert_eq!(code, 0, "{out}{err}");
    assert!(attestation::text::is_safe_output(out.as_bytes()), "{out:?}");
    let row = out
        .lines()
        .find(|l| l.contains("claim collateral "))
        .expect("collateral claim row");
    assert!(row.contains("\\x1b[2J"), "{row}");
    let mut json_args = args.to_vec();
    json_args.push("--json");
    let (code, out, _) = cli(&json_args);
    assert_eq!(code, 0, "{out}");
    assert!(attestation::text::is_safe_output(out.as_bytes()), "{out:?}");
    let j: serde_json::Value = serde_json::from_str(out.trim()).expect("json");
    assert!(
        claim(&j, "collateral")["anchor"]
            .as_str()
            .is_some_and(|a| a.contains("(as the bundle records)")),
        "{out}"
    );
}
