//! The agent's side of the binding: an ephemeral P-384 key, a report over it taken before any untrusted code
//! runs, and the verdict sealed with that key at the end.
//!
//! The private key exists only in this process's memory (zeroed on drop by `p384`); nothing writes it out.
//! Order matters: [`Session::begin`] must be called before the install phase starts.

use crate::binding::{self, BindingError};
use crate::evidence::{Evidence, EvidenceError, TeeLabel};
use crate::tee::{RawEvidence, Tee, TeeError};
use crate::verdict::Verdict;

/// Why a session could not begin or seal.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// The nonce is not acceptable.
    #[error(transparent)]
    Nonce(#[from] BindingError),
    /// The TEE did not produce a report.
    #[error("requesting the attestation report: {0}")]
    Tee(#[from] TeeError),
    /// The report the TEE returned does not carry the report data we asked for.
    #[error("the {0} report does not carry the requested report_data")]
    ReportDataMismatch(TeeLabel),
    /// The verdict's nonce is not the session's nonce.
    #[error("the verdict's inputs.nonce ({verdict}) is not the session nonce ({session})")]
    NonceMismatch {
        /// Hex of the verdict's nonce.
        verdict: String,
        /// Hex of the session's nonce.
        session: String,
    },
    /// Building the evidence failed.
    #[error(transparent)]
    Evidence(#[from] EvidenceError),
}

/// An attestation session: key made, report taken, waiting for the verdict.
pub struct Session {
    key: p384::ecdsa::SigningKey,
    nonce: Vec<u8>,
    report_data: [u8; 64],
    label: TeeLabel,
    raw: RawEvidence,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("public_key", &self.public_key())
            .field("nonce", &hex::encode(&self.nonce))
            .field("label", &self.label)
            .finish_non_exhaustive()
    }
}

/// The first half of a session whose nonce is issued for its key (the hosted pool, docs/pool.md): the ephemeral
/// key exists and its hash ([`crate::pool_ledger::key_sha256`]) can be announced; the nonce comes after.
pub struct KeyFirst {
    key: p384::ecdsa::SigningKey,
}

impl std::fmt::Debug for KeyFirst {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyFirst")
            .field("key_sha256", &hex::encode(self.key_sha256()))
            .finish_non_exhaustive()
    }
}

impl Default for KeyFirst {
    fn default() -> Self {
        KeyFirst::new()
    }
}

impl KeyFirst {
    /// Makes the ephemeral P-384 key.
    pub fn new() -> KeyFirst {
        KeyFirst {
            key: p384::ecdsa::SigningKey::random(&mut rand::rngs::OsRng),
        }
    }

    /// SHA-256 of the key's SEC1 point: what is announced before the nonce exists.
    pub fn key_sha256(&self) -> [u8; 32] {
        crate::pool_ledger::key_sha256(&p384::PublicKey::from(self.key.verifying_key()))
    }

    /// Binds the key to `nonce` and gets the report from `tee` (before any untrusted code runs).
    pub fn begin(self, tee: &dyn Tee, nonce: &[u8]) -> Result<Session, SessionError> {
        self.begin_recorded(tee, nonce, None)
    }

    /// [`KeyFirst::begin`], writing the transcript's `report-requested` event (with the report data) into
    /// `recorder` just before the report is requested.
    pub fn begin_recorded(
        self,
        tee: &dyn Tee,
        nonce: &[u8],
        recorder: Option<&crate::transcript::Recorder>,
    ) -> Result<Session, SessionError> {
        binding::check_nonce(nonce)?;
        let key = self.key;
        let public = p384::PublicKey::from(key.verifying_key());
        let report_data = binding::report_data(&public, nonce);
        if let Some(r) = recorder {
            r.record(crate::transcript::Event::ReportRequested {
                report_data: report_data.to_vec(),
            });
        }
        let label = tee.label();
        let raw = tee.get_report(&report_data)?;
        if crate::tee::report_data_of(label, &raw.report) != Some(report_data) {
            return Err(SessionError::ReportDataMismatch(label));
        }
        Ok(Session {
            key,
            nonce: nonce.to_vec(),
            report_data,
            label,
            raw,
        })
    }
}

