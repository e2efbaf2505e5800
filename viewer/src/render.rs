//! The page model as HTML (maud): the answer first (outcome, what it means for the patch, counts, VERIFIED /
//! REJECTED / SIMULATED), then the inputs and pins, each phase, and the attestation with its chain drawn as
//! inline SVG. Every claim links to its check and to the section of docs/verification.md (served by the viewer)
//! that explains it. Everything from the evidence is escaped twice over: control characters made visible
//! ([`attestation::text`]) and HTML escaped by maud; no script, no external resource.

use crate::docs::Docs;
use crate::model::{ChainNode, Page, Status};
use attestation::text::{escape, escape_text};
use attestation::verdict::{AppliedLimits, EgressRecord, Verdict};
use maud::{html, Markup, PreEscaped, DOCTYPE};

/// The one stylesheet, embedded in every page and allowed by its hash in the Content-Security-Policy.
pub const CSS: &str = include_str!("style.css");

/// The CSP source for [`CSS`]: `'sha256-…'` of its exact text.
pub fn css_hash_source() -> String {
    use base64::Engine;
    use sha2::Digest;
    format!(
        "'sha256-{}'",
        base64::engine::general_purpose::STANDARD.encode(sha2::Sha256::digest(CSS.as_bytes()))
    )
}

/// One value from outside, made safe to read: controls visible, one line.
fn t(s: &str) -> String {
    escape(s).into_owned()
}

/// Command output: colour and other terminal sequences (CSI, OSC, two-byte ESC) removed, then every remaining
/// control character made visible; newlines kept.
pub fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut it = s.chars().peekable();
    while let Some(c) = it.next() {
        match c {
            '\x1b' => match it.peek().copied() {
                Some('[') => {
                    it.next();
                    // parameters and intermediates, then one final byte 0x40..0x7e
                    for d in it.by_ref() {
                        if ('\x40'..='\x7e').contains(&d) {
                            break;
                        }
                    }
                }
                Some(']') => {
                    it.next();
                    // until BEL or ESC \
                    while let Some(d) = it.next() {
                        if d == '\x07' {
                            break;
                        }
                        if d == '\x1b' {
                            if it.peek() == Some(&'\\') {
                                it.next();
                            }
                            break;
                        }
                    }
                }
                Some(d) if ('\x40'..='\x5f').contains(&d) => {
                    it.next();
                }
                _ => out.push(c),
            },
            '\u{9b}' => {
                for d in it.by_ref() {
                    if ('\x40'..='\x7e').contains(&d) {
                        break;
                    }
                }
            }
            _ => out.push(c),
        }
    }
    escape_text(&out).into_owned()
}

fn status_class(s: Status) -> &'static str {
    match s {
        Status::Verified => "ok",
        Status::Simulated => "sim",
        Status::Rejected => "bad",
        Status::Unverified => "none",
    }
}

/// What the install and the test phase have in common, for [`Renderer::phase_common`].
struct Phase<'a> {
    command: &'a str,
    source: &'a str,
    exit: Option<i32>,
    signal: Option<i32>,
    ms: u64,
    env: &'a [String],
    sandbox: &'a [String],
}

/// The renderer: the model plus the docs for check links.
pub struct Renderer<'a> {
    page: &'a Page,
    docs: &'a Docs,
}

