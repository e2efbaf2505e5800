//! `fenced-run view EVIDENCE|VERDICT.json [--port N] [--once] [verify flags]`: verifies the evidence with
//! `verifier_lib` (the flags of `verify-attestation evidence`) and serves the result as one page on loopback, at
//! a URL with a random per-run token, printed on stdout. Also the `--view` of `fenced-run run` and `demo`.
//! A verdict JSON (`fenced-run run --json`, or `demo --json`'s `verdict`) is served as the NOT VERIFIED page.
//! Exit 0 when the viewer stopped normally (Ctrl-C or `--once`), 1 for a rejected measurement set, 2 when the
//! input is unusable or the viewer cannot listen.

use super::run::fail;
use attestation::text::{escape, shown};
use std::path::Path;
use std::process::ExitCode;
use verifier_lib::EvidenceOptions;
use verify_attestation::cli::evidence::{options, OptionsError};
use viewer::bind::{Credential, CREDENTIAL_PATH};
use viewer::{Page, ServeConfig};

/// Arguments of `fenced-run view`.
#[derive(clap::Args, Debug)]
// A verdict JSON carries nothing to pin, so the verifier's "pin or skip on purpose" groups are not required
// here: an evidence file viewed without pins is shown REJECTED with `measurement-unpinned` / `nonce-unpinned`.
#[command(mut_group("launch", |g| g.required(false)), mut_group("freshness", |g| g.required(false)))]
// The group clap derives for this struct gets its own id: the flattened struct is also called `Args`.
#[group(id = "view-args")]
pub struct Args {
    /// The port on 127.0.0.1 and ::1 (default: a free one chosen by the system).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub port: u16,
    /// Exit after the first load of the page (for scripts).
    #[arg(long)]
    pub once: bool,
    /// The flags of `verify-attestation evidence`; EVIDENCE may also be a verdict JSON (shown NOT VERIFIED).
    #[command(flatten)]
    pub verify: Box<verify_attestation::cli::evidence::Args>,
}

/// Runs the subcommand.
pub fn run(mut args: Args) -> ExitCode {
    let json = args.verify.json;
    let given = args.verify.evidence.clone();
    let stdin = given == Path::new("-");
    let source = if stdin {
        "standard input".to_string()
    } else {
        given.display().to_string()
    };
    // Read once, to tell a verdict JSON from evidence before the verifier's reader refuses JSON.
    let raw = match attestation::cli_io::read_capped(&given, attestation::cli_io::MAX_INPUT) {
        Ok(b) => b,
        Err(e) => return refuse(json, "input", &format!("evidence: {e}"), 2),
    };
    if is_json(&raw) {
        // Nothing to verify: the verify flags are not used, and the page says NOT VERIFIED throughout.
        return match Page::from_verdict_json(&source, &verdict_of(&raw)) {
            Ok(page) => serve(&page, args.port, args.once, json),
            Err(e) => fail(json, "view", "verdict-json", &e.to_string(), 2),
        };
    }
    // Evidence read from standard input is handed to the verifier's reader through a private temporary file
    // (the input cannot be read twice); messages name standard input, not that file.
    let stdin_file = if stdin {
        let tmp = match stdin_copy(&raw) {
            Ok(t) => t,
            Err(e) => return refuse(json, "input", &format!("evidence: standard input: {e}"), 2),
        };
        args.verify.evidence = tmp.path().to_path_buf();
        Some(tmp)
    } else {
        None
    };
    let named = |detail: &str| match &stdin_file {
        Some(t) => detail.replace(&t.path().display().to_string(), "standard input"),
        None => detail.to_string(),
    };
    // A `--tcb-baseline` is applied by `verify-attestation evidence`; the page shows the verification itself.
    let (bytes, opts, _baseline) = match options(&args.verify) {
        Ok(x) => x,
        Err(OptionsError::Unusable(check, e)) => return refuse(json, check, &named(&e), 2),
        Err(OptionsError::Rejected(check, e)) => return refuse(json, check, &named(&e), 1),
    };
    match Page::from_bytes(&source, &bytes, &opts) {
        Ok(page) => serve(&page, args.port, args.once, json),
        Err(e) => fail(json, "view", "evidence-format", &named(&e.to_string()), 2),
    }
}

