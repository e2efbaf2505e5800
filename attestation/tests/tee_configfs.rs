//! configfs-tsm backend against a fake kernel in a tempdir: entries appear on mkdir with their attributes,
//! every write bumps `generation`, `outblob` is computed from `inblob`, and rmdir removes the entry.
//! Then the selection order (attestation::tee::select_with) over fakes of all three interfaces: configfs-tsm,
//! then /dev/sev-guest, then /dev/tdx_guest, ENODEV-like answers read as "not this TEE".

use attestation::evidence::TeeLabel;
use attestation::tee::certtable::build_cert_table;
use attestation::tee::{CertKind, CertTableEntry, ConfigfsOps, ConfigfsTsm, Tee, TeeError};
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

struct FakeKernel {
    provider: &'static str,
    /// How many reads of outblob see a concurrent write (generation bumped behind our back).
    races: AtomicU32,
    /// Flip a byte of the report data the "firmware" puts in the report.
    corrupt: bool,
    aux: Vec<u8>,
    privlevels: Mutex<Vec<String>>,
    /// For `tdx_guest`: the sim QE that turns inblob into a quote.
    qe: Option<attestation::sim::tdx::SimQe>,
}

impl FakeKernel {
    fn new(provider: &'static str) -> FakeKernel {
        FakeKernel {
            provider,
            races: AtomicU32::new(0),
            corrupt: false,
            aux: Vec::new(),
            privlevels: Mutex::new(Vec::new()),
            qe: None,
        }
    }

    fn bump(dir: &Path) -> io::Result<()> {
        let g: u64 = std::fs::read_to_string(dir.join("generation"))?
            .trim()
            .parse()
            .map_err(io::Error::other)?;
        std::fs::write(dir.join("generation"), format!("{}\n", g + 1))
    }
}

impl ConfigfsOps for FakeKernel {
    fn mkdir(&self, path: &Path) -> io::Result<()> {
        std::fs::create_dir(path)?;
        std::fs::write(path.join("provider"), format!("{}\n", self.provider))?;
        std::fs::write(path.join("generation"), "0\n")?;
        std::fs::write(path.join("inblob"), "")?;
        std::fs::write(path.join("privlevel_floor"), "0\n")?;
        std::fs::write(path.join("outblob"), "")?;
        std::fs::write(path.join("auxblob"), "")?;
        Ok(())
    }

    fn rmdir(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_dir_all(path)
    }

    fn write(&self, path: &Path, data: &[u8]) -> io::Result<()> {
        let dir = path.parent().expect("entry");
        match path.file_name().and_then(|n| n.to_str()) {
            Some("inblob") if data.len() > 64 => Err(io::Error::from_raw_os_error(libc::EINVAL)),
            Some("privlevel") => {
                self.privlevels
                    .lock()
                    .expect("lock")
                    .push(String::from_utf8_lossy(data).trim().to_owned());
                std::fs::write(path, data)?;
                Self::bump(dir)
            }
            Some("inblob") => {
                std::fs::write(path, data)?;
                Self::bump(dir)
            }
            _ => Err(io::Error::from_raw_os_error(libc::EACCES)),
        }
    }

    fn read(&self, path: &Path, max: usize) -> io::Result<Vec<u8>> {
        let dir = path.parent().expect("entry");
        let out = match path.file_name().and_then(|n| n.to_str()) {
            Some("outblob") => {
                if self.races.load(Ordering::SeqCst) > 0 {
                    self.races.fetch_sub(1, Ordering::SeqCst);
                    Self::bump(dir)?;
                }
                let inblob = std::fs::read(dir.join("inblob"))?;
                if let Some(qe) = &self.qe {
                    let mut td = attestation::sim::tdx::SimTd::default();
                    td.report_data.copy_from_slice(&inblob);
                    return qe.quote(&td).map_err(io::Error::other);
                }
                let mut report = vec![0u8; 1184];
                report[0] = 2;
                report[0x50..0x50 + inblob.len()].copy_from_slice(&inblob);
                if self.corrupt {
                    report[0x50] ^= 1;
                }
                report
            }
            Some("auxblob") => self.aux.clone(),
            _ => std::fs::read(path)?,
        };
        if out.len() > max {
            return Err(io::Error::other("too long"));
        }
        Ok(out)
    }

    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }
}

