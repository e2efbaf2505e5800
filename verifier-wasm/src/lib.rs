//! verifier-lib's evidence check for the founder's browser.
//!
//! One entry: [`verify`] takes the evidence bytes and a [`Request`] (the founder's pins, the policies, the
//! collateral as bytes and the verification time: no HTTP, no file system, no clock) and returns the JSON object
//! of `verify-attestation evidence --json` ([`verifier_lib::output::evidence_json_with`]), claims included. The
//! viewer computes its own (server) result with the same function natively and hands the browser the same
//! request, so the two results are the same computation on the same inputs, compared claim by claim on the page.
//!
//! On `wasm32` the crate is also a module with a plain C ABI (no JavaScript glue is generated; see [`abi`]):
//! `input(len)` gives the address of a buffer of `len` bytes to fill with the evidence followed by the request
//! JSON, `verify(evidence_len, request_len)` runs the check, and `output_ptr()`/`output_len()` give the result
//! JSON. The signature arithmetic is then the RustCrypto crates' (`attestation::sig`).

use base64::Engine as _;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;

use attestation::verdict::{Isolation, Outcome};
use verifier_lib::intel_tdx::TcbStatus;
use verifier_lib::output::{evidence_json_with, ClaimContext};
use verifier_lib::sev_snp::{CertBundle, ChainOptions, Policy};
use verifier_lib::{verify_evidence_bytes, EvidenceOptions, RunPins, SharedPolicy};

#[cfg(target_arch = "wasm32")]
pub mod abi;
#[cfg(not(target_arch = "wasm32"))]
pub mod vectors;

/// Why a request could not be turned into verification options.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RequestError {
    /// The request is not JSON of the [`Request`] shape.
    #[error("request: {0}")]
    Json(String),
    /// A field does not decode (hex, base64, a time, a measurement set).
    #[error("request field {field}: {why}")]
    Field {
        /// The field, as named in the JSON.
        field: &'static str,
        /// What is wrong with it.
        why: String,
    },
}

/// SEV-SNP certificates from outside the evidence, DER in base64.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SnpCerts {
    /// ARK.
    pub ark: String,
    /// ASK or ASVK.
    pub intermediate: String,
    /// VCEK or VLEK.
    pub leaf: String,
}

/// A measurement set whose auditor signatures the viewer checked (k of n) with the founder's keys: the set
/// itself (TOML) and who signed it. The browser does not check the auditor signatures again (see
/// docs/verification.md, "The browser check").
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrustedSetInput {
    /// The set, as [`measurements::set::MeasurementSet::to_toml`] writes it.
    pub toml: String,
    /// Where it was read from (shown, never opened).
    pub path: String,
    /// (the founder's name of the key, the key as hex) for each auditor whose signature counted.
    pub signers: Vec<(String, String)>,
}

/// The TDX acceptability policy ([`verifier_lib::intel_tdx::Policy`]), registers in hex.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(missing_docs)]
pub struct TdxPolicyInput {
    pub accepted_tcb_statuses: Vec<String>,
    pub denied_advisories: Vec<String>,
    pub allow_debug: bool,
    pub require_sept_ve_disable: bool,
    pub allow_migratable: bool,
    pub allow_perfmon: bool,
    pub allow_service_td: bool,
    pub require_collateral: bool,
    pub mrtd: Vec<String>,
    pub rtmr: [Option<String>; 4],
    pub mr_config_id: Option<String>,
    pub mr_owner: Option<String>,
    pub mr_owner_config: Option<String>,
    pub xfam: Option<String>,
    pub td_attributes: Option<String>,
    pub min_tee_tcb_svn: Option<String>,
    pub report_data: Option<String>,
    pub min_tcb_evaluation_data_number: Option<u32>,
    pub min_tcb_date: Option<i64>,
    pub collateral_grace_secs: i64,
}

/// The founder's pins on the run ([`RunPins`]), digests in hex.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(missing_docs)]
pub struct PinsInput {
    pub expect_outcome: Vec<Outcome>,
    pub commit: Option<String>,
    pub tree: Option<String>,
    pub protect_tree: Option<String>,
    pub patch_sha256: Option<String>,
    pub job_sha256: Option<String>,
    pub isolation: Option<Isolation>,
    pub expect_tests_ran: bool,
    pub min_failed: Option<u64>,
    pub repository: Option<String>,
}

