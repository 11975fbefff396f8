//! An effect's own top-level block (`databases:` for `sql`, `apis:` for
//! `http`): named entries that its tools (and resources) refer to, declared
//! once in any file of the catalog.
//!
//! A block is one type implementing [`Block`]: its key, its entries' spec,
//! its load-time check, what a reload keeps, what applying an accepted
//! catalog does and its readiness probe. `effects!` (in the parent module)
//! names each effect's block and generates [`Blocks`], the set of every
//! block at one [`Stage`] of building a catalog, with [`Blocks::build`] and
//! [`Blocks::each`]: the catalog's stages go through those and never name
//! a block.

use std::collections::HashSet;
use std::fmt::Debug;
use std::future::Future;

use indexmap::IndexMap;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;

use super::{Blocks, Declared};
use crate::diag::{Diagnostic, Location};

/// One effect's top-level block, checked: what its effect's tools are
/// checked against while the catalog is built.
pub trait Block: Default + 'static {
    /// Its key at the top of a catalog file (`databases`).
    const KEY: &'static str;
    /// What one entry is called in messages (`database`).
    const ENTRY: &'static str;
    /// The diagnostic code of a name declared twice (`duplicate-database`).
    const DUPLICATE: &'static str;

    /// One entry as a catalog file writes it.
    type Spec: DeserializeOwned + JsonSchema + Clone + Debug + Send + Sync;
    /// One entry checked and ready to serve: what the catalog keeps, and a
    /// reload may reuse.
    type Entry: Send + Sync;

    /// Checks the entries every file declared, reporting into
    /// `diagnostics`; an entry of `previous` (the catalog this one
    /// replaces) is reused where it is unchanged. Checking changes nothing
    /// outside carte.
    fn check(
        declared: &[Declared<'_, Self::Spec>],
        previous: Option<&IndexMap<String, Self::Entry>>,
        diagnostics: &mut Vec<Diagnostic>,
    ) -> Self;

    /// Whether `name` was declared, whether or not it could be checked.
    fn declares(&self, name: &str) -> bool;

    /// The files checking read besides the catalog's (a reload watches them).
    fn files(&self) -> &[std::path::PathBuf] {
        &[]
    }

    /// The entries that can serve, for the catalog (what only checking
    /// needed is dropped).
    fn into_entries(self) -> IndexMap<String, Self::Entry>;

    /// Makes `entries` real once their catalog is accepted, before it is
    /// served (for `databases:`, their `setup`); all or nothing. A problem
    /// with no place of its own is reported at `fallback`.
    fn apply(entries: &IndexMap<String, Self::Entry>, fallback: &Location) -> Result<(), Vec<Diagnostic>> {
        let _ = (entries, fallback);
        Ok(())
    }

    /// Why `entry` cannot serve right now, for `/readyz` (bounded in time).
    fn ready(entry: &Self::Entry) -> impl Future<Output = Result<(), String>> + Send {
        let _ = entry;
        std::future::ready(Ok(()))
    }
}

/// What every effect's block is at one stage of building a catalog.
pub trait Stage {
    /// The block `B` at this stage.
    type Of<B: Block>;
}

/// Each block's entries as written (name → spec), from one file or merged.
pub struct Written;

impl Stage for Written {
    type Of<B: Block> = IndexMap<String, B::Spec>;
}

/// Each block checked, with the names left out earlier for a structural
/// mistake: what tools are checked against.
pub struct Checking;

impl Stage for Checking {
    type Of<B: Block> = Checked<B>;
}

/// Each block's entries ready to serve: what a catalog keeps.
pub struct Kept;

impl Stage for Kept {
    type Of<B: Block> = IndexMap<String, B::Entry>;
}

/// A block being checked against, and what was left out of it before.
#[derive(Default)]
pub struct Checked<B> {
    /// The checked block.
    pub block: B,
    /// Its entries left out for a structural mistake (already reported).
    pub left_out: LeftOut,
}