fn entries_left(root: &Path) -> usize {
    std::fs::read_dir(root).expect("read root").count()
}

#[test]
fn report_with_certificates_and_cleanup() {
    let root = tempfile::tempdir().expect("tempdir");
    let mut k = FakeKernel::new("sev_guest");
    k.aux = build_cert_table(&[
        CertTableEntry {
            kind: CertKind::Ark,
            data: b"ark".to_vec(),
        },
        CertTableEntry {
            kind: CertKind::Vcek,
            data: b"vcek".to_vec(),
        },
        CertTableEntry {
            kind: CertKind::Ask,
            data: b"ask".to_vec(),
        },
    ]);
    let k = Arc::new(k);
    let tsm = ConfigfsTsm::with_ops(root.path(), k.clone()).expect("open");
    assert_eq!(tsm.label(), TeeLabel::SevSnp);
    assert_eq!(tsm.provider(), "sev_guest");
    let tsm = tsm.with_privlevel(2).expect("privlevel");
    let rd = [0x42u8; 64];
    let raw = tsm.get_report(&rd).expect("report");
    assert_eq!(&raw.report[0x50..0x90], &rd[..]);
    assert_eq!(
        raw.certs,
        vec![b"vcek".to_vec(), b"ask".to_vec(), b"ark".to_vec()]
    );
    assert_eq!(*k.privlevels.lock().expect("lock"), vec!["2".to_owned()]);
    assert_eq!(entries_left(root.path()), 0, "report entry not removed");
    assert!(ConfigfsTsm::with_ops(root.path(), k.clone())
        .expect("open")
        .with_privlevel(4)
        .is_err());
}

#[test]
fn generation_change_retries_then_gives_up() {
    let root = tempfile::tempdir().expect("tempdir");
    let k = Arc::new(FakeKernel::new("sev_guest"));
    let tsm = ConfigfsTsm::with_ops(root.path(), k.clone()).expect("open");
    k.races.store(1, Ordering::SeqCst);
    tsm.get_report(&[1; 64]).expect("second attempt succeeds");
    assert_eq!(k.races.load(Ordering::SeqCst), 0);
    k.races.store(100, Ordering::SeqCst);
    let err = tsm.get_report(&[1; 64]).expect_err("always racing");
    assert!(
        matches!(err, TeeError::GenerationChanged { attempts: 3, .. }),
        "{err}"
    );
    assert_eq!(
        entries_left(root.path()),
        0,
        "entries left after failed attempts"
    );
}

#[test]
fn report_not_over_our_data_is_refused() {
    let root = tempfile::tempdir().expect("tempdir");
    let mut k = FakeKernel::new("sev_guest");
    k.corrupt = true;
    let tsm = ConfigfsTsm::with_ops(root.path(), Arc::new(k)).expect("open");
    let err = tsm.get_report(&[7; 64]).expect_err("mismatch");
    assert!(err.to_string().contains("REPORT_DATA"), "{err}");
    assert_eq!(entries_left(root.path()), 0);
}

