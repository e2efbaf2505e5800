//! The one record every check of this crate reports when it fails: the check's kebab-case name, a detail, and
//! (for checks that compare two values) the value seen and the value wanted. It sits at the bottom of the crate:
//! SEV-SNP, TDX and evidence verification produce it, the output layer only prints it.

use serde::Serialize;
use std::borrow::Cow;
use std::fmt;

/// One failed check: which check, and a detail naming the value seen and the value expected.
///
/// A verifier collects all of them rather than stopping at the first, so a founder sees every reason at once.
/// Check names are kebab-case (`report-signature`, `quote-signature`, `tcb-info-next-update`); the full list
/// is in `docs/verification.md`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Failure {
    /// Stable kebab-case name of the check (e.g. `report-signature`, `pck-chain-leaf-signature`, `mrtd`).
    pub check: Cow<'static, str>,
    /// What was seen and what was expected, in one line.
    pub detail: String,
    /// The value seen, where the check compares one value with another (omitted from JSON otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seen: Option<String>,
    /// The value wanted, where the check compares one value with another (omitted from JSON otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wanted: Option<String>,
}

impl Failure {
    /// A failure of `check` with `detail`.
    pub fn new(check: impl Into<Cow<'static, str>>, detail: impl Into<String>) -> Failure {
        Failure {
            check: check.into(),
            detail: detail.into(),
            seen: None,
            wanted: None,
        }
    }

    /// A failure of a check that compares a value seen with a value wanted; the detail reads
    /// "seen SEEN, wanted WANTED".
    pub fn seen_wanted(
        check: impl Into<Cow<'static, str>>,
        seen: impl fmt::Display,
        wanted: impl fmt::Display,
    ) -> Failure {
        let (seen, wanted) = (seen.to_string(), wanted.to_string());
        Failure {
            check: check.into(),
            detail: format!("seen {seen}, wanted {wanted}"),
            seen: Some(seen),
            wanted: Some(wanted),
        }
    }

    /// The value seen, or "" for a check that does not compare two values.
    pub fn seen_str(&self) -> &str {
        self.seen.as_deref().unwrap_or("")
    }

    /// The value wanted, or "" for a check that does not compare two values.
    pub fn wanted_str(&self) -> &str {
        self.wanted.as_deref().unwrap_or("")
    }

    /// Whether this failure is of `check` or of a check below it (`pck-chain` covers
    /// `pck-chain-leaf-signature`).
    pub fn is(&self, check: &str) -> bool {
        self.check == check
            || (self.check.len() > check.len()
                && self.check.starts_with(check)
                && self.check.as_bytes()[check.len()] == b'-')
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.check, self.detail)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seen_wanted_fills_all_fields() {
        let f = Failure::seen_wanted("mrtd", "aa", "bb");
        assert_eq!(f.detail, "seen aa, wanted bb");
        assert_eq!(f.seen_str(), "aa");
        assert_eq!(f.wanted_str(), "bb");
        assert_eq!(f.to_string(), "mrtd: seen aa, wanted bb");
    }

    #[test]
    fn is_matches_the_name_and_its_children_only() {
        let f = Failure::new("pck-chain-leaf-signature", "x");
        assert!(f.is("pck-chain-leaf-signature"));
        assert!(f.is("pck-chain"));
        assert!(!f.is("pck-chai"));
        assert!(!f.is("pck-chain-leaf-signature-x"));
    }
}
