//! On a hardware launch measurement that is in no entry of the `--measurements` set, the failure also gives the
//! command that answers which launch configuration produces it (`measure-guest explain`, with the evidence file).

use std::path::Path;
use verifier_lib::checks::MEASUREMENT_SET;
use verifier_lib::Failure;

/// What is appended to the failure, with the evidence path in `{}`.
const HINT: &str =
    "; to see which launch configuration gives this measurement: measure-guest explain";

/// Appends the command to a `measurement-set` failure saying the measurement is not in the set (not to one about
/// signatures or expiry, and only once).
pub(crate) fn add_explain_command(f: &mut Failure, evidence: &Path) {
    if f.check != MEASUREMENT_SET
        || !f.detail.contains(" is not in measurement set ")
        || f.detail.contains(HINT)
    {
        return;
    }
    let path = evidence.display().to_string();
    let quoted = if !path.is_empty()
        && path
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+,:=@".contains(c))
    {
        path
    } else {
        format!("'{}'", path.replace('\'', "'\\''"))
    };
    f.detail
        .push_str(&format!("{HINT} {quoted} --image DIR --ovmf FILE"));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn not_in_set() -> Failure {
        Failure::new(
            MEASUREMENT_SET,
            "measurement aa is not in measurement set g 1 (s.toml); nearest entry: snp vcpus=1"
                .to_owned(),
        )
    }

    #[test]
    fn a_measurement_not_in_the_set_gets_the_explain_command_once() {
        let mut f = not_in_set();
        add_explain_command(&mut f, Path::new("runs/run-1.evidence"));
        assert!(
            f.detail.ends_with(
                "nearest entry: snp vcpus=1; to see which launch configuration gives this measurement: \
                 measure-guest explain runs/run-1.evidence --image DIR --ovmf FILE"
            ),
            "{}",
            f.detail
        );
        let once = f.detail.clone();
        add_explain_command(&mut f, Path::new("runs/run-1.evidence"));
        assert_eq!(f.detail, once);
        // A path a shell would split or expand is quoted.
        let mut f = not_in_set();
        add_explain_command(&mut f, Path::new("my runs/it's $HOME.ev"));
        assert!(
            f.detail.ends_with(
                "measure-guest explain 'my runs/it'\\''s $HOME.ev' --image DIR --ovmf FILE"
            ),
            "{}",
            f.detail
        );
    }

    #[test]
    fn other_failures_are_left_alone() {
        for f in [
            Failure::new(
                MEASUREMENT_SET,
                "measurement set g 1 (s.toml) expired: its not_after is 2026-01-01T00:00:00Z"
                    .to_owned(),
            ),
            Failure::new(
                "nonce",
                "measurement aa is not in measurement set x".to_owned(),
            ),
        ] {
            let mut g = f.clone();
            add_explain_command(&mut g, Path::new("e.ev"));
            assert_eq!(g.detail, f.detail);
        }
    }
}
