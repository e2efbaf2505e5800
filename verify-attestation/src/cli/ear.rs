//! `--ear`: the verifier's appraisal of one evidence bundle as an EAT Attestation Result (draft-ietf-rats-ear,
//! the claim names of Project Veraison's implementations: `eat_profile` `tag:github.com,2023:veraison/ear`,
//! `ear.verifier-id`, `submods` with `ear.status`, `ear.trustworthiness-vector`, `ear.appraisal-policy-id`,
//! `eat_nonce`), a JWT signed ES256 with the founder's P-256 key.
//!
//! One submodule, named by the evidence's TEE label (`sev-snp`, `tdx`, `sim-sev-snp`, `sim-tdx`). Its AR4SI
//! trustworthiness vector is computed from the claim rows of the verification ([`vector`]; the table is in
//! docs/verification.md, "The AR4SI mapping"), its status is the worst tier of the vector, and contraindicated
//! whenever the verification failed. fenced-run's own result rides in the submodule's extension claim
//! `fenced-run.verification`. Unlike the statement, an EAR is written for a failed verification too: a
//! contraindicated appraisal is an answer.

use super::founder_key::FounderKey;
use super::run_facts::RunFacts;
use base64::Engine;
use serde_json::{json, Map, Value};
use verifier_lib::ClaimStatus;

/// The `eat_profile` of an EAR.
pub const EAR_PROFILE: &str = "tag:github.com,2023:veraison/ear";
/// The appraisal policy: `verify-attestation evidence`'s checks in their documented order, with the founder's
/// pins (which the extension's claim rows list).
pub const APPRAISAL_POLICY_ID: &str = "urn:fenced-run:verify-attestation:evidence";
/// The submodule's extension claim with fenced-run's own result.
pub const EXTENSION_CLAIM: &str = "fenced-run.verification";
/// The verifier's developer in `ear.verifier-id`.
pub const VERIFIER_DEVELOPER: &str = "fenced-run";

/// The eight AR4SI trustworthiness claims of one appraisal, each -128..=127 (0: no claim).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Vector {
    /// `instance-identity`.
    pub instance_identity: i8,
    /// `configuration`.
    pub configuration: i8,
    /// `executables`.
    pub executables: i8,
    /// `file-system`.
    pub file_system: i8,
    /// `hardware`.
    pub hardware: i8,
    /// `runtime-opaque`.
    pub runtime_opaque: i8,
    /// `storage-opaque`.
    pub storage_opaque: i8,
    /// `sourced-data`.
    pub sourced_data: i8,
}

impl Vector {
    /// The claims by their AR4SI names, in the draft's order.
    pub fn entries(&self) -> [(&'static str, i8); 8] {
        [
            ("instance-identity", self.instance_identity),
            ("configuration", self.configuration),
            ("executables", self.executables),
            ("file-system", self.file_system),
            ("hardware", self.hardware),
            ("runtime-opaque", self.runtime_opaque),
            ("storage-opaque", self.storage_opaque),
            ("sourced-data", self.sourced_data),
        ]
    }
}

/// AR4SI's four trustworthiness tiers, from no claim to the worst.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Tier {
    /// -1..=1: no claim (or the verifier could not conclude).
    None,
    /// 2..=31 and -32..=-2.
    Affirming,
    /// 32..=95 and -96..=-33.
    Warning,
    /// 96..=127 and -128..=-97.
    Contraindicated,
}

impl Tier {
    /// The tier of one trustworthiness claim value.
    pub fn of(v: i8) -> Tier {
        match v {
            -1..=1 => Tier::None,
            2..=31 | -32..=-2 => Tier::Affirming,
            32..=95 | -96..=-33 => Tier::Warning,
            _ => Tier::Contraindicated,
        }
    }

    /// The tier's name in `ear.status`.
    pub fn as_str(self) -> &'static str {
        match self {
            Tier::None => "none",
            Tier::Affirming => "affirming",
            Tier::Warning => "warning",
            Tier::Contraindicated => "contraindicated",
        }
    }
}

/// AR4SI values used here (draft-ietf-rats-ar4si, "Trustworthiness Claims").
mod ar4si {
    pub const NO_CLAIM: i8 = 0;
    pub const AFFIRMING: i8 = 2;
    pub const BOOT_TIME_APPROVED: i8 = 3;
    pub const WARNING: i8 = 32;
    pub const UNRECOGNIZED_RUNTIME: i8 = 33;
    pub const CONTRAINDICATED: i8 = 96;
    pub const UNRECOGNIZED: i8 = 97;
    pub const CRYPTO_FAILED: i8 = 99;
}

