//! The freshness policy: TDX `--min-tcb-eval-num`, `--min-tcb-date`, `--collateral-grace` (Intel's status kept
//! beside them), and the SEV-SNP `--tcb-baseline` saying per component how far below the floor a report is.

mod collateral_common;

use collateral_common::*;

fn tdx_args<'a>(
    v: &'a std::path::Path,
    extra: &[&'a str],
    at: &'a str,
) -> (i32, serde_json::Value) {
    let dir = v.join("tdx/dcapqvl-v4-b0c06f-uptodate");
    let q = dir.join("quote.bin");
    let c = dir.join("collateral.json");
    let mut args = vec![
        "tdx-quote".to_string(),
        q.display().to_string(),
        "--collateral".into(),
        c.display().to_string(),
        "--at".into(),
        at.to_string(),
        "--json".into(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, out, err) = cli(&refs);
    let j = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}{err}"));
    (code, j)
}

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

#[test]
fn tdx_min_tcb_eval_num_rejects_older_evaluation_data_and_keeps_intels_status() {
    let Some(v) = vectors() else { return };
    let tv = tdx_vector(&v, "dcapqvl-v4-b0c06f-uptodate");
    let at = tv.reference_time.to_string();
    let (code, j) = tdx_args(&v, &["--min-tcb-eval-num", "17"], &at);
    assert_eq!(code, 0, "{j}");
    let (code, j) = tdx_args(&v, &["--min-tcb-eval-num", "18"], &at);
    assert_eq!(code, 1, "{j}");
    let c = checks(&j);
    assert!(
        c.iter().any(|c| c.contains("tcb-evaluation-data-number")),
        "{c:?}"
    );
    assert_eq!(
        j["tcb_status"], "UpToDate",
        "Intel's status is reported beside: {j}"
    );
}

#[test]
fn tdx_min_tcb_date_rejects_an_older_level() {
    let Some(v) = vectors() else { return };
    let tv = tdx_vector(&v, "dcapqvl-v4-b0c06f-uptodate");
    let at = tv.reference_time.to_string();
    // The matched level of this vector is dated 2024-03-13.
    let (code, j) = tdx_args(&v, &["--min-tcb-date", "2024-03-13"], &at);
    assert_eq!(code, 0, "{j}");
    let (code, j) = tdx_args(&v, &["--min-tcb-date", "2024-03-14T00:00:00Z"], &at);
    assert_eq!(code, 1, "{j}");
    assert!(checks(&j).contains(&"tcb-date".to_string()), "{j}");
    let q = v.join("tdx/dcapqvl-v4-b0c06f-uptodate/quote.bin");
    let (code, _, err) = cli(&[
        "tdx-quote",
        q.to_str().expect("utf8"),
        "--min-tcb-date",
        "last tuesday",
    ]);
    assert_eq!(code, 2);
    assert!(err.contains("neither RFC 3339 nor YYYY-MM-DD"), "{err}");
}

#[test]
fn tdx_collateral_grace_accepts_collateral_just_past_next_update() {
    let Some(v) = vectors() else { return };
    let tv = tdx_vector(&v, "dcapqvl-v4-b0c06f-uptodate");
    let pck_next = verifier_lib::tdx::x509::Crl::from_der(
        "pck_crl",
        &hex::decode(tv.file["pck_crl"].as_str().expect("hex")).expect("hex"),
    )
    .expect("crl")
    .window()
    .1
    .expect("next");
    let late = (pck_next + 100).to_string();
    let (code, j) = tdx_args(&v, &[], &late);
    assert_eq!(code, 1, "{j}");
    assert!(checks(&j).iter().any(|c| c == "pck-crl-next-update"), "{j}");
    let (code, j) = tdx_args(&v, &["--collateral-grace", "3600"], &late);
    assert_eq!(code, 0, "{j}");
    let (code, _) = tdx_args(&v, &["--collateral-grace", "60"], &late);
    assert_eq!(code, 1, "a grace shorter than the lateness does not help");
}

