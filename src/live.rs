//! Live resources: after a tool's write commits on a database, the
//! resources clients subscribed to that read that database are read again
//! and their subscribers are told about those whose contents changed.
//!
//! This room holds the timing and the comparison; the server supplies,
//! through [`Subscriptions`], who subscribed to what, how to read a URI with
//! one catalog, and how to tell the subscribers. A change is handled once for
//! every client, not per session: each subscribed URI is read once, and its
//! read's fingerprint is compared with the last one recorded (one per
//! subscribed URI, so bounded by the subscriptions, which are bounded per
//! client). Writes in a burst are coalesced: per database, at most one pass
//! runs and one more is pending; a pass starts [`DEBOUNCE`] after the write
//! that asked for it, so the writes of that time share it. A failed read
//! counts as contents too (its error), so a resource that breaks or recovers
//! is announced.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt as _;

use crate::catalog::{Catalog, Fingerprint};
use crate::sync::lock;

/// How long a pass waits after the write that asked for it, so that the
/// other writes of a burst share it.
pub const DEBOUNCE: Duration = Duration::from_millis(50);

/// How many resources one pass reads at once.
const READS_AT_ONCE: usize = 4;

/// What live resources need from the server that serves them.
pub trait Subscriptions: Send + Sync + 'static {
    /// One catalog's reads: a pass reads every URI with the same one.
    type Reads: Reads;

    /// The passes' state, kept with the server.
    fn live(&self) -> &Live;
    /// The current catalog's reads.
    fn reads(&self) -> Arc<Self::Reads>;
    /// The URIs some client subscribed to.
    fn subscribed(&self) -> BTreeSet<String>;
    /// Records what the subscribers of `uri` know now; whether it differs
    /// from what was recorded before (nothing recorded: not subscribed, no).
    fn record(&self, uri: &str, read: Fingerprint) -> bool;
    /// Records what the subscribers of `uri` know, unless something is.
    fn record_first(&self, uri: &str, read: Fingerprint);
    /// Tells the subscribers of `updated` that those changed.
    fn announce(&self, updated: BTreeSet<String>);
}

/// Reading resources with one catalog.
pub trait Reads: Send + Sync + 'static {
    /// The catalog read.
    fn catalog(&self) -> &Arc<Catalog>;
    /// The fingerprint of `uri`'s contents (or of its error), read now,
    /// effects included.
    fn read(&self, uri: &str) -> impl Future<Output = Fingerprint> + Send;
    /// The fingerprint of `uri`'s contents (or of its error) without running
    /// an effect: what a reload announced.
    fn read_unchanged(&self, uri: &str) -> Fingerprint;
}

/// The passes running now: database name → whether another was asked for
/// since this one began.
#[derive(Default)]
pub struct Live {
    passes: Mutex<HashMap<String, bool>>,
    /// How many passes ran since start-up.
    ran: AtomicU64,
}

impl Live {
    /// How many passes (re-reads after writes) ran since start-up.
    pub fn passes(&self) -> u64 {
        self.ran.load(Ordering::Relaxed)
    }

    /// Whether a pass is running or waiting to run.
    pub fn busy(&self) -> bool {
        !lock(&self.passes).is_empty()
    }
}

/// A write committed on `database` (here or on another replica): reads
/// again (soon, once for a burst) the subscribed resources that read it, and
/// tells their subscribers about those that changed.
pub fn reread<S: Subscriptions>(server: &Arc<S>, database: &str) {
    {
        let mut passes = lock(&server.live().passes);
        if let Some(again) = passes.get_mut(database) {
            *again = true;
            return;
        }
        passes.insert(database.to_owned(), false);
    }
    let (server, database) = (Arc::clone(server), database.to_owned());
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(DEBOUNCE).await;
            let live = server.live();
            // Writes from now on are after this pass's reads began: they need another pass.
            lock(&live.passes).insert(database.clone(), false);
            refresh(&*server, Some(&database)).await;
            live.ran.fetch_add(1, Ordering::Relaxed);
            let mut passes = lock(&live.passes);
            if passes.get(&database) != Some(&true) {
                passes.remove(&database);
                return;
            }
        }
    });
}

/// Reads again every subscribed resource that reads `database` (`None`:
/// any database) and announces those whose contents changed since they
/// were last read.
pub async fn refresh(server: &impl Subscriptions, database: Option<&str>) {
    let updated = reread_subscribed(server, database).await;
    if !updated.is_empty() {
        tracing::debug!("live resources changed: {updated:?}");
        server.announce(updated);
    }
}