#[test]
fn providers() {
    let root = tempfile::tempdir().expect("tempdir");
    let state = tempfile::tempdir().expect("state");
    let mut tdx = FakeKernel::new("tdx_guest");
    tdx.qe = Some(attestation::sim::tdx::SimQe::new(state.path()).expect("sim qe"));
    let tsm = ConfigfsTsm::with_ops(root.path(), Arc::new(tdx)).expect("open");
    assert_eq!(tsm.label(), TeeLabel::Tdx);
    let raw = tsm.get_report(&[3; 64]).expect("quote");
    let quote = attestation::tdx::Quote::parse(&raw.report).expect("a TDX quote");
    assert_eq!(quote.td().report_data, [3; 64]);
    // Bytes that are not a quote over our data are refused.
    let not_quote =
        ConfigfsTsm::with_ops(root.path(), Arc::new(FakeKernel::new("tdx_guest"))).expect("open");
    let err = not_quote.get_report(&[3; 64]).expect_err("not a quote");
    assert!(err.to_string().contains("REPORT_DATA"), "{err}");
    assert!(raw.certs.is_empty());
    let err = ConfigfsTsm::with_ops(root.path(), Arc::new(FakeKernel::new("arm_cca_guest")))
        .expect_err("unknown");
    assert!(err.to_string().contains("arm_cca_guest"), "{err}");
    let err = ConfigfsTsm::open(&root.path().join("absent")).expect_err("absent");
    assert!(matches!(err, TeeError::NotPresent(_)));
    assert_eq!(entries_left(root.path()), 0);
}

// ---- The selection order: configfs-tsm, then /dev/sev-guest, then /dev/tdx_guest, then "not a TEE" ----

use attestation::tee::{
    select_with, IoctlError, Selected, SevGuestDevice, SevGuestIoctl, TdxGuestDevice,
    TdxGuestIoctl, TDREPORT_LEN,
};

/// configfs-tsm mounted, but no provider registered (a plain VM with the tsm module): reads answer ENXIO.
struct NoProvider;

impl ConfigfsOps for NoProvider {
    fn mkdir(&self, path: &Path) -> io::Result<()> {
        std::fs::create_dir(path)
    }
    fn rmdir(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_dir_all(path)
    }
    fn write(&self, _path: &Path, _data: &[u8]) -> io::Result<()> {
        Err(io::Error::from_raw_os_error(libc::ENXIO))
    }
    fn read(&self, _path: &Path, _max: usize) -> io::Result<Vec<u8>> {
        Err(io::Error::from_raw_os_error(libc::ENXIO))
    }
    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }
}

/// A `/dev/sev-guest` whose requests all answer `errno`, or a report over the data when `None`.
#[derive(Debug)]
struct Sev(Option<nix::errno::Errno>);

impl SevGuestIoctl for Sev {
    fn get_report(
        &self,
        user_data: &[u8; 64],
        _vmpl: u32,
        resp: &mut [u8; 4000],
    ) -> Result<(), IoctlError> {
        if let Some(errno) = self.0 {
            return Err(IoctlError {
                errno,
                exitinfo2: 0,
            });
        }
        resp[4..8].copy_from_slice(&1184u32.to_le_bytes());
        resp[0x20] = 2;
        resp[0x20 + 0x50..0x20 + 0x90].copy_from_slice(user_data);
        Ok(())
    }
    fn get_ext_report(
        &self,
        user_data: &[u8; 64],
        vmpl: u32,
        resp: &mut [u8; 4000],
        _certs: &mut [u8],
        certs_len: &mut u32,
    ) -> Result<(), IoctlError> {
        *certs_len = 0;
        self.get_report(user_data, vmpl, resp)
    }
}

#[derive(Debug)]
struct Tdx(Option<nix::errno::Errno>);

impl TdxGuestIoctl for Tdx {
    fn get_report0(
        &self,
        rd: &[u8; 64],
        out: &mut [u8; TDREPORT_LEN],
    ) -> Result<(), nix::errno::Errno> {
        if let Some(e) = self.0 {
            return Err(e);
        }
        out[128..192].copy_from_slice(rd);
        Ok(())
    }
}

struct Machine {
    dir: tempfile::TempDir,
}