/// Everything the check needs besides the evidence: the founder's pins, the policies, the collateral and the
/// time. Every field mirrors one of [`EvidenceOptions`] or [`ClaimContext`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Request {
    /// The verification time, unix seconds (the page's check time: the browser does not read its clock).
    pub at: i64,
    /// Accept a chain whose root is not the vendor's (sim evidence).
    pub allow_simulated: bool,
    /// A CRL (DER or PEM), base64.
    pub crl: Option<String>,
    /// What applies to evidence of either TEE: launch measurements, debugging, REPORT_DATA (left out of the
    /// JSON when empty).
    #[serde(default, skip_serializing_if = "SharedPolicy::is_empty")]
    pub shared: SharedPolicy,
    /// The SEV-SNP policy, for SEV-SNP evidence (its `measurements` are pinned launch measurements too).
    pub policy: Policy,
    /// The founder's nonce, hex.
    pub nonce: Option<String>,
    /// `--any-measurement`.
    pub any_measurement: bool,
    /// `--no-nonce`.
    pub no_nonce: bool,
    /// `--leave-rtmrs-unpinned`.
    pub leave_rtmrs_unpinned: bool,
    /// The measurement set, already trusted.
    pub measurement_set: Option<TrustedSetInput>,
    /// TDX collateral (`collateral.json` layout), base64.
    pub tdx_collateral: Option<String>,
    /// SEV-SNP certificates from outside the evidence.
    pub snp_certs: Option<SnpCerts>,
    /// The TDX policy.
    pub tdx_policy: TdxPolicyInput,
    /// The pins on the run.
    pub pins: PinsInput,
    /// `--pool-attempt N`.
    pub pool_attempt: Option<u32>,
    /// Where the collateral came from (`null`: the evidence's own), as the output names it.
    pub collateral_source: serde_json::Value,
    /// `--policy FILE`, as given.
    pub policy_file: Option<String>,
    /// `--tcb-baseline`, as given, when it was applied.
    pub tcb_baseline: Option<String>,
}

fn b64(v: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(v)
}

fn unb64(field: &'static str, s: &str) -> Result<Vec<u8>, RequestError> {
    base64::engine::general_purpose::STANDARD
        .decode(s)
        .map_err(|e| RequestError::Field {
            field,
            why: format!("not base64: {e}"),
        })
}

fn unhex<const N: usize>(field: &'static str, s: &str) -> Result<[u8; N], RequestError> {
    let v = hex::decode(s).map_err(|e| RequestError::Field {
        field,
        why: format!("not hex: {e}"),
    })?;
    v.try_into().map_err(|v: Vec<u8>| RequestError::Field {
        field,
        why: format!("{} bytes, {N} wanted", v.len()),
    })
}

fn unhex_opt<const N: usize>(
    field: &'static str,
    s: &Option<String>,
) -> Result<Option<[u8; N]>, RequestError> {
    s.as_deref().map(|s| unhex::<N>(field, s)).transpose()
}