/// The trustworthiness vector of a verification (docs/verification.md, "The AR4SI mapping").
pub fn vector(f: &RunFacts<'_>) -> Vector {
    use ar4si::*;
    let any_failed = |names: &[&str]| names.iter().any(|n| f.failed(n));
    let identity_checks = ["chain", "key binding", "verdict signature"];
    let instance_identity = if any_failed(&identity_checks) {
        CRYPTO_FAILED
    } else if f.simulated() {
        NO_CLAIM
    } else if identity_checks.iter().all(|n| f.held(n)) {
        AFFIRMING
    } else {
        NO_CLAIM
    };
    let configuration = match f.status("policy") {
        Some(ClaimStatus::Held) => AFFIRMING,
        Some(ClaimStatus::Failed) => CONTRAINDICATED,
        _ => NO_CLAIM,
    };
    let executables = match f.status("measurement") {
        Some(ClaimStatus::Held) => BOOT_TIME_APPROVED,
        Some(ClaimStatus::Failed) => CONTRAINDICATED,
        Some(ClaimStatus::NotPinned) => UNRECOGNIZED_RUNTIME,
        None => NO_CLAIM,
    };
    let file_system = if any_failed(&["tree", "test tree"]) {
        CONTRAINDICATED
    } else if f.held("tree") || f.held("test tree") {
        AFFIRMING
    } else {
        NO_CLAIM
    };
    let hardware = if f.failed("chain") {
        CRYPTO_FAILED
    } else if f.simulated() {
        UNRECOGNIZED
    } else if any_failed(&["tcb", "collateral"]) {
        CONTRAINDICATED
    } else if f.held("chain") {
        AFFIRMING
    } else {
        NO_CLAIM
    };
    let runtime_opaque = if f.failed("chain") {
        CRYPTO_FAILED
    } else if f.simulated() {
        CONTRAINDICATED
    } else if f.allow_debug || !f.held("chain") {
        NO_CLAIM
    } else {
        AFFIRMING
    };
    // Data from outside the bundle: packages the install phase fetched through the proxy, a repository fetched
    // from its URL. Neither is attested.
    let sourced_data = match f.verdict() {
        Some(v)
            if v.repository.is_some()
                || v.install
                    .as_ref()
                    .is_some_and(|i| i.egress.iter().any(|e| e.allowed)) =>
        {
            WARNING
        }
        _ => NO_CLAIM,
    };
    Vector {
        instance_identity,
        configuration,
        executables,
        file_system,
        hardware,
        runtime_opaque,
        storage_opaque: NO_CLAIM,
        sourced_data,
    }
}

/// The submodule's status: the worst tier of the vector, contraindicated when the verification failed.
pub fn status(vector: &Vector, verified: bool) -> Tier {
    let worst = vector
        .entries()
        .iter()
        .map(|(_, v)| Tier::of(*v))
        .max()
        .unwrap_or(Tier::None);
    if verified {
        worst
    } else {
        Tier::Contraindicated
    }
}

/// The EAR claims-set of a verification, issued at `iat` (Unix seconds) by `build` (`verify-attestation X.Y.Z`).
pub fn claims(f: &RunFacts<'_>, iat: i64, build: &str) -> Value {
    let vec = vector(f);
    let verified = f.verified();
    let tv: Map<String, Value> = vec
        .entries()
        .iter()
        .map(|(k, v)| ((*k).to_string(), Value::from(*v)))
        .collect();
    let mut own = Map::new();
    own.insert("verified".into(), verified.into());
    own.insert("simulated".into(), f.simulated().into());
    own.insert(
        "evidence_sha256".into(),
        hex::encode(f.evidence_sha256).into(),
    );
    if let Some(t) = f.transcript_sha384 {
        own.insert("transcript_sha384".into(), hex::encode(t).into());
    }
    if let Some(v) = f.verdict() {
        own.insert("outcome".into(), v.outcome.as_str().into());
        own.insert("tier".into(), v.isolation.as_str().into());
        if let Some(t) = &v.tests {
            own.insert(
                "counts".into(),
                json!({"passed": t.passed, "failed": t.failed, "skipped": t.skipped}),
            );
        }
    }
    own.insert("claims".into(), f.claims_json());
    own.insert(
        "failures".into(),
        f.evidence
            .failures
            .iter()
            .map(|x| json!({"check": x.check, "detail": x.detail}))
            .collect(),
    );
    let mut appraisal = Map::new();
    appraisal.insert("ear.status".into(), status(&vec, verified).as_str().into());
    appraisal.insert("ear.trustworthiness-vector".into(), Value::Object(tv));
    appraisal.insert("ear.appraisal-policy-id".into(), APPRAISAL_POLICY_ID.into());
    // The evidence's nonce (the verdict's, 16 to 64 bytes), base64url as EAT's JSON form has it.
    if let Some(v) = f.verdict() {
        if (8..=64).contains(&v.inputs.nonce.len()) {
            appraisal.insert(
                "eat_nonce".into(),
                base64::engine::general_purpose::URL_SAFE_NO_PAD
                    .encode(&v.inputs.nonce)
                    .into(),
            );
        }
    }
    appraisal.insert(EXTENSION_CLAIM.into(), Value::Object(own));
    let mut submods = Map::new();
    submods.insert(f.tee().as_str().to_string(), Value::Object(appraisal));
    json!({
        "eat_profile": EAR_PROFILE,
        "iat": iat,
        "ear.verifier-id": {"developer": VERIFIER_DEVELOPER, "build": build},
        "submods": submods,
    })
}