impl Machine {
    /// A fake machine: `report` (configfs-tsm root) made when `tsm`, device nodes made when asked.
    fn new(tsm: bool, sev: bool, tdx: bool) -> Machine {
        let dir = tempfile::tempdir().expect("tempdir");
        if tsm {
            std::fs::create_dir(dir.path().join("report")).expect("report");
        }
        for (on, name) in [(sev, "sev-guest"), (tdx, "tdx_guest")] {
            if on {
                std::fs::write(dir.path().join(name), b"").expect("node");
            }
        }
        Machine { dir }
    }
    fn p(&self, n: &str) -> std::path::PathBuf {
        self.dir.path().join(n)
    }
    fn select(
        &self,
        ops: Arc<dyn ConfigfsOps>,
        sev: Option<nix::errno::Errno>,
        tdx: Option<nix::errno::Errno>,
    ) -> Result<Selected, TeeError> {
        let root = self.p("report");
        let (sp, tp) = (self.p("sev-guest"), self.p("tdx_guest"));
        select_with(
            || ConfigfsTsm::with_ops(&root, ops),
            &sp,
            || Ok(SevGuestDevice::with_ioctl(&sp, Arc::new(Sev(sev)))),
            &tp,
            || Ok(TdxGuestDevice::with_ioctl(&tp, Arc::new(Tdx(tdx)))),
        )
    }
}

fn chosen(s: Result<Selected, TeeError>) -> String {
    match s.expect("selected") {
        Selected::Hardware(t, name) => format!("{name} {:?}", t.label()),
        Selected::NotATee(why) => format!("not a TEE: {}", why.join(" | ")),
    }
}

#[test]
fn configfs_tsm_comes_first() {
    let m = Machine::new(true, true, true);
    let got = chosen(m.select(Arc::new(FakeKernel::new("sev_guest")), None, None));
    assert_eq!(got, "configfs-tsm SevSnp");
    let got = chosen(m.select(Arc::new(FakeKernel::new("tdx_guest")), None, None));
    assert_eq!(got, "configfs-tsm Tdx");
    assert_eq!(
        entries_left(&m.p("report")),
        0,
        "the probe entry is removed"
    );
}

#[test]
fn sev_guest_when_configfs_has_no_provider_or_is_absent() {
    let m = Machine::new(true, true, false);
    assert_eq!(
        chosen(m.select(Arc::new(NoProvider), None, None)),
        "/dev/sev-guest SevSnp"
    );
    let m = Machine::new(false, true, true);
    assert_eq!(
        chosen(m.select(Arc::new(NoProvider), None, None)),
        "/dev/sev-guest SevSnp"
    );
}

#[test]
fn enodev_everywhere_is_not_a_tee_so_the_sim_is_used() {
    let m = Machine::new(true, true, true);
    let got = chosen(m.select(
        Arc::new(NoProvider),
        Some(nix::errno::Errno::ENODEV),
        Some(nix::errno::Errno::ENODEV),
    ));
    assert!(got.starts_with("not a TEE: configfs-tsm"), "{got}");
    assert_eq!(got.matches("(not this TEE)").count(), 3, "{got}");
    let none = Machine::new(false, false, false);
    let got = chosen(none.select(Arc::new(NoProvider), None, None));
    assert!(got.contains("does not exist"), "{got}");
}

#[test]
fn tdx_guest_without_configfs_is_an_error_not_the_sim() {
    let m = Machine::new(false, false, true);
    let err = m
        .select(Arc::new(NoProvider), None, None)
        .expect_err("a TD without configfs-tsm");
    assert!(
        err.to_string().contains("TDX quotes need configfs-tsm"),
        "{err}"
    );
}

#[test]
fn other_errors_stop_the_selection() {
    // EIO from /dev/sev-guest is a broken SEV-SNP guest, not "not this TEE": no fallback to the sim.
    let m = Machine::new(false, true, false);
    let err = m
        .select(Arc::new(NoProvider), Some(nix::errno::Errno::EIO), None)
        .expect_err("eio");
    assert!(
        err.to_string().contains("/dev/sev-guest") || err.to_string().contains("sev-guest"),
        "{err}"
    );
}