impl<'a> Renderer<'a> {
    /// A renderer for `page`, linking checks into `docs`.
    pub fn new(page: &'a Page, docs: &'a Docs) -> Renderer<'a> {
        Renderer { page, docs }
    }

    /// A link to check `name`: its name as verify-attestation prints it, to the docs section explaining it.
    fn check_link(&self, name: &str) -> Markup {
        let section = self.docs.section_for(name);
        html! { a.check href={ "docs/verification#" (section) } title="the check, and the section of docs/verification.md that explains it" { code { (t(name)) } } }
    }

    /// A claim's evidence: each check with passed / FAILED (with its detail) / not verified.
    fn claim(&self, checks: &[&str]) -> Markup {
        let p = self.page;
        html! {
            span.claim {
                @for c in checks {
                    @let fails = p.failures_of(&[c]);
                    @if p.status == Status::Unverified {
                        span.mark.none { "not verified" } " " (self.check_link(c)) " "
                    } @else if fails.is_empty() {
                        span.mark.ok { "✓ checked" } " " (self.check_link(c)) " "
                    } @else {
                        @for f in fails {
                            span.mark.bad { "✗ FAILED" } " " (self.check_link(&f.check)) ": " span.detail { (t(&f.detail)) } " "
                        }
                    }
                }
            }
        }
    }

    /// The status badge of a section that shows `claims` ([`Page::section_status`]: its own checks and the
    /// foundation every section rests on, never a pin shown in another section).
    fn badge(&self, claims: &[&str]) -> Markup {
        let st = self.page.section_status(claims);
        html! { span class={ "badge " (status_class(st)) } { (st.word()) } }
    }

    /// The whole page.
    pub fn page(&self) -> String {
        let p = self.page;
        let outcome = p
            .verdict
            .as_ref()
            .map(|v| v.outcome.as_str())
            .unwrap_or("unknown");
        let doc = html! {
            (DOCTYPE)
            html lang="en" {
                head {
                    meta charset="utf-8";
                    meta name="viewport" content="width=device-width, initial-scale=1";
                    meta name="referrer" content="no-referrer";
                    title { "fenced-run: " (outcome) " — " (p.status.word()) }
                    style { (PreEscaped(CSS)) }
                    @if p.browser.is_some() {
                        script src="check.js" defer {}
                    }
                }
                body {
                    (self.answer())
                    (self.browser_check())
                    nav {
                        a href="#inputs" { "inputs" } " · "
                        a href="#phase-install" { "install" } " · "
                        a href="#phase-test" { "test" } " · "
                        a href="#processes" { "processes" } " · "
                        a href="#transcript" { "transcript" } " · "
                        a href="#attestation" { "attestation" } " · "
                        a href="docs/verification" { "how each check works" }
                    }
                    main {
                        (self.inputs())
                        @if let Some(v) = &p.verdict {
                            (self.install(v))
                            (self.test(v))
                            (self.processes(v))
                            (self.limits(&v.limits))
                            (self.findings(v))
                        }
                        (self.transcript())
                        (self.attestation())
                    }
                    footer {
                        p { "Source " code { (t(&p.source)) } @if let Some(at) = &p.checked_at { ", checked at " (at) } ". Served by " code { "fenced-run view" } " on loopback; nothing on this page was fetched from elsewhere." }
                    }
                }
            }
        };
        doc.into_string()
    }

    fn answer(&self) -> Markup {
        let p = self.page;
        let v = p.verdict.as_ref();
        html! {
            header class={ "answer " (status_class(p.status)) } {
                p.verification #verification {
                    span class={ "badge big " (status_class(p.status)) } { (p.status.word()) }
                    " "
                    @match p.status {
                        Status::Verified => "every check passed; the chain ends in the vendor's root.",
                        Status::Simulated => "every check passed, but the chain ends in a root that is not the vendor's: simulated evidence proves nothing about hardware.",
                        Status::Rejected => "at least one check failed: do not trust what this evidence says.",
                        Status::Unverified => "a verdict without evidence: nothing on this page is verified.",
                    }
                }
                @match v {
                    Some(v) => {
                        h1 #outcome { "Outcome: " code { (v.outcome.as_str()) } }
                        p.meaning #meaning { (crate::model::meaning(v.outcome, v.inputs.patch_sha256.is_some())) }
                        @if let Some(r) = &v.refusal {
                            p.refusal { "Refused at " code { (t(&r.stage)) } ": " (t(&r.reason)) }
                        }
                        p.counts {
                            @match &v.tests {
                                Some(c) => { strong { (c.passed) " passed, " (c.failed) " failed, " (c.skipped) " skipped" } " (counts read by parser " code { (t(&c.parser)) } ")" }
                                None => "No test counts.",
                            }
                        }
                        @if !verifier_lib::tests_ran(v) {
                            p.no-tests #no-tests { strong { (verifier_lib::output::NO_TEST_RAN) } }
                        }
                        p { "The outcome and counts come from the verdict: " (self.claim(&["verdict-signature", "verdict-counts"])) }
                    }
                    None => {
                        h1 #outcome { "Outcome: unknown" }
                        p.meaning { "The verdict did not verify, so nothing is known about the run." }
                    }
                }
                @if !p.notes.is_empty() {
                    ul.notes { @for n in &p.notes { li { (t(n)) } } }
                }
                @if !p.failures.is_empty() {
                    h2 { "Failed checks" }
                    ul.failures {
                        @for f in &p.failures {
                            li { (self.check_link(&f.check)) ": " (t(&f.detail)) }
                        }
                    }
                }
            }
        }
    }

    /// The browser check's place: what it shows until (and unless) `check.js` runs the module and fills it.
    fn browser_check(&self) -> Markup {
        if self.page.browser.is_none() {
            return html! {};
        }
        html! {
            section #browser-check {
                h2 { "Checked in your browser" }
                p #browser-status .browser.not-run {
                    "The browser check did not run (it needs JavaScript, WebAssembly and the viewer's verifier module). The result above is the server's alone."
                }
                div.scroll { table {
                    thead { tr { th { "claim" } th { "server" } th { "your browser" } th { "" } } }
                    tbody #browser-claims {}
                } }
                p.src { "The browser runs the same checks (" code { "verifier-wasm" } ") on the same evidence, pins, collateral and check time; the module and this page come from the host serving this page: see " a href="docs/verification#the-browser-check" { "what the browser check trusts" } "." }
            }
        }
    }

    fn inputs(&self) -> Markup {
        let p = self.page;
        let Some(v) = &p.verdict else {
            return html! { section #inputs { h2 { "Inputs" } p { "Unknown: the verdict did not verify." } } };
        };
        let i = &v.inputs;
        let rows: [(&str, Option<String>, &str); 7] = [
            ("commit", i.commit.clone(), "pin-commit"),
            ("tree", i.tree.clone(), "pin-tree"),
            (
                "protected test tree",
                i.test_tree.clone(),
                "pin-protect-tree",
            ),
            ("patch SHA-256", i.patch_sha256.clone(), "pin-patch"),
            ("job SHA-256", i.job_sha256.clone(), "pin-job"),
            ("nonce", Some(hex::encode(&i.nonce)), "nonce"),
            (
                "isolation",
                Some(v.isolation.as_str().to_string()),
                "pin-isolation",
            ),
        ];
        html! {
            section #inputs {
                h2 { "Inputs " (self.badge(&INPUT_CLAIMS)) }
                div.scroll { table {
                    thead { tr { th { "input" } th { "value in the verdict" } th { "founder's pin" } th { "check" } } }
                    tbody {
                        @for (name, value, check) in rows {
                            tr {
                                td { (name) }
                                td.hex { @match &value { Some(x) => (t(x)), None => em { "none" } } }
                                @if check == "nonce" {
                                    @if p.nonce_checked {
                                        td { "given (--nonce)" } td { (self.claim(&["nonce", "key-binding"])) }
                                    } @else {
                                        td.warn { "not given: freshness NOT checked" } td { (self.claim(&["key-binding"])) }
                                    }
                                } @else {
                                    @match p.pins.iter().find(|x| x.check == check) {
                                        Some(pin) => {
                                            td { (t(&pin.wanted)) " " @if pin.held { span.mark.ok { "held" } } @else { span.mark.bad { "NOT held" } } }
                                            td { (self.claim(&[check])) }
                                        }
                                        None => { td.muted { "not pinned" } td { (self.check_link(check)) " not run" } }
                                    }
                                }
                            }
                        }
                        @if let Some(pin) = p.pins.iter().find(|x| x.check == "pin-outcome") {
                            tr { td { "outcome" } td { (v.outcome.as_str()) } td { (t(&pin.wanted)) " " @if pin.held { span.mark.ok { "held" } } @else { span.mark.bad { "NOT held" } } } td { (self.claim(&["pin-outcome"])) } }
                        } @else {
                            tr { td { "outcome" } td { (v.outcome.as_str()) } td.warn { "not pinned (no --expect-outcome)" } td { (self.check_link("pin-outcome")) " not run" } }
                        }
                    }
                } }
            }
        }
    }

    fn phase_common(&self, ph: Phase<'_>) -> Markup {
        let Phase {
            command,
            source,
            exit,
            signal,
            ms,
            env,
            sandbox,
        } = ph;
        html! {
            h3 { "How it ran (the fence's preamble)" }
            dl {
                dt { "command" } dd { code { (t(command)) } }
                dt { "where it came from" } dd { code { (t(source)) } }
                dt { "exit" } dd {
                    @match (exit, signal) {
                        (Some(c), _) => { "exit code " (c) }
                        (None, Some(s)) => { "killed by signal " (s) }
                        (None, None) => "did not exit (no code, no signal)",
                    }
                }
                dt { "duration" } dd { (ms) " ms" }
                dt { "environment (names only)" } dd {
                    @if env.is_empty() { em { "none" } }
                    @for (i, n) in env.iter().enumerate() { @if i > 0 { ", " } code { (t(n)) } }
                }
                dt { "sandbox" } dd { ul.sandbox { @for l in sandbox { li { (t(l)) } } } }
            }
        }
    }

    fn install(&self, v: &Verdict) -> Markup {
        html! {
            section #phase-install {
                h2 { "Install phase " (self.badge(&[])) }
                @match &v.install {
                    None => p { "No install phase ran." }
                    Some(ph) => {
                        h3 { "Output tail" }
                        pre.tail #install-output { (strip_ansi(own_output(&v.output_tail.install, "install", &ph.command, &ph.env_names, &ph.sandbox))) }
                        (self.phase_common(Phase { command: &ph.command, source: &ph.source, exit: ph.exit_code, signal: ph.signal, ms: ph.duration_ms, env: &ph.env_names, sandbox: &ph.sandbox }))
                        h3 { "Egress (" (ph.egress.len()) " attempt(s), every one in order)" }
                        (self.egress(&ph.egress))
                    }
                }
                p.src { "From the signed verdict: " (self.claim(&["verdict-signature"])) }
            }
        }
    }

    fn egress(&self, rows: &[EgressRecord]) -> Markup {
        html! {
            @if rows.is_empty() { p { "No connection was attempted." } } @else {
                div.scroll { table.egress {
                    thead { tr { th { "host" } th { "port" } th { "allowed" } th { "reason" } th { "bytes up" } th { "bytes down" } } }
                    tbody {
                        @for e in rows {
                            tr class=(if e.allowed { "allowed" } else { "denied" }) {
                                td { code { (t(&e.host)) } } td { (e.port) }
                                td { @if e.allowed { "allowed" } @else { strong { "DENIED" } } }
                                td { (t(&e.reason)) } td { (e.bytes_up) } td { (e.bytes_down) }
                            }
                        }
                    }
                } }
            }
        }
    }

    fn test(&self, v: &Verdict) -> Markup {
        html! {
            section #phase-test {
                h2 { "Test phase " (self.badge(&[])) }
                @match &v.test {
                    None => p { "No test phase ran (the run was refused before it)." }
                    Some(ph) => {
                        h3 { "Output tail" }
                        pre.tail #test-output { (strip_ansi(own_output(&v.output_tail.test, "test", &ph.command, &ph.env_names, &ph.sandbox))) }
                        (self.phase_common(Phase { command: &ph.command, source: &ph.source, exit: ph.exit_code, signal: ph.signal, ms: ph.duration_ms, env: &ph.env_names, sandbox: &ph.sandbox }))
                        p { "Network: " strong { "none" } " (the test phase has no network)." }
                    }
                }
                p.src { "From the signed verdict: " (self.claim(&["verdict-signature"])) }
            }
        }
    }

    fn processes(&self, v: &Verdict) -> Markup {
        let pc = &v.processes;
        html! {
            section #processes {
                h2 { "Processes " (self.badge(&[])) }
                dl {
                    dt { "started" } dd { (pc.started) }
                    dt { "running at the end" } dd { (pc.running_at_end) }
                    dt { "left after teardown" } dd class=(if pc.left_after_teardown > 0 { "warn" } else { "" }) { (pc.left_after_teardown) @if pc.left_after_teardown > 0 { " — a finding" } }
                }
            }
        }
    }

    fn limits(&self, l: &AppliedLimits) -> Markup {
        let n = |x: Option<u64>| {
            x.map(|v| v.to_string())
                .unwrap_or_else(|| "not applied".into())
        };
        html! {
            section #limits {
                h2 { "Limits " (self.badge(&[])) }
                dl {
                    dt { "memory" } dd { (n(l.memory_mib)) " MiB" }
                    dt { "processes" } dd { (n(l.pids)) }
                    dt { "disk" } dd { (n(l.disk_mib)) " MiB" }
                    dt { "open files" } dd { (n(l.open_files)) }
                    dt { "install timeout" } dd { (n(l.install_timeout_seconds)) " s" }
                    dt { "test timeout" } dd { (n(l.test_timeout_seconds)) " s" }
                }
                @if !l.rlimits.is_empty() {
                    div.scroll { table {
                        thead { tr { th { "rlimit" } th { "soft" } th { "hard" } } }
                        tbody { @for (k, r) in &l.rlimits { tr { td { code { (t(k)) } } td { (r.soft.map(|v| v.to_string()).unwrap_or_else(|| "unlimited".into())) } td { (r.hard.map(|v| v.to_string()).unwrap_or_else(|| "unlimited".into())) } } } }
                    } }
                }
            }
        }
    }

    fn findings(&self, v: &Verdict) -> Markup {
        html! {
            section #findings {
                h2 { "Findings (" (v.findings.len()) ") " (self.badge(&[])) }
                @if v.findings.is_empty() { p { "None." } } @else {
                    div.scroll { table {
                        thead { tr { th { "stage" } th { "kind" } th { "path" } th { "detail" } } }
                        tbody { @for f in &v.findings { tr { td { (t(&f.stage)) } td { (t(&f.kind)) } td { code { (t(&f.path)) } } td { (t(&f.detail)) } } } }
                    } }
                }
            }
        }
    }

    /// The fence transcript as a timeline: each event in order, its name and what it says.
    fn transcript(&self) -> Markup {
        let p = self.page;
        html! {
            section #transcript {
                h2 { "Transcript " (self.badge(&["transcript"])) }
                @if p.transcript.is_empty() {
                    p { "Not present: the evidence carries no fence transcript." }
                } @else {
                    ol.timeline {
                        @for (name, detail) in &p.transcript {
                            li { code { (t(name)) } " " (t(detail)) }
                        }
                    }
                }
            }
        }
    }

    fn attestation(&self) -> Markup {
        let p = self.page;
        let mp = &p.measurement_pin;
        html! {
            section #attestation {
                h2 { "Attestation " (self.badge(&["nonce", "isolation"])) }
                @if p.status == Status::Unverified {
                    p { "No evidence: no attestation report, no chain." }
                } @else {
                    @if let Some((tee, label)) = &p.tee {
                        p { "TEE " code { (tee) } " (the evidence is labelled " code { (t(label)) } "): " (self.claim(&["tee-label", "simulated"])) }
                    }
                    @if p.chain.is_empty() {
                        p { "The report could not be verified at all: " (self.claim(&["report-format", "certs", "tdx", "collateral-format"])) }
                    } @else {
                        h3 #chain { "Chain" }
                        div.chain { (chain_svg(&p.chain)) }
                        div.scroll { table {
                            thead { tr { th { "node" } th { "subject" } th { "valid" } th { "checks" } } }
                            tbody { @for n in &p.chain {
                                tr class=(if n.ok { "" } else { "failed" }) {
                                    td { (t(&n.role)) } td { (t(&n.subject)) }
                                    td { @match &n.validity { Some((a, b)) => { (a) " to " (b) @if n.valid_at == Some(false) { " " span.mark.bad { "not valid at the check time" } } } None => "—" } }
                                    td { @let names: Vec<&str> = n.checks.iter().map(String::as_str).collect(); (self.claim(&names)) }
                                }
                            } }
                        } }
                    }
                    h3 #binding { "Key binding and freshness" }
                    p { "REPORT_DATA binds the verdict's signing key and the nonce: " (self.claim(&["key-binding"])) }
                    p { "The verdict is signed by that key: " (self.claim(&["verdict-signature"])) }
                    p { "The verdict's nonce: " @if p.nonce_checked { (self.claim(&["nonce"])) } @else { span.warn { "NOT compared (no --nonce): the verdict may be a replay " } (self.claim(&["nonce-unpinned"])) } }
                    p { "The verdict's isolation agrees with the attestation: " (self.claim(&["isolation"])) }
                    h3 #measurement { "Launch measurement" }
                    div.scroll { table {
                        thead { tr { th { "register" } th { "in the report" } th { "pinned" } } }
                        tbody { @for r in &p.registers { tr { td { code { (r.name) } } td.hex { (r.value) } td { @if r.pinned { span.mark.ok { "compared" } } @else { span.muted { "not compared" } } } } } }
                    } }
                    @if !mp.flags.is_empty() {
                        p { "Pinned by flags:" }
                        ul { @for (reg, val) in &mp.flags { li { code { (reg) } " " span.hex { (val) } } } }
                    }
                    @if let Some(set) = &mp.set {
                        p { "Measurement set " code { (t(set)) } ", matching entry: " @match &mp.entry { Some(e) => code { (t(e)) }, None => strong { "none" } } }
                        p { "Trusted because signed by: " @if mp.auditors.is_empty() { strong { "no trusted auditor" } } @for (i, a) in mp.auditors.iter().enumerate() { @if i > 0 { ", " } code { (t(a)) } } }
                    }
                    @if mp.any { p.warn { "--any-measurement: the launch measurement was NOT pinned; any guest code could have produced this verdict." } }
                    @let tdx = p.registers.iter().any(|r| r.name == "mrtd");
                    @let mchecks = measurement_checks(mp, tdx);
                    @if !mchecks.is_empty() { p { "The measurement checks: " (self.claim(&mchecks)) } }
                    h3 #tcb { "TCB" }
                    (rows_dl(&p.tcb))
                    h3 #policy { "Policy" }
                    (rows_dl(&p.policy))
                    @if !tdx && !p.policy.is_empty() {
                        p { "The guest policy checks always made: " (self.claim(&["guest-policy", "debug", "migration-agent"])) " (a policy flag given adds its own check, and a failed one is listed at the top)" }
                    }
                }
            }
        }
    }
}

