//! Running sandbox commands as an unprivileged user.
//!
//! A gateway that runs as root (the shipped systemd unit) must not hand a
//! sandbox its privileges: the data directory holds the Raft log (with the
//! execution-token secret) and `/proc/<gateway>/environ` the PostgreSQL
//! password. With a [`SandboxUser`], each execution's directory gets a
//! `run-as.json` ([`RunAs`]); the shim then creates the command's working
//! directory OUTSIDE the driver and data directories (`WORK_ROOT/<sandbox
//! id>/<generation>`, owned by that user, 0700), and the command's first
//! process switches to that user (groups dropped, then gid, then uid) and
//! a 022 umask just before `execve`. The shim itself stays root, so it can
//! still write its records and signal the command.

use std::ffi::CString;
use std::io;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// Whom sandbox commands run as, and where their working directories go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SandboxUser {
    /// User id.
    pub uid: u32,
    /// Primary group id.
    pub gid: u32,
    /// Parent of the working directories; outside every data directory.
    pub work_root: PathBuf,
}

impl SandboxUser {
    /// Looks `user` up (a name from the passwd database, or a numeric uid,
    /// whose gid is then the same number).
    pub fn lookup(user: &str, work_root: PathBuf) -> io::Result<SandboxUser> {
        if let Ok(uid) = user.parse::<u32>() {
            return Ok(SandboxUser {
                uid,
                gid: uid,
                work_root,
            });
        }
        let name = CString::new(user)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL byte in the user"))?;
        // SAFETY: getpwnam reads the passwd database and returns a pointer
        // to static storage, read at once, before any other call could
        // overwrite it (this runs once, at start).
        let entry = unsafe { libc::getpwnam(name.as_ptr()) };
        if entry.is_null() {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("no user {user:?} on this host"),
            ));
        }
        // SAFETY: non-null, points to a valid passwd record (see above).
        let (uid, gid) = unsafe { ((*entry).pw_uid, (*entry).pw_gid) };
        Ok(SandboxUser {
            uid,
            gid,
            work_root,
        })
    }

    /// Creates the work root (0711: the sandbox user may enter its own
    /// working directory below, not list the others).
    pub fn prepare_work_root(&self) -> io::Result<()> {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::create_dir_all(&self.work_root)?;
        super::records::spread_subdirectories(&self.work_root);
        std::fs::set_permissions(&self.work_root, std::fs::Permissions::from_mode(0o711))
    }

    /// What the shims and execs of `sandbox_id` are told: its working
    /// directory persists across generations, as without a sandbox user.
    pub fn for_sandbox(&self, sandbox_id: &str) -> RunAs {
        RunAs {
            uid: self.uid,
            gid: self.gid,
            work_dir: self.work_root.join(sandbox_id),
        }
    }
}

/// `run-as.json`: the user a command runs as and its working directory.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunAs {
    /// User id.
    pub uid: u32,
    /// Group id.
    pub gid: u32,
    /// The command's working directory (created by the shim).
    pub work_dir: PathBuf,
}

impl RunAs {
    /// Creates the working directory: the sandbox's directory above it
    /// 0711 (traversable, not listable), itself owned by the user, 0700.
    /// The work root must exist ([`SandboxUser::prepare_work_root`]).
    pub fn prepare_work_dir(&self) -> io::Result<()> {
        use std::os::unix::fs::{DirBuilderExt as _, PermissionsExt as _};
        if let Some(parent) = self.work_dir.parent() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o711)
                .create(parent)?;
            // The gateway's 077 umask masked the mode above.
            std::fs::set_permissions(parent, std::fs::Permissions::from_mode(0o711))?;
        }
        match std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&self.work_dir)
        {
            Ok(()) => {}
            Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {}
            Err(error) => return Err(error),
        }
        std::os::unix::fs::chown(&self.work_dir, Some(self.uid), Some(self.gid))
    }
}
