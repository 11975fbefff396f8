//! The files a catalog was built from ([`Inputs`]): what a reload watches,
//! and what each held when it was read ([`Fingerprint`]), so a reload swaps
//! in only a catalog whose files still hold what was read.

use std::path::{Path, PathBuf};

/// The files a catalog is built from, and the places new ones could appear.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Inputs {
    /// Every file read: catalog files, templates, `file:` resources, media.
    pub files: Vec<PathBuf>,
    /// Folders where any change matters (whether or not they exist yet):
    /// the templates folder, the skills folder.
    pub trees: Vec<PathBuf>,
    /// The `include:` patterns, resolved.
    pub includes: Vec<IncludePattern>,
    /// What each file held when it was read, in reading order (a file read
    /// twice appears twice): a reload swaps in only a catalog whose files
    /// still hold exactly this, so a file caught half-written is read again.
    pub contents: Vec<(PathBuf, Fingerprint)>,
}

impl Inputs {
    /// Adds what `other` names and this does not (to watch several catalogs,
    /// or a failed load's files beside the served catalog's).
    pub fn merge(&mut self, other: Inputs) {
        fn add<T: PartialEq>(into: &mut Vec<T>, more: Vec<T>) {
            for item in more {
                if !into.contains(&item) {
                    into.push(item);
                }
            }
        }
        add(&mut self.files, other.files);
        add(&mut self.trees, other.trees);
        add(&mut self.includes, other.includes);
        add(&mut self.contents, other.contents);
    }

    /// Notes that loading read `bytes` from `path`.
    pub fn record(&mut self, path: &Path, bytes: &[u8]) {
        if !self.files.iter().any(|file| file == path) {
            self.files.push(path.to_path_buf());
        }
        self.contents.push((path.to_path_buf(), Fingerprint::of(bytes)));
    }

    /// The first file that no longer holds what loading read from it (or
    /// can no longer be read), if any. Reads each file at most once more,
    /// and not at all when its size already differs.
    pub fn changed(&self) -> Option<&Path> {
        self.contents
            .iter()
            .find(|(path, read)| Fingerprint::of_file(path, read.len).ok() != Some(*read))
            .map(|(path, _)| path.as_path())
    }

    /// How many bytes loading read from `path` (the first time), if it read it.
    pub fn len_read(&self, path: &Path) -> Option<u64> {
        self.contents.iter().find(|(file, _)| file == path).map(|(_, read)| read.len)
    }
}

/// What a file held: its length and a hash of its bytes. Only compared
/// within one process, to tell whether a file changed since it was read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fingerprint {
    /// Its length in bytes.
    pub len: u64,
    /// A 64-bit hash of its bytes.
    pub hash: u64,
}

impl Fingerprint {
    /// The fingerprint of `bytes`.
    pub fn of(bytes: &[u8]) -> Fingerprint {
        use std::hash::Hasher;
        let mut hasher = std::hash::DefaultHasher::new();
        hasher.write(bytes);
        Fingerprint { len: bytes.len() as u64, hash: hasher.finish() }
    }

    /// The fingerprint of the file at `path` now. When its length is not
    /// `expected_len`, the returned fingerprint has the actual length and
    /// no hash is computed (nothing is read); at most `expected_len + 1`
    /// bytes are read otherwise, whatever the file grows to meanwhile.
    pub fn of_file(path: &Path, expected_len: u64) -> std::io::Result<Fingerprint> {
        use std::io::Read;
        let file = std::fs::File::open(path)?;
        let len = file.metadata()?.len();
        if len != expected_len {
            return Ok(Fingerprint { len, hash: 0 });
        }
        // Sized up front (the length was read into memory once already):
        // one read instead of doubling from 32 bytes.
        let mut bytes = Vec::with_capacity(usize::try_from(expected_len.saturating_add(1)).unwrap_or(0));
        file.take(expected_len.saturating_add(1)).read_to_end(&mut bytes)?;
        Ok(Fingerprint::of(&bytes))
    }
}

/// One `include:` entry, resolved against the file that names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IncludePattern {
    /// The deepest folder of the pattern without glob characters.
    pub folder: PathBuf,
    /// The whole pattern, e.g. `/srv/catalog/tools/*.yaml`.
    pub pattern: String,
}
