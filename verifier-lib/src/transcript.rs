//! The `transcript` check of evidence (docs/transcript.md, docs/verification.md): the fence transcript's
//! structure against the verified verdict and the first report, its anchor report (verified as the first one
//! is, from the same launch, REPORT_DATA binding the transcript's hash, the verdict's SHA-384 and the nonce),
//! and on TDX the replay of RTMR3 over the events; then the founder's pins on it (`--expect-egress-only`,
//! `--expect-cut`). Evidence without a transcript (written before it existed) is "not present": no failure
//! unless a transcript pin was given.

use crate::evidence::{PinCheck, ReportVerification};
use crate::failure::Failure;
use attestation::evidence::Evidence;
use attestation::transcript::{self, Event, Hash};
use attestation::verdict::Verdict;

/// Check names of the transcript.
pub mod checks {
    /// The transcript is malformed, inconsistent with the verdict or the report, its anchor is missing or does
    /// not verify, or (TDX) RTMR3 does not replay.
    pub const TRANSCRIPT: &str = "transcript";
    /// `--expect-egress-only`: a connection the proxy let through is outside the list.
    pub const PIN_EGRESS_ONLY: &str = "pin-egress-only";
    /// `--expect-cut`: no cut event that held before the test phase started.
    pub const PIN_CUT: &str = "pin-cut";
}

/// One `--expect-egress-only` entry: a host (exact, lower case) and optionally a port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EgressPin {
    /// The host name or IP literal (IPv6 without brackets), lower case.
    pub host: String,
    /// The port; `None`: any port of the host.
    pub port: Option<u16>,
}

impl EgressPin {
    /// Parses `HOST`, `HOST:PORT` or `[IPV6]:PORT` / `[IPV6]`.
    pub fn parse(s: &str) -> Result<EgressPin, String> {
        let t = s.trim().trim_end_matches('.').to_ascii_lowercase();
        let (host, port) = if let Some(rest) = t.strip_prefix('[') {
            let Some((h, after)) = rest.split_once(']') else {
                return Err(format!(
                    "{s:?}: an IPv6 address opened with [ is not closed"
                ));
            };
            match after {
                "" => (h.to_owned(), None),
                p => match p.strip_prefix(':') {
                    Some(p) => (h.to_owned(), Some(p)),
                    None => return Err(format!("{s:?}: expected :PORT after ]")),
                },
            }
        } else {
            match t.rsplit_once(':') {
                Some((h, p)) if !h.contains(':') => (h.to_owned(), Some(p)),
                Some(_) => {
                    return Err(format!(
                        "{s:?}: write an IPv6 address in brackets ([ADDRESS]:PORT)"
                    ))
                }
                None => (t.clone(), None),
            }
        };
        if host.is_empty() {
            return Err(format!("{s:?}: no host"));
        }
        if !host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_' | b':'))
        {
            return Err(format!("{s:?}: {host:?} is not a host name or IP address"));
        }
        let port = match port {
            None => None,
            Some(p) => match p.parse::<u16>() {
                Ok(n) if n > 0 => Some(n),
                _ => return Err(format!("{s:?}: {p:?} is not a port (1-65535)")),
            },
        };
        Ok(EgressPin { host, port })
    }

    /// Whether a connection to `host:port` is within this entry.
    pub fn matches(&self, host: &str, port: u16) -> bool {
        self.host.eq_ignore_ascii_case(host.trim_end_matches('.'))
            && self.port.is_none_or(|p| p == port)
    }
}

impl std::fmt::Display for EgressPin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        match self.port {
            Some(p) => write!(f, "{host}:{p}"),
            None => write!(f, "{host}"),
        }
    }
}

/// What the `transcript` check found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TranscriptVerification {
    /// Whether the evidence carries a transcript.
    pub present: bool,
    /// Its events, in order (empty when absent).
    pub events: Vec<Event>,
    /// The transcript's hash `h(n)` (SHA-384), when present.
    pub sha384: Option<Hash>,
    /// Whether the anchor report verified and binds the transcript's hash, the verdict and the nonce.
    pub anchored: bool,
    /// TDX: whether RTMR3 of the anchor quote (and of the first quote, over the events before it) replayed;
    /// `None` on SEV-SNP (no runtime register).
    pub rtmr3_replayed: Option<bool>,
    /// Each transcript pin given, with what the transcript held.
    pub pins: Vec<PinCheck>,
}

/// The anchor report verified by the evidence module as it verifies the first one.
#[derive(Debug)]
pub(crate) struct AnchorCheck {
    /// Its verification.
    pub report: ReportVerification,
    /// Its REPORT_DATA, when readable.
    pub report_data: Option<[u8; 64]>,
    /// The failures of its verification (chain, signature, policy).
    pub failures: Vec<Failure>,
}

