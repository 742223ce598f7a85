//! [`StringMap`]: a sandbox's labels and annotations, held compactly.
//!
//! # Key decision: a sorted vector, encoded as the map it replaced
//!
//! A `BTreeMap<String, String>` allocates a whole node (room for 11
//! entries, ~550 bytes) for its first entry, and a sandbox usually has a
//! handful of labels and no annotations: a million sandboxes with one label
//! spent more than half a gigabyte on empty node slots. A vector sorted by
//! key holds exactly its entries (the map is bounded by
//! [`LABELS_COUNT_MAX`](crate::limits::LABELS_COUNT_MAX), so a lookup by
//! binary search is as fast as the tree's).
//!
//! The encoding is the map's, byte for byte: a JSON object with its keys in
//! the same (byte) order. So the state's JSON, its digest, snapshots,
//! backups and the projection's rows are unchanged, and replicas of the
//! releases before this type and after it agree on every byte.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{Deserialize, Deserializer};
use serde::ser::{Serialize, SerializeMap, Serializer};

/// A map of strings to strings, kept as a vector sorted by key with no
/// duplicate key (see the module doc).
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct StringMap {
    /// Sorted by key, each key once; no spare capacity after a build.
    entries: Vec<(String, String)>,
}

impl StringMap {
    /// An empty map (allocates nothing).
    pub const fn new() -> Self {
        StringMap {
            entries: Vec::new(),
        }
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there is no entry.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn position(&self, key: &str) -> Result<usize, usize> {
        self.entries
            .binary_search_by(|(existing, _)| existing.as_str().cmp(key))
    }

    /// The value of `key`, if present.
    pub fn get(&self, key: &str) -> Option<&String> {
        let at = self.position(key).ok()?;
        Some(&self.entries[at].1)
    }

    /// Whether `key` is present.
    pub fn contains_key(&self, key: &str) -> bool {
        self.position(key).is_ok()
    }

    /// Sets `key` to `value`; answers the value it replaced, if any.
    pub fn insert(&mut self, key: String, value: String) -> Option<String> {
        match self.position(&key) {
            Ok(at) => Some(std::mem::replace(&mut self.entries[at].1, value)),
            Err(at) => {
                self.entries.insert(at, (key, value));
                None
            }
        }
    }

    /// Removes `key`; answers its value, if it was present.
    pub fn remove(&mut self, key: &str) -> Option<String> {
        let at = self.position(key).ok()?;
        Some(self.entries.remove(at).1)
    }

    /// The entries in key order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&String, &String)> {
        self.entries.iter().map(|(key, value)| (key, value))
    }

    /// The keys in order.
    pub fn keys(&self) -> impl ExactSizeIterator<Item = &String> {
        self.entries.iter().map(|(key, _)| key)
    }
}

impl fmt::Debug for StringMap {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.debug_map().entries(self.iter()).finish()
    }
}

impl From<BTreeMap<String, String>> for StringMap {
    /// Already sorted and unique: taken as it is, with exact capacity.
    fn from(map: BTreeMap<String, String>) -> Self {
        let mut entries = Vec::with_capacity(map.len());
        entries.extend(map);
        StringMap { entries }
    }
}

impl From<StringMap> for BTreeMap<String, String> {
    fn from(map: StringMap) -> Self {
        map.entries.into_iter().collect()
    }
}

impl FromIterator<(String, String)> for StringMap {
    /// As a map would be built: a later entry with a key already seen
    /// replaces the earlier one.
    fn from_iter<I: IntoIterator<Item = (String, String)>>(entries: I) -> Self {
        StringMap::from(entries.into_iter().collect::<BTreeMap<_, _>>())
    }
}

impl IntoIterator for StringMap {
    type Item = (String, String);
    type IntoIter = std::vec::IntoIter<(String, String)>;

    fn into_iter(self) -> Self::IntoIter {
        self.entries.into_iter()
    }
}

impl<'a> IntoIterator for &'a StringMap {
    type Item = (&'a String, &'a String);
    type IntoIter = std::iter::Map<
        std::slice::Iter<'a, (String, String)>,
        fn(&'a (String, String)) -> (&'a String, &'a String),
    >;

    fn into_iter(self) -> Self::IntoIter {
        self.entries.iter().map(|(key, value)| (key, value))
    }
}

impl PartialEq<BTreeMap<String, String>> for StringMap {
    fn eq(&self, other: &BTreeMap<String, String>) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl Serialize for StringMap {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.entries.len()))?;
        for (key, value) in &self.entries {
            map.serialize_entry(key, value)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for StringMap {
    /// Decoded as the map it replaced (a repeated key: the last wins).
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        BTreeMap::<String, String>::deserialize(deserializer).map(StringMap::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> BTreeMap<String, String> {
        BTreeMap::from([
            ("team".to_string(), "infra".to_string()),
            ("app".to_string(), "agent".to_string()),
            ("Zeta".to_string(), "upper case sorts first".to_string()),
            ("app.kubernetes.io/name".to_string(), "x".to_string()),
        ])
    }

    #[test]
    fn encodes_exactly_as_the_map() {
        let map = sample();
        let compact = StringMap::from(map.clone());
        assert_eq!(
            serde_json::to_string(&compact).unwrap(),
            serde_json::to_string(&map).unwrap()
        );
        let empty = StringMap::new();
        assert_eq!(serde_json::to_string(&empty).unwrap(), "{}");
        let decoded: StringMap =
            serde_json::from_str(&serde_json::to_string(&map).unwrap()).unwrap();
        assert_eq!(decoded, compact);
        assert_eq!(decoded, map);
    }

    #[test]
    fn a_repeated_key_decodes_as_the_map_decodes_it() {
        let json = r#"{"b":"1","a":"2","b":"3"}"#;
        let map: BTreeMap<String, String> = serde_json::from_str(json).unwrap();
        let compact: StringMap = serde_json::from_str(json).unwrap();
        assert_eq!(compact, map);
        assert_eq!(compact.get("b").map(String::as_str), Some("3"));
    }

    #[test]
    fn reads_and_writes_like_a_map() {
        let mut compact = StringMap::new();
        let mut map = BTreeMap::new();
        for (key, value) in [("b", "1"), ("a", "2"), ("c", "3"), ("a", "4")] {
            assert_eq!(
                compact.insert(key.into(), value.into()),
                map.insert(key.to_string(), value.to_string())
            );
        }
        assert_eq!(compact, map);
        assert_eq!(compact.len(), 3);
        assert!(compact.contains_key("c") && !compact.contains_key("d"));
        assert_eq!(compact.get("a").map(String::as_str), Some("4"));
        assert_eq!(compact.remove("b"), map.remove("b"));
        assert_eq!(compact.remove("b"), None);
        assert_eq!(compact.keys().collect::<Vec<_>>(), vec!["a", "c"]);
        let collected: StringMap = [("z", "1"), ("y", "2"), ("z", "3")]
            .into_iter()
            .map(|(key, value)| (key.to_string(), value.to_string()))
            .collect();
        assert_eq!(format!("{collected:?}"), r#"{"y": "2", "z": "3"}"#);
        assert_eq!(BTreeMap::from(collected.clone()).len(), 2);
        assert_eq!(collected.into_iter().count(), 2);
    }
}
