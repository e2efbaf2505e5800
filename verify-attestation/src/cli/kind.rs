//! What kind of file a user gave: an SEV-SNP report, a TDX quote, fenced-run evidence, PEM, JSON, or one of
//! them written as hex or base64 text. Each subcommand uses it to turn "cannot parse" into a hint naming what
//! the file is and which subcommand reads it, and to accept hex or base64 text where binary is expected.

use base64::Engine;

/// Length of an SEV-SNP ATTESTATION_REPORT.
const SNP_REPORT_LEN: usize = 1184;

/// What a file looks like, judged from its first bytes and its length (nothing is verified).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Kind {
    /// 1184 bytes with a report version this tool knows: an SEV-SNP ATTESTATION_REPORT.
    SnpReport,
    /// The header of a DCAP quote with the TDX TEE type.
    TdxQuote,
    /// A DCAP quote of another TEE (SGX).
    SgxQuote,
    /// A CBOR map: fenced-run evidence (or another CBOR document).
    Cbor,
    /// PEM text, with the label of its first block (`CERTIFICATE`, `X509 CRL`, `PUBLIC KEY`, ...).
    Pem(String),
    /// JSON text.
    Json,
    /// TOML or other text.
    Text,
    /// Anything else.
    Binary,
}

impl Kind {
    /// A few words naming the kind, for messages.
    pub fn describe(&self) -> String {
        match self {
            Kind::SnpReport => "an SEV-SNP attestation report".into(),
            Kind::TdxQuote => "a TDX quote".into(),
            Kind::SgxQuote => "an SGX quote (not TDX)".into(),
            Kind::Cbor => "CBOR (fenced-run evidence)".into(),
            Kind::Pem(label) => format!("PEM text ({label})"),
            Kind::Json => "JSON text".into(),
            Kind::Text => "text".into(),
            Kind::Binary => "binary data of no known kind".into(),
        }
    }

    /// The `verify-attestation` command that reads this kind, when there is one.
    pub fn reader(&self) -> Option<&'static str> {
        match self {
            Kind::SnpReport => Some("verify-attestation snp-report REPORT --certs DIR"),
            Kind::TdxQuote => Some("verify-attestation tdx-quote QUOTE --collateral FILE"),
            Kind::Cbor => Some("verify-attestation evidence FILE ..."),
            Kind::Pem(l) if l == "CERTIFICATE" => {
                Some("a certificate goes in the --certs directory (snp-report) or inside the evidence")
            }
            Kind::Pem(l) if l.contains("CRL") => Some("a CRL is given with --crl FILE"),
            Kind::Pem(l) if l.contains("PUBLIC KEY") => {
                Some("an auditor key is given with --auditor-key KEY (evidence --measurements)")
            }
            Kind::Json => Some(
                "JSON is the output of --json or TDX collateral (--collateral FILE); evidence is the CBOR file \
                 `fenced-run run --evidence OUT` writes",
            ),
            _ => None,
        }
    }
}

/// Judges what `bytes` are.
pub fn sniff(bytes: &[u8]) -> Kind {
    let mut r = attestation::wire::Reader::new("file", bytes);
    if let (Ok(version), Ok(key_type), Ok(tee)) = (
        r.u16_le("version"),
        r.u16_le("att_key_type"),
        r.u32_le("tee_type"),
    ) {
        if (version == 3 || version == 4 || version == 5) && key_type == 2 {
            if tee == 0x81 {
                return Kind::TdxQuote;
            }
            if tee == 0 {
                return Kind::SgxQuote;
            }
        }
    }
    if bytes.len() == SNP_REPORT_LEN {
        let v = attestation::wire::Reader::new("file", bytes).u32_le("VERSION");
        if v.is_ok_and(|v| (2..=5).contains(&v)) {
            return Kind::SnpReport;
        }
    }
    if let Some(&b) = bytes.first() {
        // A CBOR map that decodes whole (a byte in the map range alone says little: 1184 bytes of 0xA5 are a
        // malformed report, not CBOR).
        if (0xa0..=0xbf).contains(&b)
            && ciborium::de::from_reader::<ciborium::Value, _>(bytes).is_ok()
        {
            return Kind::Cbor;
        }
    }
    let Ok(text) = std::str::from_utf8(bytes) else {
        return Kind::Binary;
    };
    let t = text.trim_start_matches('\u{feff}').trim_start();
    if let Some(rest) = t.strip_prefix("-----BEGIN ") {
        let label = rest.split("-----").next().unwrap_or("").trim();
        return Kind::Pem(label.chars().take(40).collect());
    }
    if (t.starts_with('{') || t.starts_with('['))
        && serde_json::from_str::<serde_json::Value>(t).is_ok()
    {
        return Kind::Json;
    }
    Kind::Text
}

