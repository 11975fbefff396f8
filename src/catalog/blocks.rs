//! A catalog's effect blocks once it is accepted: making them real (the
//! databases' `setup`) and probing whether each entry can serve (`/readyz`).

use indexmap::IndexMap;

use super::Catalog;
use crate::diag::Diagnostic;
use crate::effect::block::{Each, Kept, Registered};

impl Catalog {
    /// Makes each effect's block real (see [`crate::effect::block::Block::apply`]:
    /// opens this catalog's databases and applies their `setup`, each only
    /// if it changed since it was last applied), stopping at the first that
    /// fails. Loading never does this: call it once the catalog is
    /// accepted, before serving it.
    pub fn apply_setup(&self) -> Result<(), Vec<Diagnostic>> {
        let file = self.inputs.files.first().cloned().unwrap_or_default();
        let mut apply = ApplyBlocks { fallback: crate::diag::Location::file_start(&file), result: Ok(()) };
        self.blocks.each(&mut apply);
        apply.result
    }

    /// The entries of the effects' blocks that cannot serve right now (a
    /// PostgreSQL database that does not answer), each probed at once.
    pub async fn unready(&self) -> Vec<Unready> {
        let mut probes = ProbeBlocks(Vec::new());
        self.blocks.each(&mut probes);
        futures::future::join_all(probes.0).await.into_iter().flatten().collect()
    }
}

/// Applies each block in turn until one fails.
struct ApplyBlocks {
    fallback: crate::diag::Location,
    result: Result<(), Vec<Diagnostic>>,
}

impl Each<'_, Kept> for ApplyBlocks {
    fn each<B: Registered>(&mut self, entries: &IndexMap<String, B::Entry>) {
        if self.result.is_ok() {
            self.result = B::apply(entries, &self.fallback);
        }
    }
}

/// An entry of an effect's block that cannot serve (see [`Catalog::unready`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Unready {
    /// Its block's key (`databases`).
    pub block: &'static str,
    /// What an entry of its block is called (`database`).
    pub entry: &'static str,
    /// Its name.
    pub name: String,
    /// Why it cannot serve.
    pub reason: String,
}

type Probe<'a> = std::pin::Pin<Box<dyn std::future::Future<Output = Option<Unready>> + Send + 'a>>;

/// Each entry's readiness probe.
struct ProbeBlocks<'a>(Vec<Probe<'a>>);

impl<'a> Each<'a, Kept> for ProbeBlocks<'a> {
    fn each<B: Registered>(&mut self, entries: &'a IndexMap<String, B::Entry>) {
        for (name, entry) in entries {
            self.0.push(Box::pin(async move {
                let reason = B::ready(entry).await.err()?;
                Some(Unready { block: B::KEY, entry: B::ENTRY, name: name.clone(), reason })
            }));
        }
    }
}
