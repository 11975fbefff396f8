//! Watching what a catalog is built from, and saying when it may have changed.
//!
//! Folders are watched, not files: editors save by writing a new file and
//! renaming it over the old one, `sed -i` does the same, Kubernetes swaps a
//! `..data` symlink, and a new file can match an `include:` glob — a watch
//! on the old file would miss all of these. Events in those folders are
//! filtered down to paths that matter (the catalog's files, the templates
//! folder, include globs, Kubernetes' `..` entries), so that a database
//! written beside the catalog does not cause reloads.
//!
//! With file system events, a file written in place (modified) is being
//! written until its writer closes it: [`Watch::writing`] names such files,
//! so that a reload waits for the close instead of reading what a slow
//! writer has written so far.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use notify::event::{AccessKind, AccessMode, ModifyKind};
use notify::{EventKind, RecursiveMode};
use tokio::sync::mpsc;

use crate::catalog::Inputs;

/// How changes are noticed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// File system events (inotify on Linux).
    Events,
    /// Scanning every so often, for file systems without events (network mounts).
    Poll(Duration),
}

/// A running watcher; each relevant change sends `()` on its channel.
pub struct Watch {
    watcher: Box<dyn notify::Watcher + Send>,
    interest: Arc<RwLock<Interest>>,
    watched: BTreeMap<PathBuf, RecursiveMode>,
    writing: Arc<Mutex<Writing>>,
}

/// Files modified in place and not closed since, with when that began (only
/// with file system events: polling sees no closes). At most one entry per
/// path that matters, removed by its close, removal or rename.
#[derive(Debug, Default)]
struct Writing(HashMap<PathBuf, Instant>);

impl Writing {
    /// Updates what is being written after `event`; `matters` says which paths count.
    fn note(&mut self, event: &notify::Event, matters: impl Fn(&Path) -> bool) {
        match event.kind {
            EventKind::Modify(ModifyKind::Data(_) | ModifyKind::Any) => {
                for path in event.paths.iter().filter(|path| matters(path)) {
                    self.0.entry(path.clone()).or_insert_with(Instant::now);
                }
            }
            EventKind::Access(AccessKind::Close(AccessMode::Write))
            | EventKind::Remove(_)
            | EventKind::Modify(ModifyKind::Name(_)) => {
                for path in &event.paths {
                    self.0.remove(path);
                }
            }
            _ => {}
        }
    }

    /// The file written the longest, and since when.
    fn oldest(&self) -> Option<(PathBuf, Instant)> {
        self.0.iter().min_by_key(|(_, since)| **since).map(|(path, since)| (path.clone(), *since))
    }
}

/// The paths whose changes matter.
#[derive(Debug, Default)]
struct Interest {
    files: HashSet<PathBuf>,
    /// Folders where any change matters (the templates folder).
    trees: Vec<PathBuf>,
    /// `include:` globs, and the folders they look in.
    patterns: Vec<glob::Pattern>,
    include_folders: Vec<PathBuf>,
    /// The watched folders (for Kubernetes' `..data` entries inside them).
    folders: HashSet<PathBuf>,
}

impl Interest {
    fn new(inputs: &Inputs) -> Interest {
        let mut interest = Interest::default();
        for file in &inputs.files {
            let file = absolute(file);
            if let Some(parent) = file.parent() {
                interest.folders.insert(parent.to_path_buf());
            }
            interest.files.insert(file);
        }
        for templates in &inputs.trees {
            interest.trees.push(absolute(templates));
        }
        for include in &inputs.includes {
            if let Ok(pattern) = glob::Pattern::new(&absolute(Path::new(&include.pattern)).to_string_lossy()) {
                interest.patterns.push(pattern);
            }
            interest.include_folders.push(absolute(&include.folder));
        }
        interest
    }