/// The encoding a binary file was given in, when it was text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TextEncoding {
    /// Hexadecimal digits (whitespace and a `0x` prefix ignored).
    Hex,
    /// Standard or URL-safe base64 (whitespace ignored).
    Base64,
}

impl TextEncoding {
    /// Its name in messages.
    pub fn name(self) -> &'static str {
        match self {
            TextEncoding::Hex => "hex",
            TextEncoding::Base64 => "base64",
        }
    }
}

/// `bytes` decoded when they are hex or base64 text of something binary (a report, a quote or evidence; all
/// three begin with bytes that are not printable text, so a real binary file is never taken for text), with
/// the encoding found. Binary input comes back unchanged with `None`.
pub fn decode_text(bytes: &[u8]) -> (Vec<u8>, Option<TextEncoding>) {
    let Ok(text) = std::str::from_utf8(bytes) else {
        return (bytes.to_vec(), None);
    };
    let compact: String = text.chars().filter(|c| !c.is_whitespace()).collect();
    if compact.len() < 16 {
        return (bytes.to_vec(), None);
    }
    let hex_text = compact
        .strip_prefix("0x")
        .or_else(|| compact.strip_prefix("0X"))
        .unwrap_or(&compact);
    if hex_text.bytes().all(|b| b.is_ascii_hexdigit()) {
        if let Ok(b) = hex::decode(hex_text) {
            if sniff(&b) != Kind::Text && sniff(&b) != Kind::Binary {
                return (b, Some(TextEncoding::Hex));
            }
        }
    }
    let engines = [
        base64::engine::general_purpose::STANDARD,
        base64::engine::general_purpose::URL_SAFE,
        base64::engine::general_purpose::STANDARD_NO_PAD,
        base64::engine::general_purpose::URL_SAFE_NO_PAD,
    ];
    for e in engines {
        if let Ok(b) = e.decode(&compact) {
            if matches!(sniff(&b), Kind::SnpReport | Kind::TdxQuote | Kind::Cbor) {
                return (b, Some(TextEncoding::Base64));
            }
        }
    }
    (bytes.to_vec(), None)
}

/// The hint for a file of kind `found` given where `wanted` is read: what it is and which command reads it.
/// `None` when the kind is the one wanted or unknown (the parser's own message then says what is wrong).
pub fn wrong_kind_hint(found: &Kind, wanted: &Kind) -> Option<String> {
    if found == wanted || matches!(found, Kind::Binary | Kind::Text) {
        return None;
    }
    if matches!(wanted, Kind::Cbor) && matches!(found, Kind::Json) {
        return Some(
            "this is JSON, not CBOR evidence: the evidence is the binary file `fenced-run run --evidence OUT` \
             writes (the JSON of `--json` is the verdict alone, with nothing that signs it)"
                .into(),
        );
    }
    let mut hint = format!("this is {}, not {}", found.describe(), wanted.describe());
    if let Some(r) = found.reader() {
        hint.push_str(&format!("; {r}"));
    }
    Some(hint)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_are_told_apart_and_text_encodings_decoded() {
        let mut report = vec![0u8; SNP_REPORT_LEN];
        report[0] = 2;
        assert_eq!(sniff(&report), Kind::SnpReport);
        let mut quote = vec![0u8; 700];
        quote[..8].copy_from_slice(&[4, 0, 2, 0, 0x81, 0, 0, 0]);
        assert_eq!(sniff(&quote), Kind::TdxQuote);
        assert_eq!(sniff(b"\xa1\x63tee\x01"), Kind::Cbor);
        assert_eq!(sniff(&[0xa5; 1184]), Kind::Binary);
        assert_eq!(
            sniff(b"-----BEGIN CERTIFICATE-----\nMII\n"),
            Kind::Pem("CERTIFICATE".into())
        );
        assert_eq!(sniff(b" {\"outcome\": 1}"), Kind::Json);
        let (d, e) = decode_text(hex::encode(&report).as_bytes());
        assert_eq!(
            (d.as_slice(), e),
            (report.as_slice(), Some(TextEncoding::Hex))
        );
        let b64 = base64::engine::general_purpose::STANDARD.encode(&quote);
        let (d, e) = decode_text(format!("{b64}\n").as_bytes());
        assert_eq!(
            (d.as_slice(), e),
            (quote.as_slice(), Some(TextEncoding::Base64))
        );
        let (d, e) = decode_text(&report);
        assert_eq!((d.as_slice(), e), (report.as_slice(), None));
        assert!(wrong_kind_hint(&Kind::TdxQuote, &Kind::SnpReport)
            .is_some_and(|h| h.contains("tdx-quote")));
        assert!(wrong_kind_hint(&Kind::Json, &Kind::Cbor).is_some_and(|h| h.contains("CBOR")));
        assert_eq!(wrong_kind_hint(&Kind::Binary, &Kind::Cbor), None);
    }
}