/// The claims the Inputs section shows (besides the foundation every section rests on).
const INPUT_CLAIMS: [&str; 8] = [
    "nonce",
    "outcome",
    "commit",
    "tree",
    "patch",
    "job",
    "test tree",
    "isolation",
];

/// The fence's preamble of a phase's output tail, exactly as the guest writes it before the command's output
/// (`# fenced-run PHASE phase: COMMAND`, `# env: NAMES`, one `# sandbox: LINE` per sandbox line).
pub fn preamble(phase: &str, command: &str, env: &[String], sandbox: &[String]) -> String {
    let mut h = format!(
        "# fenced-run {phase} phase: {command}\n# env: {}\n",
        env.join(" ")
    );
    for line in sandbox {
        h.push_str("# sandbox: ");
        h.push_str(line);
        h.push('\n');
    }
    h
}

/// The command's own output: the tail without the fence's preamble when it starts with exactly that preamble
/// (whose lines the phase's details show once), else the whole tail as it is.
pub fn own_output<'t>(
    tail: &'t str,
    phase: &str,
    command: &str,
    env: &[String],
    sandbox: &[String],
) -> &'t str {
    tail.strip_prefix(&preamble(phase, command, env, sandbox))
        .unwrap_or(tail)
}

/// The measurement checks that ran: the flag pin, the set, the TDX completeness rule, or the unpinned failure.
fn measurement_checks(mp: &crate::model::MeasurementPin, tdx: bool) -> Vec<&'static str> {
    let mut out = Vec::new();
    if !mp.flags.is_empty() {
        out.push(if tdx { "mrtd" } else { "measurement" });
    }
    if mp.set.is_some() {
        out.push("measurement-set");
    }
    if tdx && !mp.any {
        out.push("measurement-incomplete");
    }
    if mp.flags.is_empty() && mp.set.is_none() && !mp.any {
        out.push("measurement-unpinned");
    }
    out
}

