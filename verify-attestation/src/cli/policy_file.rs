//! `--policy FILE`: the SEV-SNP acceptance policy kept in a TOML file, for founders who keep their rules
//! beside their keys. The keys are the policy flags' names without `--` (`min-tcb`, `forbid-smt`, ...); the
//! file fills the same [`PolicyArgs`] the flags fill, and a flag given on the command line overrides the file.

use super::policy_args::PolicyArgs;
use serde::Deserialize;
use std::path::Path;
use std::str::FromStr;

/// The TOML form of [`PolicyArgs`]: every key optional, unknown keys refused.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct PolicyFile {
    measurement: Option<OneOrMany>,
    report_data: Option<String>,
    host_data: Option<String>,
    family_id: Option<String>,
    image_id: Option<String>,
    id_key_digest: Option<OneOrMany>,
    author_key_digest: Option<OneOrMany>,
    allow_debug: Option<bool>,
    allow_migration_agent: Option<bool>,
    forbid_smt: Option<bool>,
    require_single_socket: Option<bool>,
    min_abi: Option<String>,
    vmpl: Option<u32>,
    min_guest_svn: Option<u32>,
    min_tcb: Option<String>,
    min_launch_tcb: Option<String>,
    min_build: Option<u8>,
    forbid_provisional_firmware: Option<bool>,
}

/// A key that takes one string or a list of them.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

impl OneOrMany {
    fn into_vec(self) -> Vec<String> {
        match self {
            OneOrMany::One(s) => vec![s],
            OneOrMany::Many(v) => v,
        }
    }
}

/// Largest policy file read (64 KiB); a policy is a few lines.
const MAX_POLICY_FILE: u64 = 64 * 1024;

fn parse<T: FromStr<Err: std::fmt::Display>>(
    file: &str,
    key: &str,
    v: Option<String>,
) -> Result<Option<T>, String> {
    v.map(|s| T::from_str(&s).map_err(|e| format!("{file}: key `{key}`: {e}")))
        .transpose()
}

fn parse_all<T: FromStr<Err: std::fmt::Display>>(
    file: &str,
    key: &str,
    v: Option<OneOrMany>,
) -> Result<Vec<T>, String> {
    v.map(OneOrMany::into_vec)
        .unwrap_or_default()
        .into_iter()
        .map(|s| T::from_str(&s).map_err(|e| format!("{file}: key `{key}`: {e}")))
        .collect()
}

/// Reads a policy file into [`PolicyArgs`]; an error names the file, the key and what is wrong with it.
pub fn load(path: &Path) -> Result<PolicyArgs, String> {
    let file = attestation::text::shown(path.display());
    let bytes =
        attestation::cli_io::read_capped(path, MAX_POLICY_FILE).map_err(|e| e.to_string())?;
    let text = std::str::from_utf8(&bytes)
        .map_err(|_| format!("{file}: not UTF-8 text (a TOML policy file is expected)"))?;
    let f: PolicyFile = toml::from_str(text).map_err(|e| {
        format!(
            "{file}: not a policy file: {}",
            e.to_string().trim_end().replace('\n', " ")
        )
    })?;
    Ok(PolicyArgs {
        measurement: parse_all(&file, "measurement", f.measurement)?,
        report_data: parse(&file, "report-data", f.report_data)?,
        host_data: parse(&file, "host-data", f.host_data)?,
        family_id: parse(&file, "family-id", f.family_id)?,
        image_id: parse(&file, "image-id", f.image_id)?,
        id_key_digest: parse_all(&file, "id-key-digest", f.id_key_digest)?,
        author_key_digest: parse_all(&file, "author-key-digest", f.author_key_digest)?,
        allow_debug: f.allow_debug.unwrap_or(false),
        allow_migration_agent: f.allow_migration_agent.unwrap_or(false),
        forbid_smt: f.forbid_smt.unwrap_or(false),
        require_single_socket: f.require_single_socket.unwrap_or(false),
        min_abi: parse(&file, "min-abi", f.min_abi)?,
        vmpl: f.vmpl,
        min_guest_svn: f.min_guest_svn,
        min_tcb: parse(&file, "min-tcb", f.min_tcb)?,
        min_launch_tcb: parse(&file, "min-launch-tcb", f.min_launch_tcb)?,
        min_build: f.min_build,
        forbid_provisional_firmware: f.forbid_provisional_firmware.unwrap_or(false),
    })
}