impl Request {
    /// The request that verifies with exactly `opts` and `ctx`.
    pub fn from_options(opts: &EvidenceOptions, ctx: &ClaimContext) -> Request {
        let t = &opts.tdx_policy;
        let h = |v: &Option<[u8; 48]>| v.map(hex::encode);
        let p = &opts.pins;
        Request {
            at: opts.chain.at.unix_timestamp(),
            allow_simulated: opts.chain.allow_simulated,
            crl: opts.chain.crl.as_deref().map(b64),
            shared: opts.shared.clone(),
            policy: opts.policy.clone(),
            nonce: opts.nonce.as_deref().map(hex::encode),
            any_measurement: opts.any_measurement,
            no_nonce: opts.no_nonce,
            leave_rtmrs_unpinned: opts.leave_rtmrs_unpinned,
            measurement_set: opts.measurement_set.as_ref().map(|s| TrustedSetInput {
                toml: s.set.to_toml(),
                path: s.path.display().to_string(),
                signers: s.signers.clone(),
            }),
            tdx_collateral: opts.tdx_collateral.as_deref().map(b64),
            snp_certs: opts.snp_certs.as_ref().map(|c| SnpCerts {
                ark: b64(&c.ark),
                intermediate: b64(&c.intermediate),
                leaf: b64(&c.leaf),
            }),
            tdx_policy: TdxPolicyInput {
                accepted_tcb_statuses: t
                    .accepted_tcb_statuses
                    .iter()
                    .map(|s| s.name().to_string())
                    .collect(),
                denied_advisories: t.denied_advisories.iter().cloned().collect(),
                allow_debug: t.allow_debug,
                require_sept_ve_disable: t.require_sept_ve_disable,
                allow_migratable: t.allow_migratable,
                allow_perfmon: t.allow_perfmon,
                allow_service_td: t.allow_service_td,
                require_collateral: t.require_collateral,
                mrtd: t.mrtd.iter().map(hex::encode).collect(),
                rtmr: t.rtmr.map(|r| r.map(hex::encode)),
                mr_config_id: h(&t.mr_config_id),
                mr_owner: h(&t.mr_owner),
                mr_owner_config: h(&t.mr_owner_config),
                xfam: t.xfam.map(hex::encode),
                td_attributes: t.td_attributes.map(hex::encode),
                min_tee_tcb_svn: t.min_tee_tcb_svn.map(hex::encode),
                report_data: t.report_data.map(hex::encode),
                min_tcb_evaluation_data_number: t.min_tcb_evaluation_data_number,
                min_tcb_date: t.min_tcb_date,
                collateral_grace_secs: t.collateral_grace_secs,
            },
            pins: PinsInput {
                expect_outcome: p.expect_outcome.clone(),
                commit: p.commit.clone(),
                tree: p.tree.clone(),
                protect_tree: p.protect_tree.clone(),
                patch_sha256: p.patch_sha256.map(hex::encode),
                job_sha256: p.job_sha256.map(hex::encode),
                isolation: p.isolation,
                expect_tests_ran: p.expect_tests_ran,
                min_failed: p.min_failed,
                repository: p.repository.clone(),
            },
            pool_attempt: ctx.pool_attempt,
            collateral_source: ctx.collateral_source.clone(),
            policy_file: ctx.policy_file.clone(),
            tcb_baseline: ctx.tcb_baseline.clone(),
        }
    }