/// Whether `bytes` is read as a verdict JSON: its first non-blank byte is `{` (evidence is CBOR).
fn is_json(bytes: &[u8]) -> bool {
    bytes.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{')
}

/// The verdict of a JSON input: the object itself (`fenced-run run --json`), or the `verdict` member of
/// `fenced-run demo --json`'s object (an object without `outcome` whose `verdict` is an object). Anything else
/// is returned as it is, for the verdict parser to name what is wrong.
fn verdict_of(bytes: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    if let Ok(serde_json::Value::Object(m)) = serde_json::from_slice::<serde_json::Value>(bytes) {
        if !m.contains_key("outcome") {
            if let Some(inner @ serde_json::Value::Object(_)) = m.get("verdict") {
                if let Ok(v) = serde_json::to_vec(inner) {
                    return std::borrow::Cow::Owned(v);
                }
            }
        }
    }
    std::borrow::Cow::Borrowed(bytes)
}

/// `bytes` (evidence read from standard input) in a temporary file only this user can read.
fn stdin_copy(bytes: &[u8]) -> std::io::Result<tempfile::NamedTempFile> {
    use std::io::Write;
    let mut f = tempfile::NamedTempFile::new()?;
    f.write_all(bytes)?;
    f.flush()?;
    Ok(f)
}

/// A verify flag or the evidence refused before anything is served: one failure object with `json`, else
/// `fenced-run view: CHECK: DETAIL` (`REJECTED CHECK: ...` for exit 1) on stderr, the check named either way.
fn refuse(json: bool, check: &str, detail: &str, code: u8) -> ExitCode {
    if json {
        let detail = if code == 1 {
            format!("REJECTED: {detail}")
        } else {
            detail.to_string()
        };
        return fail(true, "view", check, &detail, code);
    }
    let prefix = if code == 1 { "REJECTED " } else { "" };
    eprintln!("fenced-run view: {prefix}{check}: {}", escape(detail));
    ExitCode::from(code)
}

/// Serves `page` until Ctrl-C (or the first load with `once`), printing the URL as one line on stdout (as
/// `{"url": ...}` with `json`). The bind credential, when root installed one, adds the addresses it lists.
pub fn serve(page: &Page, port: u16, once: bool, json: bool) -> ExitCode {
    let credential = match Credential::load(Path::new(CREDENTIAL_PATH)) {
        Ok(c) => c,
        Err(e) => return fail(json, "view", "viewer-credential", &e.to_string(), 2),
    };
    let cfg = ServeConfig {
        port,
        once,
        until_interrupt: true,
        extra: credential
            .as_ref()
            .map(|c| c.addresses.clone())
            .unwrap_or_default(),
        credential,
    };
    let running = match viewer::start(page, cfg) {
        Ok(r) => r,
        Err(e) => return fail(json, "view", "viewer-start", &e.to_string(), 2),
    };
    for w in running.warnings() {
        eprintln!("fenced-run view: {}", shown(w));
    }
    if json {
        outln!("{}", serde_json::json!({ "url": running.url() }));
    } else {
        outln!("{}", running.url());
    }
    {
        use std::io::Write;
        let _ = std::io::stdout().flush();
    }
    match running.wait() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("fenced-run view: {}", shown(e));
            ExitCode::from(2)
        }
    }
}

/// The `--view` of `fenced-run run` and `demo`: verifies the evidence the run just wrote, pinning the nonce it
/// sent and (`measurement`) the launch measurement it knows, accepting simulated evidence (the process and vm
/// tiers are simulated), and serves it. `Err` carries the exit when the evidence cannot be read or shown.
pub fn after_run(
    evidence: &[u8],
    source: &str,
    nonce: &[u8],
    measurement: Option<[u8; 48]>,
) -> Result<(), ExitCode> {
    let mut opts = EvidenceOptions {
        nonce: Some(nonce.to_vec()),
        any_measurement: measurement.is_none(),
        ..EvidenceOptions::default()
    };
    opts.chain.allow_simulated = true;
    opts.chain.at = time::OffsetDateTime::now_utc();
    if let Some(m) = measurement {
        opts.policy.measurements = vec![attestation::hex::Hex(m)];
    }
    let page = Page::from_bytes(source, evidence, &opts).map_err(|e| {
        eprintln!("--view: {}", shown(e));
        ExitCode::from(2)
    })?;
    let code = serve(&page, 0, false, false);
    if code == ExitCode::SUCCESS {
        Ok(())
    } else {
        Err(code)
    }
}

/// [`after_run`] on the evidence file a run wrote (`--evidence OUT`); the launch measurement is this process's
/// sim `process` measurement for the process tier, and left unpinned (shown so) for the vm tier.
pub fn after_run_file(path: &Path, nonce: &[u8], process_tier: bool) -> Result<(), ExitCode> {
    let bytes = std::fs::read(path).map_err(|e| {
        eprintln!("--view: {}: {e}", shown(path.display()));
        ExitCode::from(2)
    })?;
    let measurement = if process_tier {
        attestation::sim::current_process_launch_measurement().ok()
    } else {
        None
    };
    after_run(&bytes, &path.display().to_string(), nonce, measurement)
}
