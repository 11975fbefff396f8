use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;

use crate::value::ops::LenIterWrap;
use crate::value::{Enumerator, Object, ObjectExt, ObjectRepr, Value, ValueKind};

/// Dictionary merging behavior - create custom object with lookup capability
#[derive(Debug)]
pub struct MergeDict {
    values: Box<[Value]>,
}

impl MergeDict {
    pub fn new(values: Vec<Value>) -> Self {
        // carte: merges of merges are flattened (a later map still wins):
        // nested, `m|chain({})` in a loop overflowed the stack, and
        // `m|chain(m)` doubled made every lookup walk 2^n maps.
        let mut flat = Vec::with_capacity(values.len());
        for value in values {
            match value.downcast_object_ref::<Self>() {
                Some(merged) => flat.extend(merged.values.iter().cloned()),
                None => flat.push(value),
            }
        }
        Self {
            values: flat.into_boxed_slice(),
        }
    }

    /// carte: the maps merging `values` holds once flattened, plus their
    /// keys where known: what building it and visiting it walks, checked
    /// against the fuel before it is built (like `MergeSeq::weight_for_values`).
    pub(crate) fn weight_for_values<'v>(values: impl IntoIterator<Item = &'v Value>) -> usize {
        values
            .into_iter()
            .map(|value| match value.downcast_object_ref::<Self>() {
                Some(merged) => Self::weight_for_values(merged.values.iter()),
                None => value.len().unwrap_or(0).saturating_add(1),
            })
            .fold(0, usize::saturating_add)
    }

    /// carte: the maps this merge holds (what a lookup may walk).
    pub(crate) fn slots(&self) -> usize {
        self.values.len()
    }
}

impl Object for MergeDict {
    fn get_value(self: &Arc<Self>, key: &Value) -> Option<Value> {
        // Look up key in reverse order (last matching dict wins)
        for value in self.values.iter().rev() {
            if let Ok(v) = value.get_item(key) {
                if !v.is_undefined() {
                    return Some(v);
                }
            }
        }
        None
    }

    fn enumerate(self: &Arc<Self>) -> Enumerator {
        // Collect all keys from all dictionaries (only include maps)
        let mut keys = BTreeSet::new();
        for key in self
            .values
            .iter()
            .filter(|x| x.kind() == ValueKind::Map)
            .filter_map(|v| v.try_iter().ok())
            .flatten()
        {
            keys.insert(key);
        }
        Enumerator::Iter(Box::new(keys.into_iter()))
    }
}

/// List merging behavior - calculate total length for size hint
pub struct MergeSeq {
    values: Box<[Value]>,
    total_len: Option<usize>,
    repr: ObjectRepr,
    depth: usize,
    // carte: the items this merge would have if it were materialized,
    // counting an unsized part as one (see `weight_for_values`).
    weight: usize,
}

impl fmt::Debug for MergeSeq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("<iterator>").finish()
    }
}

impl MergeSeq {
    pub(crate) const MAX_DEPTH: usize = crate::value::MAX_LAZY_DEPTH;

    #[cfg(feature = "builtins")]
    pub fn new(values: Vec<Value>) -> Self {
        Self::with_repr(values, ObjectRepr::Seq)
    }

    pub(crate) fn new_iterable(values: Vec<Value>) -> Self {
        Self::with_repr(values, ObjectRepr::Iterable)
    }

    fn with_repr(mut values: Vec<Value>, repr: ObjectRepr) -> Self {
        let mut depth = Self::depth_for_values(&values);
        if depth > Self::MAX_DEPTH {
            let mut flattened = Vec::new();
            for value in values.iter() {
                Self::push_flattened_value(value, &mut flattened);
            }
            values = flattened;
            depth = Self::depth_for_values(&values);
        }

        // carte: an empty part adds nothing but a step to every visit; without
        // it, `[] + []` doubled n times is 2^n empty parts to walk.
        let mut lens = Vec::with_capacity(values.len());
        values.retain(|value| {
            let len = value.len();
            if len != Some(0) {
                lens.push(len);
            }
            len != Some(0)
        });
        let weight = values
            .iter()
            .zip(&lens)
            .map(|(value, len)| match value.downcast_object_ref::<Self>() {
                Some(seq) => seq.weight,
                None => len.unwrap_or(1),
            })
            .fold(0, usize::saturating_add);

        Self {
            total_len: lens.iter().try_fold(0usize, |sum, len| sum.checked_add((*len)?)),
            weight,
            values: values.into_boxed_slice(),
            repr,
            depth,
        }
    }

    /// carte: how many items merging `values` stands for: the length of the
    /// result, where every part of unknown length counts as one.  Merging is
    /// lazy, but materializing (past [`Self::MAX_DEPTH`]) or flattening
    /// allocates a slot per item or part, and every visit walks them, so the
    /// engine checks this against the fuel before it merges (see
    /// `ops::binop_alloc_estimate`).  Shared parts count each time they
    /// appear: `l + l` doubled n times weighs 2^n.
    pub(crate) fn weight_for_values<'v>(values: impl IntoIterator<Item = &'v Value>) -> usize {
        values
            .into_iter()
            .map(|value| match value.downcast_object_ref::<Self>() {
                Some(seq) => seq.weight,
                None => value.len().unwrap_or(1),
            })
            .fold(0, usize::saturating_add)
    }

    /// carte: the slots this merge holds itself (for its fuel cost).
    pub(crate) fn slots(&self) -> usize {
        self.values.len()
    }

    /// carte: how deep lazy values nest in this one (see `lazy_depth`).
    pub(crate) fn depth(&self) -> usize {
        self.depth
    }

    pub(crate) fn depth_for_values(values: &[Value]) -> usize {
        // carte: other lazy values nest too (see `lazy_depth`).
        crate::value::nested_depth(values)
    }

    fn push_flattened_value(value: &Value, values: &mut Vec<Value>) {
        let mut pending = vec![value.clone()];
        while let Some(value) = pending.pop() {
            if let Some(seq) = value.downcast_object_ref::<Self>() {
                pending.extend(seq.values.iter().rev().cloned());
            } else {
                values.push(value);
            }
        }
    }
}