fn rows_dl(rows: &[(String, String)]) -> Markup {
    html! { dl { @for (k, v) in rows { dt { (t(k)) } dd.hex { (t(v)) } } } }
}

/// Shortens `s` to `n` characters for the drawing (the table beside it holds the whole text).
fn short(s: &str, n: usize) -> String {
    let s = t(s);
    if s.chars().count() <= n {
        s
    } else {
        let mut o: String = s.chars().take(n.saturating_sub(1)).collect();
        o.push('…');
        o
    }
}

/// The chain as an inline SVG: one box per node, root at the top, an arrow from each to the one it signed.
pub fn chain_svg(nodes: &[ChainNode]) -> Markup {
    let (w, h, gap) = (560, 64, 26);
    let total = nodes.len() as i32 * (h + gap) - gap + 4;
    html! {
        svg xmlns="http://www.w3.org/2000/svg" viewBox={ "0 0 " (w) " " (total) } role="img" aria-label="attestation chain, root first" {
            @for (i, n) in nodes.iter().enumerate() {
                @let y = 2 + i as i32 * (h + gap);
                @let (stroke, fill) = if n.ok { ("#1a7f37", "#eef8f0") } else { ("#cf222e", "#fdecec") };
                g {
                    title { (t(&n.role)) ": " (t(&n.subject)) }
                    rect x="2" y=(y) width=(w - 4) height=(h) rx="6" fill=(fill) stroke=(stroke) stroke-width="2" {}
                    text x="14" y=(y + 20) font-size="14" font-weight="bold" fill="#111" { (short(&n.role, 40)) " " (if n.ok { "✓ checked" } else { "✗ FAILED" }) }
                    text x="14" y=(y + 38) font-size="12" fill="#222" { (short(&n.subject, 78)) }
                    text x="14" y=(y + 55) font-size="11" fill="#444" {
                        @match &n.validity { Some((a, b)) => { "valid " (a) " to " (b) @if n.valid_at == Some(false) { " (NOT valid now)" } } None => { "checks: " (n.checks.join(", ")) } }
                    }
                    @if i + 1 < nodes.len() {
                        line x1=(w / 2) y1=(y + h) x2=(w / 2) y2=(y + h + gap - 4) stroke="#555" stroke-width="2" {}
                        polygon points={ (w / 2 - 5) "," (y + h + gap - 9) " " (w / 2 + 5) "," (y + h + gap - 9) " " (w / 2) "," (y + h + gap - 2) } fill="#555" {}
                    }
                }
            }
        }
    }
}

