//! The operator's `[egress]` settings (a host-side file, never the job's): networks the address policy then
//! accepts ([`crate::addr::AllowNetworks`]) and an HTTP CONNECT proxy that the side that dials forwards allowed
//! connections through ([`UpstreamProxy`]), and CA certificates the install phase's clients trust besides the
//! system's ([`CaCertificates`]). The allowlist is still judged by name before any of them applies.

use crate::addr::{AllowNetworks, NetworkEntryError};

/// The operator's HTTP CONNECT proxy, `http://HOST:PORT`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct UpstreamProxy {
    /// The proxy's host: a name, an IPv4 address or an IPv6 address (without brackets).
    pub host: String,
    /// Its port.
    pub port: u16,
}

/// Why an `upstream_proxy` value cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{value}`: {why} (expected http://HOST:PORT)")]
pub struct UpstreamProxyError {
    /// The value as written.
    pub value: String,
    /// What is wrong.
    pub why: String,
}

impl UpstreamProxy {
    /// Parses `http://HOST:PORT` (a trailing `/` allowed; no path, no user information, no other scheme).
    pub fn parse(value: &str) -> Result<UpstreamProxy, UpstreamProxyError> {
        let err = |why: &str| UpstreamProxyError {
            value: value.to_owned(),
            why: why.to_owned(),
        };
        let rest = value
            .get(..7)
            .filter(|s| s.eq_ignore_ascii_case("http://"))
            .map(|_| &value[7..])
            .ok_or_else(|| {
                err("the scheme must be http:// (the proxy is spoken to with CONNECT)")
            })?;
        let authority = rest.strip_suffix('/').unwrap_or(rest);
        if authority.contains('/') || authority.contains('?') || authority.contains('#') {
            return Err(err("a proxy URL has no path"));
        }
        let (host, port) =
            crate::hostport::split_host_port(authority, None).map_err(|e| err(&e.to_string()))?;
        if host.len() > 253
            || !host
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b':' | b'_'))
        {
            return Err(err(
                "the host must be a name or an IP address (letters, digits, `.`, `-`, `_`, `:`)",
            ));
        }
        Ok(UpstreamProxy {
            host: host.trim_end_matches('.').to_ascii_lowercase(),
            port,
        })
    }

    /// `host:port`, an IPv6 address in brackets.
    pub fn authority(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }

    /// `http://host:port`.
    pub fn url(&self) -> String {
        format!("http://{}", self.authority())
    }
}

/// Largest `ca_certificates` file (bytes): it travels in the `vm` tier's job header beside the other settings
/// (a company's root and intermediate, or a test CA, are a few kilobytes).
pub const MAX_CA_BYTES: usize = 32 * 1024;

/// The operator's extra trust anchors (`[egress] ca_certificates`): PEM text holding only CA certificates,
/// each checked to be an X.509 certificate with `basicConstraints` CA:TRUE.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CaCertificates {
    /// The file's text as read, CRLF line ends made LF.
    pem: String,
    /// The certificates' subjects, in file order.
    subjects: Vec<String>,
    /// SHA-256 of [`CaCertificates::pem`].
    sha256: [u8; 32],
}

/// Why a `ca_certificates` file cannot be used: names the file and, when one is at fault, the certificate.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}: {why}")]
pub struct CaCertificatesError {
    /// The file (or where the text came from).
    pub file: String,
    /// What is wrong.
    pub why: String,
}

