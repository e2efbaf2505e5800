//! `verify-attestation show FILE [--json]`: decodes an SEV-SNP report, a TDX quote or fenced-run evidence
//! WITHOUT verifying anything, and prints every field: TCB versions decoded, platform info and policy bits,
//! the FMSPC of a TDX PCK certificate, the verdict of evidence. Like snpguest `display` or dcap-qvl `decode`.
//!
//! Exit 0 decoded, 2 unusable input. Nothing printed here is checked: the output says so on its first line.

use super::exit::{unusable, Exit};
use super::kind::{self, Kind};
use attestation::snp::{AttestationReport, Product, TcbVersion};
use attestation::tdx::Quote;
use std::path::PathBuf;
use std::process::ExitCode;
use verifier_lib::output::print_table;

/// The first line of every `show` table, and the `verified` key of its JSON: nothing was checked.
pub const NOT_VERIFIED: &str =
    "NOT VERIFIED: decoded only (no signature, chain, TCB or policy was checked)";

/// Arguments of `verify-attestation show`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The file: a raw SEV-SNP report, a TDX quote or fenced-run evidence (binary, or hex or base64 text;
    /// `-` reads standard input).
    pub file: PathBuf,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// A TCB_VERSION decoded for `product`, or for the Milan/Genoa layout (said so) when the product is unknown.
fn tcb_text(tcb: TcbVersion, product: Option<Product>) -> String {
    match product {
        Some(p) => format!("{tcb} ({})", tcb.decode(p)),
        None => format!(
            "{tcb} ({}, read with the Milan/Genoa layout: the report names no product)",
            tcb.decode(Product::Milan)
        ),
    }
}

fn tcb_json(tcb: TcbVersion, product: Option<Product>) -> serde_json::Value {
    verifier_lib::output::decoded_tcb(tcb, product.or(Some(Product::Milan)))
}

fn yes(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}

/// The rows of an SEV-SNP report, every field; `product` from the report's CPUID or the VCEK.
pub fn snp_rows(r: &AttestationReport, product: Option<Product>) -> Vec<(String, String)> {
    let p = r.policy;
    let pi = r.platform_info;
    let mut rows = vec![
        ("kind".to_string(), "SEV-SNP attestation report".to_string()),
        ("version".to_string(), r.version.to_string()),
        (
            "product".to_string(),
            product
                .map(|p| p.name().to_string())
                .unwrap_or_else(|| "unknown (no CPUID in this report version)".into()),
        ),
        ("guest svn".to_string(), r.guest_svn.to_string()),
        (
            "guest policy".to_string(),
            format!(
                "{:#018x}: abi>={}.{} smt={} migrate_ma={} debug={} single_socket={} cxl={} aes_256_xts={} \
                 rapl_dis={} ciphertext_hiding={} page_swap_disable={}",
                p.0,
                p.abi_major(),
                p.abi_minor(),
                yes(p.smt_allowed()),
                yes(p.migrate_ma_allowed()),
                yes(p.debug_allowed()),
                yes(p.single_socket()),
                yes(p.cxl_allowed()),
                yes(p.mem_aes_256_xts()),
                yes(p.rapl_dis()),
                yes(p.ciphertext_hiding()),
                yes(p.page_swap_disable())
            ),
        ),
        ("family id".to_string(), hex::encode(r.family_id)),
        ("image id".to_string(), hex::encode(r.image_id)),
        ("vmpl".to_string(), r.vmpl.to_string()),
        ("signature algo".to_string(), r.signature_algo.to_string()),
        (
            "platform info".to_string(),
            format!(
                "{:#018x}: smt_enabled={} tsme={} ecc={} rapl_disabled={} ciphertext_hiding={} \
                 alias_check_complete={} tio={}",
                pi.0,
                yes(pi.smt_enabled()),
                yes(pi.tsme_enabled()),
                yes(pi.ecc_enabled()),
                yes(pi.rapl_disabled()),
                yes(pi.ciphertext_hiding_enabled()),
                yes(pi.alias_check_complete()),
                yes(pi.tio_enabled())
            ),
        ),
        (
            "signing key".to_string(),
            format!(
                "{} (mask_chip_key={} author_key_en={})",
                r.key_info.signing_key.name(),
                yes(r.key_info.mask_chip_key),
                yes(r.key_info.author_key_en)
            ),
        ),
        ("report data".to_string(), hex::encode(r.report_data)),
        ("measurement".to_string(), hex::encode(r.measurement)),
        ("host data".to_string(), hex::encode(r.host_data)),
        ("id key digest".to_string(), hex::encode(r.id_key_digest)),
        (
            "author key digest".to_string(),
            hex::encode(r.author_key_digest),
        ),
        ("report id".to_string(), hex::encode(r.report_id)),
        ("report id ma".to_string(), hex::encode(r.report_id_ma)),
        ("current tcb".to_string(), tcb_text(r.current_tcb, product)),
        (
            "committed tcb".to_string(),
            tcb_text(r.committed_tcb, product),
        ),
        ("launch tcb".to_string(), tcb_text(r.launch_tcb, product)),
        ("reported tcb".to_string(), tcb_text(r.reported_tcb, product)),
        (
            "cpuid".to_string(),
            match r.cpuid {
                Some(c) => format!(
                    "family {:#x} model {:#x} stepping {:#x}",
                    c.family, c.model, c.stepping
                ),
                None => "none (report version 2)".to_string(),
            },
        ),
        ("chip id".to_string(), hex::encode(r.chip_id)),
        ("current firmware".to_string(), r.current_fw.to_string()),
        ("committed firmware".to_string(), r.committed_fw.to_string()),
    ];
    for (name, v) in [
        ("launch mit vector", r.launch_mit_vector),
        ("current mit vector", r.current_mit_vector),
    ] {
        if let Some(v) = v {
            rows.push((name.to_string(), format!("{v:#018x}")));
        }
    }
    rows.push(("signature r".to_string(), hex::encode(r.signature.r_be())));
    rows.push(("signature s".to_string(), hex::encode(r.signature.s_be())));
    rows
}