    /// Whether a change at `path` may change the catalog.
    fn matters(&self, path: &Path) -> bool {
        if self.files.contains(path) || self.patterns.iter().any(|p| p.matches_path(path)) {
            return true;
        }
        // Inside the templates folder; or a folder on the way to it or to
        // an include folder, created or moved.
        if self.trees.iter().any(|tree| path.starts_with(tree) || tree.starts_with(path))
            || self.include_folders.iter().any(|folder| folder.starts_with(path))
        {
            return true;
        }
        // Kubernetes ConfigMap volumes swap `..data` (and `..2026_…` folders).
        let kubernetes = path.file_name().is_some_and(|name| name.to_string_lossy().starts_with(".."));
        kubernetes && path.parent().is_some_and(|parent| self.folders.contains(parent))
    }

    /// The folders to watch, and how.
    fn folders_to_watch(&self) -> BTreeMap<PathBuf, RecursiveMode> {
        let mut folders = BTreeMap::new();
        for folder in &self.folders {
            folders.insert(existing(folder), RecursiveMode::NonRecursive);
        }
        for tree in self.trees.iter().chain(&self.include_folders) {
            let found = existing(tree);
            let mode = if found == *tree { RecursiveMode::Recursive } else { RecursiveMode::NonRecursive };
            folders.insert(found, mode);
        }
        folders
    }
}

/// `path` made absolute (not canonical: symlinks stay, as the events name them).
fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

/// The nearest existing folder at or above `folder` (a folder created later
/// shows up as an event in its parent).
fn existing(folder: &Path) -> PathBuf {
    folder.ancestors().find(|a| a.is_dir()).map(Path::to_path_buf).unwrap_or_else(|| PathBuf::from("/"))
}

impl Watch {
    /// Starts watching nothing yet; [`Watch::follow`] says what.
    pub fn new(mode: Mode, changed: mpsc::UnboundedSender<()>) -> notify::Result<Watch> {
        let interest = Arc::new(RwLock::new(Interest::default()));
        let seen = interest.clone();
        let writing = Arc::new(Mutex::new(Writing::default()));
        let written = writing.clone();
        // Polling reports contents, not writers: no closes to wait for.
        let closes = mode == Mode::Events;
        let handler = move |event: notify::Result<notify::Event>| {
            let event = match event {
                Ok(event) => event,
                Err(err) => {
                    tracing::warn!("file watcher: {err}");
                    let _ = changed.send(()); // something happened; a reload will tell
                    return;
                }
            };
            // Reading a file (as a reload does) is not a change.
            if let EventKind::Access(kind) = event.kind
                && kind != AccessKind::Close(AccessMode::Write)
            {
                return;
            }
            let interest = crate::sync::read(&seen);
            if closes {
                crate::sync::lock(&written).note(&event, |path| interest.matters(path));
            }
            if event.need_rescan() || event.paths.iter().any(|path| interest.matters(path)) {
                tracing::debug!("change: {:?} {:?}", event.kind, event.paths);
                let _ = changed.send(());
            }
        };
        let watcher: Box<dyn notify::Watcher + Send> = match mode {
            Mode::Events => Box::new(notify::recommended_watcher(handler)?),
            Mode::Poll(every) => Box::new(notify::PollWatcher::new(
                handler,
                notify::Config::default().with_poll_interval(every).with_compare_contents(true),
            )?),
        };
        Ok(Watch { watcher, interest, watched: BTreeMap::new(), writing })
    }

    /// The files being written in place, as this watch sees them.
    pub fn writers(&self) -> Writers {
        Writers(self.writing.clone())
    }

    /// Watches what `inputs` name (and stops watching what they no longer do).
    pub fn follow(&mut self, inputs: &Inputs) {
        let interest = Interest::new(inputs);
        let wanted = interest.folders_to_watch();
        // A file that no longer matters is not waited for (its close would not be seen).
        crate::sync::lock(&self.writing).0.retain(|path, _| interest.matters(path));
        *crate::sync::write(&self.interest) = interest;
        let stale: Vec<PathBuf> = self
            .watched
            .iter()
            .filter(|(path, mode)| wanted.get(*path) != Some(mode))
            .map(|(p, _)| p.clone())
            .collect();
        for path in stale {
            let _ = self.watcher.unwatch(&path);
            self.watched.remove(&path);
        }
        for (path, mode) in wanted {
            if self.watched.contains_key(&path) {
                continue;
            }
            match self.watcher.watch(&path, mode) {
                Ok(()) => {
                    self.watched.insert(path, mode);
                }
                Err(err) => tracing::warn!("cannot watch `{}`: {err}", path.display()),
            }
        }
    }
}

