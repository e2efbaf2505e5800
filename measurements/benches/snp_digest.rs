//! The SNP launch digest of the shared 4 MiB OVMF against its floor, one SHA-384 pass over the same bytes.
//! Run: `cargo bench -p measurements --bench snp_digest`. Skips (prints why) when ../shared/firmware is absent.

// criterion_group! generates an undocumented public function.
#![allow(missing_docs)]

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use measurements::snp;
use sha2::{Digest, Sha384};

fn bench(c: &mut Criterion) {
    let path = attestation::vectors::firmware("OVMF.amdsev-edk2-2025.02-8+deb13u1.fd");
    let Ok(bytes) = std::fs::read(&path) else {
        attestation::vectors::skip_for(
            attestation::vectors::SkipKind::Vectors,
            &format!("{} not found", path.display()),
        );
        return;
    };
    let ovmf = snp::Ovmf::parse(bytes.clone()).expect("OVMF parses");
    let hashes = snp::KernelHashes::new(b"kernel", Some(b"initrd"), Some("console=ttyS0"));
    let cfg = snp::SnpConfig {
        vcpus: 4,
        vcpu_sig: snp::vcpu_sig(25, 1, 1),
        guest_features: 1,
        vmm: snp::VmmType::Qemu,
        ovmf_hash: None,
    };
    let mut g = c.benchmark_group("snp_4MiB_ovmf");
    g.throughput(Throughput::Bytes(bytes.len() as u64));
    g.bench_function("launch_digest", |b| {
        b.iter(|| snp::launch_digest(&ovmf, Some(&hashes), &cfg).expect("digest"))
    });
    g.bench_function("sha384_floor", |b| b.iter(|| Sha384::digest(&bytes)));
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