impl CaCertificates {
    /// Checks `bytes`, the text of `file`: at most [`MAX_CA_BYTES`], UTF-8 without control characters other
    /// than line ends and tabs, at least one PEM block, every block a `CERTIFICATE` that parses as X.509 with
    /// nothing after it and is a CA (`basicConstraints` CA:TRUE). Text outside the blocks is kept (comments).
    pub fn parse(bytes: &[u8], file: &str) -> Result<CaCertificates, CaCertificatesError> {
        let err = |why: String| CaCertificatesError {
            file: file.to_owned(),
            why,
        };
        if bytes.len() > MAX_CA_BYTES {
            return Err(err(format!(
                "{} bytes, larger than the {MAX_CA_BYTES} bytes the job header carries",
                bytes.len()
            )));
        }
        let text = std::str::from_utf8(bytes)
            .map_err(|e| err(format!("not UTF-8 text (a PEM file is): {e}")))?;
        let pem = text.replace("\r\n", "\n");
        if let Some((line, c)) = pem.lines().enumerate().find_map(|(i, l)| {
            l.chars()
                .find(|c| c.is_control() && *c != '\t')
                .map(|c| (i + 1, c))
        }) {
            return Err(err(format!(
                "line {line}: control character U+{:04X} (a PEM file is text)",
                u32::from(c)
            )));
        }
        let mut subjects = Vec::new();
        for (i, block) in x509_parser::pem::Pem::iter_from_buffer(pem.as_bytes()).enumerate() {
            let n = i + 1;
            let block = block.map_err(|e| err(format!("PEM block {n}: {e}")))?;
            if block.label != "CERTIFICATE" {
                return Err(err(format!(
                    "PEM block {n} is `{}`: only CA certificates (`CERTIFICATE` blocks) belong here",
                    block.label.chars().take(40).collect::<String>()
                )));
            }
            let (rest, cert) = x509_parser::parse_x509_certificate(&block.contents)
                .map_err(|e| err(format!("certificate {n}: not an X.509 certificate: {e}")))?;
            if !rest.is_empty() {
                return Err(err(format!(
                    "certificate {n}: {} bytes after the certificate",
                    rest.len()
                )));
            }
            let subject = cert.subject().to_string();
            let is_ca = match cert.basic_constraints() {
                Ok(Some(bc)) => bc.value.ca,
                Ok(None) => false,
                Err(e) => {
                    return Err(err(format!(
                        "certificate {n} ({subject}): basicConstraints: {e}"
                    )))
                }
            };
            if !is_ca {
                return Err(err(format!(
                    "certificate {n} ({subject}): not a CA certificate (basicConstraints CA:TRUE is \
                     missing); only trust anchors belong here"
                )));
            }
            subjects.push(subject);
        }
        if subjects.is_empty() {
            return Err(err(
                "no PEM certificate in it (expected -----BEGIN CERTIFICATE----- blocks)".into(),
            ));
        }
        use sha2::Digest;
        let sha256 = sha2::Sha256::digest(pem.as_bytes()).into();
        Ok(CaCertificates {
            pem,
            subjects,
            sha256,
        })
    }

    /// The PEM text (CRLF made LF), as appended to the sandbox's CA bundle.
    pub fn pem(&self) -> &str {
        &self.pem
    }

    /// The certificates' subjects, in file order.
    pub fn subjects(&self) -> &[String] {
        &self.subjects
    }

    /// SHA-256 of [`CaCertificates::pem`], lowercase hex (the verdict records it; for a file with LF line
    /// ends it is `sha256sum FILE`).
    pub fn sha256_hex(&self) -> String {
        hex::encode(self.sha256)
    }
}

/// The operator's `[egress]` table, checked.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct OperatorEgress {
    /// Networks the address policy accepts for allowlisted names.
    pub allow_networks: AllowNetworks,
    /// The HTTP CONNECT proxy allowed connections go through, if any.
    pub upstream_proxy: Option<UpstreamProxy>,
    /// CA certificates the install phase's clients trust besides the system bundle, if any.
    pub ca_certificates: Option<CaCertificates>,
}

