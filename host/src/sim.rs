//! The sim PSP on the host side of the process tier: it attests what this host runs, with a locally generated
//! chain that `verify-attestation` accepts only with `--allow-simulated`.

use attestation::session::{Session, SessionError};
use attestation::sim::{current_process_launch_measurement, SimError, SimPsp, SimSnpTee};
use attestation::snp::Product;

/// Begins an attestation session for a process-tier run: a sim SEV-SNP report (Milan layout) whose launch
/// measurement is the process-tier measurement of the running binary, bound to a fresh key and `nonce`.
/// Returns the session and the measurement it attests.
pub fn begin_process_session(nonce: &[u8]) -> Result<(Session, [u8; 48]), SessionStartError> {
    let psp = SimPsp::open_default(Product::Milan).map_err(SessionStartError::Psp)?;
    let measurement =
        current_process_launch_measurement().map_err(SessionStartError::Measurement)?;
    let tee = SimSnpTee::new(psp, measurement);
    let session = Session::begin(&tee, nonce)?;
    Ok((session, measurement))
}

/// [`begin_process_session`] with the nonce issued for the session's key: the key is made first, its SHA-256
/// given to `source`, and the report bound to the nonce `source` returns (the hosted pool, docs/pool.md).
pub fn begin_process_session_for_key(
    source: &mut dyn crate::nonce_exchange::NonceSource,
) -> Result<(Session, [u8; 48]), SessionStartError> {
    let keyed = attestation::session::KeyFirst::new();
    let nonce = source
        .nonce_for(&keyed.key_sha256())
        .map_err(SessionStartError::Nonce)?;
    let psp = SimPsp::open_default(Product::Milan).map_err(SessionStartError::Psp)?;
    let measurement =
        current_process_launch_measurement().map_err(SessionStartError::Measurement)?;
    let tee = SimSnpTee::new(psp, measurement);
    let session = keyed.begin(&tee, &nonce)?;
    Ok((session, measurement))
}

/// A process-tier session that writes the fence transcript (docs/transcript.md): the sim PSP it began with
/// (the anchor report comes from it at the end), the session and the transcript's recorder.
pub struct TranscribedSession {
    /// The session (key, first report).
    pub session: Session,
    /// The launch measurement the sim PSP attests.
    pub measurement: [u8; 48],
    /// The sim PSP backend, kept for the anchor report.
    pub tee: SimSnpTee,
    /// The transcript; give it to the run ([`guest::fence::run::RunOptions::transcript`]).
    pub recorder: attestation::transcript::Recorder,
}

impl TranscribedSession {
    /// Begins a session whose transcript opens with `agent-ready` (the agent version and the process-tier
    /// launch measurement), `job-header` (the nonce) and `report-requested`, in that order, before the first
    /// report. With `source`, the key is made first and the nonce obtained for it (`nonce` is then unused).
    pub fn begin(
        nonce: &[u8],
        source: Option<&mut dyn crate::nonce_exchange::NonceSource>,
    ) -> Result<TranscribedSession, SessionStartError> {
        use attestation::transcript::{Event, Recorder};
        let psp = SimPsp::open_default(Product::Milan).map_err(SessionStartError::Psp)?;
        let measurement =
            current_process_launch_measurement().map_err(SessionStartError::Measurement)?;
        let recorder = Recorder::new();
        recorder.record(Event::AgentReady {
            agent_version: guest::fence::run::AGENT_VERSION.to_owned(),
            image: Some(hex::encode(measurement)),
        });
        let keyed = attestation::session::KeyFirst::new();
        let nonce = match source {
            Some(s) => s
                .nonce_for(&keyed.key_sha256())
                .map_err(SessionStartError::Nonce)?,
            None => nonce.to_vec(),
        };
        recorder.record(Event::JobHeader {
            nonce: nonce.clone(),
            job_sha256: None,
            bundle_sha256: None,
        });
        let tee = SimSnpTee::new(psp, measurement);
        let session = keyed.begin_recorded(&tee, &nonce, Some(&recorder))?;
        Ok(TranscribedSession {
            session,
            measurement,
            tee,
            recorder,
        })
    }

    /// Seals `verdict` with the transcript anchored by a second sim report; a missing anchor is said on
    /// stderr (the verifier's `transcript` check then fails).
    pub fn seal(
        self,
        verdict: &attestation::verdict::Verdict,
    ) -> Result<attestation::evidence::Evidence, SessionError> {
        let (ev, why) = self
            .session
            .seal_anchored(&self.tee, verdict, &self.recorder)?;
        if let Some(why) = why {
            eprintln!("fenced-run: the transcript's anchor: {why}");
        }
        Ok(ev)
    }
}

/// Why a process-tier attestation session could not begin.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SessionStartError {
    /// The sim PSP's state (its chain and keys) could not be opened or created.
    #[error("sim PSP: {0}")]
    Psp(SimError),
    /// The running binary's launch measurement could not be computed.
    #[error("launch measurement: {0}")]
    Measurement(SimError),
    /// No nonce was issued for the session's key.
    #[error("nonce: {0}")]
    Nonce(String),
    /// The session itself (nonce, key, report) could not begin.
    #[error("attestation: {0}")]
    Session(#[from] SessionError),
}