/// The documentation page (docs/verification.md), with the same stylesheet.
pub fn docs_page(docs: &Docs) -> String {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { "fenced-run: verification checks" }
                style { (PreEscaped(CSS)) }
            }
            body {
                nav { a href="./" { "← back to the run" } }
                main.docs { (PreEscaped(&docs.html)) }
            }
        }
    }
    .into_string()
}

/// A short page for errors (404, 421): it names nothing about the run.
pub fn plain_page(title: &str, text: &str) -> String {
    html! {
        (DOCTYPE)
        html lang="en" { head { meta charset="utf-8"; title { (title) } } body { h1 { (title) } p { (text) } } }
    }
    .into_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ansi_is_stripped_and_other_controls_shown() {
        assert_eq!(strip_ansi("\x1b[31mred\x1b[0m ok"), "red ok");
        assert_eq!(strip_ansi("\x1b]0;title\x07x"), "x");
        assert_eq!(strip_ansi("a\x07b\nc"), "a\\x07b\nc");
        assert_eq!(strip_ansi("\u{9b}2Jz"), "z");
    }
}

#[cfg(test)]
mod page_tests {
    use super::*;
    use attestation::verdict::{Inputs, Isolation, Outcome, TestPhase};

    fn failing_page(patch: bool) -> String {
        let mut v = Verdict::new(
            Outcome::TestsFailed,
            Isolation::Process,
            Inputs {
                patch_sha256: patch.then(|| "ab".repeat(32)),
                ..Inputs::default()
            },
            "t",
        );
        let sandbox = vec!["net: none".to_string(), "root: read-only".to_string()];
        let env = vec!["PATH".to_string(), "HOME".to_string()];
        v.test = Some(TestPhase {
            command: "cargo test".into(),
            source: "job".into(),
            exit_code: Some(101),
            env_names: env.clone(),
            sandbox: sandbox.clone(),
            ..TestPhase::default()
        });
        v.output_tail.test = preamble("test", "cargo test", &env, &sandbox)
            + "test it_works ... FAILED\nassertion failed: left == right\n";
        let json = serde_json::to_vec(&v.to_json_value()).expect("json");
        let page = crate::model::Page::from_verdict_json("v.json", &json).expect("page");
        Renderer::new(&page, &crate::docs::Docs::verification()).page()
    }

