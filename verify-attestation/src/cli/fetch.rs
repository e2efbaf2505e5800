//! `verify-attestation fetch`: the collateral a report, quote or evidence needs, from AMD's KDS or Intel's
//! PCS (verified before it is cached or written), as the certificate directory `snp-report --certs` reads, a
//! `collateral.json`, or one offline bundle; `--from-pcs-responses DIR` converts PCS responses other tools
//! saved. `bundle-sign` adds an auditor's signature to a bundle. [`CollateralArgs`] are the flags the verify
//! commands share to use a bundle, the cache, or the network (`--online`).

use attestation::snp::{AttestationReport, Product};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use super::exit::Exit;
// The refusal type lives with the exit codes; named here as before.
pub use super::exit::Refusal;
use verifier_lib::collateral::Client;
use verifier_lib::collateral::{rfc3339, Cache, Origin};
use verifier_lib::collateral::{Bundle, Content, SnpPart};
use verifier_lib::collateral::{FetchConfig, FetchError};
use verifier_lib::collateral::{Kds, DEFAULT_KDS_URL};
use verifier_lib::collateral::{Pcs, QuoteNeeds, Update, DEFAULT_PCS_URL};

/// Where collateral comes from: the flags every fetching path shares.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct SourceArgs {
    /// AMD KDS base URL. Default: the config file's, else AMD's.
    #[arg(long, value_name = "URL")]
    pub kds_url: Option<String>,
    /// Intel PCS (or PCCS) base URL. Default: the config file's, else Intel's.
    #[arg(long, value_name = "URL")]
    pub pcs_url: Option<String>,
    /// The Intel root CA CRL URL. Default: the config file's, else the root certificate's CRL distribution point.
    #[arg(long, value_name = "URL")]
    pub root_crl_url: Option<String>,
    /// TOML file with kds_url, pcs_url, root_crl_url, update, timeout_secs, max_retries, max_retry_wait_secs.
    #[arg(long, value_name = "FILE")]
    pub fetch_config: Option<PathBuf>,
    /// The collateral cache directory. Default: $XDG_CACHE_HOME/fenced-run/collateral (~/.cache/...).
    #[arg(long, value_name = "DIR")]
    pub cache: Option<PathBuf>,
    /// Neither read nor write the cache.
    #[arg(long, conflicts_with = "cache")]
    pub no_cache: bool,
    /// Intel TCB Info and QE Identity `update`: standard or early. Default: standard.
    #[arg(long, value_name = "standard|early")]
    pub update: Option<Update>,
    /// SEV-SNP product when a version 2 report does not name it (milan, genoa, turin).
    #[arg(long, value_name = "PRODUCT", value_parser = parse_product)]
    pub product: Option<Product>,
}

fn parse_product(s: &str) -> Result<Product, String> {
    let cap = |s: &str| {
        let mut c = s.chars();
        c.next()
            .map(|f| f.to_ascii_uppercase().to_string() + &c.as_str().to_ascii_lowercase())
            .unwrap_or_default()
    };
    Product::from_name(&cap(s)).ok_or_else(|| format!("`{s}` is not milan, genoa or turin"))
}

/// The resolved sources: client, URLs, cache.
pub struct Sources {
    /// The HTTP client.
    pub http: Client,
    /// KDS base URL.
    pub kds_url: String,
    /// PCS base URL.
    pub pcs_url: String,
    /// Root CA CRL URL override.
    pub root_crl_url: Option<String>,
    /// update.
    pub update: Update,
    /// The cache (None with --no-cache).
    pub cache: Option<Cache>,
    /// --product.
    pub product: Option<Product>,
    /// Accept simulated (non-AMD) roots from KDS; such answers are cached apart (`kds-sim/`).
    pub allow_simulated: bool,
}

impl SourceArgs {
    /// Resolves flags over the config file.
    pub fn resolve(&self) -> Result<Sources, String> {
        let cfg = match &self.fetch_config {
            Some(p) => FetchConfig::load(p).map_err(|e| e.to_string())?,
            None => FetchConfig::default(),
        };
        let http = Client::new(cfg.http_options()).map_err(|e| e.to_string())?;
        let cache = if self.no_cache {
            None
        } else {
            Some(Cache::at_or_default(self.cache.as_deref()).map_err(|e| e.to_string())?)
        };
        Ok(Sources {
            http,
            kds_url: self
                .kds_url
                .clone()
                .or(cfg.kds_url.clone())
                .unwrap_or_else(|| DEFAULT_KDS_URL.into()),
            pcs_url: self
                .pcs_url
                .clone()
                .or(cfg.pcs_url.clone())
                .unwrap_or_else(|| DEFAULT_PCS_URL.into()),
            root_crl_url: self.root_crl_url.clone().or(cfg.root_crl_url.clone()),
            update: match self.update {
                Some(u) => u,
                None => cfg.update().map_err(|e| e.to_string())?,
            },
            cache,
            product: self.product,
            allow_simulated: false,
        })
    }
}