impl<B: Block> Checked<B> {
    /// Whether `name` is declared, or may be and was left out for a mistake
    /// already reported: what names it must not be reported again.
    pub fn may_declare(&self, name: &str) -> bool {
        self.block.declares(name) || self.left_out.contains(name)
    }
}

/// The entries of a block left out for a structural mistake.
#[derive(Debug, Default, Clone)]
pub struct LeftOut {
    /// By name.
    pub names: HashSet<String>,
    /// Whether the whole block was unreadable.
    pub all: bool,
}

impl LeftOut {
    /// Whether the entry `name` may have been declared but left out.
    pub fn contains(&self, name: &str) -> bool {
        self.all || self.names.contains(name)
    }

    /// Adds what `other` left out.
    pub fn merge(&mut self, other: LeftOut) {
        self.names.extend(other.names);
        self.all |= other.all;
    }
}

/// A block's place in [`Blocks`] (implemented by `effects!`), so that code
/// generic over the block reaches the same block in another set.
pub trait Registered: Block {
    /// This block in `blocks`.
    fn of<S: Stage>(blocks: &Blocks<S>) -> &S::Of<Self>;
    /// This block in `blocks`, to change.
    fn of_mut<S: Stage>(blocks: &mut Blocks<S>) -> &mut S::Of<Self>;
}

/// Makes each block at stage `S` (see [`Blocks::build`]).
pub trait Build<S: Stage> {
    /// Makes the block `B`.
    fn build<B: Registered>(&mut self) -> S::Of<B>;
}

/// Visits each block at stage `S`, borrowed for `'a` (see [`Blocks::each`]).
pub trait Each<'a, S: Stage> {
    /// Visits the block `B`.
    fn each<B: Registered>(&mut self, block: &'a S::Of<B>);
}

/// Visits each block at stage `S`, to change it (see [`Blocks::each_mut`]).
pub trait EachMut<S: Stage> {
    /// Visits the block `B`.
    fn each<B: Registered>(&mut self, block: &mut S::Of<B>);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counts the blocks and the entries in them.
    struct Count(usize, usize);

    impl Each<'_, Written> for Count {
        fn each<B: Registered>(&mut self, block: &IndexMap<String, B::Spec>) {
            self.0 += 1;
            self.1 += block.len();
        }
    }

    /// Reads each block from one YAML text, by its key.
    struct FromYaml(serde_json::Value);

    impl Build<Written> for FromYaml {
        fn build<B: Registered>(&mut self) -> IndexMap<String, B::Spec> {
            self.0.get(B::KEY).and_then(|v| serde_json::from_value(v.clone()).ok()).unwrap_or_default()
        }
    }

    #[test]
    fn each_block_is_built_and_visited_by_its_key_and_nothing_else() {
        let value = serde_json::json!({
            "databases": { "a": { "url": "sqlite::memory:" }, "b": { "url": "sqlite::memory:" } },
            "apis": { "c": { "baseUrl": "https://example.com" } },
            "tools": [],
        });
        let blocks = Blocks::<Written>::build(&mut FromYaml(value));
        let mut count = Count(0, 0);
        blocks.each(&mut count);
        assert_eq!((count.0, count.1), (super::super::BLOCK_KEYS.len(), 3));
        assert_eq!(<super::super::sql::Databases as Registered>::of(&blocks).len(), 2);
        assert!(super::super::BLOCK_KEYS.contains(&"databases") && super::super::BLOCK_KEYS.contains(&"apis"));
    }

    #[test]
    fn a_name_left_out_for_a_mistake_may_be_declared() {
        let mut left_out = LeftOut::default();
        assert!(!left_out.contains("x"));
        left_out.merge(LeftOut { names: ["x".to_owned()].into(), all: false });
        assert!(left_out.contains("x") && !left_out.contains("y"));
        left_out.merge(LeftOut { names: HashSet::new(), all: true });
        assert!(left_out.contains("y"));
    }
}
