//! [`PolicyArgs`]: the SEV-SNP policy flags every SEV-SNP subcommand shares (one flag per [`Policy`] field), which
//! `--policy FILE` fills as well.

use attestation::hex::Hex;
use verifier_lib::sev_snp::Policy;
use verifier_lib::sev_snp::{AbiVersion, TcbMinimum};

/// The acceptability policy as flags; each flag sets one field of [`Policy`], the rest keep their defaults.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct PolicyArgs {
    /// Accepted launch MEASUREMENT (96 hex digits); repeat for any of several. Default: not checked.
    #[arg(long = "measurement", value_name = "HEX")]
    pub measurement: Vec<Hex<48>>,
    /// Required REPORT_DATA (128 hex digits). Default: not checked.
    #[arg(long, value_name = "HEX")]
    pub report_data: Option<Hex<64>>,
    /// Required HOST_DATA (64 hex digits). Default: not checked.
    #[arg(long, value_name = "HEX")]
    pub host_data: Option<Hex<32>>,
    /// Required FAMILY_ID (32 hex digits). Default: not checked.
    #[arg(long, value_name = "HEX")]
    pub family_id: Option<Hex<16>>,
    /// Required IMAGE_ID (32 hex digits). Default: not checked.
    #[arg(long, value_name = "HEX")]
    pub image_id: Option<Hex<16>>,
    /// Accepted ID_KEY_DIGEST (96 hex digits); repeatable. Default: not checked.
    #[arg(long = "id-key-digest", value_name = "HEX")]
    pub id_key_digest: Vec<Hex<48>>,
    /// Accepted AUTHOR_KEY_DIGEST (96 hex digits, AUTHOR_KEY_EN must be set); repeatable. Default: not checked.
    #[arg(long = "author-key-digest", value_name = "HEX")]
    pub author_key_digest: Vec<Hex<48>>,
    /// Accept a guest whose policy allows debugging. Default: forbidden.
    #[arg(long)]
    pub allow_debug: bool,
    /// Accept a guest whose policy allows a migration agent. Default: forbidden.
    #[arg(long)]
    pub allow_migration_agent: bool,
    /// Reject a guest policy that allows SMT, or a platform with SMT enabled. Default: SMT allowed.
    #[arg(long)]
    pub forbid_smt: bool,
    /// Require the guest policy's SINGLE_SOCKET bit. Default: not required.
    #[arg(long)]
    pub require_single_socket: bool,
    /// Minimum firmware ABI as MAJOR.MINOR (current firmware). Default: none.
    #[arg(long, value_name = "MAJOR.MINOR")]
    pub min_abi: Option<AbiVersion>,
    /// Required VMPL of the report request. Default: any VMPL.
    #[arg(long, value_name = "N")]
    pub vmpl: Option<u32>,
    /// Minimum GUEST_SVN. Default: none.
    #[arg(long, value_name = "N")]
    pub min_guest_svn: Option<u32>,
    /// Minimum CURRENT/COMMITTED/REPORTED TCB, e.g. `bl=3,tee=0,snp=10,ucode=115[,fmc=1]`. Default: none.
    #[arg(long, value_name = "LIST")]
    pub min_tcb: Option<TcbMinimum>,
    /// Minimum LAUNCH_TCB, same syntax as --min-tcb. Default: none.
    #[arg(long, value_name = "LIST")]
    pub min_launch_tcb: Option<TcbMinimum>,
    /// Minimum firmware build (current and committed). Default: none.
    #[arg(long, value_name = "N")]
    pub min_build: Option<u8>,
    /// Reject provisional firmware (CURRENT differs from COMMITTED). Default: allowed.
    #[arg(long)]
    pub forbid_provisional_firmware: bool,
}

impl PolicyArgs {
    /// The SEV-SNP-only flags given (every flag but `--measurement`, `--report-data` and `--allow-debug`, which
    /// TDX evidence uses too), by name: on TDX evidence each is an error, not silently ignored.
    pub fn snp_only_flags_given(&self) -> Vec<&'static str> {
        let mut out = Vec::new();
        let mut given = |b: bool, name: &'static str| {
            if b {
                out.push(name);
            }
        };
        given(self.host_data.is_some(), "--host-data");
        given(self.family_id.is_some(), "--family-id");
        given(self.image_id.is_some(), "--image-id");
        given(!self.id_key_digest.is_empty(), "--id-key-digest");
        given(!self.author_key_digest.is_empty(), "--author-key-digest");
        given(self.allow_migration_agent, "--allow-migration-agent");
        given(self.forbid_smt, "--forbid-smt");
        given(self.require_single_socket, "--require-single-socket");
        given(self.min_abi.is_some(), "--min-abi");
        given(self.vmpl.is_some(), "--vmpl");
        given(self.min_guest_svn.is_some(), "--min-guest-svn");
        given(self.min_tcb.is_some(), "--min-tcb");
        given(self.min_launch_tcb.is_some(), "--min-launch-tcb");
        given(self.min_build.is_some(), "--min-build");
        given(
            self.forbid_provisional_firmware,
            "--forbid-provisional-firmware",
        );
        out
    }

    /// The [`Policy`] these flags describe.
    pub fn to_policy(&self) -> Policy {
        Policy {
            allow_debug: self.allow_debug,
            allow_migration_agent: self.allow_migration_agent,
            allow_smt: !self.forbid_smt,
            require_single_socket: self.require_single_socket,
            min_abi: self.min_abi,
            vmpl: self.vmpl,
            min_guest_svn: self.min_guest_svn,
            min_tcb: self.min_tcb.unwrap_or_default(),
            min_launch_tcb: self.min_launch_tcb.unwrap_or_default(),
            min_build: self.min_build,
            allow_provisional_firmware: !self.forbid_provisional_firmware,
            measurements: self.measurement.clone(),
            report_data: self.report_data,
            host_data: self.host_data,
            family_id: self.family_id,
            image_id: self.image_id,
            id_key_digests: self.id_key_digest.clone(),
            author_key_digests: self.author_key_digest.clone(),
        }
    }
}