/// A JWS compact serialization of `claims`, ES256 with `key` (header `alg`, `typ` JWT, `kid` the key id).
pub fn jwt(claims: &Value, key: &FounderKey) -> String {
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let header = json!({"alg": "ES256", "typ": "JWT", "kid": key.keyid()});
    // Serializing a `Value` cannot fail.
    let signing_input = format!(
        "{}.{}",
        b64.encode(serde_json::to_vec(&header).unwrap_or_default()),
        b64.encode(serde_json::to_vec(claims).unwrap_or_default())
    );
    let sig = key.sign_raw(signing_input.as_bytes());
    format!("{signing_input}.{}", b64.encode(sig))
}

#[cfg(test)]
mod tests {
    use super::*;

    use attestation::evidence::TeeLabel;
    use attestation::verdict::{Inputs, Isolation, Outcome, Verdict};
    use verifier_lib::{Claim, EvidenceVerification};

    /// An evidence result of `label` (its failures do not matter to the vector, which reads the claim rows).
    fn evidence(
        label: TeeLabel,
        simulated: bool,
        verdict: Option<Verdict>,
    ) -> EvidenceVerification {
        crate::cli::run_facts::test_evidence(label, simulated, verdict)
    }

    /// Claim rows: every claim of `verifier_lib::output::CLAIMS` held unless named in `rows`.
    fn rows(rows: &[(&'static str, ClaimStatus)]) -> Vec<Claim> {
        verifier_lib::output::CLAIMS
            .iter()
            .map(|name| Claim {
                claim: name,
                status: rows
                    .iter()
                    .find(|(n, _)| n == name)
                    .map_or(ClaimStatus::Held, |(_, s)| *s),
                anchor: None,
                detail: String::new(),
            })
            .collect()
    }

    fn vector_of(
        label: TeeLabel,
        simulated: bool,
        allow_debug: bool,
        claims: &[(&'static str, ClaimStatus)],
        verdict: Option<Verdict>,
    ) -> Vector {
        let ev = evidence(label, simulated, verdict);
        let claims = rows(claims);
        vector(&RunFacts {
            claims: &claims,
            evidence: &ev,
            evidence_sha256: [0; 32],
            transcript_sha384: None,
            allow_debug,
        })
    }

    fn verdict() -> Verdict {
        Verdict::new(
            Outcome::TestsPassed,
            Isolation::SevSnp,
            Inputs::default(),
            "test",
        )
    }

    /// Each row of docs/verification.md's AR4SI mapping table.
    #[test]
    fn the_mapping_table_row_by_row() {
        use ClaimStatus::{Failed, NotPinned};
        let snp = TeeLabel::SevSnp;
        // Real evidence, every claim held, nothing from outside the bundle.
        let all = vector_of(snp, false, false, &[], Some(verdict()));
        assert_eq!(
            all,
            Vector {
                instance_identity: 2,
                configuration: 2,
                executables: 3,
                file_system: 2,
                hardware: 2,
                runtime_opaque: 2,
                storage_opaque: 0,
                sourced_data: 0,
            }
        );
        assert_eq!(status(&all, true), Tier::Affirming);
        // instance-identity
        for c in ["chain", "key binding", "verdict signature"] {
            let v = vector_of(snp, false, false, &[(c, Failed)], None);
            assert_eq!(v.instance_identity, 99, "{c}");
        }
        assert_eq!(
            vector_of(TeeLabel::SimTdx, true, false, &[], None).instance_identity,
            0
        );
        // configuration
        assert_eq!(
            vector_of(snp, false, false, &[("policy", Failed)], None).configuration,
            96
        );
        assert_eq!(
            vector_of(snp, false, false, &[("policy", NotPinned)], None).configuration,
            0
        );
        // executables
        assert_eq!(
            vector_of(snp, false, false, &[("measurement", Failed)], None).executables,
            96
        );
        assert_eq!(
            vector_of(snp, false, false, &[("measurement", NotPinned)], None).executables,
            33
        );
        // file-system
        let both = [("tree", NotPinned), ("test tree", NotPinned)];
        assert_eq!(vector_of(snp, false, false, &both, None).file_system, 0);
        let one = [("tree", NotPinned), ("test tree", ClaimStatus::Held)];
        assert_eq!(vector_of(snp, false, false, &one, None).file_system, 2);
        let bad = [("tree", ClaimStatus::Held), ("test tree", Failed)];
        assert_eq!(vector_of(snp, false, false, &bad, None).file_system, 96);
        // hardware
        assert_eq!(
            vector_of(snp, false, false, &[("chain", Failed)], None).hardware,
            99
        );
        assert_eq!(
            vector_of(TeeLabel::SimSevSnp, true, false, &[], None).hardware,
            97
        );
        assert_eq!(
            vector_of(snp, false, false, &[("tcb", Failed)], None).hardware,
            96
        );
        assert_eq!(
            vector_of(snp, false, false, &[("collateral", Failed)], None).hardware,
            96
        );
        assert_eq!(
            vector_of(snp, false, false, &[("tcb", NotPinned)], None).hardware,
            2
        );
        // runtime-opaque
        assert_eq!(
            vector_of(snp, false, false, &[("chain", Failed)], None).runtime_opaque,
            99
        );
        assert_eq!(
            vector_of(TeeLabel::SimSevSnp, true, false, &[], None).runtime_opaque,
            96
        );
        assert_eq!(
            vector_of(TeeLabel::Tdx, false, true, &[], None).runtime_opaque,
            0
        );
        assert_eq!(
            vector_of(TeeLabel::Tdx, false, false, &[], None).runtime_opaque,
            2
        );
        // sourced-data
        let mut fetched = verdict();
        fetched.repository = Some(attestation::verdict::RepositorySource {
            url: "https://git.example/r.git".into(),
            fetch: "shallow".into(),
            duration_ms: 1,
            egress: Vec::new(),
        });
        assert_eq!(
            vector_of(snp, false, false, &[], Some(fetched)).sourced_data,
            32
        );
        let mut refused_only = verdict();
        refused_only.install = Some(attestation::verdict::InstallPhase {
            egress: vec![attestation::verdict::EgressRecord {
                host: "registry.example".into(),
                port: 443,
                allowed: false,
                reason: "not in the allowlist".into(),
                bytes_up: 0,
                bytes_down: 0,
            }],
            ..Default::default()
        });
        assert_eq!(
            vector_of(snp, false, false, &[], Some(refused_only)).sourced_data,
            0
        );
    }

    #[test]
    fn tiers_follow_ar4si_ranges() {
        for (v, t) in [
            (0, Tier::None),
            (1, Tier::None),
            (-1, Tier::None),
            (2, Tier::Affirming),
            (31, Tier::Affirming),
            (-2, Tier::Affirming),
            (-32, Tier::Affirming),
            (32, Tier::Warning),
            (95, Tier::Warning),
            (-33, Tier::Warning),
            (-96, Tier::Warning),
            (96, Tier::Contraindicated),
            (127, Tier::Contraindicated),
            (-97, Tier::Contraindicated),
            (-128, Tier::Contraindicated),
        ] {
            assert_eq!(Tier::of(v), t, "{v}");
        }
    }

    #[test]
    fn status_is_the_worst_tier_and_contraindicated_when_not_verified() {
        let mut v = Vector {
            hardware: 2,
            executables: 3,
            ..Vector::default()
        };
        assert_eq!(status(&v, true), Tier::Affirming);
        assert_eq!(status(&v, false), Tier::Contraindicated);
        v.sourced_data = 32;
        assert_eq!(status(&v, true), Tier::Warning);
        v.hardware = 97;
        assert_eq!(status(&v, true), Tier::Contraindicated);
        assert_eq!(status(&Vector::default(), true), Tier::None);
    }
}
