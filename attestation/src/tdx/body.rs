//! The TD report bodies (TD 1.0 and TD 1.5) and the SGX enclave report that carries the QE's identity.
//! Each parses from exactly its length and writes back the same bytes, reserved fields included.

use super::{QuoteError, ENCLAVE_REPORT_LEN, TD10_BODY_LEN, TD15_BODY_LEN};
use crate::wire::Reader;

/// The TD 1.0 report body (584 bytes): the TD's measurements and attributes as the TDX module reported them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TdReport10 {
    /// TEE_TCB_SVN: the TDX module's SVNs (byte 0 minor SVN, byte 1 major version, then TCB components).
    pub tee_tcb_svn: [u8; 16],
    /// MRSEAM: measurement of the TDX module.
    pub mr_seam: [u8; 48],
    /// MRSIGNERSEAM: signer of the TDX module (zero for Intel's module).
    pub mr_signer_seam: [u8; 48],
    /// SEAMATTRIBUTES.
    pub seam_attributes: [u8; 8],
    /// TDATTRIBUTES (see [`TdAttributes`]).
    pub td_attributes: [u8; 8],
    /// XFAM: the extended features the TD may use.
    pub xfam: [u8; 8],
    /// MRTD: the initial TD contents (the launch measurement).
    pub mrtd: [u8; 48],
    /// MRCONFIGID: software-defined configuration ID.
    pub mr_config_id: [u8; 48],
    /// MROWNER: software-defined owner ID.
    pub mr_owner: [u8; 48],
    /// MROWNERCONFIG: software-defined owner configuration.
    pub mr_owner_config: [u8; 48],
    /// RTMR0..RTMR3: the runtime-extendable measurement registers.
    pub rtmr: [[u8; 48]; 4],
    /// REPORTDATA: 64 bytes chosen by the TD.
    pub report_data: [u8; 64],
}

impl TdReport10 {
    pub(crate) fn read(r: &mut Reader<'_>) -> Result<Self, QuoteError> {
        Ok(TdReport10 {
            tee_tcb_svn: r.array("body.tee_tcb_svn")?,
            mr_seam: r.array("body.mr_seam")?,
            mr_signer_seam: r.array("body.mr_signer_seam")?,
            seam_attributes: r.array("body.seam_attributes")?,
            td_attributes: r.array("body.td_attributes")?,
            xfam: r.array("body.xfam")?,
            mrtd: r.array("body.mrtd")?,
            mr_config_id: r.array("body.mr_config_id")?,
            mr_owner: r.array("body.mr_owner")?,
            mr_owner_config: r.array("body.mr_owner_config")?,
            rtmr: [
                r.array("body.rtmr0")?,
                r.array("body.rtmr1")?,
                r.array("body.rtmr2")?,
                r.array("body.rtmr3")?,
            ],
            report_data: r.array("body.report_data")?,
        })
    }

    /// The 584 bytes of this body.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(TD10_BODY_LEN);
        self.write(&mut out);
        out
    }

    pub(crate) fn write(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.tee_tcb_svn);
        out.extend_from_slice(&self.mr_seam);
        out.extend_from_slice(&self.mr_signer_seam);
        out.extend_from_slice(&self.seam_attributes);
        out.extend_from_slice(&self.td_attributes);
        out.extend_from_slice(&self.xfam);
        out.extend_from_slice(&self.mrtd);
        out.extend_from_slice(&self.mr_config_id);
        out.extend_from_slice(&self.mr_owner);
        out.extend_from_slice(&self.mr_owner_config);
        for r in &self.rtmr {
            out.extend_from_slice(r);
        }
        out.extend_from_slice(&self.report_data);
    }

    /// The decoded TD attributes.
    pub fn attributes(&self) -> TdAttributes {
        TdAttributes(u64::from_le_bytes(self.td_attributes))
    }
}

/// The TD 1.5 report body (648 bytes): TD 1.0 plus TEE_TCB_SVN2 and MRSERVICETD.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TdReport15 {
    /// The TD 1.0 fields, in the same order.
    pub td10: TdReport10,
    /// TEE_TCB_SVN2: the SVNs of the TDX module after an update (TD-preserving).
    pub tee_tcb_svn2: [u8; 16],
    /// MRSERVICETD: digest of the service TDs bound to this TD (zero when none).
    pub mr_servicetd: [u8; 48],
}

impl TdReport15 {
    pub(crate) fn read(r: &mut Reader<'_>) -> Result<Self, QuoteError> {
        Ok(TdReport15 {
            td10: TdReport10::read(r)?,
            tee_tcb_svn2: r.array("body.tee_tcb_svn2")?,
            mr_servicetd: r.array("body.mr_servicetd")?,
        })
    }