/// The files of a [`Watch`] being written in place (modified and not yet
/// closed by their writer).
#[derive(Debug, Clone)]
pub struct Writers(Arc<Mutex<Writing>>);

impl Writers {
    /// The file written the longest, and since when.
    pub fn oldest(&self) -> Option<(PathBuf, Instant)> {
        crate::sync::lock(&self.0).oldest()
    }

    /// Stops waiting for the files being written (a writer that keeps a
    /// file open for too long); their next modification counts again.
    pub fn forget(&self) {
        crate::sync::lock(&self.0).0.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::IncludePattern;

    #[test]
    fn only_the_catalogs_paths_matter() {
        let inputs = Inputs {
            files: vec![PathBuf::from("/srv/c/catalog.yaml"), PathBuf::from("/srv/c/tools/a.yaml")],
            trees: vec![PathBuf::from("/srv/c/templates")],
            includes: vec![IncludePattern { folder: "/srv/c/tools".into(), pattern: "/srv/c/tools/*.yaml".into() }],
            contents: Vec::new(),
        };
        let interest = Interest::new(&inputs);
        for path in ["/srv/c/catalog.yaml", "/srv/c/tools/new.yaml", "/srv/c/templates/x/y.j2", "/srv/c/..data"] {
            assert!(interest.matters(Path::new(path)), "{path}");
        }
        for path in ["/srv/c/reservo.db-wal", "/srv/c/tools/notes.txt", "/srv/c/.catalog.yaml.swp", "/srv/other/..data"]
        {
            assert!(!interest.matters(Path::new(path)), "{path}");
        }
    }

    #[test]
    fn a_file_modified_in_place_is_being_written_until_closed() {
        use notify::event::{CreateKind, DataChange, RemoveKind, RenameMode};
        let event = |kind: EventKind, path: &str| notify::Event::new(kind).add_path(PathBuf::from(path));
        let matters = |path: &Path| path.starts_with("/srv/c");
        let modified = EventKind::Modify(ModifyKind::Data(DataChange::Any));
        let mut writing = Writing::default();
        // Created, opened, read, closed after reading: nobody is writing.
        for kind in [
            EventKind::Create(CreateKind::File),
            EventKind::Access(AccessKind::Open(AccessMode::Any)),
            EventKind::Access(AccessKind::Close(AccessMode::Read)),
        ] {
            writing.note(&event(kind, "/srv/c/catalog.yaml"), matters);
        }
        assert_eq!(writing.oldest(), None);
        // A file that does not matter is never waited for.
        writing.note(&event(modified, "/srv/other/notes.txt"), matters);
        assert_eq!(writing.oldest(), None);
        // Truncated (or written): being written, from the first modification, until closed.
        writing.note(&event(modified, "/srv/c/catalog.yaml"), matters);
        let (path, since) = writing.oldest().expect("being written");
        assert_eq!(path, Path::new("/srv/c/catalog.yaml"));
        writing.note(&event(modified, "/srv/c/catalog.yaml"), matters);
        writing.note(&event(modified, "/srv/c/tools/a.yaml"), matters);
        assert_eq!(writing.oldest(), Some((path.clone(), since)), "the first modification counts");
        writing.note(&event(EventKind::Access(AccessKind::Close(AccessMode::Write)), "/srv/c/catalog.yaml"), matters);
        assert_eq!(writing.oldest().map(|(path, _)| path), Some(PathBuf::from("/srv/c/tools/a.yaml")));
        // Removed, or replaced by a rename: its writer writes elsewhere now.
        writing.note(&event(EventKind::Remove(RemoveKind::File), "/srv/c/tools/a.yaml"), matters);
        assert_eq!(writing.oldest(), None);
        writing.note(&event(modified, "/srv/c/catalog.yaml"), matters);
        writing.note(&event(EventKind::Modify(ModifyKind::Name(RenameMode::To)), "/srv/c/catalog.yaml"), matters);
        assert_eq!(writing.oldest(), None);
    }
}
