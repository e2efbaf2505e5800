//! A reproducible newc initramfs: entries sorted by path, owner 0:0, mtime 0, inode numbers in order, modes
//! normalised (0755 for directories and executables, 0644 for other files, 0777 for symlinks), and a
//! `/dev/console` node so that the kernel can open the console for `/init` before anything is mounted.

use std::collections::BTreeMap;
use std::io::Write;

/// One entry of the archive.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Entry {
    /// A directory.
    Dir,
    /// A regular file and whether it is executable.
    File(Vec<u8>, bool),
    /// A symbolic link to the target.
    Symlink(String),
    /// A character device (major, minor), mode 0600.
    CharDev(u32, u32),
}

/// The archive being assembled: paths (without a leading `/`) to entries.
#[derive(Clone, Debug, Default)]
pub struct Tree {
    entries: BTreeMap<String, Entry>,
}

impl Tree {
    /// An empty tree.
    pub fn new() -> Tree {
        Tree::default()
    }

    /// Adds `entry` at `path` (leading `/` ignored), creating its parent directories.
    pub fn add(&mut self, path: &str, entry: Entry) {
        let path = path.trim_start_matches('/').to_owned();
        let mut parent = String::new();
        for comp in path
            .split('/')
            .take(path.split('/').count().saturating_sub(1))
        {
            if !parent.is_empty() {
                parent.push('/');
            }
            parent.push_str(comp);
            self.entries.entry(parent.clone()).or_insert(Entry::Dir);
        }
        self.entries.insert(path, entry);
    }

    /// The paths in archive order.
    pub fn paths(&self) -> impl Iterator<Item = &str> {
        self.entries.keys().map(String::as_str)
    }

    /// Writes the newc archive (with its trailer) to `out`.
    pub fn write(&self, mut out: impl Write) -> std::io::Result<()> {
        for (i, (path, entry)) in self.entries.iter().enumerate() {
            let (mode, data, rdev): (u32, &[u8], (u32, u32)) = match entry {
                Entry::Dir => (0o040_755, &[], (0, 0)),
                Entry::File(d, exec) => (if *exec { 0o100_755 } else { 0o100_644 }, d, (0, 0)),
                Entry::Symlink(t) => (0o120_777, t.as_bytes(), (0, 0)),
                Entry::CharDev(maj, min) => (0o020_600, &[], (*maj, *min)),
            };
            let size = u32::try_from(data.len())
                .map_err(|_| std::io::Error::other(format!("{path}: larger than 4 GiB")))?;
            let mut w = cpio::newc::Builder::new(path)
                .ino(i as u32 + 1)
                .mode(mode)
                .uid(0)
                .gid(0)
                .nlink(if matches!(entry, Entry::Dir) { 2 } else { 1 })
                .mtime(0)
                .rdev_major(rdev.0)
                .rdev_minor(rdev.1)
                .write(&mut out, size);
            w.write_all(data)?;
            w.finish()?;
        }
        cpio::newc::trailer(&mut out)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn archive_is_sorted_with_parents_and_independent_of_insertion_order() {
        let mut a = Tree::new();
        a.add("/bin/sh", Entry::Symlink("busybox".into()));
        a.add("/init", Entry::File(b"x".to_vec(), true));
        a.add("/dev/console", Entry::CharDev(5, 1));
        let mut b = Tree::new();
        b.add("dev/console", Entry::CharDev(5, 1));
        b.add("init", Entry::File(b"x".to_vec(), true));
        b.add("bin/sh", Entry::Symlink("busybox".into()));
        let (mut x, mut y) = (Vec::new(), Vec::new());
        a.write(&mut x).expect("write");
        b.write(&mut y).expect("write");
        assert_eq!(x, y);
        assert_eq!(
            a.paths().collect::<Vec<_>>(),
            ["bin", "bin/sh", "dev", "dev/console", "init"]
        );
        // newc magic, and the trailer at the end.
        assert!(x.starts_with(b"070701"));
        assert!(x.windows(10).any(|w| w == b"TRAILER!!!"));
        // uid, gid and mtime fields of the first header are zero (offsets 22, 30, 46 in the ASCII header).
        assert_eq!(&x[22..30], b"00000000");
        assert_eq!(&x[30..38], b"00000000");
        assert_eq!(&x[46..54], b"00000000");
    }
}
