//! The measurement-set tools around the auditor workflow: `measure-guest process --binary` (the process-tier
//! measurement, the same as the sim PSP's), `pin --process-binary` (a set with no guest image), the warning of a
//! sim-only `pin`, one entry where EC2/GCE would repeat it per vCPU type, `sign` refusing to overwrite without
//! `--force`, `verify-set` finding `SET.*.sig` by default and naming signers from the founder's trusted keys only.

use std::path::Path;
use std::process::{Command, Output};

use measurements::set;

fn mg(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_measure-guest"))
        .args(args)
        .output()
        .expect("run measure-guest")
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf8 path")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn process_measurement_is_the_sim_psps_and_pins_a_set_without_an_image() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let bin = d.join("fenced-run");
    std::fs::write(&bin, b"\x7fELF pretend this is the fenced-run binary").expect("write");
    let want = attestation::sim::process_launch_measurement(
        b"\x7fELF pretend this is the fenced-run binary",
    );
    let o = mg(&["process", "--binary", s(&bin)]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(text(&o.stdout).trim(), hex::encode(want));
    let o = mg(&["process", "--binary", s(&bin), "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(v["measurement"], hex::encode(want));
    assert_eq!(v["tier"], "process");
    // A missing binary: exit 2 naming the flag and file.
    let o = mg(&["process", "--binary", s(&d.join("absent"))]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o.stderr).contains("--binary"), "{}", text(&o.stderr));

    // pin with only a process binary: one process entry, no image hashes, and a warning that it pins
    // simulated launches only.
    let set_path = d.join("release.toml");
    let o = mg(&[
        "pin",
        "--name",
        "fenced-run-process",
        "--release-version",
        "0.1.0",
        "--process-binary",
        s(&bin),
        "--out",
        s(&set_path),
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let err = text(&o.stderr);
    assert!(
        err.contains("warning") && err.contains("only simulated launches (process)"),
        "{err}"
    );
    let pinned = set::MeasurementSet::load(&set_path).expect("set parses");
    assert_eq!(pinned.sim.len(), 1);
    assert_eq!(pinned.sim[0].tier, "process");
    assert_eq!(pinned.sim[0].measurement.0, want);
    assert!(pinned.artifacts.kernel_sha256.is_none() && pinned.snp.is_empty());
    // A set with a vm entry but no image hashes is refused by the parser, naming the rule.
    let broken = std::fs::read_to_string(&set_path)
        .expect("read")
        .replace("tier = \"process\"", "tier = \"vm\"")
        .replace("binary_sha256", "# binary_sha256");
    std::fs::write(d.join("broken.toml"), broken).expect("write");
    let e = set::MeasurementSet::load(&d.join("broken.toml")).expect_err("vm needs an image");
    assert!(e.to_string().contains("kernel_sha256"), "{e}");
    // Neither an image nor a binary: a usage error.
    let o = mg(&["pin", "--name", "x", "--release-version", "1"]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn ec2_entries_are_not_repeated_per_vcpu_type() {
    let p = attestation::vectors::firmware("OVMF.amdsev-edk2-2025.02-8+deb13u1.fd");
    if !p.exists() {
        attestation::vectors::skip(&format!("shared AmdSev OVMF not found at {}", p.display()));
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    std::fs::write(d.join("k"), b"kernel").expect("write");
    std::fs::write(d.join("i"), b"initrd").expect("write");
    let out = d.join("set.toml");
    let o = mg(&[
        "pin",
        "--name",
        "g",
        "--release-version",
        "1",
        "--kernel",
        s(&d.join("k")),
        "--initrd",
        s(&d.join("i")),
        "--ovmf",
        s(&p),
        "--snp-vcpu-types",
        "EPYC-Milan,EPYC-Genoa",
        "--snp-vmm",
        "QEMU,ec2",
        "--out",
        s(&out),
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let pinned = set::MeasurementSet::load(&out).expect("parses");
    let qemu: Vec<_> = pinned.snp.iter().filter(|e| e.vmm == "QEMU").collect();
    let ec2: Vec<_> = pinned.snp.iter().filter(|e| e.vmm == "ec2").collect();
    assert_eq!(qemu.len(), 2, "one QEMU entry per vCPU type");
    assert_eq!(ec2.len(), 1, "EC2 ignores the vCPU type: one entry");
    assert_eq!(ec2[0].vcpu_type, None);
    assert_eq!(ec2[0].vcpu_sig.0, 0x600);
    assert_ne!(qemu[0].measurement, qemu[1].measurement);
    // No sim-only warning when real entries are pinned.
    assert!(
        !text(&o.stderr).contains("only simulated"),
        "{}",
        text(&o.stderr)
    );
}

#[test]
fn sign_refuses_to_overwrite_and_verify_set_finds_signatures_and_names_trusted_keys() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let bin = d.join("agent");
    std::fs::write(&bin, b"agent bytes").expect("write");
    let set_path = d.join("release.toml");
    let o = mg(&[
        "pin",
        "--name",
        "n",
        "--release-version",
        "1",
        "--process-binary",
        s(&bin),
        "--out",
        s(&set_path),
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    for who in ["alice", "bob"] {
        let o = mg(&["keygen", "--out", s(&d.join(who))]);
        assert!(o.status.success(), "{}", text(&o.stderr));
    }
    // Alice signs, but writes "bob" in the unsigned auditor field.
    let sign = |key: &str, name: &str, extra: &[&str]| {
        let k = d.join(format!("{key}.key"));
        let mut a = vec![
            "sign",
            "--key",
            s(&k),
            "--set",
            s(&set_path),
            "--auditor",
            name,
        ];
        a.extend_from_slice(extra);
        mg(&a)
    };
    let o = sign("alice", "bob", &[]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let sig = d.join("release.toml.bob.sig");
    let first = std::fs::read(&sig).expect("sig written");
    // A second signature to the same file is refused (exit 2, naming the file and --force) and the file stays.
    let o = sign("bob", "bob", &[]);
    assert_eq!(o.status.code(), Some(2));
    let err = text(&o.stderr);
    assert!(
        err.contains("release.toml.bob.sig") && err.contains("--force"),
        "{err}"
    );
    assert_eq!(std::fs::read(&sig).expect("read"), first);

    // verify-set without --signature finds release.toml.*.sig; it names alice's key file, not "bob".
    let alice = d.join("alice.pub");
    let bobk = d.join("bob.pub");
    let o = mg(&[
        "verify-set",
        "--set",
        s(&set_path),
        "--auditor-key",
        s(&alice),
    ]);
    let out = text(&o.stdout);
    assert!(o.status.success(), "{out} {}", text(&o.stderr));
    assert!(
        out.contains(&format!(
            "signed by 1 trusted auditor(s): {}",
            alice.display()
        )),
        "{out}"
    );
    assert!(!out.contains("auditor(s): bob"), "{out}");
    // Trusting only bob's key: alice's signature does not count, whatever its auditor field says.
    let o = mg(&[
        "verify-set",
        "--set",
        s(&set_path),
        "--auditor-key",
        s(&bobk),
    ]);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("untrusted key") && err.contains("(missing)"),
        "{err}"
    );

    // With --force the file is replaced (now bob's signature), and bob's key verifies.
    let o = sign("bob", "bob", &["--force"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_ne!(std::fs::read(&sig).expect("read"), first);
    let o = mg(&[
        "verify-set",
        "--set",
        s(&set_path),
        "--auditor-key",
        s(&bobk),
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
}

/// `pin` gives every new set a not_after (180 days by default, or `--valid-days`/`--not-after`); the signatures
/// cover it, so moving it breaks them; `renew` gives an old-format set one (the current format) and its auditors
/// sign again; `verify-set --at` refuses a set past its not_after, naming the date.
#[test]
fn sets_expire_and_the_signatures_cover_not_after() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let bin = d.join("fenced-run");
    std::fs::write(&bin, b"\x7fELF a process-tier binary").expect("write");
    let set_path = d.join("release.toml");
    let pin = |extra: &[&str]| {
        let mut args = vec![
            "pin",
            "--release-version",
            "1",
            "--process-binary",
            s(&bin),
            "--out",
            s(&set_path),
        ];
        args.extend_from_slice(extra);
        mg(&args)
    };
    let o = pin(&[]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs() as i64;
    let default = set::MeasurementSet::load(&set_path).expect("parses");
    assert_eq!(default.format, set::SET_FORMAT);
    let days = (default.not_after_unix().expect("not_after") - now) as f64 / 86_400.0;
    assert!((179.9..=180.1).contains(&days), "{days} days");
    let o = pin(&["--valid-days", "30", "--not-after", "2030-01-01T00:00:00Z"]);
    assert_eq!(o.status.code(), Some(2), "conflicting flags");
    let o = pin(&["--valid-days", "0"]);
    assert_eq!(o.status.code(), Some(2), "zero days");
    let o = pin(&["--valid-days", "30"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let days = (set::MeasurementSet::load(&set_path)
        .expect("parses")
        .not_after_unix()
        .expect("not_after")
        - now) as f64
        / 86_400.0;
    assert!((29.9..=30.1).contains(&days), "{days} days");
    let o = pin(&["--not-after", "soon"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o.stderr).contains("--not-after \"soon\""),
        "{}",
        text(&o.stderr)
    );
    let o = pin(&["--not-after", "2030-01-01T00:00:00Z"]);
    assert!(o.status.success(), "{}", text(&o.stderr));

    let o = mg(&["keygen", "--out", s(&d.join("alice"))]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let sign = || {
        mg(&[
            "sign",
            "--key",
            s(&d.join("alice.key")),
            "--set",
            s(&set_path),
            "--auditor",
            "alice",
            "--force",
        ])
    };
    assert!(sign().status.success());
    let verify = |at: &str| {
        mg(&[
            "verify-set",
            "--set",
            s(&set_path),
            "--auditor-key",
            s(&d.join("alice.pub")),
            "--at",
            at,
        ])
    };
    let o = verify("2029-12-31T23:59:59Z");
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let o = verify("2030-01-01T00:00:01Z");
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o.stderr).contains("expired: its not_after is 2030-01-01T00:00:00Z"),
        "{}",
        text(&o.stderr)
    );

    // Moving not_after after signing: the signature no longer counts.
    let signed = std::fs::read_to_string(&set_path).expect("read");
    std::fs::write(
        &set_path,
        signed.replace("2030-01-01T00:00:00Z", "2040-01-01T00:00:00Z"),
    )
    .expect("write");
    let o = verify("2029-12-31T23:59:59Z");
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o.stderr).contains("signed a different set"),
        "{}",
        text(&o.stderr)
    );

    // An old-format set (no not_after) is refused naming the fix; renew gives it one, then it needs signing.
    let old = signed
        .replace(set::SET_FORMAT, set::SET_FORMAT_V1)
        .lines()
        .filter(|l| !l.starts_with("not_after") && !l.contains("refuses the set after"))
        .collect::<Vec<_>>()
        .join("\n");
    std::fs::write(&set_path, old).expect("write");
    assert!(sign().status.success());
    let o = verify("2029-12-31T23:59:59Z");
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o.stderr).contains("has no not_after")
            && text(&o.stderr).contains("measure-guest renew"),
        "{}",
        text(&o.stderr)
    );
    let o = mg(&[
        "renew",
        "--set",
        s(&set_path),
        "--not-after",
        "2031-01-01T00:00:00Z",
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(
        text(&o.stdout).contains("must sign it again"),
        "{}",
        text(&o.stdout)
    );
    let o = verify("2030-06-01T00:00:00Z");
    assert_eq!(
        o.status.code(),
        Some(1),
        "the old signature is over the old form"
    );
    assert!(sign().status.success());
    let o = verify("2030-06-01T00:00:00Z");
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
}
