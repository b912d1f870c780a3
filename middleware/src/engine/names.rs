//! Keys and lock names: what makes a key valid, and the sorted, prefixed names a lock holds.

use std::fmt;

use super::KeyError;

/// The default longest key, in bytes (the prefix not counted).
pub(crate) const DEFAULT_MAX_KEY_LEN: usize = 256;

/// Checks that `key` can name a lock: non-empty, at most `max_len` bytes, no ASCII control
/// characters, and no `{` or `}` (they would break the Redis Cluster hash tag around it; the
/// rule holds for every backend, so keys move between stores unchanged).
pub(crate) fn validate_key(key: &str, max_len: usize) -> Result<(), KeyError> {
    if key.is_empty() {
        return Err(KeyError::Empty);
    }
    if key.len() > max_len {
        return Err(KeyError::TooLong {
            len: key.len(),
            max: max_len,
        });
    }
    if key.bytes().any(|byte| byte.is_ascii_control()) {
        return Err(KeyError::ControlCharacter);
    }
    if key.contains(['{', '}']) {
        return Err(KeyError::Brace);
    }
    Ok(())
}

/// The full lock names of a lock (prefix and key), sorted and distinct: one, or several taken
/// together. Never empty.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct LockNames {
    names: Vec<Box<str>>,
    key_start: usize,
}

impl LockNames {
    /// The names of `keys` under `prefix`, each key checked against `max_key_len`.
    pub(crate) fn new<S: AsRef<str>>(
        prefix: &str,
        keys: impl IntoIterator<Item = S>,
        max_key_len: usize,
    ) -> Result<Self, KeyError> {
        let mut names = keys
            .into_iter()
            .map(|key| {
                let key = key.as_ref();
                validate_key(key, max_key_len)?;
                let mut name = String::with_capacity(prefix.len() + key.len());
                name.push_str(prefix);
                name.push_str(key);
                Ok(name.into_boxed_str())
            })
            .collect::<Result<Vec<_>, _>>()?;
        if names.is_empty() {
            return Err(KeyError::NoKeys);
        }
        names.sort_unstable();
        names.dedup();
        Ok(Self {
            names,
            key_start: prefix.len(),
        })
    }

    /// Every full name, sorted.
    pub(crate) fn iter(&self) -> impl ExactSizeIterator<Item = &str> + Clone {
        self.names.iter().map(|name| &**name)
    }

    /// Every key (the names without the prefix), sorted.
    pub(crate) fn keys(&self) -> impl ExactSizeIterator<Item = &str> + Clone {
        self.iter().map(|name| &name[self.key_start..])
    }

    /// The first name.
    pub(crate) fn first(&self) -> &str {
        &self.names[0]
    }

    /// The only name, if there is one.
    pub(crate) fn single(&self) -> Option<&str> {
        match &self.names[..] {
            [name] => Some(name),
            _ => None,
        }
    }

    /// Whether `name` is one of them.
    pub(crate) fn contains(&self, name: &str) -> bool {
        self.names
            .binary_search_by(|held| (**held).cmp(name))
            .is_ok()
    }

    /// The keys joined with `, `, for messages.
    pub(crate) fn joined_keys(&self) -> String {
        self.to_string()
    }

    pub(crate) fn key_start(&self) -> usize {
        self.key_start
    }
}

impl fmt::Display for LockNames {
    /// The keys joined with `, `.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (index, key) in self.keys().enumerate() {
            if index > 0 {
                f.write_str(", ")?;
            }
            f.write_str(key)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ordinary_key_is_valid() {
        assert!(validate_key("tenant:7:coupon:42", DEFAULT_MAX_KEY_LEN).is_ok());
        assert!(validate_key("ключ:ü", DEFAULT_MAX_KEY_LEN).is_ok());
    }

    #[test]
    fn an_empty_key_is_rejected() {
        assert_eq!(validate_key("", 10), Err(KeyError::Empty));
    }

    #[test]
    fn the_length_limit_counts_bytes_and_is_inclusive() {
        assert!(validate_key(&"a".repeat(10), 10).is_ok());
        assert_eq!(
            validate_key("ééééé!", 10),
            Err(KeyError::TooLong { len: 11, max: 10 })
        );
    }

    #[test]
    fn control_characters_are_rejected() {
        for key in ["a\nb", "a\0", "\u{7f}", "tab\there"] {
            assert_eq!(
                validate_key(key, 64),
                Err(KeyError::ControlCharacter),
                "{key:?}"
            );
        }
    }

    #[test]
    fn braces_are_rejected() {
        for key in ["{a}", "a{", "}"] {
            assert_eq!(validate_key(key, 64), Err(KeyError::Brace), "{key:?}");
        }
    }

    #[test]
    fn names_are_prefixed_sorted_and_distinct() {
        let names = LockNames::new("lock:", ["b", "a", "b"], 10).unwrap();
        assert_eq!(names.iter().collect::<Vec<_>>(), ["lock:a", "lock:b"]);
        assert_eq!(names.keys().collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!(names.joined_keys(), "a, b");
        assert!(names.contains("lock:b") && !names.contains("b"));
        assert_eq!(names.single(), None);
    }

    #[test]
    fn no_key_is_refused_and_one_bad_key_spoils_the_set() {
        assert_eq!(
            LockNames::new("p:", Vec::<String>::new(), 10),
            Err(KeyError::NoKeys)
        );
        assert_eq!(LockNames::new("p:", ["a", ""], 10), Err(KeyError::Empty));
    }
}
