//! Every tightening policy flag of `verify-attestation snp-report`, run through the built CLI on real vectors:
//! a value the report does not meet rejects it (exit 1) with exactly that check, naming seen and expected;
//! a value it meets (where the vector allows one) keeps it verified (exit 0).

#[path = "../../verifier-lib/tests/snp_common/mod.rs"]
mod snp_common;

use std::process::Command;

/// One row: the vector, the policy flags, and `Some((check, detail parts))` when it must be rejected.
struct Row {
    vector: &'static str,
    flags: Vec<String>,
    reject: Option<(&'static str, Vec<String>)>,
}

fn row(vector: &'static str, flags: &[&str], reject: Option<(&'static str, &[&str])>) -> Row {
    Row {
        vector,
        flags: flags.iter().map(|s| s.to_string()).collect(),
        reject: reject.map(|(c, parts)| (c, parts.iter().map(|s| s.to_string()).collect())),
    }
}

#[test]
fn snp_report_each_tightening_flag_rejects_an_unmet_value_and_accepts_a_met_one() {
    let Some(snp) = snp_common::snp_vectors() else {
        return;
    };
    let vectors = snp_common::report_vectors(&snp);
    const V: &str = "milan-v3-oak-oc-release";
    // An Azure vector whose CURRENT_TCB differs from COMMITTED_TCB (provisional firmware).
    const PROV: &str = "milan-v2-azure-trustee-hcl";
    let v = vectors
        .iter()
        .find(|v| v.name == V)
        .expect("vector present");
    let f = &v.expected["fields"];
    let field = |k: &str| f[k].as_str().expect("hex field").to_string();
    let (measurement, report_data) = (field("measurement"), field("report_data"));
    let (host_data, family_id) = (field("host_data"), field("family_id"));
    let (image_id, id_key) = (field("image_id"), field("id_key_digest"));
    assert_eq!(
        f["policy"], "0x0000000000030000",
        "{V}: SMT allowed, not single-socket"
    );
    assert_eq!(f["current_fw"], "1.55.29", "{V}: firmware");
    assert_eq!(f["guest_svn"], 0);
    assert_eq!(f["vmpl"], 0);
    assert_eq!(f["key_info"], "0x00000000", "{V}: AUTHOR_KEY_EN clear");
    let other = |n: usize, len: usize| format!("{n:02x}").repeat(len);
    let m_bad = other(0x11, 48);
    let rd_bad = other(0x22, 64);
    let hd_bad = other(0x33, 32);
    let fam_bad = other(0x44, 16);
    let img_bad = other(0x55, 16);
    let idk_bad = other(0x66, 48);
    let ak_bad = other(0x77, 48);
    let rows = vec![
        row(V, &["--forbid-smt"], Some(("smt", &["SMT", "expected"]))),
        row(
            V,
            &["--require-single-socket"],
            Some((
                "single-socket",
                &["SINGLE_SOCKET (bit 20) is 0, expected 1"],
            )),
        ),
        row(
            V,
            &["--min-abi", "1.56"],
            Some(("abi", &["firmware ABI is 1.55, expected at least 1.56"])),
        ),
        row(V, &["--min-abi", "1.55"], None),
        row(
            V,
            &["--vmpl", "1"],
            Some(("vmpl", &["VMPL is 0, expected 1"])),
        ),
        row(V, &["--vmpl", "0"], None),
        row(
            V,
            &["--min-guest-svn", "1"],
            Some(("guest-svn", &["GUEST_SVN is 0, expected at least 1"])),
        ),
        row(V, &["--min-guest-svn", "0"], None),
        row(
            V,
            &["--min-tcb", "snp=25"],
            Some(("min-tcb", &["is below the minimum", "snp 24 < 25"])),
        ),
        row(V, &["--min-tcb", "bl=4,tee=0,snp=24,ucode=219"], None),
        row(
            V,
            &["--min-launch-tcb", "ucode=220"],
            Some(("min-launch-tcb", &["LAUNCH_TCB", "ucode 219 < 220"])),
        ),
        row(
            V,
            &["--min-launch-tcb", "bl=4,tee=0,snp=24,ucode=219"],
            None,
        ),
        row(
            V,
            &["--min-build", "30"],
            Some(("min-build", &["BUILD is 29, expected at least 30"])),
        ),
        row(V, &["--min-build", "29"], None),
        row(
            PROV,
            &["--forbid-provisional-firmware"],
            Some((
                "provisional-firmware",
                &["CURRENT 1.52.4 / ", "differs from COMMITTED 1.52.4 / "],
            )),
        ),
        row(PROV, &[], None),
        row(V, &["--forbid-provisional-firmware"], None),
        row(
            V,
            &["--measurement", &m_bad],
            Some(("measurement", &[&measurement, &m_bad])),
        ),
        row(
            V,
            &["--measurement", &m_bad, "--measurement", &measurement],
            None,
        ),
        row(
            V,
            &["--report-data", &rd_bad],
            Some(("report-data", &[&report_data, &rd_bad])),
        ),
        row(V, &["--report-data", &report_data], None),
        row(
            V,
            &["--host-data", &hd_bad],
            Some(("host-data", &[&host_data, &hd_bad])),
        ),
        row(V, &["--host-data", &host_data], None),
        row(
            V,
            &["--family-id", &fam_bad],
            Some(("family-id", &[&family_id, &fam_bad])),
        ),
        row(V, &["--family-id", &family_id], None),
        row(
            V,
            &["--image-id", &img_bad],
            Some(("image-id", &[&image_id, &img_bad])),
        ),
        row(V, &["--image-id", &image_id], None),
        row(
            V,
            &["--id-key-digest", &idk_bad],
            Some(("id-key-digest", &[&id_key, &idk_bad])),
        ),
        row(
            V,
            &["--id-key-digest", &idk_bad, "--id-key-digest", &id_key],
            None,
        ),
        // AUTHOR_KEY_EN is clear in every real vector: no value can be met, any is rejected.
        row(
            V,
            &["--author-key-digest", &ak_bad],
            Some(("author-key-digest", &["AUTHOR_KEY_EN is 0", &ak_bad])),
        ),
    ];
    for r in &rows {
        let v = vectors
            .iter()
            .find(|v| v.name == r.vector)
            .unwrap_or_else(|| panic!("vector {} present", r.vector));
        let at = v.at().unix_timestamp().to_string();
        let out = Command::new(env!("CARGO_BIN_EXE_verify-attestation"))
            .arg("snp-report")
            .arg(v.dir.join("report.bin"))
            .arg("--certs")
            .arg(&v.dir)
            .args(["--at", &at, "--json"])
            .args(&r.flags)
            .output()
            .expect("run verify-attestation");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let ctx = format!(
            "{} {:?}: {stdout} {}",
            r.vector,
            r.flags,
            String::from_utf8_lossy(&out.stderr)
        );
        let json: serde_json::Value =
            serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{ctx}: {e}"));
        let failures = json["failures"].as_array().expect("failures array");
        match &r.reject {
            None => {
                assert_eq!(out.status.code(), Some(0), "{ctx}");
                assert_eq!(json["verified"], true, "{ctx}");
                assert!(failures.is_empty(), "{ctx}");
            }
            Some((check, parts)) => {
                assert_eq!(out.status.code(), Some(1), "{ctx}");
                assert_eq!(json["verified"], false, "{ctx}");
                assert!(!failures.is_empty(), "{ctx}");
                for fl in failures {
                    assert_eq!(fl["check"], *check, "{ctx}");
                    let detail = fl["detail"].as_str().expect("detail");
                    for p in parts {
                        assert!(detail.contains(p.as_str()), "{ctx}: detail lacks `{p}`");
                    }
                }
            }
        }
    }
}