/// The transcript's pins (part of [`crate::RunPins`]).
pub(crate) struct Pins<'a> {
    pub egress_only: Option<&'a [EgressPin]>,
    pub expect_cut: bool,
}

/// The `transcript` check; failures go to `failures` (the check's name, then the pins').
pub(crate) fn verify(
    ev: &Evidence,
    first: &ReportVerification,
    first_report_data: Option<[u8; 64]>,
    anchor: Option<AnchorCheck>,
    verdict: Option<&Verdict>,
    pins: Pins<'_>,
    failures: &mut Vec<Failure>,
) -> TranscriptVerification {
    let mut out = TranscriptVerification::default();
    let fail = |failures: &mut Vec<Failure>, d: String| {
        failures.push(Failure::new(checks::TRANSCRIPT, d));
    };
    let Some(t) = &ev.transcript else {
        pin_checks(&mut out, None, &pins);
        push_pin_failures(&out.pins, failures);
        return out;
    };
    out.present = true;
    out.sha384 = Some(t.transcript.hash());
    let events = match t.transcript.events() {
        Ok(e) => e,
        Err(e) => {
            fail(failures, e.to_string());
            pin_checks(&mut out, None, &pins);
            push_pin_failures(&out.pins, failures);
            return out;
        }
    };
    let raw = t.transcript.raw();

    // 1. Its structure against the verdict and the first report.
    let opening = matches!(
        events.get(..3),
        Some([
            Event::AgentReady { .. },
            Event::JobHeader { .. },
            Event::ReportRequested { .. }
        ])
    );
    if !opening {
        fail(
            failures,
            format!(
                "the transcript opens with {}, not agent-ready, job-header, report-requested",
                names(events.iter().take(3))
            ),
        );
    }
    if let (Some(Event::ReportRequested { report_data }), Some(rd)) =
        (events.get(2), first_report_data)
    {
        if report_data[..] != rd[..] {
            fail(
                failures,
                format!(
                    "report-requested carries REPORT_DATA {}, the report carries {}",
                    hex::encode(report_data),
                    hex::encode(rd)
                ),
            );
        }
    }
    // The job in the launch: a header that names its bundle names the launch's HOST_DATA / MRCONFIGID.
    if let Some(Event::JobHeader {
        bundle_sha256: Some(b),
        ..
    }) = events.get(1)
    {
        let snp = ev.tee.is_snp();
        let field = if snp { "HOST_DATA" } else { "MRCONFIGID" };
        match <[u8; 32]>::try_from(hex::decode(b).unwrap_or_default().as_slice()) {
            Err(_) => fail(
                failures,
                format!("job-header's bundle_sha256 {b:?} is not 32 bytes of hex"),
            ),
            Ok(bundle) => {
                let want = transcript::job_launch_digest(&bundle);
                match transcript::launch_job_field(snp, &ev.report) {
                    Some(f) if f == want => {}
                    seen => fail(
                        failures,
                        format!(
                            "job in the launch: the report's {field} is {}, the job header's launch digest is {}",
                            seen.map(hex::encode)
                                .unwrap_or_else(|| "not a launch digest".into()),
                            hex::encode(want)
                        ),
                    ),
                }
            }
        }
    }
    let payload = ev.verdict.payload.as_deref().unwrap_or_default();
    let vsha = transcript::verdict_sha384(payload);
    let verdicts = events
        .iter()
        .filter(|e| matches!(e, Event::Verdict { .. }))
        .count();
    match events.last() {
        Some(Event::Verdict { outcome, sha384 }) if verdicts == 1 => {
            if sha384[..] != vsha[..] {
                fail(
                    failures,
                    format!(
                        "the verdict event names SHA-384 {}, the evidence's verdict is {}",
                        hex::encode(sha384),
                        hex::encode(vsha)
                    ),
                );
            }
            if let Some(v) = verdict {
                if outcome != v.outcome.as_str() {
                    fail(
                        failures,
                        format!(
                            "the verdict event names outcome {outcome}, the verdict {}",
                            v.outcome
                        ),
                    );
                }
            }
        }
        _ => fail(
            failures,
            format!(
                "the transcript must end with its one verdict event; it has {verdicts} and ends with {}",
                names(events.last())
            ),
        ),
    }
    if let Some(v) = verdict {
        if let Some(Event::JobHeader { nonce, .. }) = events.get(1) {
            if *nonce != v.inputs.nonce {
                fail(
                    failures,
                    format!(
                        "job-header names nonce {}, the verdict {}",
                        hex::encode(nonce),
                        hex::encode(&v.inputs.nonce)
                    ),
                );
            }
        }
        // Every connection the verdict records, and no other, in the same order.
        let recorded: Vec<Event> = v
            .install
            .as_ref()
            .map(|i| i.egress.iter().map(Event::egress).collect())
            .unwrap_or_default();
        let written: Vec<Event> = events
            .iter()
            .filter(|e| matches!(e, Event::Egress { .. }))
            .cloned()
            .collect();
        if recorded != written {
            fail(
                failures,
                format!(
                    "the transcript's {} egress event(s) are not the verdict's {} egress record(s)",
                    written.len(),
                    recorded.len()
                ),
            );
        }
    }

    // 2. The anchor: verified as the first report, of the same launch, binding hash, verdict and nonce.
    match anchor {
        None => fail(
            failures,
            "no anchor report: the transcript's hash and the verdict are bound by no report".into(),
        ),
        Some(a) => {
            let before = failures.len();
            for f in &a.failures {
                fail(failures, format!("anchor report: {f}"));
            }
            if let Some(why) = same_launch(first, &a.report) {
                fail(failures, format!("anchor report: {why}"));
            }
            let nonce = verdict.map(|v| v.inputs.nonce.as_slice());
            match (a.report_data, nonce) {
                (Some(rd), Some(n)) => {
                    let want = transcript::anchor_report_data(&t.transcript.hash(), &vsha, n);
                    if rd != want {
                        fail(
                            failures,
                            format!(
                                "anchor report: REPORT_DATA is {}, expected SHA-512(domain || transcript hash {} || \
                                 verdict SHA-384 || nonce) = {}",
                                hex::encode(rd),
                                hex::encode(t.transcript.hash()),
                                hex::encode(want)
                            ),
                        );
                    }
                }
                (None, _) => fail(
                    failures,
                    "anchor report: its REPORT_DATA could not be read".into(),
                ),
                (_, None) => fail(
                    failures,
                    "anchor report: no verified verdict to take the nonce from".into(),
                ),
            }
            // 3. TDX: RTMR3 replayed over the events (measurements' fold), in the anchor and the first quote.
            if let (ReportVerification::Tdx(first_q), ReportVerification::Tdx(anchor_q)) =
                (first, &a.report)
            {
                let digests = |n: usize| raw[..n].iter().map(|e| transcript::event_digest(e));
                let all = measurements::tdx_boot::fold(digests(raw.len()));
                let quoted = anchor_q.quote.td().rtmr[3];
                let mut ok = true;
                if all != quoted {
                    ok = false;
                    fail(
                        failures,
                        format!(
                            "RTMR3 of the anchor quote is {}; the {} events replay to {}",
                            hex::encode(quoted),
                            raw.len(),
                            hex::encode(all)
                        ),
                    );
                }
                let opened = 3.min(raw.len());
                let early = measurements::tdx_boot::fold(digests(opened));
                let first_rtmr3 = first_q.quote.td().rtmr[3];
                if early != first_rtmr3 {
                    ok = false;
                    fail(
                        failures,
                        format!(
                            "RTMR3 of the first quote is {}; the {opened} events before it replay to {}",
                            hex::encode(first_rtmr3),
                            hex::encode(early)
                        ),
                    );
                }
                out.rtmr3_replayed = Some(ok);
            }
            out.anchored = failures.len() == before;
        }
    }
    out.events = events;
    pin_checks(&mut out, Some(()), &pins);
    push_pin_failures(&out.pins, failures);
    out
}