/// The JSON object of an SEV-SNP report: every field (as the report serialises) and each TCB decoded.
pub fn snp_json(r: &AttestationReport, product: Option<Product>) -> serde_json::Value {
    let mut v = serde_json::to_value(r).unwrap_or_default();
    if let Some(o) = v.as_object_mut() {
        o.insert("product".into(), product.map(|p| p.name()).into());
        for (k, t) in [
            ("current_tcb", r.current_tcb),
            ("committed_tcb", r.committed_tcb),
            ("launch_tcb", r.launch_tcb),
            ("reported_tcb", r.reported_tcb),
        ] {
            o.insert(format!("{k}_decoded"), tcb_json(t, product));
        }
    }
    v
}

/// The FMSPC (and the rest of the SGX extensions) of the quote's PCK certificate, when it carries a chain.
fn pck_facts(q: &Quote) -> Option<verifier_lib::intel_tdx::PckExtensions> {
    verifier_lib::intel_tdx::pck_extensions(q)
}

/// The rows of a TDX quote, every field of the header and the TD report.
pub fn tdx_rows(q: &Quote) -> Vec<(String, String)> {
    let td = q.td();
    let attrs = td.attributes();
    let h = &q.header;
    let mut rows = vec![
        ("kind".to_string(), "TDX quote".to_string()),
        ("quote version".to_string(), h.version.to_string()),
        ("att key type".to_string(), h.att_key_type.to_string()),
        ("tee type".to_string(), format!("{:#x}", h.tee_type)),
        ("qe svn".to_string(), h.qe_svn.to_string()),
        ("pce svn".to_string(), h.pce_svn.to_string()),
        ("qe vendor id".to_string(), hex::encode(h.qe_vendor_id)),
        ("user data".to_string(), hex::encode(h.user_data)),
        (
            "body".to_string(),
            if q.body.td15().is_some() {
                "TD report 1.5".to_string()
            } else {
                "TD report 1.0".to_string()
            },
        ),
        ("tee tcb svn".to_string(), hex::encode(td.tee_tcb_svn)),
        ("mr seam".to_string(), hex::encode(td.mr_seam)),
        ("mr signer seam".to_string(), hex::encode(td.mr_signer_seam)),
        (
            "seam attributes".to_string(),
            hex::encode(td.seam_attributes),
        ),
        (
            "td attributes".to_string(),
            format!(
                "{}: debug={} sept_ve_disable={} pks={} perfmon={}",
                hex::encode(td.td_attributes),
                yes(attrs.debug()),
                yes(attrs.sept_ve_disable()),
                yes(attrs.pks()),
                yes(attrs.perfmon())
            ),
        ),
        ("xfam".to_string(), hex::encode(td.xfam)),
        ("mrtd".to_string(), hex::encode(td.mrtd)),
        ("mr config id".to_string(), hex::encode(td.mr_config_id)),
        ("mr owner".to_string(), hex::encode(td.mr_owner)),
        (
            "mr owner config".to_string(),
            hex::encode(td.mr_owner_config),
        ),
    ];
    for (i, r) in td.rtmr.iter().enumerate() {
        rows.push((format!("rtmr{i}"), hex::encode(r)));
    }
    rows.push(("report data".to_string(), hex::encode(td.report_data)));
    if let Some(b) = q.body.td15() {
        rows.push(("tee tcb svn 2".to_string(), hex::encode(b.tee_tcb_svn2)));
        rows.push(("mr servicetd".to_string(), hex::encode(b.mr_servicetd)));
    }
    match pck_facts(q) {
        Some(p) => {
            rows.push(("fmspc".to_string(), hex::encode(&p.fmspc)));
            rows.push(("pce id".to_string(), hex::encode(&p.pceid)));
            rows.push(("pce svn (pck)".to_string(), p.pcesvn.to_string()));
            rows.push(("cpu svn".to_string(), hex::encode(&p.cpusvn)));
            rows.push((
                "sgx tcb components".to_string(),
                hex::encode(p.sgx_tcb_components),
            ));
        }
        None => rows.push((
            "fmspc".to_string(),
            "unknown (no readable PCK certificate in the quote)".to_string(),
        )),
    }
    rows.push(("trailing bytes".to_string(), q.trailing.len().to_string()));
    rows
}