    #[test]
    fn the_tests_own_output_comes_first_and_the_preamble_once() {
        let html = failing_page(true);
        let output = html.find("assertion failed").expect("the test's output");
        let preamble = html.find("How it ran").expect("the phase details");
        assert!(
            output < preamble,
            "the output is shown before the fence's preamble"
        );
        // The preamble's lines are not repeated inside the output, and each sandbox line is shown once.
        assert!(
            !html.contains("# sandbox:"),
            "preamble left in the output tail"
        );
        assert!(!html.contains("# fenced-run test phase"));
        assert_eq!(html.matches("root: read-only").count(), 1);
    }

    /// The transcript is a timeline of its events in order, escaped; without one the section says "not present".
    #[test]
    fn the_transcript_is_a_timeline_in_order() {
        use attestation::transcript::Event;
        let v = Verdict::new(
            Outcome::TestsPassed,
            Isolation::Process,
            Inputs::default(),
            "t",
        );
        let json = serde_json::to_vec(&v.to_json_value()).expect("json");
        let mut page = crate::model::Page::from_verdict_json("v.json", &json).expect("page");
        let docs = crate::docs::Docs::verification();
        let html = Renderer::new(&page, &docs).page();
        assert!(html.contains("Not present: the evidence carries no fence transcript"));
        page.transcript = [
            Event::Cut {
                pid1_reaped: true,
                processes_left: 0,
                held: true,
            },
            Event::TestStart {
                command: "sh <t>.sh".into(),
            },
        ]
        .iter()
        .map(crate::model::timeline_entry)
        .collect();
        let html = Renderer::new(&page, &docs).page();
        let cut = html.find("<code>cut</code>").expect("cut");
        let test = html.find("<code>test-start</code>").expect("test-start");
        assert!(cut < test);
        assert!(html.contains("held: install PID 1 reaped true, 0 process(es) left"));
        assert!(html.contains("sh &lt;t&gt;.sh"), "escaped");
    }

    #[test]
    fn a_tail_without_the_exact_preamble_is_shown_as_it_is() {
        let env = vec!["PATH".to_string()];
        let tail = "# sandbox: written by the test itself\nok\n";
        assert_eq!(own_output(tail, "test", "make", &env, &[]), tail);
        let full = preamble("test", "make", &env, &[]) + "ok\n";
        assert_eq!(own_output(&full, "test", "make", &env, &[]), "ok\n");
        assert_eq!(own_output(&full, "install", "make", &env, &[]), full);
    }

    #[test]
    fn the_outcome_sentence_matches_the_inputs() {
        assert!(failing_page(true).contains("Tests failed with the patch applied"));
        let unpatched = failing_page(false);
        assert!(!unpatched.contains("patch applied"));
        assert!(unpatched.contains("no patch was applied"));
    }

    #[test]
    fn a_verdict_json_page_has_no_browser_check() {
        let html = failing_page(true);
        assert!(!html.contains("browser-check") && !html.contains("check.js"));
    }
}