impl Session {
    /// Makes an ephemeral P-384 key, binds it to `nonce` and gets the report from `tee`.
    ///
    /// Call this before any untrusted code runs. The nonce must be 16 to 64 bytes.
    pub fn begin(tee: &dyn Tee, nonce: &[u8]) -> Result<Session, SessionError> {
        KeyFirst::new().begin(tee, nonce)
    }

    /// The ephemeral public key the report binds.
    pub fn public_key(&self) -> p384::PublicKey {
        p384::PublicKey::from(self.key.verifying_key())
    }

    /// The founder's nonce.
    pub fn nonce(&self) -> &[u8] {
        &self.nonce
    }

    /// The report data sent to the TEE.
    pub fn report_data(&self) -> [u8; 64] {
        self.report_data
    }

    /// The label of the TEE that produced the report.
    pub fn label(&self) -> TeeLabel {
        self.label
    }

    /// The report, certificates and collateral obtained at the start.
    pub fn raw(&self) -> &RawEvidence {
        &self.raw
    }

    /// [`Session::seal`] with the fence transcript anchored (docs/transcript.md): the `verdict` event (the
    /// verdict's outcome and SHA-384) is appended to `recorder`, a second report is taken from `tee` with
    /// REPORT_DATA = [`crate::transcript::anchor_report_data`] over the transcript's hash, the verdict's SHA-384
    /// and the nonce, and the evidence carries both under `transcript`. A second report the TEE does not give
    /// (or gives for other report data) leaves the anchor out, with the reason returned beside the evidence;
    /// the verifier's `transcript` check then fails.
    pub fn seal_anchored(
        self,
        tee: &dyn Tee,
        verdict: &Verdict,
        recorder: &crate::transcript::Recorder,
    ) -> Result<(Evidence, Option<String>), SessionError> {
        use crate::transcript::{anchor_report_data, verdict_sha384, Anchored, Event};
        let payload = verdict.to_cbor().map_err(EvidenceError::from)?;
        let vsha = verdict_sha384(&payload);
        recorder.record(Event::Verdict {
            outcome: verdict.outcome.as_str().to_owned(),
            sha384: vsha.to_vec(),
        });
        let transcript = recorder.transcript();
        let rd = anchor_report_data(&transcript.hash(), &vsha, &self.nonce);
        let label = self.label;
        let (anchor, why) = match tee.get_report(&rd) {
            Ok(raw) if crate::tee::report_data_of(label, &raw.report) == Some(rd) => {
                (Some(raw.report), None)
            }
            Ok(_) => (
                None,
                Some(format!(
                    "the {label} anchor report does not carry the requested report_data"
                )),
            ),
            Err(e) => (None, Some(format!("the anchor report: {e}"))),
        };
        let why = match (why, recorder.failure()) {
            (Some(a), Some(b)) => Some(format!("{a}; {b}")),
            (a, b) => a.or(b),
        };
        let mut evidence = self.seal(verdict)?;
        evidence.transcript = Some(Anchored { transcript, anchor });
        Ok((evidence, why))
    }

    /// Signs `verdict` with the session key and packs the evidence; the key is dropped (and zeroed) afterwards.
    ///
    /// The verdict must carry the session's nonce in `inputs.nonce`.
    pub fn seal(self, verdict: &Verdict) -> Result<Evidence, SessionError> {
        if verdict.inputs.nonce != self.nonce {
            return Err(SessionError::NonceMismatch {
                verdict: hex::encode(&verdict.inputs.nonce),
                session: hex::encode(&self.nonce),
            });
        }
        let Session {
            key, label, raw, ..
        } = self;
        Ok(Evidence::seal(
            label,
            raw.report,
            raw.certs,
            raw.collateral,
            &key,
            verdict,
        )?)
    }
}