    /// The 648 bytes of this body.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(TD15_BODY_LEN);
        self.write(&mut out);
        out
    }

    pub(crate) fn write(&self, out: &mut Vec<u8>) {
        self.td10.write(out);
        out.extend_from_slice(&self.tee_tcb_svn2);
        out.extend_from_slice(&self.mr_servicetd);
    }
}

/// TDATTRIBUTES decoded (a little-endian u64 in the body).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TdAttributes(pub u64);

impl TdAttributes {
    /// Bit 0: the TD is debuggable (the host can read and write its memory and state).
    pub const DEBUG: u64 = 1 << 0;
    /// Bit 28: EPT violations are not converted to #VE for the TD's private memory.
    pub const SEPT_VE_DISABLE: u64 = 1 << 28;
    /// Bit 30: protection keys for supervisor pages.
    pub const PKS: u64 = 1 << 30;
    /// Bit 31: key locker.
    pub const KL: u64 = 1 << 31;
    /// Bit 63: the TD may use performance monitoring.
    pub const PERFMON: u64 = 1 << 63;

    /// Whether the TD is a debug TD.
    pub fn debug(self) -> bool {
        self.0 & Self::DEBUG != 0
    }
    /// Whether SEPT_VE_DISABLE is set.
    pub fn sept_ve_disable(self) -> bool {
        self.0 & Self::SEPT_VE_DISABLE != 0
    }
    /// Whether PKS is set.
    pub fn pks(self) -> bool {
        self.0 & Self::PKS != 0
    }
    /// Whether PERFMON is set.
    pub fn perfmon(self) -> bool {
        self.0 & Self::PERFMON != 0
    }
}

/// The SGX enclave report (384 bytes) of the Quoting Enclave, signed by the PCK key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnclaveReport {
    /// CPUSVN of the platform.
    pub cpu_svn: [u8; 16],
    /// MISCSELECT.
    pub misc_select: u32,
    /// Reserved (bytes 20..48).
    pub reserved1: [u8; 28],
    /// ATTRIBUTES (flags, xfrm).
    pub attributes: [u8; 16],
    /// MRENCLAVE.
    pub mr_enclave: [u8; 32],
    /// Reserved (bytes 96..128).
    pub reserved2: [u8; 32],
    /// MRSIGNER.
    pub mr_signer: [u8; 32],
    /// Reserved (bytes 160..256), CONFIGID and friends on newer parts.
    pub reserved3: [u8; 96],
    /// ISVPRODID.
    pub isv_prod_id: u16,
    /// ISVSVN.
    pub isv_svn: u16,
    /// Reserved (bytes 260..320).
    pub reserved4: [u8; 60],
    /// REPORTDATA: SHA-256(attestation key || QE auth data), then 32 zero bytes.
    pub report_data: [u8; 64],
}

impl EnclaveReport {
    pub(crate) fn read(r: &mut Reader<'_>) -> Result<Self, QuoteError> {
        Ok(EnclaveReport {
            cpu_svn: r.array("qe_report.cpu_svn")?,
            misc_select: r.u32_le("qe_report.misc_select")?,
            reserved1: r.array("qe_report.reserved1")?,
            attributes: r.array("qe_report.attributes")?,
            mr_enclave: r.array("qe_report.mr_enclave")?,
            reserved2: r.array("qe_report.reserved2")?,
            mr_signer: r.array("qe_report.mr_signer")?,
            reserved3: r.array("qe_report.reserved3")?,
            isv_prod_id: r.u16_le("qe_report.isv_prod_id")?,
            isv_svn: r.u16_le("qe_report.isv_svn")?,
            reserved4: r.array("qe_report.reserved4")?,
            report_data: r.array("qe_report.report_data")?,
        })
    }

    /// The 384 bytes of this report (what the PCK key signs).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(ENCLAVE_REPORT_LEN);
        self.write(&mut out);
        out
    }

    pub(crate) fn write(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.cpu_svn);
        out.extend_from_slice(&self.misc_select.to_le_bytes());
        out.extend_from_slice(&self.reserved1);
        out.extend_from_slice(&self.attributes);
        out.extend_from_slice(&self.mr_enclave);
        out.extend_from_slice(&self.reserved2);
        out.extend_from_slice(&self.mr_signer);
        out.extend_from_slice(&self.reserved3);
        out.extend_from_slice(&self.isv_prod_id.to_le_bytes());
        out.extend_from_slice(&self.isv_svn.to_le_bytes());
        out.extend_from_slice(&self.reserved4);
        out.extend_from_slice(&self.report_data);
    }
}
