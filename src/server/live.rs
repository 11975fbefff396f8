//! Live resources: after a tool's write commits on a database, the
//! resources clients subscribed to that read that database are read again
//! and `notifications/resources/updated` goes to the subscribers of those
//! whose contents changed.
//!
//! A change is handled once for every client, not per session: the
//! subscribed URIs come from the hub's index, each is read once, and its
//! contents' fingerprint is compared with the last one recorded in the hub
//! (one per subscribed URI, so bounded by the subscriptions, which are
//! bounded per client). Writes in a burst are coalesced: per database, at
//! most one pass runs and one more is pending; a pass starts [`DEBOUNCE`]
//! after the write that asked for it, so the writes of that time share it.
//! Reads go through the same path as `resources/read` (statements through
//! the database's turn and timeout, renders on the blocking pool), and a
//! failed read counts as contents too (its error), so a resource that breaks
//! or recovers is announced.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::sync::lock;

use futures::StreamExt as _;

use super::Shared;
use super::hub::Changes;
use crate::catalog::Fingerprint;

/// How long a pass waits after the write that asked for it, so that the
/// other writes of a burst share it.
pub const DEBOUNCE: Duration = Duration::from_millis(50);

/// How many resources one pass reads at once.
const READS_AT_ONCE: usize = 4;

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

/// A tool's write committed on `database`: tells the other replicas, if
/// any, and reads again here what [`reread`] does.
pub fn changed(shared: &Arc<Shared>, database: &str) {
    if let Some(replicas) = &shared.replicas {
        replicas.publish(super::replicas::Event::Changed { database: database.to_owned() });
    }
    reread(shared, database);
}

/// A write committed on `database` (here or on another replica): reads
/// again (soon, once for a burst) the subscribed resources that read it, and
/// tells their subscribers about those that changed.
pub fn reread(shared: &Arc<Shared>, database: &str) {
    {
        let mut passes = lock(&shared.live.passes);
        if let Some(again) = passes.get_mut(database) {
            *again = true;
            return;
        }
        passes.insert(database.to_owned(), false);
    }
    let (shared, database) = (Arc::clone(shared), database.to_owned());
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(DEBOUNCE).await;
            // Writes from now on are after this pass's reads began: they need another pass.
            lock(&shared.live.passes).insert(database.clone(), false);
            refresh(&shared, Some(&database)).await;
            shared.live.ran.fetch_add(1, Ordering::Relaxed);
            let mut passes = lock(&shared.live.passes);
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
pub async fn refresh(shared: &Shared, database: Option<&str>) {
    let updated = reread_subscribed(shared, database).await;
    if !updated.is_empty() {
        tracing::debug!("live resources changed: {updated:?}");
        shared.hub.announce(&Changes { updated, ..Changes::default() }, None);
    }
}

/// Reads again every subscribed resource of the current catalog that reads
/// `database` (`None`: any), records what its subscribers will know, and
/// returns those whose contents changed since they were last read (a
/// reload announces them with the rest of its changes, once).
pub async fn reread_subscribed(shared: &Shared, database: Option<&str>) -> BTreeSet<String> {
    let snapshot = shared.snapshot();
    let subscribed = shared.hub.subscribed_uris();
    let catalog = Arc::clone(&snapshot.catalog);
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
    let reads = futures::stream::iter(live).map(|uri| {
        let snapshot = &snapshot;
        async move {
            let read = fingerprint(&snapshot.read_resource_live_json(&uri).await);
            (uri, read)
        }
    });
    let reads: Vec<(String, Fingerprint)> = reads.buffered(READS_AT_ONCE).collect().await;
    let mut updated = BTreeSet::new();
    for (uri, read) in reads {
        if shared.hub.record(&uri, read) {
            updated.insert(uri);
        }
    }
    updated
}

/// Records what the subscribers of `uris` (announced as updated by a
/// reload: removed, added, or changed without reading a database) know of
/// them now, so that the next read of one after a write is compared with
/// that.
pub fn heard(shared: &Shared, uris: &BTreeSet<String>) {
    let snapshot = shared.snapshot();
    for uri in uris {
        shared.hub.record(uri, fingerprint(&snapshot.read_resource_json(uri)));
    }
}

/// Records what the subscribers of `uris` see now, if they read a database:
/// a later write is compared with this.
pub async fn subscribed(shared: &Shared, uris: impl IntoIterator<Item = String>) {
    let snapshot = shared.snapshot();
    for uri in uris {
        if crate::resource::database_of(&snapshot.catalog, &uri).is_some() {
            let read = fingerprint(&snapshot.read_resource_live_json(&uri).await);
            shared.hub.record_first(&uri, read);
        }
    }
}

/// The fingerprint of a read's answer (contents or error), as JSON.
fn fingerprint(answer: &super::Answer) -> Fingerprint {
    let text = match answer {
        Ok(contents) => contents.to_string(),
        Err(err) => format!("error {}: {}", err.code, err.message),
    };
    Fingerprint::of(text.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::Snapshot;

    fn shared() -> Arc<Shared> {
        let yaml = "server: { name: l, version: 1.0.0 }\ntools:\n  - { name: t, description: T., run: { text: t } }\n";
        Shared::new(Snapshot::new(crate::catalog::from_text(yaml)))
    }

    #[test]
    fn a_burst_of_writes_shares_one_pass_per_database() {
        let shared = shared();
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async {
            // Nothing runs until this task waits: every write of the burst comes before the pass.
            for _ in 0..100 {
                changed(&shared, "shop");
                changed(&shared, "other");
            }
            let waited = tokio::time::timeout(Duration::from_secs(20), async {
                while shared.live.busy() {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            });
            waited.await.expect("the passes ended within the test's bound");
        });
        assert_eq!(shared.live.passes(), 2, "one pass per database");
    }
}