/// The policy of `file` with every flag given on the command line (`flags`) put over it: a value flag or a
/// repeated flag replaces the file's value, a switch given turns the file's setting on.
pub fn merge(file: PolicyArgs, flags: &PolicyArgs) -> PolicyArgs {
    fn pick<T: Clone>(flag: &Option<T>, file: Option<T>) -> Option<T> {
        flag.clone().or(file)
    }
    fn pick_all<T: Clone>(flag: &[T], file: Vec<T>) -> Vec<T> {
        if flag.is_empty() {
            file
        } else {
            flag.to_vec()
        }
    }
    PolicyArgs {
        measurement: pick_all(&flags.measurement, file.measurement),
        report_data: pick(&flags.report_data, file.report_data),
        host_data: pick(&flags.host_data, file.host_data),
        family_id: pick(&flags.family_id, file.family_id),
        image_id: pick(&flags.image_id, file.image_id),
        id_key_digest: pick_all(&flags.id_key_digest, file.id_key_digest),
        author_key_digest: pick_all(&flags.author_key_digest, file.author_key_digest),
        allow_debug: flags.allow_debug || file.allow_debug,
        allow_migration_agent: flags.allow_migration_agent || file.allow_migration_agent,
        forbid_smt: flags.forbid_smt || file.forbid_smt,
        require_single_socket: flags.require_single_socket || file.require_single_socket,
        min_abi: pick(&flags.min_abi, file.min_abi),
        vmpl: pick(&flags.vmpl, file.vmpl),
        min_guest_svn: pick(&flags.min_guest_svn, file.min_guest_svn),
        min_tcb: pick(&flags.min_tcb, file.min_tcb),
        min_launch_tcb: pick(&flags.min_launch_tcb, file.min_launch_tcb),
        min_build: pick(&flags.min_build, file.min_build),
        forbid_provisional_firmware: flags.forbid_provisional_firmware
            || file.forbid_provisional_firmware,
    }
}

/// The policy of the command line: the file's (when `--policy` was given) under the flags.
pub fn effective(path: Option<&Path>, flags: &PolicyArgs) -> Result<PolicyArgs, String> {
    match path {
        None => Ok(flags.clone()),
        Some(p) => Ok(merge(load(p).map_err(|e| format!("--policy {e}"))?, flags)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(text: &str) -> (tempfile::TempDir, std::path::PathBuf) {
        let d = tempfile::tempdir().expect("tmp");
        let p = d.path().join("policy.toml");
        std::fs::write(&p, text).expect("write");
        (d, p)
    }

    #[test]
    fn the_file_fills_the_policy_and_flags_override_it() {
        let m = "ab".repeat(48);
        let (_d, p) = write(&format!(
            "measurement = \"{m}\"\nmin-tcb = \"bl=3,tee=0,snp=8,ucode=115\"\nforbid-smt = true\nvmpl = 0\n"
        ));
        let file = load(&p).expect("loads");
        assert_eq!(file.measurement.len(), 1);
        assert!(file.forbid_smt);
        assert_eq!(file.vmpl, Some(0));
        let policy = file.to_policy();
        assert!(!policy.allow_smt);
        let flags = PolicyArgs {
            vmpl: Some(2),
            ..Default::default()
        };
        let merged = merge(file, &flags);
        assert_eq!(merged.vmpl, Some(2), "the flag wins");
        assert!(merged.min_tcb.is_some(), "the file's value stays");
    }

    #[test]
    fn a_bad_file_names_the_file_and_the_key() {
        let (_d, p) = write("min-tcb = \"bl=x\"\n");
        let e = load(&p).expect_err("bad value");
        assert!(e.contains("policy.toml") && e.contains("min-tcb"), "{e}");
        let (_d, p) = write("allow-everything = true\n");
        let e = load(&p).expect_err("unknown key");
        assert!(e.contains("allow-everything"), "{e}");
        let (_d, p) = write("vmpl = \"zero\"\n");
        assert!(load(&p).is_err());
    }
}
