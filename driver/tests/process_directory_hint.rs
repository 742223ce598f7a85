//! The process driver asks ext4 to spread its per-sandbox directories over the
//! file system's block groups (the top-directory flag, `chattr +T`) and keeps
//! working where the file system has no such flag.
//!
//! Why it matters: without the flag, every sandbox's files are allocated in the
//! driver directory's block group, and on an ext4 without a journal each new
//! inode is found by scanning past every inode of that group freed in the last
//! ~30 s; cycling sandboxes at 16 clients spent ~20 % of a 2-core machine in
//! those scans (see `records::spread_subdirectories`).
#![cfg(target_os = "linux")]

use std::fs::File;
use std::path::{Path, PathBuf};

use palisade_driver::process::ProcessDriver;
use rustix::fs::IFlags;

/// `EXT4_SUPER_MAGIC` (ext2 and ext3 share it).
const EXT_SUPER_MAGIC: i64 = 0xEF53;

// `f_type`'s type differs between architectures.
#[allow(clippy::unnecessary_cast)]
fn on_ext4(path: &Path) -> bool {
    rustix::fs::statfs(path).is_ok_and(|stat| stat.f_type as i64 == EXT_SUPER_MAGIC)
}

fn flags_of(dir: &Path) -> IFlags {
    let directory = File::open(dir).expect("open directory");
    rustix::fs::ioctl_getflags(&directory).expect("FS_IOC_GETFLAGS")
}

fn driver_at(dir: &Path) -> ProcessDriver {
    ProcessDriver::new(
        dir.to_path_buf(),
        PathBuf::from("/nonexistent/palisade-test-shim"),
    )
    .expect("driver directory")
}

#[test]
fn on_ext4_the_driver_and_work_directories_are_top_directories() {
    let root = tempfile::tempdir().expect("temporary directory");
    if !on_ext4(root.path()) {
        eprintln!(
            "skipped: {} is not on ext2/3/4, whose allocator the hint is for",
            root.path().display()
        );
        return;
    }
    let driver_dir = root.path().join("executions");
    let _driver = driver_at(&driver_dir);
    for dir in [driver_dir.clone(), driver_dir.join(".workdirs")] {
        assert!(
            flags_of(&dir).contains(IFlags::TOPDIR),
            "{} lacks the top-directory flag",
            dir.display()
        );
    }
    // A second driver on the same directory (another replica of the host)
    // finds the flag set and keeps it.
    let _again = driver_at(&driver_dir);
    assert!(flags_of(&driver_dir).contains(IFlags::TOPDIR));
}

#[test]
fn a_file_system_without_the_flag_is_no_error() {
    // tmpfs has no top-directory flag: it refuses FS_IOC_SETFLAGS with it.
    let shm = Path::new("/dev/shm");
    let Ok(root) = tempfile::tempdir_in(shm) else {
        eprintln!("skipped: no writable /dev/shm");
        return;
    };
    let driver_dir = root.path().join("executions");
    let _driver = driver_at(&driver_dir);
    assert!(driver_dir.join(".driver-id").exists());
    assert!(driver_dir.join(".workdirs").is_dir());
}
