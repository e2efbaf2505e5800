//! Bench binary of the vm tier (docs/benchmarks.md): the bare kernel's boot to `/init` (a busybox `/init` that
//! prints a marker on the console and powers off, same kernel, command line and QEMU flags as the image) against
//! the image's boot to the agent's `Hello` (agent ready), and the whole demo job in the vm tier. Prints one line
//! per run and the median of each. Needs QEMU and an image (`fenced-run image build --out target/vm-image`);
//! without them it says so and exits 0.
//!
//! `cargo bench -p host --bench vm_boot -- [RUNS] [IMAGE_DIR]`

use host::image::{self, cpio};
use host::vm::{self, qemu, VmOptions};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const MARKER: &str = "fenced-run-bench: init reached";

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// Spawn to the marker on the console of a bare boot; the VM is killed right after.
fn bare_boot(image: &Path, cpio_path: &Path, dir: &Path) -> Result<f64, String> {
    let console = dir.join("bare-console.log");
    let _ = std::fs::remove_file(&console);
    let l = qemu::Launch {
        kernel: image::vm_kernel_path(
            image,
            &image::Manifest::load(image).map_err(|e| format!("manifest: {e}"))?,
        ),
        initrd: cpio_path.to_path_buf(),
        cmdline: image::CMDLINE.into(),
        channel: dir.join("unused.sock"),
        console: console.clone(),
        vcpus: 2,
        memory_mib: 2048,
        accel: qemu::choose_accel(Path::new("/sys/module"), Path::new("/dev/kvm")),
        dialer: None,
        qmp: None,
        bios: qemu::fast_firmware(Path::new("qemu-system-x86_64")),
        disk: None,
    };
    // The bare boot has no channel: drop the chardev and port arguments.
    let mut args = qemu::args(&l);
    let cut = args
        .iter()
        .position(|a| a == "-chardev")
        .unwrap_or(args.len());
    args.truncate(cut);
    let start = Instant::now();
    let mut child = std::process::Command::new("qemu-system-x86_64")
        .args(&args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .map_err(|e| format!("qemu: {e}"))?;
    let deadline = start + Duration::from_secs(120);
    let took = loop {
        let text = std::fs::read_to_string(&console).unwrap_or_default();
        if text.contains(MARKER) {
            break Ok(start.elapsed().as_secs_f64());
        }
        if Instant::now() > deadline {
            break Err("no marker within 120 s".to_string());
        }
        if let Ok(Some(st)) = child.try_wait() {
            break Err(format!("QEMU exited ({st}) before the marker"));
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let _ = child.kill();
    let _ = child.wait();
    took
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let runs: usize = args.first().and_then(|a| a.parse().ok()).unwrap_or(3);
    let image = args
        .get(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/vm-image"));
    if image::Manifest::load(&image).is_err() || !Path::new("/bin/busybox").is_file() {
        println!(
            "skipped: no image in {} (fenced-run image build --out DIR) or no /bin/busybox",
            image.display()
        );
        return;
    }
    let dir = tempfile::tempdir().expect("temporary directory");
    let mut t = cpio::Tree::new();
    t.add("dev/console", cpio::Entry::CharDev(5, 1));
    t.add(
        "bin/busybox",
        cpio::Entry::File(std::fs::read("/bin/busybox").expect("busybox"), true),
    );
    t.add("bin/sh", cpio::Entry::Symlink("busybox".into()));
    t.add(
        "init",
        cpio::Entry::File(
            format!("#!/bin/sh\necho '{MARKER}'\nexec /bin/busybox poweroff -f\n").into_bytes(),
            true,
        ),
    );
    let mut bytes = Vec::new();
    t.write(&mut bytes).expect("cpio");
    let bare = dir.path().join("bare.cpio");
    std::fs::write(&bare, bytes).expect("write cpio");

    let demo = Path::new(env!("CARGO_MANIFEST_DIR")).join("demo");
    let (kind, bundle) = vm::bundle::pack(&demo).expect("pack the demo");
    let (mut b, mut ready, mut total) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..runs {
        match bare_boot(&image, &bare, dir.path()) {
            Ok(s) => {
                println!("run {i}: bare kernel, spawn to /init      {s:.2} s");
                b.push(s);
            }
            Err(e) => println!("run {i}: bare kernel: {e}"),
        }
        let mut o = VmOptions::new(image.clone());
        o.work_parent = Some(dir.path().to_path_buf());
        let start = Instant::now();
        match vm::run(kind, &bundle, &[7u8; 32], &o) {
            Ok(r) => {
                let whole = start.elapsed().as_secs_f64();
                println!(
                    "run {i}: image, spawn to the agent's Hello  {:.2} s; whole demo run {whole:.2} s ({})",
                    r.ready.as_secs_f64(),
                    r.verdict.outcome.as_str()
                );
                ready.push(r.ready.as_secs_f64());
                total.push(whole);
            }
            Err(e) => println!("run {i}: vm run: {e}"),
        }
    }
    println!(
        "median of {runs}: bare to /init {:.2} s, agent ready {:.2} s (difference {:+.2} s), whole vm demo run {:.2} s",
        median(b.clone()),
        median(ready.clone()),
        median(ready) - median(b),
        median(total)
    );
}