/// The JSON object of a TDX quote.
pub fn tdx_json(q: &Quote) -> serde_json::Value {
    let td = q.td();
    let h = &q.header;
    let pck = pck_facts(q);
    let attrs = td.attributes();
    serde_json::json!({
        "quote_version": h.version,
        "att_key_type": h.att_key_type,
        "tee_type": h.tee_type,
        "qe_svn": h.qe_svn,
        "pce_svn": h.pce_svn,
        "qe_vendor_id": hex::encode(h.qe_vendor_id),
        "user_data": hex::encode(h.user_data),
        "td15": q.body.td15().is_some(),
        "tee_tcb_svn": hex::encode(td.tee_tcb_svn),
        "mr_seam": hex::encode(td.mr_seam),
        "mr_signer_seam": hex::encode(td.mr_signer_seam),
        "seam_attributes": hex::encode(td.seam_attributes),
        "td_attributes": {
            "raw": hex::encode(td.td_attributes),
            "debug": attrs.debug(),
            "sept_ve_disable": attrs.sept_ve_disable(),
            "pks": attrs.pks(),
            "perfmon": attrs.perfmon(),
        },
        "xfam": hex::encode(td.xfam),
        "mrtd": hex::encode(td.mrtd),
        "mr_config_id": hex::encode(td.mr_config_id),
        "mr_owner": hex::encode(td.mr_owner),
        "mr_owner_config": hex::encode(td.mr_owner_config),
        "rtmr0": hex::encode(td.rtmr[0]),
        "rtmr1": hex::encode(td.rtmr[1]),
        "rtmr2": hex::encode(td.rtmr[2]),
        "rtmr3": hex::encode(td.rtmr[3]),
        "report_data": hex::encode(td.report_data),
        "tee_tcb_svn2": q.body.td15().map(|b| hex::encode(b.tee_tcb_svn2)),
        "mr_servicetd": q.body.td15().map(|b| hex::encode(b.mr_servicetd)),
        "fmspc": pck.as_ref().map(|p| hex::encode(&p.fmspc)),
        "pce_id": pck.as_ref().map(|p| hex::encode(&p.pceid)),
        "cpu_svn": pck.as_ref().map(|p| hex::encode(&p.cpusvn)),
        "sgx_tcb_components": pck.as_ref().map(|p| hex::encode(p.sgx_tcb_components)),
        "trailing_bytes": q.trailing.len(),
    })
}

/// What `show` decoded: its rows and its JSON.
struct Shown {
    kind: &'static str,
    rows: Vec<(String, String)>,
    json: serde_json::Value,
}

fn show_snp(bytes: &[u8], product_hint: Option<Product>) -> Result<Shown, String> {
    let r = AttestationReport::from_bytes(bytes).map_err(|e| e.to_string())?;
    let product = r.product_from_cpuid().or(product_hint);
    Ok(Shown {
        kind: "sev-snp-report",
        rows: snp_rows(&r, product),
        json: snp_json(&r, product),
    })
}