impl Object for MergeSeq {
    fn repr(self: &Arc<Self>) -> ObjectRepr {
        self.repr
    }

    fn get_value(self: &Arc<Self>, key: &Value) -> Option<Value> {
        if self.repr != ObjectRepr::Seq {
            return None;
        }

        if let Some(idx) = key.as_usize() {
            let mut current_idx = 0;
            for value in self.values.iter() {
                let len = value.len().unwrap_or(0);
                if idx < current_idx + len {
                    return value.get_item(&Value::from(idx - current_idx)).ok();
                }
                current_idx += len;
            }
        }
        None
    }

    fn enumerate(self: &Arc<Self>) -> Enumerator {
        self.mapped_enumerator(|this| {
            // carte: one walk over the whole tree of merges instead of an
            // iterator per merge nested in the next: an item costs the same
            // whatever the depth (it cost one call per level).
            let iter = MergeSeqIter {
                parts: vec![this.values.iter()],
                current: None,
            };
            if let Some(total_len) = this.total_len {
                Box::new(LenIterWrap(total_len, iter))
            } else {
                Box::new(iter)
            }
        })
    }

    fn enumerator_len(self: &Arc<Self>) -> Option<usize> {
        self.total_len
    }
}

/// carte: the items of a [`MergeSeq`] and of the merges it holds, walked
/// with a stack of parts (at most [`MergeSeq::MAX_DEPTH`] deep plus one).
struct MergeSeqIter<'a> {
    parts: Vec<std::slice::Iter<'a, Value>>,
    current: Option<Box<dyn Iterator<Item = Value> + Send + Sync + 'a>>,
}

impl Iterator for MergeSeqIter<'_> {
    type Item = Value;

    fn next(&mut self) -> Option<Value> {
        loop {
            if let Some(current) = self.current.as_mut() {
                if let Some(item) = current.next() {
                    return Some(item);
                }
                self.current = None;
            }
            match self.parts.last_mut()?.next() {
                None => {
                    self.parts.pop();
                }
                Some(part) => match part.downcast_object_ref::<MergeSeq>() {
                    Some(merged) => self.parts.push(merged.values.iter()),
                    None => {
                        self.current = Some(match part.try_iter() {
                            Ok(iter) => Box::new(iter),
                            Err(err) => Box::new(Some(Value::from(err)).into_iter()),
                        });
                    }
                },
            }
        }
    }
}

/// Utility function to merge multiple maps into a single one.
///
/// If values are passed that are not maps, they are for the most part ignored.
/// They cannot be enumerated, but attribute lookups can still work.   That's
/// because [`get_value`](crate::value::Object::get_value) is forwarded through
/// to all objects.
///
/// This is the operation the [`context!`](crate::context) macro uses behind
/// the scenes.  The merge is done lazily which means that any dynamic object
/// that behaves like a map can be used here.  Note though that the order of
/// this function is inverse to what the macro does.
///
/// ```
/// use minijinja::{context, value::merge_maps};
///
/// let ctx1 = context!{
///     name => "John",
///     age => 30
/// };
///
/// let ctx2 = context!{
///     location => "New York",
///     age => 25  // This will be overridden by ctx1's value
/// };
///
/// let merged = merge_maps([ctx1, ctx2]);
/// ```
pub fn merge_maps<I, V>(iter: I) -> Value
where
    I: IntoIterator<Item = V>,
    V: Into<Value>,
{
    let sources: Vec<Value> = iter.into_iter().map(Into::into).collect();
    // if we only have a single source, we can use it directly to avoid making
    // an unnecessary indirection.
    if sources.len() == 1 {
        sources[0].clone()
    } else {
        Value::from_object(MergeDict::new(sources))
    }
}

#[test]
fn test_merge_object() {
    use std::collections::BTreeMap;

    let o = merge_maps([Value::from("abc"), Value::from(vec![1, 2, 3])]);
    assert_eq!(o, Value::from(BTreeMap::<String, String>::new()));

    let mut map1 = BTreeMap::new();
    map1.insert("a", 1);
    map1.insert("b", 2);

    let mut map2 = BTreeMap::new();
    map2.insert("b", 3);
    map2.insert("c", 4);

    let merged = merge_maps([Value::from(map1), Value::from(map2)]);

    // Check that the merged object contains all keys with expected values
    // The value from the latter map should be used when keys overlap
    assert_eq!(merged.get_attr("a").unwrap(), Value::from(1));
    assert_eq!(merged.get_attr("b").unwrap(), Value::from(3)); // Takes value from map2
    assert_eq!(merged.get_attr("c").unwrap(), Value::from(4));
}