/// Why the anchor is not a report of the first report's launch, if it is not.
fn same_launch(first: &ReportVerification, anchor: &ReportVerification) -> Option<String> {
    match (first, anchor) {
        (ReportVerification::Snp(a), ReportVerification::Snp(b)) => {
            let (a, b) = (&a.report, &b.report);
            let diff = [
                ("MEASUREMENT", a.measurement[..] != b.measurement[..]),
                ("CHIP_ID", a.chip_id[..] != b.chip_id[..]),
                ("POLICY", a.policy.0 != b.policy.0),
                ("HOST_DATA", a.host_data != b.host_data),
            ];
            let d: Vec<&str> = diff.iter().filter(|(_, x)| *x).map(|(n, _)| *n).collect();
            (!d.is_empty())
                .then(|| format!("its {} differ(s) from the first report's", d.join(", ")))
        }
        (ReportVerification::Tdx(a), ReportVerification::Tdx(b)) => {
            let (a, b) = (a.quote.td(), b.quote.td());
            let diff = [
                ("MRTD", a.mrtd != b.mrtd),
                ("RTMR0", a.rtmr[0] != b.rtmr[0]),
                ("RTMR1", a.rtmr[1] != b.rtmr[1]),
                ("RTMR2", a.rtmr[2] != b.rtmr[2]),
                ("MRCONFIGID", a.mr_config_id != b.mr_config_id),
                ("MROWNER", a.mr_owner != b.mr_owner),
                ("MROWNERCONFIG", a.mr_owner_config != b.mr_owner_config),
            ];
            let d: Vec<&str> = diff.iter().filter(|(_, x)| *x).map(|(n, _)| *n).collect();
            (!d.is_empty())
                .then(|| format!("its {} differ(s) from the first quote's", d.join(", ")))
        }
        (ReportVerification::Unverified, _) | (_, ReportVerification::Unverified) => None,
        _ => Some("it is not of the first report's kind (SEV-SNP / TDX)".into()),
    }
}