impl Sources {
    /// The KDS side.
    pub fn kds(&self) -> Kds<'_> {
        Kds {
            http: &self.http,
            base: self.kds_url.clone(),
            cache: self.cache.as_ref(),
            allow_simulated: self.allow_simulated,
        }
    }

    /// The PCS side.
    pub fn pcs(&self) -> Pcs<'_> {
        Pcs {
            http: &self.http,
            base: self.pcs_url.clone(),
            root_crl_url: self.root_crl_url.clone(),
            update: self.update,
            cache: self.cache.as_ref(),
        }
    }
}

/// Arguments of `verify-attestation fetch`.
#[derive(clap::Args, Debug)]
#[command(group(clap::ArgGroup::new("dest").required(true).args(["out", "bundle"])))]
#[command(group(clap::ArgGroup::new("what").required(true).args(["input", "from_pcs_responses"])))]
pub struct Args {
    /// A raw SEV-SNP report (1184 bytes), a TDX quote, or a fenced-run evidence file.
    pub input: Option<PathBuf>,
    /// Convert PCS responses saved by another tool in DIR (no network) instead of fetching.
    #[arg(long, value_name = "DIR", conflicts_with = "input")]
    pub from_pcs_responses: Option<PathBuf>,
    /// Write ark.pem, ask.pem and vcek.der (+ crl.der) for a report, or collateral.json for a quote, into DIR.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Write one offline bundle FILE with everything the input needs.
    #[arg(long, value_name = "FILE")]
    pub bundle: Option<PathBuf>,
    /// SEV-SNP: do not fetch the product's CRL.
    #[arg(long)]
    pub no_crl: bool,
    /// SEV-SNP, VLEK-signed report: the VLEK certificate (DER or PEM) got from the host or cloud provider
    /// (KDS gives VLEKs to the provider only). It is checked against the fetched ASVK chain and the report.
    #[arg(long, value_name = "FILE")]
    pub vlek: Option<PathBuf>,
    /// SEV-SNP: accept a KDS whose root is not AMD's pinned ARK (the sim chain); cached apart from real
    /// answers, and written output is then simulated collateral.
    #[arg(long)]
    pub allow_simulated: bool,
    /// Verify what is fetched at this time (RFC 3339 or Unix seconds). Default: now.
    #[arg(long, value_name = "TIME", value_parser = super::input::parse_time)]
    pub at: Option<time::OffsetDateTime>,
    /// Print one JSON object instead of lines.
    #[arg(long)]
    pub json: bool,
    /// Where to fetch from, and the cache.
    #[command(flatten)]
    pub source: SourceArgs,
}

/// What an input file is.
pub enum Input {
    /// A raw SEV-SNP report.
    Snp(Box<AttestationReport>),
    /// A TDX quote (raw bytes).
    Tdx(Vec<u8>),
}

/// Classifies an input: fenced-run evidence (CBOR), a TDX quote, or a raw SEV-SNP report.
pub fn classify(bytes: &[u8]) -> Result<Input, String> {
    if let Ok(ev) = attestation::evidence::Evidence::from_cbor(bytes) {
        return if ev.tee.is_snp() {
            AttestationReport::from_bytes(&ev.report)
                .map(|r| Input::Snp(Box::new(r)))
                .map_err(|e| format!("the evidence's SEV-SNP report: {e}"))
        } else {
            Ok(Input::Tdx(ev.report))
        };
    }
    if attestation::tdx::Quote::parse(bytes).is_ok() {
        return Ok(Input::Tdx(bytes.to_vec()));
    }
    match AttestationReport::from_bytes(bytes) {
        Ok(r) => Ok(Input::Snp(Box::new(r))),
        Err(e) => Err(format!(
            "neither fenced-run evidence, a TDX quote nor an SEV-SNP report ({e})"
        )),
    }
}

fn origin_word(o: Origin) -> &'static str {
    match o {
        Origin::Cache => "cache",
        Origin::Fetched => "fetched",
    }
}