#[test]
fn snp_tcb_baseline_names_each_component_below_and_by_how_much() {
    let Some(v) = vectors() else { return };
    let dir = v.join("snp/genoa-v3-yaxi");
    let r = dir.join("report.bin");
    let r = r.to_str().expect("utf8");
    let certs = dir.to_str().expect("utf8");
    // Reported TCB of this report: bl 9, tee 0, snp 23, ucode 72.
    let (code, out, _) = cli(&[
        "snp-report",
        r,
        "--certs",
        certs,
        "--json",
        "--tcb-baseline",
        "builtin",
    ]);
    assert_eq!(code, 1, "{out}");
    let j: serde_json::Value = serde_json::from_str(&out).expect("json");
    let below = j["tcb_baseline"]["below"].as_array().expect("below");
    let find = |c: &str| {
        below
            .iter()
            .find(|b| b["component"] == c)
            .cloned()
            .expect(c)
    };
    assert_eq!(find("snp")["below_by"], 4);
    // Two bulletins set the Genoa SNP floor 27: both are named.
    assert_eq!(find("snp")["bulletin"], "AMD-SB-3020, AMD-SB-3023");
    assert_eq!(find("snp")["minimum"], 27);
    assert_eq!(find("snp")["seen"], 23);
    assert_eq!(find("microcode")["below_by"], 14);
    assert_eq!(find("microcode")["verified_at_source"], false);
    assert!(below.iter().all(|b| b["component"] != "bootloader"));
    // A baseline the report meets passes; one with a bad product is unusable input naming it.
    let tmp = tempfile::tempdir().expect("tmp");
    let ok = tmp.path().join("ok.toml");
    std::fs::write(
        &ok,
        "format = \"fenced-run-snp-tcb-baseline-v1\"\nversion = \"t\"\n[[floor]]\nproduct = \"Genoa\"\nbulletin = \"AMD-SB-0000\"\nsnp = 23\nmicrocode = 72\nverified_at_source = false\n",
    )
    .expect("write");
    let (code, out, _) = cli(&[
        "snp-report",
        r,
        "--certs",
        certs,
        "--json",
        "--tcb-baseline",
        ok.to_str().expect("utf8"),
    ]);
    assert_eq!(code, 0, "{out}");
    let bad = tmp.path().join("bad.toml");
    std::fs::write(&bad, "format = \"fenced-run-snp-tcb-baseline-v1\"\nversion = \"t\"\n[[floor]]\nproduct = \"Naples\"\nbulletin = \"AMD-SB-1\"\nverified_at_source = false\n").expect("write");
    let (code, out, _) = cli(&[
        "snp-report",
        r,
        "--certs",
        certs,
        "--json",
        "--tcb-baseline",
        bad.to_str().expect("utf8"),
    ]);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("Naples") && out.contains("bad.toml"), "{out}");
}

#[test]
fn the_builtin_baseline_has_milan_and_turin_floors_and_says_how_far_below() {
    let Some(v) = vectors() else { return };
    // A Milan report at SNP SPL 24 (0x18): 3 below the AMD-SB-3023 floor 27.
    let dir = v.join("snp/milan-v3-oak-oc-release");
    let exp: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("expected.json")).expect("exp"))
            .expect("json");
    let snp = exp["reported_tcb_decoded"]["snp"].as_u64().expect("snp");
    let r = dir.join("report.bin");
    let (code, out, _) = cli(&[
        "snp-report",
        r.to_str().expect("utf8"),
        "--certs",
        dir.to_str().expect("utf8"),
        "--json",
        "--tcb-baseline",
        "builtin",
    ]);
    let j: serde_json::Value = serde_json::from_str(&out).expect("json");
    let below = j["tcb_baseline"]["below"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let s = below.iter().find(|b| b["component"] == "snp");
    if snp < 27 {
        assert_eq!(code, 1, "{out}");
        let s = s.expect("snp below");
        assert_eq!(s["below_by"].as_u64(), Some(27 - snp), "{out}");
        assert_eq!(s["bulletin"], "AMD-SB-3023");
        assert_eq!(s["verified_at_source"], false);
    } else {
        assert!(s.is_none(), "{out}");
    }
    let b = verifier_lib::collateral::baseline::Baseline::builtin().expect("builtin");
    for p in ["Milan", "Genoa", "Turin"] {
        assert!(b.floors.iter().any(|f| f.product == p), "no {p} floor");
    }
    // Turin: the check per component on a synthetic TCB (fmc, bl, tee, snp, ucode).
    let tcb = attestation::snp::TcbParts {
        fmc: Some(1),
        bootloader: 1,
        tee: 1,
        snp: 3,
        microcode: 9,
    };
    let short = b.check(attestation::snp::Product::Turin, &tcb);
    assert_eq!(short.len(), 1, "{short:?}");
    assert_eq!((short[0].component, short[0].below_by), ("snp", 1));
}

#[test]
fn the_shipped_baseline_parses_and_marks_every_unverified_floor() {
    let b = verifier_lib::collateral::baseline::Baseline::builtin().expect("builtin baseline");
    assert!(!b.floors.is_empty());
    for f in &b.floors {
        assert!(f.bulletin.starts_with("AMD-SB-"), "{f:?}");
        assert!(
            !f.source.is_empty(),
            "every floor says where its value was read: {f:?}"
        );
    }
}