/// Why the `[egress]` settings cannot be used: names the key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EgressSettingError {
    /// An `allow_networks` entry.
    #[error("egress.allow_networks: {0}")]
    Network(#[from] NetworkEntryError),
    /// The `upstream_proxy` value.
    #[error("egress.upstream_proxy: {0}")]
    Upstream(#[from] UpstreamProxyError),
    /// The `ca_certificates` file.
    #[error("egress.ca_certificates: {0}")]
    Ca(#[from] CaCertificatesError),
    /// A line of the encoded form that is none of them.
    #[error("egress settings: line `{0}` is not `network CIDR`, `upstream URL` or `ca PEM-LINE`")]
    Line(String),
}

impl OperatorEgress {
    /// Parses the table's two keys.
    pub fn parse<S: AsRef<str>>(
        allow_networks: &[S],
        upstream_proxy: Option<&str>,
    ) -> Result<OperatorEgress, EgressSettingError> {
        Ok(OperatorEgress {
            allow_networks: AllowNetworks::parse(allow_networks)?,
            upstream_proxy: upstream_proxy.map(UpstreamProxy::parse).transpose()?,
            ca_certificates: None,
        })
    }

    /// Whether no setting is in force.
    pub fn is_empty(&self) -> bool {
        self.allow_networks.is_empty()
            && self.upstream_proxy.is_none()
            && self.ca_certificates.is_none()
    }

    /// The settings as text lines (`network CIDR`, `upstream URL`, and `ca LINE` for every line of the CA
    /// certificates' PEM text, the last one included when empty), the form the `vm` tier's job header carries.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        for n in self.allow_networks.entries() {
            out.push_str(&format!("network {n}\n"));
        }
        if let Some(u) = &self.upstream_proxy {
            out.push_str(&format!("upstream {}\n", u.url()));
        }
        if let Some(ca) = &self.ca_certificates {
            for line in ca.pem().split('\n') {
                out.push_str("ca ");
                out.push_str(line);
                out.push('\n');
            }
        }
        out
    }

    /// Parses [`OperatorEgress::encode`]'s form, every entry checked again.
    pub fn decode(text: &str) -> Result<OperatorEgress, EgressSettingError> {
        let mut nets = Vec::new();
        let mut upstream = None;
        let mut ca: Option<Vec<&str>> = None;
        for line in text.split('\n').filter(|l| !l.is_empty()) {
            match line.split_once(' ') {
                Some(("network", n)) => nets.push(n),
                Some(("upstream", u)) if upstream.is_none() => upstream = Some(u),
                Some(("ca", l)) => ca.get_or_insert_with(Vec::new).push(l),
                _ => return Err(EgressSettingError::Line(line.chars().take(80).collect())),
            }
        }
        let mut settings = OperatorEgress::parse(nets.as_slice(), upstream)?;
        if let Some(lines) = ca {
            settings.ca_certificates = Some(CaCertificates::parse(
                lines.join("\n").as_bytes(),
                "the job header's CA certificates",
            )?);
        }
        Ok(settings)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstream_proxies_parse_and_odd_ones_are_refused() {
        let u = UpstreamProxy::parse("http://Proxy.Example:3128/").expect("ok");
        assert_eq!((u.host.as_str(), u.port), ("proxy.example", 3128));
        assert_eq!(u.url(), "http://proxy.example:3128");
        let v6 = UpstreamProxy::parse("http://[fd12::1]:8080").expect("v6");
        assert_eq!(v6.authority(), "[fd12::1]:8080");
        for bad in [
            "https://proxy.example:3128",
            "proxy.example:3128",
            "http://proxy.example",
            "http://proxy.example:3128/path",
            "http://user:pw@proxy.example:3128",
            "http://proxy.example:0",
            "http://pro xy.example:80",
            "",
        ] {
            let e = UpstreamProxy::parse(bad).expect_err(bad).to_string();
            assert!(e.starts_with(&format!("`{bad}`")), "{e}");
        }
    }

    #[test]
    fn settings_round_trip_through_their_encoded_form() {
        let s = OperatorEgress::parse(&["10.20.0.0/16", "127.0.0.1"], Some("http://10.0.0.5:3128"))
            .expect("parse");
        let text = s.encode();
        assert_eq!(
            text,
            "network 10.20.0.0/16\nnetwork 127.0.0.1/32\nupstream http://10.0.0.5:3128\n"
        );
        assert_eq!(OperatorEgress::decode(&text).expect("decode"), s);
        assert!(OperatorEgress::decode("").expect("empty").is_empty());
        for bad in [
            "network 127.0.0.0/8\n",
            "upstream ftp://x:1\n",
            "other x\n",
            "upstream http://a.example:1\nupstream http://b.example:2\n",
        ] {
            assert!(OperatorEgress::decode(bad).is_err(), "{bad}");
        }
    }

    /// A P-256 CA (`CN=fenced-run unit-test CA`, basicConstraints CA:TRUE) made with the openssl CLI.
    const CA: &str = "-----BEGIN CERTIFICATE-----\nMIIBqzCCAVGgAwIBAgIUTVViumSfOSjTpQ2ubY2o/aVmUGkwCgYIKoZIzj0EAwIw\nIjEgMB4GA1UEAwwXZmVuY2VkLXJ1biB1bml0LXRlc3QgQ0EwIBcNMjYxMjA1MDkz\nODI2WhgPMjEyNjExMTEwOTM4MjZaMCIxIDAeBgNVBAMMF2ZlbmNlZC1ydW4gdW5p\ndC10ZXN0IENBMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEe6p/nLW3fRXCg8Se\nQ7VNfMlA+ICS86yylCoVRh61X09XZVZ/enJNCwWnj52l2W6z+l42ePJ2GM3T0a9D\nhEesKKNjMGEwHQYDVR0OBBYEFAW9+cJ2wX12MkcIGc6QvhxRjrEOMB8GA1UdIwQY\nMBaAFAW9+cJ2wX12MkcIGc6QvhxRjrEOMA8GA1UdEwEB/wQFMAMBAf8wDgYDVR0P\nAQH/BAQDAgIEMAoGCCqGSM49BAMCA0gAMEUCIEJ3+KJvSBa3Eg0glfJRmIc08OFT\nM5NvIj6/zlfW/v1RAiEAvLx2fbDhskhwoT1VH4t8rS2Q0CzMad2LQMewRT/Rh4w=\n-----END CERTIFICATE-----\n";
    /// A certificate that is not a CA (basicConstraints CA:FALSE).
    const LEAF: &str = "-----BEGIN CERTIFICATE-----\nMIIBgjCCASigAwIBAgIUTckG+mzwij4blWAWUzDwmgQYw8cwCgYIKoZIzj0EAwIw\nFzEVMBMGA1UEAwwMbGVhZi5leGFtcGxlMCAXDTI2MTIwNTA5MzgyNloYDzIxMjYx\nMTExMDkzODI2WjAXMRUwEwYDVQQDDAxsZWFmLmV4YW1wbGUwWTATBgcqhkjOPQIB\nBggqhkjOPQMBBwNCAAQMyMBaKkYfOdCcqdid2ahS6POr0ZmSLjxIjofpd0dsZxcV\nx1RfEcygme+hxlwW5+DdbGrcEjGKLhjEl/MCdBGno1AwTjAdBgNVHQ4EFgQURpGg\n8aUq1orq67bUAp7WcIYC0xgwHwYDVR0jBBgwFoAURpGg8aUq1orq67bUAp7WcIYC\n0xgwDAYDVR0TAQH/BAIwADAKBggqhkjOPQQDAgNIADBFAiBd6Wf/J32l/ScfapV+\nOwXb3uxAKADty/BAJ7LVR0MqPQIhALLbufq+DMnjnd6xHhBaPlNh5pX8F9tkIqIJ\nXQZYspmE\n-----END CERTIFICATE-----\n";

    #[test]
    fn ca_certificates_are_checked_hashed_and_carried_in_the_encoded_form() {
        let ca = CaCertificates::parse(format!("# the test CA\r\n{CA}").as_bytes(), "ca.pem")
            .expect("a CA");
        assert_eq!(ca.subjects(), ["CN=fenced-run unit-test CA"]);
        assert_eq!(ca.pem(), format!("# the test CA\n{CA}"));
        use sha2::Digest;
        assert_eq!(
            ca.sha256_hex(),
            hex::encode(sha2::Sha256::digest(ca.pem().as_bytes()))
        );
        let mut s = OperatorEgress::parse(&["127.0.0.1/32"], None).expect("parse");
        s.ca_certificates = Some(ca.clone());
        let text = s.encode();
        assert!(
            text.starts_with(
                "network 127.0.0.1/32\nca # the test CA\nca -----BEGIN CERTIFICATE-----\n"
            ),
            "{text}"
        );
        let back = OperatorEgress::decode(&text).expect("decode");
        assert_eq!(back, s);
        assert_eq!(
            back.ca_certificates.expect("ca").sha256_hex(),
            ca.sha256_hex()
        );
        // Without a final line end, too.
        let bare = CaCertificates::parse(CA.trim_end().as_bytes(), "ca.pem").expect("bare");
        let only = OperatorEgress {
            ca_certificates: Some(bare),
            ..OperatorEgress::default()
        };
        assert!(!only.is_empty());
        assert_eq!(
            OperatorEgress::decode(&only.encode()).expect("decode"),
            only
        );
        // The largest file still fits the job header's 16-bit settings length, with every other setting.
        let padding = "# padding\n".repeat((MAX_CA_BYTES - CA.len()) / 10);
        let full = format!("{padding}{CA}");
        assert!(full.len() <= MAX_CA_BYTES && full.len() > MAX_CA_BYTES - 10);
        let mut most = OperatorEgress::parse(
            &["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"],
            Some("http://proxy.example:3128"),
        )
        .expect("settings");
        most.ca_certificates =
            Some(CaCertificates::parse(full.as_bytes(), "full.pem").expect("full"));
        assert!(
            most.encode().len() < usize::from(u16::MAX),
            "{}",
            most.encode().len()
        );
    }

    #[test]
    fn ca_files_that_are_not_only_ca_certificates_are_refused_naming_the_file_and_certificate() {
        let two = format!("{CA}{LEAF}");
        let key =
            "-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIA==\n-----END PRIVATE KEY-----\n";
        let big = format!("{CA}{}", "#".repeat(MAX_CA_BYTES));
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (
                two.clone().into_bytes(),
                "ca.pem: certificate 2 (CN=leaf.example): not a CA certificate",
            ),
            (
                key.as_bytes().to_vec(),
                "ca.pem: PEM block 1 is `PRIVATE KEY`",
            ),
            (
                format!("{CA}{key}").into_bytes(),
                "ca.pem: PEM block 2 is `PRIVATE KEY`",
            ),
            (b"just text\n".to_vec(), "ca.pem: no PEM certificate in it"),
            (Vec::new(), "ca.pem: no PEM certificate in it"),
            (
                b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n".to_vec(),
                "ca.pem: certificate 1: not an X.509 certificate",
            ),
            (
                b"-----BEGIN CERTIFICATE-----\nMIIB\n".to_vec(),
                "ca.pem: PEM block 1:",
            ),
            (vec![0xff, 0xfe], "ca.pem: not UTF-8 text"),
            (
                format!("{CA}\u{7}").into_bytes(),
                "ca.pem: line 12: control character U+0007",
            ),
            (
                big.into_bytes(),
                "ca.pem: 33407 bytes, larger than the 32768 bytes",
            ),
        ];
        for (bytes, want) in cases {
            let e = CaCertificates::parse(&bytes, "ca.pem")
                .expect_err(want)
                .to_string();
            assert!(e.starts_with(want), "{e}\nwanted: {want}");
        }
        // The job header's form is checked again on decode.
        let forged = format!("ca {}", LEAF.replace('\n', "\nca "));
        let e = OperatorEgress::decode(&forged)
            .expect_err("leaf")
            .to_string();
        assert!(e.starts_with("egress.ca_certificates: the job header's CA certificates: certificate 1 (CN=leaf.example)"), "{e}");
    }
}