    /// The options and context this request stands for.
    pub fn to_options(&self) -> Result<(EvidenceOptions, ClaimContext), RequestError> {
        let at = time::OffsetDateTime::from_unix_timestamp(self.at).map_err(|e| {
            RequestError::Field {
                field: "at",
                why: e.to_string(),
            }
        })?;
        let t = &self.tdx_policy;
        let mut rtmr = [None; 4];
        for (slot, r) in rtmr.iter_mut().zip(&t.rtmr) {
            *slot = unhex_opt::<48>("tdx_policy.rtmr", r)?;
        }
        let tdx_policy = verifier_lib::intel_tdx::Policy {
            accepted_tcb_statuses: t
                .accepted_tcb_statuses
                .iter()
                .map(|s| TcbStatus::from_name(s))
                .collect::<BTreeSet<_>>(),
            denied_advisories: t.denied_advisories.iter().cloned().collect(),
            allow_debug: t.allow_debug,
            require_sept_ve_disable: t.require_sept_ve_disable,
            allow_migratable: t.allow_migratable,
            allow_perfmon: t.allow_perfmon,
            allow_service_td: t.allow_service_td,
            require_collateral: t.require_collateral,
            mrtd: t
                .mrtd
                .iter()
                .map(|m| unhex::<48>("tdx_policy.mrtd", m))
                .collect::<Result<_, _>>()?,
            rtmr,
            mr_config_id: unhex_opt::<48>("tdx_policy.mr_config_id", &t.mr_config_id)?,
            mr_owner: unhex_opt::<48>("tdx_policy.mr_owner", &t.mr_owner)?,
            mr_owner_config: unhex_opt::<48>("tdx_policy.mr_owner_config", &t.mr_owner_config)?,
            xfam: unhex_opt::<8>("tdx_policy.xfam", &t.xfam)?,
            td_attributes: unhex_opt::<8>("tdx_policy.td_attributes", &t.td_attributes)?,
            min_tee_tcb_svn: unhex_opt::<16>("tdx_policy.min_tee_tcb_svn", &t.min_tee_tcb_svn)?,
            report_data: unhex_opt::<64>("tdx_policy.report_data", &t.report_data)?,
            min_tcb_evaluation_data_number: t.min_tcb_evaluation_data_number,
            min_tcb_date: t.min_tcb_date,
            collateral_grace_secs: t.collateral_grace_secs,
        };
        let p = &self.pins;
        let pins = RunPins {
            expect_outcome: p.expect_outcome.clone(),
            commit: p.commit.clone(),
            tree: p.tree.clone(),
            protect_tree: p.protect_tree.clone(),
            patch_sha256: unhex_opt::<32>("pins.patch_sha256", &p.patch_sha256)?,
            job_sha256: unhex_opt::<32>("pins.job_sha256", &p.job_sha256)?,
            isolation: p.isolation,
            expect_tests_ran: p.expect_tests_ran,
            min_failed: p.min_failed,
            repository: p.repository.clone(),
            ..RunPins::default()
        };
        let measurement_set =
            match &self.measurement_set {
                None => None,
                Some(s) => {
                    let path = PathBuf::from(&s.path);
                    let set = measurements::set::MeasurementSet::from_toml(&s.toml, &path)
                        .map_err(|e| RequestError::Field {
                            field: "measurement_set.toml",
                            why: e.to_string(),
                        })?;
                    Some(Arc::new(measurements::set::TrustedSet {
                        set,
                        path,
                        signers: s.signers.clone(),
                        problems: Vec::new(),
                    }))
                }
            };
        let snp_certs = match &self.snp_certs {
            None => None,
            Some(c) => Some(CertBundle {
                ark: unb64("snp_certs.ark", &c.ark)?,
                intermediate: unb64("snp_certs.intermediate", &c.intermediate)?,
                leaf: unb64("snp_certs.leaf", &c.leaf)?,
            }),
        };
        let opts = EvidenceOptions {
            chain: ChainOptions {
                at,
                crl: self.crl.as_deref().map(|c| unb64("crl", c)).transpose()?,
                allow_simulated: self.allow_simulated,
            },
            shared: self.shared.clone(),
            policy: self.policy.clone(),
            nonce: self
                .nonce
                .as_deref()
                .map(|n| {
                    hex::decode(n).map_err(|e| RequestError::Field {
                        field: "nonce",
                        why: format!("not hex: {e}"),
                    })
                })
                .transpose()?,
            any_measurement: self.any_measurement,
            measurement_set,
            tdx_collateral: self
                .tdx_collateral
                .as_deref()
                .map(|c| unb64("tdx_collateral", c))
                .transpose()?,
            snp_certs,
            no_nonce: self.no_nonce,
            tdx_policy,
            leave_rtmrs_unpinned: self.leave_rtmrs_unpinned,
            pins,
        };
        let ctx = ClaimContext {
            pool_attempt: self.pool_attempt,
            // The pool's ledger is checked by verify-attestation (--pool-ledger), not in the browser.
            pool_ledger: None,
            collateral_source: self.collateral_source.clone(),
            policy_file: self.policy_file.clone(),
            tcb_baseline: self.tcb_baseline.clone(),
        };
        Ok((opts, ctx))
    }
}

/// Verifies `evidence` with `request`: the JSON object of `verify-attestation evidence --json`, or
/// `{"error": {"check": ..., "detail": ...}}` when the request or the evidence cannot be read at all.
pub fn verify(evidence: &[u8], request: &Request) -> serde_json::Value {
    let (opts, ctx) = match request.to_options() {
        Ok(o) => o,
        Err(e) => return error("request", &e.to_string()),
    };
    match verify_evidence_bytes(evidence, &opts) {
        Ok(v) => evidence_json_with(&v, &opts, &ctx),
        Err(e) => error(verifier_lib::checks::EVIDENCE_FORMAT, &e.to_string()),
    }
}

