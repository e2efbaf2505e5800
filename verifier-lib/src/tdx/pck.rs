//! The Intel SGX extensions of a PCK certificate (OID 1.2.840.113741.1.13.1): PPID, the TCB (16 component
//! SVNs, PCESVN, CPUSVN), PCE-ID, FMSPC and SGX type. TCB levels are matched against these values.

use x509_parser::der_parser::ber::BerObject;
use x509_parser::der_parser::der::parse_der;

use super::x509::Cert;

/// OID of the SGX extensions.
pub const SGX_EXTENSIONS_OID: &str = "1.2.840.113741.1.13.1";

/// The SGX extension values of a PCK certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PckExtensions {
    /// PPID (16 bytes).
    pub ppid: Vec<u8>,
    /// SGX TCB component SVNs 1..16.
    pub sgx_tcb_components: [u8; 16],
    /// PCESVN.
    pub pcesvn: u16,
    /// CPUSVN (16 bytes).
    pub cpusvn: Vec<u8>,
    /// PCE-ID (2 bytes).
    pub pceid: Vec<u8>,
    /// FMSPC (6 bytes).
    pub fmspc: Vec<u8>,
    /// SGX type (0 standard, 1 scalable, 2 scalable with integrity).
    pub sgx_type: u64,
}

/// Why the SGX extensions could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PckError {
    /// The certificate has no SGX extension.
    #[error("PCK certificate has no SGX extension ({SGX_EXTENSIONS_OID})")]
    Missing,
    /// The extension is not the expected DER structure.
    #[error("SGX extension malformed at {0}")]
    Malformed(String),
    /// A required entry is absent.
    #[error("SGX extension lacks {0}")]
    Lacks(&'static str),
}

fn entries<'a>(
    obj: &'a BerObject<'a>,
    at: &str,
) -> Result<Vec<(String, &'a BerObject<'a>)>, PckError> {
    let seq = obj
        .as_sequence()
        .map_err(|_| PckError::Malformed(format!("{at}: not a SEQUENCE")))?;
    let mut out: Vec<(String, &'a BerObject<'a>)> = Vec::new();
    for (i, e) in seq.iter().enumerate() {
        let pair = e
            .as_sequence()
            .map_err(|_| PckError::Malformed(format!("{at}[{i}]: not a SEQUENCE")))?;
        let (Some(oid), Some(val)) = (pair.first(), pair.get(1)) else {
            return Err(PckError::Malformed(format!("{at}[{i}]: not (OID, value)")));
        };
        let oid = oid
            .as_oid()
            .map_err(|_| PckError::Malformed(format!("{at}[{i}]: no OID")))?;
        let oid = oid.to_id_string();
        // A repeated entry (two FMSPCs, two TCBs) would let two readers see two platforms.
        if out.iter().any(|(o, _)| *o == oid) {
            return Err(PckError::Malformed(format!(
                "{at}[{i}]: {oid} appears twice"
            )));
        }
        out.push((oid, val));
    }
    Ok(out)
}

impl PckExtensions {
    /// Reads the SGX extensions of a PCK leaf certificate.
    pub fn from_cert(cert: &Cert) -> Result<Self, PckError> {
        let parsed = cert.parsed();
        let ext = parsed
            .extensions()
            .iter()
            .find(|e| e.oid.to_id_string() == SGX_EXTENSIONS_OID)
            .ok_or(PckError::Missing)?;
        let (_, obj) = parse_der(ext.value)
            .map_err(|e| PckError::Malformed(format!("extension value: {e}")))?;
        let top = entries(&obj, "sgx")?;
        let mut ppid = None;
        let mut tcb = None;
        let mut pceid = None;
        let mut fmspc = None;
        let mut sgx_type = None;
        let p = SGX_EXTENSIONS_OID;
        for (oid, val) in top {
            let octets = || {
                val.as_slice()
                    .map(<[u8]>::to_vec)
                    .map_err(|_| PckError::Malformed(oid.clone()))
            };
            match oid.strip_prefix(p).and_then(|s| s.strip_prefix('.')) {
                Some("1") => ppid = Some(octets()?),
                Some("2") => tcb = Some(Self::tcb(val)?),
                Some("3") => pceid = Some(octets()?),
                Some("4") => fmspc = Some(octets()?),
                Some("5") => {
                    sgx_type = Some(val.as_u64().map_err(|_| PckError::Malformed(oid.clone()))?)
                }
                _ => {}
            }
        }
        let (sgx_tcb_components, pcesvn, cpusvn) = tcb.ok_or(PckError::Lacks("TCB (.2)"))?;
        Ok(PckExtensions {
            ppid: ppid.ok_or(PckError::Lacks("PPID (.1)"))?,
            sgx_tcb_components,
            pcesvn,
            cpusvn,
            pceid: pceid.ok_or(PckError::Lacks("PCE-ID (.3)"))?,
            fmspc: fmspc.ok_or(PckError::Lacks("FMSPC (.4)"))?,
            sgx_type: sgx_type.ok_or(PckError::Lacks("SGX type (.5)"))?,
        })
    }

    fn tcb(val: &BerObject<'_>) -> Result<([u8; 16], u16, Vec<u8>), PckError> {
        let prefix = format!("{SGX_EXTENSIONS_OID}.2.");
        let mut comps = [None::<u8>; 16];
        let mut pcesvn = None;
        let mut cpusvn = None;
        for (oid, v) in entries(val, "sgx.tcb")? {
            let Some(n) = oid
                .strip_prefix(&prefix)
                .and_then(|s| s.parse::<usize>().ok())
            else {
                continue;
            };
            let bad = || PckError::Malformed(oid.clone());
            match n {
                1..=16 => {
                    comps[n - 1] =
                        Some(u8::try_from(v.as_u32().map_err(|_| bad())?).map_err(|_| bad())?)
                }
                17 => {
                    pcesvn = Some(u16::try_from(v.as_u32().map_err(|_| bad())?).map_err(|_| bad())?)
                }
                18 => cpusvn = Some(v.as_slice().map_err(|_| bad())?.to_vec()),
                _ => {}
            }
        }
        let mut out = [0u8; 16];
        for (i, c) in comps.iter().enumerate() {
            out[i] = c.ok_or(PckError::Lacks("a TCB component SVN"))?;
        }
        Ok((
            out,
            pcesvn.ok_or(PckError::Lacks("PCESVN (.2.17)"))?,
            cpusvn.ok_or(PckError::Lacks("CPUSVN (.2.18)"))?,
        ))
    }
}
