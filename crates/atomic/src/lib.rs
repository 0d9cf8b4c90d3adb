//! Output files written whole or not at all.
//!
//! Every file volley writes (results, reports, charts, client files, metrics, certificates) goes
//! through [`AtomicFile`]: the bytes go to `.NAME.tmp-PID` in the target's directory, which is
//! renamed over the target on [`AtomicFile::commit`], so a reader sees the old file or the whole
//! new one, and an interrupted or failed write leaves nothing behind.
//!
//! Targets that are not regular files are written in place instead: renaming over `/dev/null`,
//! `/dev/stdout` or a FIFO would replace the device or pipe with a regular file (as root, for
//! every program on the machine). A symbolic link is followed and the file it names replaced,
//! so the link stays a link.

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufWriter, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// A file being written; see the crate docs.
pub struct AtomicFile {
    /// The file the bytes end up in (a symbolic link resolved).
    path: PathBuf,
    /// The temporary file, or `None` when writing in place.
    tmp: Option<PathBuf>,
    file: Option<BufWriter<File>>,
}

impl AtomicFile {
    /// Starts writing `path`. Fails at once (creating nothing) when `path` is a directory or
    /// its directory cannot be written.
    pub fn create(path: &Path) -> io::Result<AtomicFile> {
        AtomicFile::with_capacity(path, 64 * 1024)
    }

    /// [`AtomicFile::create`] with a buffer of `capacity` bytes.
    pub fn with_capacity(path: &Path, capacity: usize) -> io::Result<AtomicFile> {
        // The kernel follows links here, /proc/self/fd's magic ones (/dev/stdout) included.
        let path = match fs::metadata(path) {
            Ok(m) if m.is_dir() => return Err(io::Error::new(io::ErrorKind::IsADirectory, "is a directory")),
            Ok(m) if !m.is_file() => {
                let file = OpenOptions::new().write(true).truncate(true).open(path)?;
                let file = Some(BufWriter::with_capacity(capacity, file));
                return Ok(AtomicFile { path: path.to_path_buf(), tmp: None, file });
            }
            // A regular file, perhaps through symbolic links: replace the file, keep the links.
            Ok(_) => fs::canonicalize(path)?,
            Err(_) => path.to_path_buf(),
        };
        let tmp =
            tmp_path(&path).ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "the path has no file name"))?;
        let file = OpenOptions::new().write(true).create(true).truncate(true).open(&tmp)?;
        Ok(AtomicFile { path, tmp: Some(tmp), file: Some(BufWriter::with_capacity(capacity, file)) })
    }

    /// The buffered writer to fill.
    pub fn writer(&mut self) -> &mut BufWriter<File> {
        self.file.as_mut().expect("an AtomicFile is written before it is committed")
    }

    /// Flushes the bytes, fsyncs them and renames the file into place, then fsyncs the
    /// directory so that the rename survives a crash.
    pub fn commit(self) -> io::Result<()> {
        self.finish(true)
    }

    /// [`AtomicFile::commit`] without the fsyncs: for files rewritten every second and read
    /// live (metrics for scrapers), where durability is not worth a disk flush.
    pub fn commit_fast(self) -> io::Result<()> {
        self.finish(false)
    }

    fn finish(mut self, durable: bool) -> io::Result<()> {
        let w = self.file.take().expect("an AtomicFile is committed once");
        let file = w.into_inner().map_err(|e| e.into_error())?;
        let Some(tmp) = self.tmp.take() else {
            // In place (a device or a pipe): flushed by into_inner; nothing to sync or rename.
            return Ok(());
        };
        let done = (|| {
            if durable {
                file.sync_all()?;
            }
            drop(file);
            fs::rename(&tmp, &self.path)
        })();
        if let Err(e) = done {
            let _ = fs::remove_file(&tmp);
            return Err(e);
        }
        if durable {
            // Not every platform lets a directory be opened and synced.
            if let Ok(d) = File::open(parent(&self.path)) {
                let _ = d.sync_all();
            }
        }
        Ok(())
    }
}