/// [`verify`] with the request as JSON text, the result as JSON text.
pub fn verify_json(evidence: &[u8], request: &[u8]) -> String {
    let out = match serde_json::from_slice::<Request>(request) {
        Ok(r) => verify(evidence, &r),
        Err(e) => error("request", &RequestError::Json(e.to_string()).to_string()),
    };
    out.to_string()
}

fn error(check: &str, detail: &str) -> serde_json::Value {
    serde_json::json!({"error": {"check": check, "detail": detail}})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_round_trips_the_options() {
        let mut opts = EvidenceOptions {
            nonce: Some(vec![1, 2, 3]),
            no_nonce: false,
            any_measurement: true,
            tdx_collateral: Some(b"{}".to_vec()),
            snp_certs: Some(CertBundle {
                ark: vec![1],
                intermediate: vec![2],
                leaf: vec![3],
            }),
            ..EvidenceOptions::default()
        };
        opts.chain.crl = Some(vec![9, 9]);
        opts.shared.measurements = vec![attestation::hex::Hex([6; 48])];
        opts.shared.report_data = Some(attestation::hex::Hex([4; 64]));
        opts.tdx_policy.rtmr[1] = Some([7; 48]);
        opts.tdx_policy.mrtd.push([8; 48]);
        opts.tdx_policy.xfam = Some([1; 8]);
        opts.pins.patch_sha256 = Some([5; 32]);
        opts.pins.commit = Some("abcdefabcdef".into());
        opts.pins.expect_outcome = vec![Outcome::TestsFailed];
        let ctx = ClaimContext {
            pool_attempt: Some(2),
            ..ClaimContext::default()
        };
        let req = Request::from_options(&opts, &ctx);
        let text = serde_json::to_string(&req).expect("json");
        let back: Request = serde_json::from_str(&text).expect("parse");
        assert_eq!(back, req);
        let (o, c) = back.to_options().expect("options");
        assert_eq!(o.chain.at.unix_timestamp(), opts.chain.at.unix_timestamp());
        assert_eq!(o.chain.crl, opts.chain.crl);
        assert_eq!(o.nonce, opts.nonce);
        assert_eq!(o.tdx_policy, opts.tdx_policy);
        assert_eq!(o.pins, opts.pins);
        assert_eq!(o.snp_certs, opts.snp_certs);
        assert_eq!(o.tdx_collateral, opts.tdx_collateral);
        assert_eq!(o.policy, opts.policy);
        assert_eq!(o.shared, opts.shared);
        assert_eq!(c.pool_attempt, Some(2));
    }

    #[test]
    fn the_shared_policy_is_left_out_of_the_json_when_empty() {
        let mut opts = EvidenceOptions::default();
        let json = serde_json::to_value(Request::from_options(&opts, &ClaimContext::default()))
            .expect("json");
        assert!(json.get("shared").is_none(), "{json}");
        opts.shared.allow_debug = true;
        let req = Request::from_options(&opts, &ClaimContext::default());
        let json = serde_json::to_value(&req).expect("json");
        assert_eq!(json["shared"]["allow_debug"], true, "{json}");
        let back: Request = serde_json::from_value(json).expect("parse");
        assert_eq!(back.to_options().expect("options").0.shared, opts.shared);
    }

    #[test]
    fn bad_requests_and_evidence_are_named() {
        let out: serde_json::Value =
            serde_json::from_str(&verify_json(b"", b"{\"nope\": 1}")).expect("json");
        assert_eq!(out["error"]["check"], "request");
        let req = Request {
            nonce: Some("zz".into()),
            ..Request::default()
        };
        let out = verify(b"", &req);
        assert!(
            out["error"]["detail"]
                .as_str()
                .is_some_and(|d| d.contains("nonce")),
            "{out}"
        );
        let out = verify(b"not cbor", &Request::default());
        assert_eq!(out["error"]["check"], "evidence-format");
    }
}