fn show_tdx(bytes: &[u8]) -> Result<Shown, String> {
    let q = Quote::parse(bytes).map_err(|e| e.to_string())?;
    Ok(Shown {
        kind: "tdx-quote",
        rows: tdx_rows(&q),
        json: tdx_json(&q),
    })
}

fn show_evidence(bytes: &[u8]) -> Result<Shown, String> {
    let ev = attestation::evidence::Evidence::from_cbor(bytes).map_err(|e| e.to_string())?;
    // The product the VCEK names, for the TCB layout of a report without CPUID.
    let leaf_product = ev
        .certs
        .first()
        .and_then(|der| verifier_lib::sev_snp::leaf_product(der));
    let inner = if ev.tee.is_snp() {
        show_snp(&ev.report, leaf_product)
    } else {
        show_tdx(&ev.report)
    }
    .map_err(|e| format!("the report inside the evidence: {e}"))?;
    let key_hex = {
        use p384::elliptic_curve::sec1::ToEncodedPoint;
        hex::encode(ev.key().to_encoded_point(false).as_bytes())
    };
    // The verdict as signed; its signature is not checked here (verify-attestation evidence does).
    let payload = ev.verdict.payload.as_deref().unwrap_or_default();
    let verdict = attestation::verdict::Verdict::from_cbor(payload)
        .map_err(|e| format!("the verdict inside the evidence: {e}"))?;
    let mut rows = vec![
        ("kind".to_string(), "fenced-run evidence".to_string()),
        ("tee label".to_string(), ev.tee.to_string()),
        ("certificates".to_string(), ev.certs.len().to_string()),
        (
            "collateral".to_string(),
            if ev.collateral.is_some() {
                "carried"
            } else {
                "none"
            }
            .to_string(),
        ),
        ("verdict key".to_string(), key_hex.clone()),
    ];
    rows.extend(
        verifier_lib::output::evidence_run_rows_of(&verdict)
            .into_iter()
            .map(|(k, v)| (format!("verdict {k}"), v)),
    );
    rows.extend(inner.rows.into_iter().map(|(k, v)| {
        if k == "kind" {
            ("report kind".to_string(), v)
        } else {
            (k, v)
        }
    }));
    let json = serde_json::json!({
        "tee_label": ev.tee.to_string(),
        "certificates": ev.certs.len(),
        "collateral": ev.collateral.is_some(),
        "verdict_key": key_hex,
        "verdict": verdict.to_json_value(),
        "report_kind": inner.kind,
        "report": inner.json,
    });
    Ok(Shown {
        kind: "evidence",
        rows,
        json,
    })
}

/// Runs the subcommand.
pub fn run(args: Args) -> ExitCode {
    let raw = match super::input::read_input(&args.file) {
        Ok(b) => b,
        Err(e) => return unusable(args.json, "input", format!("file: {e}")),
    };
    let (bytes, encoding) = kind::decode_text(&raw);
    let found = kind::sniff(&bytes);
    let shown_path = attestation::text::shown(args.file.display());
    let decoded = match &found {
        Kind::SnpReport => show_snp(&bytes, None),
        Kind::TdxQuote => show_tdx(&bytes),
        Kind::Cbor => show_evidence(&bytes),
        other => Err(format!(
            "this is {}; show decodes an SEV-SNP report (1184 bytes), a TDX quote or fenced-run evidence{}",
            other.describe(),
            other.reader().map(|r| format!(" ({r})")).unwrap_or_default()
        )),
    };
    let mut s = match decoded {
        Ok(s) => s,
        Err(e) => return unusable(args.json, "input-kind", format!("{shown_path}: {e}")),
    };
    if args.json {
        let mut out = serde_json::json!({
            "verified": false,
            "decoded_only": true,
            "kind": s.kind,
            "encoding": encoding.map(|e| e.name()).unwrap_or("binary"),
        });
        if let (Some(o), Some(fields)) = (out.as_object_mut(), s.json.as_object_mut()) {
            o.append(fields);
        }
        println!("{}", attestation::text::json_safe(&out.to_string()));
    } else {
        let mut rows = vec![("NOTE".to_string(), NOT_VERIFIED.to_string())];
        if let Some(e) = encoding {
            rows.push((
                "encoding".to_string(),
                format!("{} text, decoded", e.name()),
            ));
        }
        rows.append(&mut s.rows);
        print!("{}", print_table(&rows, ""));
    }
    Exit::Success.into()
}