impl Drop for AtomicFile {
    fn drop(&mut self) {
        self.file = None;
        if let Some(tmp) = self.tmp.take() {
            let _ = fs::remove_file(tmp);
        }
    }
}

impl Seek for AtomicFile {
    fn seek(&mut self, pos: SeekFrom) -> io::Result<u64> {
        self.writer().seek(pos)
    }
}

impl Write for AtomicFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.writer().write(buf)
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        self.writer().write_all(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.writer().flush()
    }
}

/// Writes `bytes` to `path` through an [`AtomicFile`].
pub fn write(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut f = AtomicFile::create(path)?;
    f.write_all(bytes)?;
    f.commit()
}

fn parent(path: &Path) -> &Path {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

/// `.NAME.tmp-PID` next to `path`.
fn tmp_path(path: &Path) -> Option<PathBuf> {
    let name = path.file_name()?;
    let mut tmp = std::ffi::OsString::from(".");
    tmp.push(name);
    tmp.push(format!(".tmp-{}", std::process::id()));
    Some(parent(path).join(tmp))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::FileTypeExt;

    fn leftovers(dir: &Path) -> Vec<String> {
        fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.contains(".tmp-"))
            .collect()
    }

    #[test]
    fn replaces_a_regular_file_whole() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("r.json");
        fs::write(&p, "old").unwrap();
        let mut f = AtomicFile::create(&p).unwrap();
        f.write_all(b"new contents").unwrap();
        // Not yet committed: readers still see the old file.
        assert_eq!(fs::read_to_string(&p).unwrap(), "old");
        f.commit().unwrap();
        assert_eq!(fs::read_to_string(&p).unwrap(), "new contents");
        assert!(leftovers(dir.path()).is_empty());
    }

    #[test]
    fn dropped_uncommitted_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("r.json");
        let mut f = AtomicFile::create(&p).unwrap();
        f.write_all(b"partial").unwrap();
        drop(f);
        assert!(!p.exists());
        assert!(leftovers(dir.path()).is_empty());
    }

    #[test]
    fn a_symlink_stays_a_link() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real.json");
        let link = dir.path().join("link.json");
        fs::write(&real, "old").unwrap();
        std::os::unix::fs::symlink("real.json", &link).unwrap();
        write(&link, b"through the link").unwrap();
        assert!(fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
        assert_eq!(fs::read_to_string(&real).unwrap(), "through the link");
    }

    #[test]
    fn a_device_is_written_in_place_not_replaced() {
        // /dev/null must stay a character device: renaming over it would break every program
        // on the machine that redirects to it.
        let null = Path::new("/dev/null");
        write(null, b"discarded").unwrap();
        assert!(fs::metadata(null).unwrap().file_type().is_char_device());
        assert!(!Path::new(&format!("/dev/.null.tmp-{}", std::process::id())).exists());
    }

    #[test]
    fn a_fifo_is_written_in_place() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("pipe");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc_mkfifo(c.as_ptr(), 0o600) }, 0);
        let reader = {
            let fifo = fifo.clone();
            std::thread::spawn(move || fs::read_to_string(fifo).unwrap())
        };
        write(&fifo, b"through the pipe").unwrap();
        assert_eq!(reader.join().unwrap(), "through the pipe");
        assert!(fs::metadata(&fifo).unwrap().file_type().is_fifo());
    }

    extern "C" {
        #[link_name = "mkfifo"]
        fn libc_mkfifo(path: *const std::ffi::c_char, mode: u32) -> i32;
    }

    #[test]
    fn a_directory_is_refused_before_anything_is_created() {
        let dir = tempfile::tempdir().unwrap();
        let e = AtomicFile::create(dir.path()).err().unwrap();
        assert_eq!(e.kind(), io::ErrorKind::IsADirectory);
        assert!(leftovers(dir.path()).is_empty());
    }
}