/// Reads again every subscribed resource of the current catalog that reads
/// `database` (`None`: any), records what its subscribers will know, and
/// returns those whose contents changed since they were last read (a
/// reload announces them with the rest of its changes, once).
pub async fn reread_subscribed(server: &impl Subscriptions, database: Option<&str>) -> BTreeSet<String> {
    let reads = server.reads();
    let subscribed = server.subscribed();
    let catalog = Arc::clone(reads.catalog());
    let wanted = database.map(str::to_owned);
    // Matching a URI may render (a template's `fail()` checks).
    let live = crate::render::inline_first(
        || crate::render::Caller::new("carte: live resources"),
        move || {
            subscribed
                .iter()
                .filter(|uri| {
                    crate::resource::database_of(&catalog, uri)
                        .is_some_and(|read| wanted.as_deref().is_none_or(|wanted| wanted == read))
                })
                .cloned()
                .collect::<Vec<String>>()
        },
    )
    .await;
    let live = match live {
        Ok(live) => live,
        Err(err) => {
            tracing::warn!("live resources were not read again: {err}");
            return BTreeSet::new();
        }
    };
    // A few at once: one's render overlaps the next one's statement (a
    // database runs one statement at a time anyway).
    let read = futures::stream::iter(live).map(|uri| {
        let reads = &reads;
        async move {
            let read = reads.read(&uri).await;
            (uri, read)
        }
    });
    let read: Vec<(String, Fingerprint)> = read.buffered(READS_AT_ONCE).collect().await;
    let mut updated = BTreeSet::new();
    for (uri, read) in read {
        if server.record(&uri, read) {
            updated.insert(uri);
        }
    }
    updated
}

/// Records what the subscribers of `uris` (announced as updated by a
/// reload: removed, added, or changed without reading a database) know of
/// them now, so that the next read of one after a write is compared with
/// that.
pub fn heard(server: &impl Subscriptions, uris: &BTreeSet<String>) {
    let reads = server.reads();
    for uri in uris {
        server.record(uri, reads.read_unchanged(uri));
    }
}

/// Records what the subscribers of `uris` see now, if they read a database:
/// a later write is compared with this.
pub async fn subscribed(server: &impl Subscriptions, uris: impl IntoIterator<Item = String>) {
    let reads = server.reads();
    for uri in uris {
        if crate::resource::database_of(reads.catalog(), &uri).is_some() {
            let read = reads.read(&uri).await;
            server.record_first(&uri, read);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A server with no subscriber: passes run and read nothing.
    struct Nobody {
        live: Live,
        catalog: Arc<Catalog>,
    }

    impl Reads for Nobody {
        fn catalog(&self) -> &Arc<Catalog> {
            &self.catalog
        }
        async fn read(&self, _: &str) -> Fingerprint {
            Fingerprint::of(b"")
        }
        fn read_unchanged(&self, _: &str) -> Fingerprint {
            Fingerprint::of(b"")
        }
    }

    impl Subscriptions for Nobody {
        type Reads = Nobody;
        fn live(&self) -> &Live {
            &self.live
        }
        fn reads(&self) -> Arc<Nobody> {
            Arc::new(Nobody { live: Live::default(), catalog: Arc::clone(&self.catalog) })
        }
        fn subscribed(&self) -> BTreeSet<String> {
            BTreeSet::new()
        }
        fn record(&self, _: &str, _: Fingerprint) -> bool {
            false
        }
        fn record_first(&self, _: &str, _: Fingerprint) {}
        fn announce(&self, _: BTreeSet<String>) {}
    }

    #[test]
    fn a_burst_of_writes_shares_one_pass_per_database() {
        let yaml = "server: { name: l, version: 1.0.0 }\ntools:\n  - { name: t, description: T., run: { text: t } }\n";
        let server = Arc::new(Nobody { live: Live::default(), catalog: Arc::new(crate::catalog::from_text(yaml)) });
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async {
            // Nothing runs until this task waits: every write of the burst comes before the pass.
            for _ in 0..100 {
                reread(&server, "shop");
                reread(&server, "other");
            }
            let waited = tokio::time::timeout(Duration::from_secs(20), async {
                while server.live.busy() {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            });
            waited.await.expect("the passes ended within the test's bound");
        });
        assert_eq!(server.live.passes(), 2, "one pass per database");
    }
}