fn names<'a>(events: impl IntoIterator<Item = &'a Event>) -> String {
    let n: Vec<&str> = events.into_iter().map(Event::name).collect();
    if n.is_empty() {
        "nothing".into()
    } else {
        n.join(", ")
    }
}

/// The pins against the events (`present` is `None` when there are none to read).
fn pin_checks(out: &mut TranscriptVerification, present: Option<()>, pins: &Pins<'_>) {
    let none = "no transcript (the evidence carries none, or it could not be read)";
    if let Some(list) = pins.egress_only {
        let wanted = list
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", ");
        let allowed: Vec<(String, u16)> = out
            .events
            .iter()
            .filter_map(|e| match e {
                Event::Egress {
                    host,
                    port,
                    allowed: true,
                    ..
                } => Some((host.clone(), *port)),
                _ => None,
            })
            .collect();
        let outside: Vec<String> = allowed
            .iter()
            .filter(|(h, p)| !list.iter().any(|x| x.matches(h, *p)))
            .map(|(h, p)| format!("{h}:{p}"))
            .collect();
        // The proxy logs at most its record limit and then one record with no host counting the rest
        // (guest::fence::proxy): connections it did not log may have gone anywhere the job allowed, so the list
        // cannot be shown to hold.
        let unlogged = out
            .events
            .iter()
            .any(|e| matches!(e, Event::Egress { host, .. } if host.is_empty()));
        let seen = match present {
            None => none.to_owned(),
            Some(()) if unlogged => {
                "the proxy's log overflowed: attempts it did not log cannot be checked against the list"
                    .to_owned()
            }
            Some(()) if allowed.is_empty() => "no connection let through".to_owned(),
            Some(()) if outside.is_empty() => format!(
                "{} connection(s) let through, all within the list",
                allowed.len()
            ),
            Some(()) => format!("connection(s) outside the list: {}", outside.join(", ")),
        };
        out.pins.push(PinCheck {
            check: checks::PIN_EGRESS_ONLY,
            wanted: format!("only {wanted}"),
            seen: Some(seen),
            held: present.is_some() && !unlogged && outside.is_empty(),
        });
    }
    if pins.expect_cut {
        let cut = out
            .events
            .iter()
            .position(|e| matches!(e, Event::Cut { held: true, .. }));
        let test = out
            .events
            .iter()
            .position(|e| matches!(e, Event::TestStart { .. }));
        let (seen, held) = match (present, cut, test) {
            (None, _, _) => (none.to_owned(), false),
            (Some(()), None, _) => ("no cut event that held".to_owned(), false),
            (Some(()), Some(c), Some(t)) if t < c => (
                format!("test-start (event {t}) before the cut (event {c})"),
                false,
            ),
            (Some(()), Some(c), Some(t)) => (
                format!("the cut held (event {c}) before test-start (event {t})"),
                true,
            ),
            (Some(()), Some(c), None) => (
                format!("the cut held (event {c}); no test phase started"),
                true,
            ),
        };
        out.pins.push(PinCheck {
            check: checks::PIN_CUT,
            wanted: "a cut that held before test-start".into(),
            seen: Some(seen),
            held,
        });
    }
}

fn push_pin_failures(pins: &[PinCheck], failures: &mut Vec<Failure>) {
    for p in pins.iter().filter(|p| !p.held) {
        failures.push(Failure::seen_wanted(
            p.check,
            p.seen.as_deref().unwrap_or("nothing"),
            &p.wanted,
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn egress_pins_parse_and_match() {
        let p = EgressPin::parse("Registry.Example:443").expect("pin");
        assert_eq!(p.to_string(), "registry.example:443");
        assert!(p.matches("registry.example", 443));
        assert!(!p.matches("registry.example", 80));
        assert!(!p.matches("evil.example", 443));
        let any = EgressPin::parse("registry.example").expect("pin");
        assert!(any.matches("registry.example", 80));
        let v6 = EgressPin::parse("[::1]:8080").expect("pin");
        assert!(v6.matches("::1", 8080));
        assert_eq!(v6.to_string(), "[::1]:8080");
        for bad in [
            "", ":443", "host:0", "host:x", "::1:80", "[::1", "a b:1", "[::1]x",
        ] {
            assert!(EgressPin::parse(bad).is_err(), "{bad:?}");
        }
    }
}
