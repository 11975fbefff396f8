//! The server's side of live resources ([`crate::live`]: the hub's
//! subscriptions, and reads through a snapshot, as `resources/read` answers)
//! and of replicas ([`crate::replicas::Listener`]: what the others tell).

use std::collections::BTreeSet;
use std::sync::Arc;

use super::hub::Changes;
use super::{Answer, Shared, Snapshot};
use crate::catalog::{Catalog, Fingerprint};
use crate::live::{Live, Reads, Subscriptions};

impl Subscriptions for Shared {
    type Reads = Snapshot;

    fn live(&self) -> &Live {
        &self.live
    }

    fn reads(&self) -> Arc<Snapshot> {
        self.snapshot()
    }

    fn subscribed(&self) -> BTreeSet<String> {
        self.hub.subscribed_uris()
    }

    fn record(&self, uri: &str, read: Fingerprint) -> bool {
        self.hub.record(uri, read)
    }

    fn record_first(&self, uri: &str, read: Fingerprint) {
        self.hub.record_first(uri, read);
    }

    fn announce(&self, updated: BTreeSet<String>) {
        self.hub.announce(&Changes { updated, ..Changes::default() }, None);
    }
}

impl Reads for Snapshot {
    fn catalog(&self) -> &Arc<Catalog> {
        &self.catalog
    }

    async fn read(&self, uri: &str) -> Fingerprint {
        fingerprint(&self.read_resource_live_json(uri).await)
    }

    fn read_unchanged(&self, uri: &str) -> Fingerprint {
        fingerprint(&self.read_resource_json(uri))
    }
}

impl Shared {
    /// A tool's write committed on `database`: tells the other replicas, if
    /// any, and reads the live resources again here ([`crate::live::reread`]).
    pub fn wrote(self: &Arc<Self>, database: &str) {
        if let Some(replicas) = &self.replicas {
            replicas.publish(crate::replicas::Event::Changed { database: database.to_owned() });
        }
        crate::live::reread(self, database);
    }
}

impl crate::replicas::Listener for Shared {
    fn changed(self: &Arc<Self>, database: &str) {
        if self.snapshot().catalog.watched().contains(&database) {
            crate::live::reread(self, database);
        }
    }

    fn task(&self, id: &str, cancelled: bool) {
        self.tasks.heard(id, cancelled);
    }

    async fn missed(self: &Arc<Self>) {
        for database in self.snapshot().catalog.watched() {
            crate::live::reread(self, database);
        }
        self.tasks.recheck().await;
    }
}

/// The fingerprint of a read's answer (contents or error), as JSON.
fn fingerprint(answer: &Answer) -> Fingerprint {
    let text = match answer {
        Ok(contents) => contents.to_string(),
        Err(err) => format!("error {}: {}", err.code, err.message),
    };
    Fingerprint::of(text.as_bytes())
}