fn fail(json: bool, check: &'static str, detail: String) -> ExitCode {
    super::exit::unusable(json, check, detail)
}

fn pem(label: &str, der: &[u8]) -> String {
    use base64::Engine as _;
    let b = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for line in b.as_bytes().chunks(64) {
        out.push_str(&String::from_utf8_lossy(line));
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

/// Writes `bytes` to `path` through a temporary file in the same directory, renamed into place.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), String> {
    use std::io::Write;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut tmp = tempfile::Builder::new()
        .prefix(".partial-")
        .tempfile_in(&dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?;
    tmp.write_all(bytes)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    tmp.persist(path)
        .map_err(|e| format!("{}: {}", path.display(), e.error))?;
    Ok(())
}

fn subject_of(path: &Path, bytes: &[u8]) -> String {
    format!(
        "{} sha256 {}",
        path.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        hex::encode(Sha256::digest(bytes))
    )
}

/// Runs `fetch`.
pub fn run(args: Args) -> ExitCode {
    let now = super::input::at_or_now(args.at);
    let now_s = now.unix_timestamp();
    let mut content = Content {
        format: verifier_lib::collateral::BUNDLE_FORMAT.into(),
        created: rfc3339(now_s),
        subject: String::new(),
        snp: None,
        tdx: None,
        sources: Vec::new(),
    };
    let mut lines: Vec<String> = Vec::new();
    let mut files: Vec<(PathBuf, Vec<u8>)> = Vec::new();
    if let Some(dir) = &args.from_pcs_responses {
        let file = match verifier_lib::collateral::from_responses(dir, now_s) {
            Ok(f) => f,
            Err(e) => return fail(args.json, e.check(), e.to_string()),
        };
        content.subject = format!("PCS responses in {}", dir.display());
        content.sources.push(dir.display().to_string());
        lines.push(format!(
            "converted and verified the PCS responses in {}",
            dir.display()
        ));
        if let Some(out) = &args.out {
            let json = serde_json::to_vec_pretty(&file).unwrap_or_default();
            files.push((out.join("collateral.json"), json));
        }
        content.tdx = Some(file);
    } else {
        let Some(input) = &args.input else {
            return fail(
                args.json,
                "input",
                "give a report, quote or evidence file".into(),
            );
        };
        let bytes = match super::input::read_input(input) {
            Ok(b) => b,
            Err(e) => return fail(args.json, "input", format!("{}: {e}", input.display())),
        };
        content.subject = subject_of(input, &bytes);
        let kind = match classify(&bytes) {
            Ok(k) => k,
            Err(e) => return fail(args.json, "input", format!("{}: {e}", input.display())),
        };
        let mut sources = match args.source.resolve() {
            Ok(s) => s,
            Err(e) => return fail(args.json, "input", e),
        };
        sources.allow_simulated = args.allow_simulated;
        match kind {
            Input::Snp(report) => {
                let vlek = report.key_info.signing_key == attestation::snp::SigningKey::Vlek;
                let given = match (&args.vlek, vlek) {
                    (Some(p), true) => match super::input::read_input(p) {
                        Ok(b) => Some(b),
                        Err(e) => {
                            return fail(args.json, "input", format!("--vlek {}: {e}", p.display()))
                        }
                    },
                    (Some(p), false) => {
                        return fail(
                            args.json,
                            "input",
                            format!(
                                "--vlek {}: the report's KEY_INFO.SIGNING_KEY is not VLEK (its VCEK is fetched from KDS)",
                                p.display()
                            ),
                        )
                    }
                    (None, _) => None,
                };
                let kds = sources.kds();
                let fetched = if vlek {
                    kds.for_vlek_report(
                        &report,
                        sources.product,
                        !args.no_crl,
                        given.as_deref(),
                        now_s,
                    )
                } else {
                    kds.for_report(&report, sources.product, !args.no_crl, now_s)
                };
                let got = match fetched {
                    Ok(g) => g,
                    Err(verifier_lib::collateral::FetchError::VlekNotFetchable { partial }) => {
                        return vlek_partial(&args, &partial)
                    }
                    Err(e) => return fail(args.json, e.check(), e.to_string()),
                };
                for (what, url, o) in &got.origins {
                    if url.starts_with("given") {
                        // The VLEK the founder gave: not fetched, not a URL.
                        lines.push(format!(
                            "{what}: {url}, checked against the ASVK and the report"
                        ));
                        continue;
                    }
                    lines.push(format!("{what}: {} ({url})", origin_word(*o)));
                    content.sources.push(url.clone());
                }
                if let Some(out) = &args.out {
                    files.push((
                        out.join("ark.pem"),
                        pem("CERTIFICATE", &got.ark).into_bytes(),
                    ));
                    let (inter, leaf) = if vlek {
                        ("asvk.pem", "vlek.der")
                    } else {
                        ("ask.pem", "vcek.der")
                    };
                    files.push((out.join(inter), pem("CERTIFICATE", &got.ask).into_bytes()));
                    files.push((out.join(leaf), got.vcek.clone()));
                    if let Some(c) = &got.crl {
                        files.push((out.join("crl.der"), c.clone()));
                    }
                }
                content.snp = Some(SnpPart::new(got.product, &got.bundle(), got.crl.as_deref()));
            }
            Input::Tdx(quote) => {
                let needs = match QuoteNeeds::of_quote(&quote) {
                    Ok(n) => n,
                    Err(e) => return fail(args.json, e.check(), e.to_string()),
                };
                let got = match sources.pcs().for_quote(&needs, now_s) {
                    Ok(g) => g,
                    Err(e) => return fail(args.json, e.check(), e.to_string()),
                };
                lines.push(format!(
                    "TDX collateral for FMSPC {} (PCK {} CA): {}, usable until {}",
                    needs.fmspc,
                    needs.ca.name(),
                    origin_word(got.origin),
                    rfc3339(got.expires)
                ));
                content.sources.extend(got.sources.iter().cloned());
                if let Some(out) = &args.out {
                    files.push((out.join("collateral.json"), got.json.clone()));
                }
                content.tdx = Some(got.file);
            }
        }
    }
    if let Some(b) = &args.bundle {
        files.push((
            b.clone(),
            Bundle::new(content.clone()).to_json().into_bytes(),
        ));
    }
    for (p, b) in &files {
        if let Err(e) = write_atomic(p, b) {
            return fail(args.json, "output", e);
        }
        lines.push(format!("wrote {}", p.display()));
    }
    if args.json {
        let v = serde_json::json!({
            "fetched": true,
            "sources": content.sources,
            "files": files.iter().map(|(p, _)| p.display().to_string()).collect::<Vec<_>>(),
            "log": lines,
        });
        println!("{}", attestation::text::json_safe(&v.to_string()));
    } else {
        for l in lines {
            println!("{}", attestation::text::escape(&l));
        }
    }
    Exit::Success.into()
}

/// A VLEK-signed report without `--vlek`: writes the fetched ARK, ASVK (and CRL) to `--out` when given, then
/// fails (exit 2, `collateral-vlek`) saying that the VLEK is the cloud provider's and what to get.
fn vlek_partial(args: &Args, partial: &verifier_lib::collateral::SnpFetched) -> ExitCode {
    let mut written = Vec::new();
    if let Some(out) = &args.out {
        let mut files = vec![
            (
                out.join("ark.pem"),
                pem("CERTIFICATE", &partial.ark).into_bytes(),
            ),
            (
                out.join("asvk.pem"),
                pem("CERTIFICATE", &partial.ask).into_bytes(),
            ),
        ];
        if let Some(c) = &partial.crl {
            files.push((out.join("crl.der"), c.clone()));
        }
        for (p, b) in &files {
            if let Err(e) = write_atomic(p, b) {
                return fail(args.json, "output", e);
            }
            written.push(p.display().to_string());
        }
    }
    let fetched: Vec<String> = partial
        .origins
        .iter()
        .map(|(what, url, o)| format!("{what} {} from {url}", origin_word(*o)))
        .collect();
    let mut detail = format!(
        "{}. Fetched and verified: {}",
        verifier_lib::collateral::VLEK_ADVICE,
        fetched.join(", ")
    );
    if !written.is_empty() {
        detail.push_str(&format!("; wrote {}", written.join(", ")));
    }
    if args.bundle.is_some() {
        detail.push_str("; no bundle was written: it would lack the VLEK");
    }
    fail(args.json, "collateral-vlek", detail)
}

/// Arguments of `verify-attestation bundle-sign`.
#[derive(clap::Args, Debug)]
pub struct SignArgs {
    /// The bundle (rewritten in place with the signature added).
    pub bundle: PathBuf,
    /// The auditor's Ed25519 private key (PKCS#8 PEM, from `measure-guest keygen`).
    #[arg(long, value_name = "KEY")]
    pub key: PathBuf,
    /// The auditor's name (informational; trust comes from the key).
    #[arg(long, value_name = "NAME")]
    pub auditor: String,
}

/// Runs `bundle-sign`.
pub fn run_sign(args: SignArgs) -> ExitCode {
    let bytes = match super::input::read_input(&args.bundle) {
        Ok(b) => b,
        Err(e) => return fail(false, "input", format!("{}: {e}", args.bundle.display())),
    };
    let mut b = match Bundle::from_json(&bytes) {
        Ok(b) => b,
        Err(e) => {
            return fail(
                false,
                "collateral-format",
                format!("{}: {e}", args.bundle.display()),
            )
        }
    };
    let key = match measurements::set::load_private_key(&args.key) {
        Ok(k) => k,
        Err(e) => return fail(false, "input", e.to_string()),
    };
    b.sign(&key, &args.auditor);
    if let Err(e) = write_atomic(&args.bundle, b.to_json().as_bytes()) {
        return fail(false, "output", e);
    }
    println!(
        "signed {} as {} ({} signature(s))",
        attestation::text::escape(&args.bundle.display().to_string()),
        attestation::text::escape(&args.auditor),
        b.signatures.len()
    );
    Exit::Success.into()
}

/// The check that fails when the founder named auditor keys and the collateral is not signed by enough of them,
/// wherever it came from (docs/verification.md, "Auditor-signed collateral").
pub const COLLATERAL_UNSIGNED: &str = "collateral-unsigned";

/// The collateral flags of the verify commands: a bundle's auditors, the cache or the network, and the SEV-SNP
/// TCB baseline.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct CollateralArgs {
    /// Fetch missing collateral (VCEK, CRL, TCB Info, QE Identity) from KDS/PCS, through the cache. Without
    /// it, `--cache` is read only: missing or stale entries are named failures. Not with `--collateral`.
    #[arg(long, conflicts_with = "collateral")]
    pub online: bool,
    /// A trusted auditor's public key (Ed25519 PEM); repeat for each. With any, the collateral must come from
    /// a `--collateral` bundle carrying valid signatures by `--collateral-auditors-required` of them: collateral
    /// from anywhere else (the evidence, a bare collateral.json, --certs, --crl, a --tcb-baseline file, the
    /// cache, --online) is refused (`collateral-unsigned`).
    #[arg(long = "collateral-auditor-key", value_name = "KEY")]
    pub collateral_auditor_key: Vec<PathBuf>,
    /// How many distinct trusted auditors must have signed the collateral bundle (default 1; only with
    /// --collateral-auditor-key).
    #[arg(long, value_name = "K", requires = "collateral_auditor_key", value_parser = clap::value_parser!(u32).range(1..))]
    pub collateral_auditors_required: Option<u32>,
    /// SEV-SNP: a TCB baseline file (or `builtin`, the one shipped): the report's TCB must be at or above each
    /// per-product floor; the output names each component below it, by how much, and the bulletin.
    #[arg(long, value_name = "FILE")]
    pub tcb_baseline: Option<PathBuf>,
    /// Where to fetch from and the cache.
    #[command(flatten)]
    pub source: SourceArgs,
}

impl CollateralArgs {
    /// Whether the cache or the network is to be used.
    pub fn wants_cache_or_network(&self) -> bool {
        self.online || self.source.cache.is_some()
    }

    /// Whether the founder named auditor keys: every piece of collateral must then be auditor-signed.
    pub fn auditors_named(&self) -> bool {
        !self.collateral_auditor_key.is_empty()
    }

    /// How many distinct auditors must have signed (1 unless `--collateral-auditors-required`).
    pub fn auditors_required(&self) -> u32 {
        self.collateral_auditors_required.unwrap_or(1)
    }

    /// `--collateral FILE` with `--cache DIR`: the file would be used and the cache go unread without a word, so
    /// it is a usage error (exit 2), as `--collateral FILE --online` is the parser's.
    pub fn check_collateral_flag(&self, flag: Option<&Path>) -> Result<(), Refusal> {
        match (flag, &self.source.cache) {
            (Some(f), Some(c)) => Err((
                Exit::Unusable,
                "usage",
                format!(
                    "--collateral {} with --cache {}: the collateral would come from the file and the cache would \
                     go unread; give one of them",
                    f.display(),
                    c.display()
                ),
            )),
            _ => Ok(()),
        }
    }

    /// The usage errors of the auditor flags the parser cannot see (exit 2): more signatures required than
    /// keys named (`--collateral-auditors-required` without any key is the parser's usage error).
    pub fn check_usage(&self) -> Result<(), Refusal> {
        let k = self.auditors_required();
        let n = self.collateral_auditor_key.len();
        if self.auditors_named() && (k as usize) > n {
            return Err((
                Exit::Unusable,
                "usage",
                format!(
                    "--collateral-auditors-required {k} with {n} --collateral-auditor-key: no collateral could \
                     ever be signed by {k} distinct trusted auditors; name at least {k} keys"
                ),
            ));
        }
        Ok(())
    }

    /// With auditor keys named, collateral from `what` (anything but a `--collateral` bundle) is refused as
    /// `collateral-unsigned` (exit 1), saying how to get signed collateral; without keys, `Ok`.
    pub fn refuse_unsigned(&self, what: &str) -> Result<(), Refusal> {
        if !self.auditors_named() {
            return Ok(());
        }
        let k = self.auditors_required();
        Err((
            Exit::Rejected,
            COLLATERAL_UNSIGNED,
            format!(
                "{what} is signed by no auditor, and --collateral-auditor-key requires the signatures of {k} \
                 trusted auditor{} on every piece of collateral: give --collateral BUNDLE, a bundle written by \
                 `verify-attestation fetch --bundle FILE` and signed with `verify-attestation bundle-sign` \
                 (docs/verification.md)",
                if k == 1 { "" } else { "s" }
            ),
        ))
    }

    /// With auditor keys named: a `--tcb-baseline` file is refused (`builtin`, shipped in this binary, is not
    /// collateral from anyone else).
    pub fn refuse_unsigned_baseline(&self) -> Result<(), Refusal> {
        match &self.tcb_baseline {
            Some(p) if p.as_os_str() != "builtin" => self.refuse_unsigned(&format!(
                "the TCB baseline file --tcb-baseline {}",
                p.display()
            )),
            _ => Ok(()),
        }
    }

    /// Reads a `--collateral` bundle and checks its auditor signatures (k of n) when auditor keys are given.
    /// `Err((exit, check, why))`: too few signatures is `collateral-unsigned` (exit 1).
    pub fn open_bundle(
        &self,
        path: &Path,
        bytes: &[u8],
    ) -> Result<(Bundle, verifier_lib::collateral::SignatureCheck), Refusal> {
        let b = Bundle::from_json(bytes).map_err(|e| {
            (
                Exit::Unusable,
                "collateral-format",
                format!("{}: {e}", path.display()),
            )
        })?;
        if !self.auditors_named() {
            return Ok((
                b,
                verifier_lib::collateral::SignatureCheck {
                    signers: Vec::new(),
                    key_ids: Vec::new(),
                    problems: Vec::new(),
                },
            ));
        }
        self.check_usage()?;
        let mut keys = Vec::new();
        for k in &self.collateral_auditor_key {
            let key = measurements::set::load_public_key(k)
                .map_err(|e| (Exit::Unusable, "input", e.to_string()))?;
            keys.push((k.display().to_string(), key));
        }
        match b.check_signatures(&keys, self.auditors_required() as usize) {
            Ok(c) => Ok((b, c)),
            Err(e) => Err((
                Exit::Rejected,
                COLLATERAL_UNSIGNED,
                format!("{}: {e}", path.display()),
            )),
        }
    }

    /// The SEV-SNP certificates (and CRL) for `report` from the cache (offline) or KDS (`--online`);
    /// `allow_simulated` (the verify command's flag) also lets a sim root come from KDS and the `kds-sim/`
    /// cache entries. Also returns the cache directory used, if any.
    pub fn snp_from_sources(
        &self,
        report: &AttestationReport,
        with_crl: bool,
        allow_simulated: bool,
        now: i64,
    ) -> Result<(verifier_lib::collateral::SnpFetched, Option<PathBuf>), FetchError> {
        if report.key_info.signing_key == attestation::snp::SigningKey::Vlek {
            // Nothing fetched or cached completes a VLEK-signed report: say so before any request.
            return Err(verifier_lib::collateral::vlek_error());
        }
        let mut s = self.source.resolve().map_err(FetchError::Input)?;
        s.allow_simulated = allow_simulated;
        let dir = s.cache.as_ref().map(|c| c.dir().to_path_buf());
        let got = if self.online {
            s.kds().for_report(report, s.product, with_crl, now)?
        } else {
            s.kds()
                .from_cache_offline(report, s.product, with_crl, now)?
        };
        Ok((got, dir))
    }

    /// TDX `collateral.json` for a quote from the cache (offline) or PCS (`--online`), the URLs that served its
    /// parts (after redirects), and the cache directory used, if any.
    pub fn tdx_from_sources(&self, quote: &[u8], now: i64) -> Result<TdxFromSources, FetchError> {
        let s = self.source.resolve().map_err(FetchError::Input)?;
        let needs = QuoteNeeds::of_quote(quote)?;
        let dir = s.cache.as_ref().map(|c| c.dir().to_path_buf());
        if self.online {
            return s.pcs().for_quote(&needs, now).map(|f| TdxFromSources {
                json: f.json,
                urls: f.sources,
                cache: dir,
            });
        }
        let cache = s.cache.as_ref().ok_or_else(|| {
            FetchError::Input("--no-cache without --online leaves no collateral source".into())
        })?;
        let key = format!(
            "pcs/tdx/{}-{}-{}",
            needs.fmspc,
            needs.ca.name(),
            s.update.name()
        );
        let e = cache.get_offline(&key, now)?;
        let json = e
            .part("collateral.json")
            .ok_or_else(|| FetchError::Input(format!("cache entry {key} lacks collateral.json")))?;
        Ok(TdxFromSources {
            json,
            urls: e.sources,
            cache: dir,
        })
    }

    /// Loads the TCB baseline, if given.
    pub fn baseline(&self) -> Result<Option<verifier_lib::collateral::Baseline>, String> {
        self.tcb_baseline
            .as_deref()
            .map(|p| {
                verifier_lib::collateral::Baseline::load(p)
                    .map_err(|e| format!("--tcb-baseline: {e}"))
            })
            .transpose()
    }
}

/// TDX collateral from the cache or PCS ([`CollateralArgs::tdx_from_sources`]).
pub struct TdxFromSources {
    /// `collateral.json` bytes.
    pub json: Vec<u8>,
    /// The URLs that served its parts (after redirects).
    pub urls: Vec<String>,
    /// The cache directory used, if any.
    pub cache: Option<PathBuf>,
}

/// The `collateral_source` note of a bundle: its file, the founder's names and the key ids of the auditors whose
/// signatures counted, and the URLs its parts came from (as recorded by `fetch`).
fn bundle_note(
    path: &Path,
    b: &Bundle,
    c: &verifier_lib::collateral::SignatureCheck,
) -> serde_json::Value {
    serde_json::json!({
        "source": "bundle",
        "file": path.display().to_string(),
        "auditors": c.signers,
        "auditor_keys": c.key_ids,
        "urls": b.content.sources,
    })
}

/// The `collateral_source` note of the cache or the network: which, the URLs that served the parts (after
/// redirects), and the cache directory.
fn sources_note(online: bool, urls: Vec<String>, cache: Option<PathBuf>) -> serde_json::Value {
    let mut v = serde_json::json!({
        "source": if online { "online" } else { "cache" },
        "urls": urls,
    });
    if let (Some(o), Some(d)) = (v.as_object_mut(), cache) {
        o.insert("cache".into(), d.display().to_string().into());
    }
    v
}

/// The TDX collateral a verify command uses: the `--collateral` file (a bundle, whose auditor signatures are
/// checked, or a bare `collateral.json`), else the cache or PCS when asked. `Ok(None)`: none. With auditor
/// keys named, anything but a bundle signed by enough of them is refused (`collateral-unsigned`).
/// `Err((exit, check, why))`: exit 1 for a rejection (unsigned collateral), 2 for unusable input.
pub fn tdx_collateral(
    args: &CollateralArgs,
    flag: Option<&Path>,
    quote: &[u8],
    now: i64,
) -> Result<Option<(Vec<u8>, serde_json::Value)>, Refusal> {
    args.check_usage()?;
    args.check_collateral_flag(flag)?;
    if let Some(path) = flag {
        let bytes = super::input::read_input(path)
            .map_err(|e| (Exit::Unusable, "input", format!("--collateral: {e}")))?;
        if !Bundle::is_bundle(&bytes) {
            args.refuse_unsigned(&format!(
                "the bare collateral file --collateral {} (not a bundle)",
                path.display()
            ))?;
            return Ok(Some((
                bytes,
                serde_json::json!({"source": "file", "file": path.display().to_string()}),
            )));
        }
        let (b, check) = args.open_bundle(path, &bytes)?;
        let note = bundle_note(path, &b, &check);
        let tdx = b.content.tdx.ok_or_else(|| {
            (
                Exit::Unusable,
                "collateral-format",
                format!("{}: the bundle has no TDX part", path.display()),
            )
        })?;
        let json = serde_json::to_vec(&tdx)
            .map_err(|e| (Exit::Unusable, "collateral-format", e.to_string()))?;
        return Ok(Some((json, note)));
    }
    if !args.wants_cache_or_network() {
        return Ok(None);
    }
    args.refuse_unsigned(if args.online {
        "collateral fetched with --online (from PCS)"
    } else {
        "collateral from the cache (--cache)"
    })?;
    let got = args
        .tdx_from_sources(quote, now)
        .map_err(|e| (Exit::Unusable, e.check(), e.to_string()))?;
    Ok(Some((
        got.json,
        sources_note(args.online, got.urls, got.cache),
    )))
}

/// SEV-SNP collateral from outside the input: the certificates, the CRL when one came with them, and a note
/// for the output's `collateral_source`.
pub struct SnpCollateral {
    /// ARK, ASK|ASVK, VCEK|VLEK.
    pub certs: verifier_lib::sev_snp::CertBundle,
    /// The bundle's or KDS's CRL, if any.
    pub crl: Option<Vec<u8>>,
    /// `{"source": "bundle"|"online"|"cache", ...}`.
    pub note: serde_json::Value,
}

/// The SEV-SNP certificates a verify command uses when they do not come from `--certs` or the evidence: the
/// `--collateral` bundle (its auditor signatures checked), else the cache or KDS when asked (`--cache`,
/// `--online`). `want_crl`: fetch the product's CRL too (false when the founder gave `--crl`). `Ok(None)`:
/// none of these was asked for. With auditor keys named, anything but a bundle signed by enough of them is
/// refused (`collateral-unsigned`). `Err((exit, check, why))`: exit 1 for a rejection (collateral without the
/// auditor signatures asked for), 2 for unusable input (a missing or stale cache entry, a failed fetch).
pub fn snp_collateral(
    args: &CollateralArgs,
    flag: Option<&Path>,
    report: &AttestationReport,
    want_crl: bool,
    allow_simulated: bool,
    now: i64,
) -> Result<Option<SnpCollateral>, Refusal> {
    args.check_usage()?;
    args.check_collateral_flag(flag)?;
    if let Some(path) = flag {
        let bytes = super::input::read_input(path)
            .map_err(|e| (Exit::Unusable, "input", format!("--collateral: {e}")))?;
        if !Bundle::is_bundle(&bytes) {
            return Err((
                Exit::Unusable,
                "collateral-format",
                format!(
                    "{}: not a collateral bundle (`verify-attestation fetch --bundle` writes one); SEV-SNP \
                     takes its certificates from a bundle, a --certs directory or the cache",
                    path.display()
                ),
            ));
        }
        let (b, check) = args.open_bundle(path, &bytes)?;
        let note = bundle_note(path, &b, &check);
        let snp = b.content.snp.as_ref().ok_or_else(|| {
            (
                Exit::Unusable,
                "collateral-format",
                format!("{}: the bundle has no SEV-SNP part", path.display()),
            )
        })?;
        let certs = snp.certs().map_err(|e| {
            (
                Exit::Unusable,
                "collateral-format",
                format!("{}: {e}", path.display()),
            )
        })?;
        let crl = snp.crl().map_err(|e| {
            (
                Exit::Unusable,
                "collateral-format",
                format!("{}: {e}", path.display()),
            )
        })?;
        return Ok(Some(SnpCollateral { certs, crl, note }));
    }
    if !args.wants_cache_or_network() {
        return Ok(None);
    }
    args.refuse_unsigned(if args.online {
        "the VCEK chain and CRL fetched with --online (from KDS)"
    } else {
        "the VCEK chain and CRL from the cache (--cache)"
    })?;
    let (f, dir) = args
        .snp_from_sources(report, want_crl, allow_simulated, now)
        .map_err(|e| (Exit::Unusable, e.check(), e.to_string()))?;
    let urls = f.origins.iter().map(|(_, u, _)| u.clone()).collect();
    Ok(Some(SnpCollateral {
        certs: f.bundle(),
        crl: f.crl,
        note: sources_note(args.online, urls, dir),
    }))
}
