//! TCB_VERSION (a raw little-endian u64) and the AMD products whose layouts decode it.
//!
//! Milan and Genoa pack `BL | TEE | 4 reserved | SNP | UCODE`; Turin adds the FMC SVN and packs
//! `FMC | BL | TEE | SNP | 3 reserved | UCODE`. The product comes from CPUID or from the VCEK certificate.

use serde::{Serialize, Serializer};
use std::fmt;

/// An AMD EPYC product generation that supports SEV-SNP.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum Product {
    /// EPYC 7003 (Zen 3).
    Milan,
    /// EPYC 9004/8004 (Zen 4, Zen 4c).
    Genoa,
    /// EPYC 9005 (Zen 5).
    Turin,
}

impl Product {
    /// All products, in release order.
    pub const ALL: [Product; 3] = [Product::Milan, Product::Genoa, Product::Turin];

    /// The product for a CPUID family/model pair (the combined values the report carries), if known.
    pub fn from_cpuid(family: u8, model: u8) -> Option<Product> {
        match (family, model) {
            (0x19, 0x00..=0x0F) => Some(Product::Milan),
            // Genoa (Zen 4) and its Zen 4c siblings Bergamo/Siena (models A0h..AFh) share the Genoa keys.
            (0x19, 0x10..=0x1F) | (0x19, 0xA0..=0xAF) => Some(Product::Genoa),
            (0x1A, 0x00..=0x11) => Some(Product::Turin),
            _ => None,
        }
    }

    /// The product named by a certificate string such as `Milan`, `Milan-B0`, `SEV-Genoa` or `SEV-VLEK-Turin`.
    pub fn from_name(name: &str) -> Option<Product> {
        let base = name
            .strip_prefix("SEV-VLEK-")
            .or_else(|| name.strip_prefix("SEV-"))
            .or_else(|| name.strip_prefix("ARK-"))
            .unwrap_or(name);
        let base = base.split('-').next().unwrap_or(base);
        match base {
            "Milan" => Some(Product::Milan),
            "Genoa" => Some(Product::Genoa),
            "Turin" => Some(Product::Turin),
            _ => None,
        }
    }

    /// The name AMD uses for the product (`Milan`, `Genoa`, `Turin`).
    pub fn name(self) -> &'static str {
        match self {
            Product::Milan => "Milan",
            Product::Genoa => "Genoa",
            Product::Turin => "Turin",
        }
    }

    /// Whether this product's TCB_VERSION carries an FMC SVN (Turin layout).
    pub fn has_fmc(self) -> bool {
        matches!(self, Product::Turin)
    }
}

impl fmt::Display for Product {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A TCB_VERSION exactly as the firmware writes it (little-endian u64); decode it with [`TcbVersion::decode`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct TcbVersion(pub u64);

/// The security patch levels inside a TCB_VERSION, decoded for one product.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct TcbParts {
    /// FMC SVN (Turin only; `None` on Milan and Genoa).
    pub fmc: Option<u8>,
    /// Boot loader SVN.
    pub bootloader: u8,
    /// PSP OS (TEE) SVN.
    pub tee: u8,
    /// SNP firmware SVN.
    pub snp: u8,
    /// Microcode SVN.
    pub microcode: u8,
}

impl TcbVersion {
    /// The eight bytes in report order.
    pub fn to_le_bytes(self) -> [u8; 8] {
        self.0.to_le_bytes()
    }

    /// Decodes the patch levels with the layout of `product`.
    pub fn decode(self, product: Product) -> TcbParts {
        let b = self.to_le_bytes();
        if product.has_fmc() {
            TcbParts {
                fmc: Some(b[0]),
                bootloader: b[1],
                tee: b[2],
                snp: b[3],
                microcode: b[7],
            }
        } else {
            TcbParts {
                fmc: None,
                bootloader: b[0],
                tee: b[1],
                snp: b[6],
                microcode: b[7],
            }
        }
    }

    /// Encodes patch levels with the layout of `product` (an `fmc` on Milan/Genoa is ignored).
    pub fn from_parts(product: Product, parts: TcbParts) -> TcbVersion {
        let mut b = [0u8; 8];
        if product.has_fmc() {
            b[0] = parts.fmc.unwrap_or(0);
            b[1] = parts.bootloader;
            b[2] = parts.tee;
            b[3] = parts.snp;
        } else {
            b[0] = parts.bootloader;
            b[1] = parts.tee;
            b[6] = parts.snp;
        }
        b[7] = parts.microcode;
        TcbVersion(u64::from_le_bytes(b))
    }

    /// The bytes that the product's layout reserves, as a mask of the raw value (they should be zero).
    pub fn reserved_mask(product: Product) -> u64 {
        if product.has_fmc() {
            0x00FF_FFFF_0000_0000
        } else {
            0x0000_FFFF_FFFF_0000
        }
    }
}

impl fmt::Display for TcbVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "0x{:016x}", self.0)
    }
}

impl Serialize for TcbVersion {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl TcbParts {
    /// Whether every component is at least the one in `min` (an FMC minimum applies only where both have FMC).
    pub fn at_least(&self, min: &TcbParts) -> bool {
        let fmc_ok = match (self.fmc, min.fmc) {
            (Some(a), Some(b)) => a >= b,
            (None, Some(b)) => b == 0,
            _ => true,
        };
        fmc_ok
            && self.bootloader >= min.bootloader
            && self.tee >= min.tee
            && self.snp >= min.snp
            && self.microcode >= min.microcode
    }
}

impl fmt::Display for TcbParts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(fmc) = self.fmc {
            write!(f, "fmc={fmc} ")?;
        }
        write!(
            f,
            "bl={} tee={} snp={} ucode={}",
            self.bootloader, self.tee, self.snp, self.microcode
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn milan_and_turin_layouts_differ() {
        let raw = TcbVersion(0x541900000000000a);
        assert_eq!(
            raw.decode(Product::Genoa),
            TcbParts {
                fmc: None,
                bootloader: 10,
                tee: 0,
                snp: 25,
                microcode: 84
            }
        );
        let t = TcbVersion(0x0900000000000000);
        assert_eq!(
            t.decode(Product::Turin),
            TcbParts {
                fmc: Some(0),
                bootloader: 0,
                tee: 0,
                snp: 0,
                microcode: 9
            }
        );
        let p = TcbParts {
            fmc: Some(1),
            bootloader: 2,
            tee: 3,
            snp: 4,
            microcode: 5,
        };
        assert_eq!(
            TcbVersion::from_parts(Product::Turin, p).decode(Product::Turin),
            p
        );
        assert_eq!(
            TcbVersion::from_parts(Product::Turin, p).0,
            0x0500000004030201
        );
    }

    #[test]
    fn products_from_cpuid_and_names() {
        assert_eq!(Product::from_cpuid(0x19, 0x01), Some(Product::Milan));
        assert_eq!(Product::from_cpuid(0x19, 0x11), Some(Product::Genoa));
        assert_eq!(Product::from_cpuid(0x19, 0xA0), Some(Product::Genoa));
        assert_eq!(Product::from_cpuid(0x1A, 0x02), Some(Product::Turin));
        assert_eq!(Product::from_cpuid(0x17, 0x31), None);
        assert_eq!(Product::from_name("Milan-B0"), Some(Product::Milan));
        assert_eq!(Product::from_name("SEV-VLEK-Genoa"), Some(Product::Genoa));
        assert_eq!(Product::from_name("SEV-Turin"), Some(Product::Turin));
        assert_eq!(Product::from_name("Rome"), None);
    }
}
